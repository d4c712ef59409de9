"""Anthropic Messages in (Claude Code, the ``anthropic`` SDK), OpenAI-compatible chat completions out."""

from __future__ import annotations

import json
from typing import Any

from ...asgi import Header
from .base import ProviderRequest, StreamTranslator, Translation
from .common import Fields, dumps, parse_json
from .sse import SseReader, sse

__all__ = ["AnthropicToOpenAI"]

FINISH_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                  "content_filter": "refusal"}
NEUTRAL: dict[str, tuple[Any, ...]] = {"thinking": ({"type": "disabled"},), "service_tier": ("auto", "standard_only"),
                                       "metadata": ({},)}


class AnthropicToOpenAI(Translation):
    dialect = "anthropic"
    provider = "openAI"

    def __init__(self, provider: str = "openAI", *, stream_usage_option: bool = True) -> None:
        super().__init__()
        self.provider = provider
        #: the provider takes ``stream_options`` (Mistral refuses it and reports stream usage anyway)
        self.stream_usage_option = stream_usage_option

    def request(self, body: bytes, model: str | None = None) -> ProviderRequest:
        obj = parse_json(body, self.provider, self.dialect)
        out = chat_request(Fields(obj, "", self.provider, self.dialect))
        if not self.stream_usage_option:
            out.pop("stream_options", None)
        if "max_tokens" in out and self.provider in ("openAI", "azure"):
            # OpenAI's own APIs deprecate max_tokens, and its reasoning models refuse it
            out["max_completion_tokens"] = out.pop("max_tokens")
        if model:
            out["model"] = model
        self.streaming, self.model = out.get("stream") is True, out.get("model") or ""
        return ProviderRequest("/v1/chat/completions", dumps(out), self.streaming)

    def headers(self, headers: list[Header]) -> list[Header]:
        """The Anthropic SDK's ``x-api-key`` becomes a Bearer credential (unless one is set already,
        by backendAuth); the ``anthropic-*`` headers mean nothing to an OpenAI-compatible API."""
        has_bearer = any(name == b"authorization" for name, _ in headers)
        out = []
        for name, value in super().headers(headers):
            if name == b"x-api-key":
                if not has_bearer:
                    out.append((b"authorization", b"Bearer " + value))
            elif not name.startswith(b"anthropic-"):
                out.append((name, value))
        return out

    def response_json(self, obj: dict[str, Any]) -> bytes:
        choices = obj.get("choices") or [{}]
        choice = choices[0]
        message = choice.get("message") or {}
        content: list[dict[str, Any]] = []
        if message.get("content"):
            content.append({"type": "text", "text": message["content"]})
        for call in message.get("tool_calls") or ():
            fn = call.get("function") or {}
            content.append({"type": "tool_use", "id": call.get("id", ""), "name": fn.get("name", ""),
                            "input": _arguments(fn.get("arguments"))})
        return dumps({"id": obj.get("id", "msg_translated"), "type": "message", "role": "assistant",
                      "model": obj.get("model") or self.model, "content": content,
                      "stop_reason": FINISH_REASONS.get(choice.get("finish_reason") or "stop", "end_turn"),
                      "stop_sequence": None, "usage": self._used(obj.get("usage"))})

    def _used(self, use: Any) -> dict[str, Any]:
        self.raw = use if isinstance(use, dict) else None
        self.use = _usage(use)
        return self.use

    def new_stream(self) -> StreamTranslator:
        return OpenAIToAnthropicStream(self.model)


