"""OpenAI chat completions in, Bedrock Converse / ConverseStream out, signed with botocore's SigV4.

ConverseStream answers in AWS's binary event-stream framing; botocore's own decoder reads it and the
events become ``chat.completion.chunk`` SSE.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer, ParserError

from ...asgi import Header
from .base import ProviderRequest, StreamTranslator, Translation
from .common import dumps, parse_json
from .errors import MalformedAnswer, TranslationError
from .openai_in import Chat, Image, Text, ToolCall, ToolResult, read_chat
from .openai_out import ChunkWriter, completion, openai_error, tool_call, usage

__all__ = ["OpenAIToBedrock", "sign_request"]

STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                "guardrail_intervened": "content_filter", "content_filtered": "content_filter"}
IMAGE_FORMATS = {"image/png": "png", "image/jpeg": "jpeg", "image/jpg": "jpeg", "image/gif": "gif",
                 "image/webp": "webp"}


def sign_request(credentials: Credentials, region: str, method: str, url: str, headers: list[Header],
                 body: bytes) -> list[Header]:
    """``headers`` with the client's ``authorization`` replaced by a SigV4 signature for the
    ``bedrock`` service. Only ``host`` and ``content-type`` are signed: the other headers are the
    client's and a signature over them would break on any hop that edits them."""
    signed = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers if k in (b"host", b"content-type")}
    request = AWSRequest(method=method, url=url, data=body, headers=signed)
    SigV4Auth(credentials, "bedrock", region).add_auth(request)
    drop = {b"authorization", b"x-amz-date", b"x-amz-security-token", b"x-amz-content-sha256"}
    out = [h for h in headers if h[0] not in drop]
    for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
        if name in request.headers:
            out.append((name.lower().encode(), str(request.headers[name]).encode("latin-1")))
    return out


class OpenAIToBedrock(Translation):
    dialect = "openai"
    provider = "bedrock"

    def __init__(self, credentials: Credentials | None = None, region: str = "us-east-1") -> None:
        super().__init__()
        self.credentials = credentials
        self.region = region
        self.include_usage = False

    def request(self, body: bytes, model: str | None = None) -> ProviderRequest:
        chat = read_chat(parse_json(body, self.provider, self.dialect), self.provider)
        if model:
            chat.model = model
        if not chat.model:
            raise TranslationError("model", "a missing model", self.provider)
        self.streaming, self.model, self.include_usage = chat.stream, chat.model, chat.include_usage
        path = f"/model/{quote(chat.model, safe='')}/{'converse-stream' if chat.stream else 'converse'}"
        return ProviderRequest(path, dumps(converse_request(chat)), chat.stream)

    def sign(self, method: str, url: str, headers: list[Header], body: bytes) -> list[Header]:
        if self.credentials is None:
            return headers
        return sign_request(self.credentials, self.region, method, url, headers, body)

    def response_json(self, obj: dict[str, Any]) -> bytes:
        text, calls = [], []
        for block in ((obj.get("output") or {}).get("message") or {}).get("content") or ():
            if "text" in block:
                text.append(block["text"])
            elif "toolUse" in block:
                use = block["toolUse"]
                calls.append(tool_call(use.get("toolUseId", ""), use.get("name", ""), use.get("input") or {}))
        self.raw = obj.get("usage")
        self.use = _usage(self.raw)
        return dumps(completion("chatcmpl-bedrock", self.model, "".join(text), calls,
                                STOP_REASONS.get(obj.get("stopReason") or "end_turn", "stop"), self.use))

    def new_stream(self) -> StreamTranslator:
        return BedrockToOpenAIStream(self.model, self.include_usage)


def _usage(use: Any) -> dict[str, Any] | None:
    if not isinstance(use, dict):
        return None
    cached = use.get("cacheReadInputTokens") or 0
    prompt = (use.get("inputTokens") or 0) + cached + (use.get("cacheWriteInputTokens") or 0)
    return usage(prompt, use.get("outputTokens") or 0, cached)


