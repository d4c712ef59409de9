"""OpenAI chat completion bodies and ``chat.completion.chunk`` streams, built from a provider's answer."""

from __future__ import annotations

import json
from typing import Any

from .common import now
from .sse import sse

__all__ = ["ChunkWriter", "completion", "openai_error", "tool_call"]


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, separators=(",", ":"))
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def usage(prompt: int, completion: int, cached: int | None = None, reasoning: int | None = None) -> dict[str, Any]:
    """OpenAI's usage: ``prompt_tokens`` count the cached ones (``prompt_tokens_details.cached_tokens``),
    ``completion_tokens`` the reasoning ones (``completion_tokens_details.reasoning_tokens``)."""
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                           "total_tokens": prompt + completion}
    if cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    if reasoning:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def completion(id_: str, model: str, text: str | None, calls: list[dict[str, Any]], finish: str,
               use: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None,
                               "refusal": None}
    if calls:
        message["tool_calls"] = calls
    out: dict[str, Any] = {"id": id_, "object": "chat.completion", "created": now(), "model": model,
                           "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}]}
    if use is not None:
        out["usage"] = use
    return out


def openai_error(message: str, kind: str, code: Any = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class ChunkWriter:
    """The chunks of one streamed completion. ``include_usage``: as OpenAI does when asked, every chunk
    carries ``"usage": null`` and a last chunk with no choices carries the usage."""

    __slots__ = ("id", "model", "include_usage", "created", "_started", "_tools", "finished", "use")

    def __init__(self, model: str, include_usage: bool) -> None:
        self.id = "chatcmpl-translated"
        self.model = model
        self.include_usage = include_usage
        self.created = now()
        self._started = False
        self._tools: dict[Any, int] = {}  # provider's tool block key -> OpenAI tool_calls index
        self.finished = False
        self.use: dict[str, Any] | None = None

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        chunk: dict[str, Any] = {"id": self.id, "object": "chat.completion.chunk", "created": self.created,
                                 "model": self.model,
                                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
        if self.include_usage:
            chunk["usage"] = None
        return sse(chunk)

    def start(self) -> bytes:
        """The first chunk (the role); idempotent."""
        if self._started:
            return b""
        self._started = True
        return self._chunk({"role": "assistant", "content": ""})

    def text(self, text: str) -> bytes:
        return self.start() + self._chunk({"content": text}) if text else self.start()

    def tool_start(self, key: Any, call_id: str, name: str, arguments: str = "") -> bytes:
        index = self._tools.setdefault(key, len(self._tools))
        return self.start() + self._chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                                           "function": {"name": name, "arguments": arguments}}]})

    def tool_args(self, key: Any, fragment: str) -> bytes:
        index = self._tools.get(key)
        if index is None or not fragment:
            return b""
        return self._chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})

    @property
    def called_tools(self) -> bool:
        return bool(self._tools)

    def finish(self, reason: str) -> bytes:
        if self.finished:
            return b""
        self.finished = True
        return self.start() + self._chunk({}, reason)

    def end(self, use: dict[str, Any] | None) -> bytes:
        """The usage chunk (when asked for) and ``[DONE]``."""
        out = b""
        self.use = use
        if self.include_usage and use is not None:
            out = sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                       "choices": [], "usage": use})
        return out + b"data: [DONE]\n\n"

    def error(self, body: dict[str, Any]) -> bytes:
        """An error mid-stream, as OpenAI sends one: a data event holding ``{"error": ...}``."""
        return sse(body)
