"""OpenAI chat completions in, Anthropic Messages out (and the answer back, streamed or whole)."""

from __future__ import annotations

import json
from typing import Any

from .base import ProviderRequest, StreamTranslator, Translation
from .common import dumps, parse_json
from .openai_in import Chat, Image, Text, ToolCall, ToolResult, read_chat
from .openai_out import ChunkWriter, completion, openai_error, tool_call, usage
from .sse import SseReader

__all__ = ["DEFAULT_MAX_TOKENS", "OpenAIToAnthropic"]

#: Anthropic requires ``max_tokens``; OpenAI clients often send none (agentgateway uses the same default).
DEFAULT_MAX_TOKENS = 4096

STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
                "refusal": "content_filter", "pause_turn": "stop", "model_context_window_exceeded": "length"}


class OpenAIToAnthropic(Translation):
    dialect = "openai"
    provider = "anthropic"

    def __init__(self) -> None:
        super().__init__()
        self.include_usage = False

    def request(self, body: bytes, model: str | None = None) -> ProviderRequest:
        chat = read_chat(parse_json(body, self.provider, self.dialect), self.provider)
        if model:
            chat.model = model
        self.streaming, self.model, self.include_usage = chat.stream, chat.model or "", chat.include_usage
        return ProviderRequest("/v1/messages", dumps(messages_request(chat)), chat.stream)

    def response_json(self, obj: dict[str, Any]) -> bytes:
        text, calls = [], []
        for block in obj.get("content") or ():
            if block.get("type") == "text":
                text.append(block.get("text", ""))
            elif block.get("type") == "tool_use":
                calls.append(tool_call(block.get("id", ""), block.get("name", ""), block.get("input", {})))
        self.raw = obj.get("usage") or {}
        self.use = _usage(self.raw)
        return dumps(completion(obj.get("id", ""), obj.get("model", self.model), "".join(text), calls,
                                STOP_REASONS.get(obj.get("stop_reason") or "end_turn", "stop"), self.use))

    def new_stream(self) -> StreamTranslator:
        return AnthropicToOpenAIStream(self.model, self.include_usage)


def _usage(use: dict[str, Any]) -> dict[str, Any]:
    """OpenAI's prompt_tokens include cached ones; Anthropic counts cache reads and writes apart."""
    cached = use.get("cache_read_input_tokens") or 0
    prompt = (use.get("input_tokens") or 0) + cached + (use.get("cache_creation_input_tokens") or 0)
    return usage(prompt, use.get("output_tokens") or 0, cached)


def messages_request(chat: Chat) -> dict[str, Any]:
    out: dict[str, Any] = {"model": chat.model, "max_tokens": chat.max_tokens or DEFAULT_MAX_TOKENS}
    if chat.system:
        out["system"] = "\n\n".join(chat.system)
    out["messages"] = [{"role": turn.role, "content": [_block(b) for b in turn.blocks]} for turn in chat.turns]
    for key, name in (("temperature", "temperature"), ("top_p", "top_p")):
        if getattr(chat, key) is not None:
            out[name] = getattr(chat, key)
    if chat.stop:
        out["stop_sequences"] = chat.stop
    if chat.stream:
        out["stream"] = True
    if chat.tools:
        out["tools"] = [{"name": t.name, **({"description": t.description} if t.description else {}),
                         "input_schema": t.parameters} for t in chat.tools]
    choice: dict[str, Any] | None = None
    if chat.tool_choice == "none":
        choice = {"type": "none"}
    elif chat.tool_choice == "auto":
        choice = {"type": "auto"}
    elif chat.tool_choice == "required":
        choice = {"type": "any"}
    elif chat.tool_choice is not None:
        choice = {"type": "tool", "name": chat.tool_choice.removeprefix("function:")}
    if chat.parallel_tool_calls is False and chat.tools:
        choice = {**(choice or {"type": "auto"}), "disable_parallel_tool_use": True}
    if choice is not None:
        out["tool_choice"] = choice
    if chat.user:
        out["metadata"] = {"user_id": chat.user}
    return out


def _block(block: Text | Image | ToolCall | ToolResult) -> dict[str, Any]:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    if isinstance(block, Image):
        if block.url is not None:
            return {"type": "image", "source": {"type": "url", "url": block.url}}
        return {"type": "image", "source": {"type": "base64", "media_type": block.media_type, "data": block.data}}
    if isinstance(block, ToolCall):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.arguments}
    return {"type": "tool_result", "tool_use_id": block.id, "content": block.content}


class AnthropicToOpenAIStream(StreamTranslator):
    """Anthropic's ``message_start`` / ``content_block_*`` / ``message_delta`` / ``message_stop`` events
    as ``chat.completion.chunk`` deltas; a ``tool_use`` block becomes a ``tool_calls`` entry whose
    arguments arrive as the ``input_json_delta`` fragments."""

    def __init__(self, model: str, include_usage: bool) -> None:
        self.reader = SseReader()
        self.out = ChunkWriter(model, include_usage)
        self.prompt = self.cached = self.completion = 0
        self.done = False

    def feed(self, chunk: bytes) -> bytes:
        return self._joined(self._event(name, data) for name, data in self.reader.feed(chunk))

    def finish(self) -> bytes:
        out = self._joined(self._event(name, data) for name, data in self.reader.finish())
        if not self.done:  # the provider's stream ended early: still a well-formed client stream
            out += self._stop()
        return out

    def _stop(self) -> bytes:
        self.done = True
        self.use = usage(self.prompt, self.completion, self.cached)
        return self.out.finish("stop") + self.out.end(self.use)

    def _event(self, name: str, data: str) -> bytes:
        try:
            event = json.loads(data)
        except ValueError:
            return b""
        if not isinstance(event, dict):  # not an Anthropic event: skipped, as unparseable JSON is
            return b""
        kind = event.get("type", name)
        out = self.out
        if kind == "message_start":
            message = event.get("message") or {}
            out.id = message.get("id") or out.id
            out.model = message.get("model") or out.model
            self._count(message.get("usage") or {})
            return out.start()
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                return out.tool_start(event.get("index"), block.get("id", ""), block.get("name", ""))
            if block.get("type") == "text" and block.get("text"):
                return out.text(block["text"])
            return b""
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                return out.text(delta.get("text", ""))
            if delta.get("type") == "input_json_delta":
                return out.tool_args(event.get("index"), delta.get("partial_json", ""))
            return b""  # thinking and signature deltas have no place in a chat completion
        if kind == "message_delta":
            self._count(event.get("usage") or {})
            reason = (event.get("delta") or {}).get("stop_reason")
            return out.finish(STOP_REASONS.get(reason, "stop")) if reason else b""
        if kind == "message_stop":
            return self._stop()
        if kind == "error":
            self.done = True
            error = event.get("error") or {}
            return out.error(openai_error(error.get("message", ""), error.get("type", "api_error"))) + \
                b"data: [DONE]\n\n"
        return b""  # ping

    def _count(self, use: dict[str, Any]) -> None:
        self.raw = {**(self.raw or {}), **{k: v for k, v in use.items() if v is not None}}
        if use.get("input_tokens") is not None:
            self.cached = use.get("cache_read_input_tokens") or 0
            self.prompt = use["input_tokens"] + self.cached + (use.get("cache_creation_input_tokens") or 0)
        if use.get("output_tokens") is not None:
            self.completion = use["output_tokens"]
