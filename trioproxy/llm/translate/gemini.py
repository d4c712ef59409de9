"""OpenAI chat completions in, Gemini ``generateContent`` / ``streamGenerateContent?alt=sse`` out."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from ...asgi import Header
from .base import ProviderRequest, StreamTranslator, Translation
from .common import dumps, parse_json
from .errors import TranslationError
from .openai_in import Chat, Image, Text, ToolCall, ToolResult, read_chat
from .openai_out import ChunkWriter, completion, tool_call, usage
from .sse import SseReader

__all__ = ["OpenAIToGemini"]

FINISH_REASONS = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter",
                  "RECITATION": "content_filter", "BLOCKLIST": "content_filter",
                  "PROHIBITED_CONTENT": "content_filter", "SPII": "content_filter",
                  "IMAGE_SAFETY": "content_filter", "MALFORMED_FUNCTION_CALL": "stop"}

#: the OpenAI keys Gemini's generationConfig has a place for, beyond the common ones
SUPPORTS = frozenset({"seed", "frequency_penalty", "presence_penalty", "response_format"})


class OpenAIToGemini(Translation):
    dialect = "openai"
    provider = "gemini"

    def __init__(self) -> None:
        super().__init__()
        self.include_usage = False

    def request(self, body: bytes, model: str | None = None) -> ProviderRequest:
        chat = read_chat(parse_json(body, self.provider, self.dialect), self.provider, SUPPORTS)
        if model:
            chat.model = model
        if not chat.model:
            raise TranslationError("model", "a missing model", self.provider)
        self.streaming, self.model, self.include_usage = chat.stream, chat.model, chat.include_usage
        name = quote(chat.model.removeprefix("models/"), safe="")
        path = f"/v1beta/models/{name}:streamGenerateContent?alt=sse" if chat.stream else \
            f"/v1beta/models/{name}:generateContent"
        return ProviderRequest(path, dumps(generate_request(chat)), chat.stream)

    def headers(self, headers: list[Header]) -> list[Header]:
        """Gemini's API key goes in ``x-goog-api-key``."""
        out = []
        for name, value in super().headers(headers):
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                out.append((b"x-goog-api-key", value[7:].strip()))
            else:
                out.append((name, value))
        return out

    def response_json(self, obj: dict[str, Any]) -> bytes:
        candidates = obj.get("candidates") or []
        candidate = candidates[0] if candidates else {}
        text, calls = [], []
        for i, part in enumerate((candidate.get("content") or {}).get("parts") or ()):
            if "text" in part and not part.get("thought"):
                text.append(part["text"])
            elif "functionCall" in part:
                call = part["functionCall"]
                calls.append(tool_call(call.get("id") or f"call_{i}", call.get("name", ""), call.get("args") or {}))
        reason = candidate.get("finishReason")
        if not candidates and (obj.get("promptFeedback") or {}).get("blockReason"):
            reason = "SAFETY"
        finish = "tool_calls" if calls and reason in (None, "STOP") else FINISH_REASONS.get(reason or "STOP", "stop")
        self.raw = obj.get("usageMetadata")
        self.use = _usage(self.raw)
        return dumps(completion(obj.get("responseId") or "chatcmpl-gemini", obj.get("modelVersion") or self.model,
                                "".join(text), calls, finish, self.use))

    def new_stream(self) -> StreamTranslator:
        return GeminiToOpenAIStream(self.model, self.include_usage)


def _usage(meta: Any) -> dict[str, Any] | None:
    if not isinstance(meta, dict):
        return None
    completion = (meta.get("candidatesTokenCount") or 0) + (meta.get("thoughtsTokenCount") or 0)
    return usage(meta.get("promptTokenCount") or 0, completion, meta.get("cachedContentTokenCount"),
                 meta.get("thoughtsTokenCount"))