def converse_request(chat: Chat) -> dict[str, Any]:
    out: dict[str, Any] = {"messages": [{"role": t.role, "content": [_block(b) for b in t.blocks]}
                                        for t in chat.turns]}
    if chat.system:
        out["system"] = [{"text": text} for text in chat.system]
    config: dict[str, Any] = {}
    for key, name in (("max_tokens", "maxTokens"), ("temperature", "temperature"), ("top_p", "topP")):
        if getattr(chat, key) is not None:
            config[name] = getattr(chat, key)
    if chat.stop:
        config["stopSequences"] = chat.stop
    if config:
        out["inferenceConfig"] = config
    if chat.parallel_tool_calls is False:
        raise TranslationError("parallel_tool_calls", "false (Converse has no switch for it)", "bedrock")
    if chat.tool_choice == "none":
        raise TranslationError("tool_choice", "'none' (Converse has no such choice)", "bedrock")
    if chat.tools:
        tools: dict[str, Any] = {"tools": [{"toolSpec": {
            "name": t.name, **({"description": t.description} if t.description else {}),
            "inputSchema": {"json": t.parameters}}} for t in chat.tools]}
        if chat.tool_choice == "auto":
            tools["toolChoice"] = {"auto": {}}
        elif chat.tool_choice == "required":
            tools["toolChoice"] = {"any": {}}
        elif chat.tool_choice is not None:
            tools["toolChoice"] = {"tool": {"name": chat.tool_choice.removeprefix("function:")}}
        out["toolConfig"] = tools
    return out


def _block(block: Text | Image | ToolCall | ToolResult) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"text": block.text}
    if isinstance(block, Image):
        fmt = IMAGE_FORMATS.get(block.media_type or "")
        if block.data is None or fmt is None:
            what = "an image by http(s) URL (Converse takes bytes)" if block.data is None else \
                f"an image of type {block.media_type}"
            raise TranslationError(block.path, what, "bedrock")
        return {"image": {"format": fmt, "source": {"bytes": block.data}}}
    if isinstance(block, ToolCall):
        return {"toolUse": {"toolUseId": block.id, "name": block.name, "input": block.arguments}}
    return {"toolResult": {"toolUseId": block.id, "content": [{"text": block.content}]}}


class BedrockToOpenAIStream(StreamTranslator):
    """ConverseStream's ``messageStart`` / ``contentBlockStart`` / ``contentBlockDelta`` / ``messageStop`` /
    ``metadata`` events (AWS event-stream frames) as ``chat.completion.chunk`` SSE."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.buffer = EventStreamBuffer()
        self.out = ChunkWriter(model, include_usage)
        self.out.id = "chatcmpl-bedrock"
        self.use: dict[str, Any] | None = None
        self.reason = "end_turn"
        self.failed = False

    def feed(self, chunk: bytes) -> bytes:
        self.buffer.add_data(chunk)
        try:
            return self._joined(self._event(message.headers, message.payload) for message in self.buffer)
        except ParserError as error:  # framing botocore's decoder refuses: nothing after it can be read
            raise MalformedAnswer(f"an event stream frame botocore cannot decode ({type(error).__name__})") from None

    def finish(self) -> bytes:
        if self.failed:
            return b""
        return self.out.finish(STOP_REASONS.get(self.reason, "stop")) + self.out.end(self.use or usage(0, 0))

    def _event(self, headers: dict[str, Any], payload: bytes) -> bytes:
        try:
            body = json.loads(payload) if payload else {}
        except ValueError:
            body = {}
        out = self.out
        exception = headers.get(":message-type") == "exception"
        if not isinstance(body, dict):  # not a Converse event: skipped (an exception still ends the stream)
            if not exception:
                return b""
            body = {}
        if exception:
            self.failed = True
            kind = str(headers.get(":exception-type", "api_error"))
            return out.error(openai_error(str(body.get("message", kind)), kind)) + b"data: [DONE]\n\n"
        event = headers.get(":event-type")
        if event == "messageStart":
            return out.start()
        if event == "contentBlockStart":
            use = (body.get("start") or {}).get("toolUse")
            if use:
                return out.tool_start(body.get("contentBlockIndex"), use.get("toolUseId", ""), use.get("name", ""))
            return b""
        if event == "contentBlockDelta":
            delta = body.get("delta") or {}
            if "text" in delta:
                return out.text(delta["text"])
            if "toolUse" in delta:
                return out.tool_args(body.get("contentBlockIndex"), (delta["toolUse"] or {}).get("input", ""))
            return b""
        if event == "messageStop":
            self.reason = str(body.get("stopReason") or "end_turn")
        elif event == "metadata":
            self.raw = body.get("usage")
            self.use = _usage(self.raw)
        return b""


