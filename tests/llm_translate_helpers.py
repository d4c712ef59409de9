"""What the translation tests share: the official SDKs' own stream accumulators and types, so a
translated answer is checked the way a client library reads it."""

from __future__ import annotations

import json
from typing import Any

import pydantic
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from trioproxy.llm.translate.sse import SseReader

_EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)


def events(data: bytes) -> list[tuple[str, str]]:
    reader = SseReader()
    return reader.feed(data) + reader.finish()


def openai_completion(body: bytes) -> ChatCompletion:
    return ChatCompletion.model_validate_json(body)


def openai_stream(data: bytes) -> tuple[ChatCompletion, list[ChatCompletionChunk]]:
    """The chunks (each validated as ``ChatCompletionChunk``) and the completion the SDK assembles;
    the stream must end with ``[DONE]``."""
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    chunks = []
    got = events(data)
    assert got and got[-1][1] == "[DONE]", got[-1:]
    for _, payload in got[:-1]:
        chunk = ChatCompletionChunk.model_validate_json(payload)
        chunks.append(chunk)
        state.handle_chunk(chunk)
    return state.get_final_completion(), chunks  # type: ignore[return-value]


def anthropic_message(body: bytes) -> Message:
    return Message.model_validate_json(body)


def anthropic_stream(data: bytes) -> Message:
    """The message the ``anthropic`` SDK assembles from the events (each validated, named as its type)."""
    snapshot = None
    bufs: dict[int, bytes] = {}
    for name, payload in events(data):
        event = _EVENT.validate_json(payload)
        assert name == event.type
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=bufs)
    assert snapshot is not None
    return snapshot


def request(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


def sse_frames(items: list[tuple[str | None, Any]]) -> bytes:
    out = b""
    for name, data in items:
        text = data if isinstance(data, str) else json.dumps(data)
        out += (f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode()
    return out