def _arguments(text: Any) -> dict[str, Any]:
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _usage(use: Any) -> dict[str, Any]:
    if not isinstance(use, dict):
        return {"input_tokens": 0, "output_tokens": 0}
    cached = (use.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    out = {"input_tokens": (use.get("prompt_tokens") or 0) - cached, "output_tokens": use.get("completion_tokens") or 0}
    if cached:
        out["cache_read_input_tokens"] = cached
    return out


def chat_request(f: Fields) -> dict[str, Any]:
    out: dict[str, Any] = {"model": f.take("model", str)}
    messages: list[dict[str, Any]] = []
    system = f.take("system", (str, list))
    if system:
        messages.append({"role": "system", "content": system if isinstance(system, str) else
                         "".join(_text_blocks(f, "system", system))})
    raw = f.take("messages", list)
    if not raw:
        raise f.refuse("messages", "an empty or missing list")
    for i, message in enumerate(raw):
        m = f.sub(f"messages[{i}]", message)
        messages.extend(_message(m))
    out["messages"] = messages
    max_tokens = f.take("max_tokens", int)
    if max_tokens is not None:
        out["max_tokens"] = max_tokens
    for key in ("temperature", "top_p"):
        value = f.take(key, (int, float))
        if value is not None:
            out[key] = value
    stop = f.take("stop_sequences", list)
    if stop:
        out["stop"] = stop
    if f.take("stream", bool):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}  # Anthropic streams always report usage
    tools = f.take("tools", list)
    if tools:
        out["tools"] = [_tool(f, i, t) for i, t in enumerate(tools)]
    choice = f.take("tool_choice", dict)
    if choice is not None:
        c = f.sub("tool_choice", choice)
        kind = c.take("type", str)
        if kind == "tool":
            out["tool_choice"] = {"type": "function", "function": {"name": c.take("name", str)}}
        elif kind in ("auto", "any", "none"):
            out["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
        else:
            raise c.refuse("type", f"tool_choice type {kind!r}")
        if c.take("disable_parallel_tool_use", bool):
            out["parallel_tool_calls"] = False
        c.done()
    metadata = f.take("metadata", dict)
    if metadata:
        md = f.sub("metadata", metadata)
        user = md.take("user_id", str)
        if user:
            out["user"] = user
        md.done()
    f.done(NEUTRAL)
    return out


def _tool(f: Fields, i: int, tool: Any) -> dict[str, Any]:
    t = f.sub(f"tools[{i}]", tool)
    kind = t.take("type", str)
    if kind not in (None, "custom"):
        raise t.refuse("type", f"the server tool {kind!r}")
    name = t.take("name", str)
    description = t.take("description", str)
    schema = t.take("input_schema", dict) or {"type": "object", "properties": {}}
    t.drop("cache_control")
    t.done()
    fn: dict[str, Any] = {"name": name, "parameters": schema}
    if description:
        fn["description"] = description
    return {"type": "function", "function": fn}


def _text_blocks(f: Fields, key: str, blocks: list[Any]) -> list[str]:
    texts = []
    for k, block in enumerate(blocks):
        b = f.sub(f"{key}[{k}]", block)
        kind = b.take("type", str)
        if kind != "text":
            raise b.refuse("type", f"block type {kind!r} here")
        texts.append(b.take("text", str) or "")
        b.drop("cache_control", "citations")
        b.done()
    return texts


def _message(m: Fields) -> list[dict[str, Any]]:
    role = m.take("role", str)
    content = m.take("content", (str, list))
    m.done()
    if role not in ("user", "assistant"):
        raise m.refuse("role", f"role {role!r}")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    out: list[dict[str, Any]] = []  # tool results go first, as tool messages, then the rest of the turn
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for k, block in enumerate(content or ()):
        b = m.sub(f"content[{k}]", block)
        kind = b.take("type", str)
        b.drop("cache_control", "citations")
        if kind == "text":
            parts.append({"type": "text", "text": b.take("text", str) or ""})
        elif kind == "image" and role == "user":
            parts.append({"type": "image_url", "image_url": {"url": _image_url(b)}})
        elif kind == "tool_use" and role == "assistant":
            calls.append({"id": b.take("id", str), "type": "function", "function": {
                "name": b.take("name", str), "arguments": json.dumps(b.take("input", dict) or {})}})
        elif kind == "tool_result" and role == "user":
            result = b.take("content", (str, list))
            text = result if isinstance(result, str) or result is None else "".join(_text_blocks(b, "content", result))
            if b.take("is_error", bool):
                text = f"Error: {text}"
            out.append({"role": "tool", "tool_call_id": b.take("tool_use_id", str), "content": text or ""})
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            b.drop("thinking", "signature", "data")  # the model's own reasoning; no OpenAI message takes it back
        else:
            raise b.refuse("type", f"{role} content type {kind!r}")
        b.done()
    if role == "assistant":
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(p["text"] for p in parts) if parts else None}
        if calls:
            message["tool_calls"] = calls
        out.append(message)
    elif parts:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "".join(p["text"] for p in parts) if only_text else parts})
    return out


