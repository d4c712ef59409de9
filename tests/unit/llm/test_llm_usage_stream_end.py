"""``UsageReader.ended``: the event that ends a streamed answer was read, in each provider's stream, so
a client that closes right after it is leaving with its whole answer (gateway.py, ``Exchange.answered``)."""

from __future__ import annotations

import json

import pytest

from trioproxy.llm.usage import UsageReader


def _sse(obj: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "data: " + json.dumps(obj) + "\n\n").encode()


OPENAI = [
    _sse({"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": "stop"}], "usage": None}),
    _sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}),
    b"data: [DONE]\n\n",
]
ANTHROPIC = [
    _sse({"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}}, "message_start"),
    _sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
         "content_block_delta"),
    _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}},
         "message_delta"),
    _sse({"type": "message_stop"}, "message_stop"),
]
RESPONSES = [
    _sse({"type": "response.output_text.delta", "delta": "hi"}, "response.output_text.delta"),
    _sse({"type": "response.completed", "response": {"usage": {"input_tokens": 3, "output_tokens": 4,
                                                               "total_tokens": 7}}}, "response.completed"),
]
GEMINI = [
    _sse({"candidates": [{"content": {"parts": [{"text": "hi"}]}}],
          "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}}),
    _sse({"candidates": [{"content": {"parts": [{"text": "!"}]}, "finishReason": "STOP"}],
          "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7}}),
]


@pytest.mark.parametrize("events", [OPENAI, ANTHROPIC, RESPONSES, GEMINI], ids=["openai", "anthropic", "responses",
                                                                              "gemini"])
def test_the_last_event_ends_the_answer(events: list[bytes]) -> None:
    reader = UsageReader("text/event-stream")
    for event in events[:-1]:
        reader.feed(bytearray(event))  # the upstream's chunks may be bytearrays
        assert not reader.ended
    last = events[-1]
    reader.feed(last[:-1])  # the event is not over before its blank line
    assert not reader.ended
    reader.feed(last[-1:])
    assert reader.ended
    usage = reader.finish()
    assert usage is not None and usage.total_tokens == 7


def test_a_json_body_has_no_end_before_its_last_byte() -> None:
    reader = UsageReader("application/json")
    reader.feed(b'{"usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}')
    assert not reader.ended