def generate_request(chat: Chat) -> dict[str, Any]:
    out: dict[str, Any] = {"contents": [{"role": "model" if t.role == "assistant" else "user",
                                         "parts": [_part(b) for b in t.blocks]} for t in chat.turns]}
    if chat.system:
        out["systemInstruction"] = {"parts": [{"text": "\n\n".join(chat.system)}]}
    config: dict[str, Any] = {}
    for key, name in (("max_tokens", "maxOutputTokens"), ("temperature", "temperature"), ("top_p", "topP")):
        if getattr(chat, key) is not None:
            config[name] = getattr(chat, key)
    if chat.stop:
        config["stopSequences"] = chat.stop
    for key, name in (("seed", "seed"), ("frequency_penalty", "frequencyPenalty"),
                      ("presence_penalty", "presencePenalty")):
        if key in chat.extra:
            config[name] = chat.extra[key]
    fmt = chat.extra.get("response_format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        config["responseMimeType"] = "application/json"
    elif isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(
            (fmt.get("json_schema") or {}).get("schema"), dict):
        config["responseMimeType"] = "application/json"
        config["responseJsonSchema"] = fmt["json_schema"]["schema"]
    elif fmt is not None and fmt != {"type": "text"}:
        raise TranslationError("response_format", json.dumps(fmt), "gemini")
    if config:
        out["generationConfig"] = config
    if chat.tools:
        out["tools"] = [{"functionDeclarations": [
            {"name": t.name, **({"description": t.description} if t.description else {}),
             "parametersJsonSchema": t.parameters} for t in chat.tools]}]
    if chat.parallel_tool_calls is False:
        raise TranslationError("parallel_tool_calls", "false (Gemini has no switch for it)", "gemini")
    if chat.tool_choice is not None:
        mode = {"auto": "AUTO", "required": "ANY", "none": "NONE"}.get(chat.tool_choice, "ANY")
        calling: dict[str, Any] = {"mode": mode}
        if chat.tool_choice.startswith("function:"):
            calling["allowedFunctionNames"] = [chat.tool_choice.removeprefix("function:")]
        out["toolConfig"] = {"functionCallingConfig": calling}
    return out


def _part(block: Text | Image | ToolCall | ToolResult) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"text": block.text}
    if isinstance(block, Image):
        if block.data is None:
            raise TranslationError(block.path, "an image by http(s) URL (Gemini takes inline base64)", "gemini")
        return {"inlineData": {"mimeType": block.media_type, "data": block.data}}
    if isinstance(block, ToolCall):
        return {"functionCall": {"name": block.name, "args": block.arguments}}
    if block.name is None:
        raise TranslationError(f"{block.path}.tool_call_id",
                               "a tool result whose call is not in the conversation", "gemini")
    try:
        result = json.loads(block.content)
    except ValueError:
        result = None
    return {"functionResponse": {"name": block.name,
                                 "response": result if isinstance(result, dict) else {"content": block.content}}}


class GeminiToOpenAIStream(StreamTranslator):
    """Each ``data:`` event of ``streamGenerateContent?alt=sse`` is a whole ``GenerateContentResponse``
    holding the next parts; a function call arrives whole, so it is one ``tool_calls`` delta."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.reader = SseReader()
        self.out = ChunkWriter(model, include_usage)
        self.use: dict[str, Any] | None = None
        self.calls = 0
        self.reason: str | None = None

    def feed(self, chunk: bytes) -> bytes:
        return self._joined(self._event(data) for _, data in self.reader.feed(chunk))

    def finish(self) -> bytes:
        out = self._joined(self._event(data) for _, data in self.reader.finish())
        reason = self.reason or "STOP"
        finish = "tool_calls" if self.calls and reason == "STOP" else FINISH_REASONS.get(reason, "stop")
        return out + self.out.finish(finish) + self.out.end(self.use or usage(0, 0))

    def _event(self, data: str) -> bytes:
        try:
            obj = json.loads(data)
        except ValueError:
            return b""
        if not isinstance(obj, dict):  # not a GenerateContentResponse: skipped, as unparseable JSON is
            return b""
        out = self.out
        if isinstance(obj.get("error"), dict):
            error = obj["error"]
            return out.error({"error": {"message": error.get("message", ""), "type": error.get("status", "api_error"),
                                        "param": None, "code": error.get("code")}})
        if obj.get("responseId"):
            out.id = obj["responseId"]
        if obj.get("modelVersion"):
            out.model = obj["modelVersion"]
        if obj.get("usageMetadata"):
            self.raw = obj["usageMetadata"]
            self.use = _usage(self.raw)
        chunks = [out.start()]
        candidates = obj.get("candidates") or []
        candidate = candidates[0] if candidates else {}
        for part in (candidate.get("content") or {}).get("parts") or ():
            if "text" in part and not part.get("thought"):
                chunks.append(out.text(part["text"]))
            elif "functionCall" in part:
                call = part["functionCall"]
                key = self.calls
                self.calls += 1
                chunks.append(out.tool_start(key, call.get("id") or f"call_{key}", call.get("name", ""),
                                             json.dumps(call.get("args") or {}, separators=(",", ":"))))
        if candidate.get("finishReason"):
            self.reason = candidate["finishReason"]
        elif not candidates and (obj.get("promptFeedback") or {}).get("blockReason"):
            self.reason = "SAFETY"
        return b"".join(chunks)