def _image_url(b: Fields) -> str:
    source = b.sub("source", b.take("source", dict))
    kind = source.take("type", str)
    if kind == "base64":
        url = f"data:{source.take('media_type', str)};base64,{source.take('data', str)}"
    elif kind == "url":
        url = source.take("url", str) or ""
    else:
        raise source.refuse("type", f"image source type {kind!r}")
    source.done()
    return url


class OpenAIToAnthropicStream(StreamTranslator):
    """``chat.completion.chunk`` SSE as Anthropic's events: ``message_start``, one ``content_block_*``
    run per text or tool call, ``message_delta`` with the stop reason and usage, ``message_stop``."""

    def __init__(self, model: str) -> None:
        self.reader = SseReader()
        self.model = model
        self.started = self.done = False
        self.block = -1  # the index of the open content block, -1 if none
        self.block_kind = ""
        self.tools: dict[int, int] = {}  # OpenAI tool_calls index -> content block index
        self.reason = "end_turn"
        self.use: dict[str, Any] = {"input_tokens": 0, "output_tokens": 0}

    def feed(self, chunk: bytes) -> bytes:
        return self._joined(self._data(data) for _, data in self.reader.feed(chunk))

    def finish(self) -> bytes:
        out = self._joined(self._data(data) for _, data in self.reader.finish())
        return out + self._stop()

    def fail(self, message: str) -> bytes:
        """Anthropic's end of a stream that cannot go on: an ``error`` event (as its API sends one)."""
        self.done = self.broken = True
        return self.partial + sse({"type": "error", "error": {"type": "api_error", "message": message}}, "error")

    def _start(self, chunk: dict[str, Any]) -> bytes:
        if self.started:
            return b""
        self.started = True
        message: dict[str, Any] = {"id": chunk.get("id") or "msg_translated", "type": "message", "role": "assistant",
                   "model": chunk.get("model") or self.model, "content": [], "stop_reason": None,
                   "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0}}
        return sse({"type": "message_start", "message": message}, "message_start")

    def _open(self, kind: str, block: dict[str, Any]) -> bytes:
        out = self._close()
        self.block += 1
        self.block_kind = kind
        return out + sse({"type": "content_block_start", "index": self.block, "content_block": block},
                         "content_block_start")

    def _close(self) -> bytes:
        if not self.block_kind:
            return b""
        self.block_kind = ""
        return sse({"type": "content_block_stop", "index": self.block}, "content_block_stop")

    def _delta(self, index: int, delta: dict[str, Any]) -> bytes:
        return sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")

    def _stop(self) -> bytes:
        if self.done:
            return b""
        self.done = True
        out = self._start({}) + self._close()
        out += sse({"type": "message_delta", "delta": {"stop_reason": self.reason, "stop_sequence": None},
                    "usage": self.use}, "message_delta")
        return out + sse({"type": "message_stop"}, "message_stop")

    def _data(self, data: str) -> bytes:
        if self.done:
            return b""
        if data.strip() == "[DONE]":
            return self._stop()
        try:
            chunk = json.loads(data)
        except ValueError:
            return b""
        if not isinstance(chunk, dict):  # not a chat.completion.chunk: skipped, as unparseable JSON is
            return b""
        if isinstance(chunk.get("error"), dict):
            self.done = True
            error = chunk["error"]
            return sse({"type": "error", "error": {"type": str(error.get("type") or "api_error"),
                                                   "message": str(error.get("message", ""))}}, "error")
        out = self._start(chunk)
        if isinstance(chunk.get("usage"), dict):
            self.raw = chunk["usage"]
            self.use = _usage(self.raw)
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            if delta.get("content"):
                if self.block_kind != "text":
                    out += self._open("text", {"type": "text", "text": ""})
                out += self._delta(self.block, {"type": "text_delta", "text": delta["content"]})
            for call in delta.get("tool_calls") or ():
                index = call.get("index", 0)
                fn = call.get("function") or {}
                if index not in self.tools:
                    out += self._open("tool_use", {"type": "tool_use", "id": call.get("id", ""),
                                                   "name": fn.get("name", ""), "input": {}})
                    self.tools[index] = self.block
                if fn.get("arguments"):
                    out += self._delta(self.tools[index], {"type": "input_json_delta",
                                                           "partial_json": fn["arguments"]})
            if choice.get("finish_reason"):
                self.reason = FINISH_REASONS.get(choice["finish_reason"], "end_turn")
        return out
