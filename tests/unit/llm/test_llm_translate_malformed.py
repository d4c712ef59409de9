"""An upstream answer that is JSON but not the provider's shape (``[1]``, ``{"content": [1]}``...):
each translator skips a stream event that is not an object, as it skips unparseable JSON; a whole
success that is not an object is ``MalformedAnswer``; and the gateway's call site
(``proxy/llm_stage.py``) turns what a translator cannot read into a 502 ``BadUpstreamResponse`` naming
the provider, or ends the client's stream with its dialect's error event. docs/llm-providers.md,
"Answers the gateway cannot read"."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from fixtures.mock_bedrock import encode_event, event
from tests.llm_translate_helpers import anthropic_stream, events, openai_stream, request, sse_frames
from trioproxy.errors import BadUpstreamResponse, error_response
from trioproxy.llm.translate import AnthropicToOpenAI, OpenAIToAnthropic, OpenAIToBedrock, OpenAIToGemini
from trioproxy.llm.translate.base import Translation
from trioproxy.llm.translate.errors import MalformedAnswer
from trioproxy.proxy import llm_stage


def _openai_translations() -> list[Translation]:
    return [OpenAIToAnthropic(), OpenAIToGemini(), OpenAIToBedrock()]


def _streaming(t: Translation, body: bytes | None = None) -> Translation:
    t.request(body or request(stream=True))
    return t


def _anthropic_request(**fields: Any) -> bytes:
    return json.dumps({"model": "gpt-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
                       **fields}).encode()


# -- whole answers ------------------------------------------------------------------------------------

@pytest.mark.parametrize("body, what", [(b"[1]", "a JSON array"), (b"7", "a JSON number"), (b'"x"', "a JSON string"),
                                        (b"null", "a JSON null"), (b"<html>", "a body that is not JSON")])
@pytest.mark.parametrize("t", [*_openai_translations(), AnthropicToOpenAI()], ids=lambda t: type(t).__name__)
def test_a_success_that_is_not_an_object_is_malformed(t, body, what):
    with pytest.raises(MalformedAnswer, match=what):
        t.response(200, body)


def test_an_error_status_that_is_not_an_object_is_still_the_providers_error_in_the_clients_dialect():
    out = json.loads(OpenAIToAnthropic().response(503, b"[1]"))
    assert out["error"]["message"] == "[1]" and out["error"]["type"] == "api_error"


@pytest.mark.parametrize("t, body", [
    (OpenAIToAnthropic(), b'{"content": [1]}'),
    (OpenAIToGemini(), b'{"candidates": [1]}'),
    (OpenAIToBedrock(), b'{"output": [1]}'),
    (AnthropicToOpenAI(), b'{"choices": [1]}'),
], ids=lambda v: type(v).__name__ if isinstance(v, Translation) else "")
def test_a_nested_value_of_the_wrong_type_raises_what_the_call_site_catches(t, body):
    with pytest.raises(llm_stage._SHAPE_ERRORS):
        t.response(200, body)


def test_bad_answer_is_a_502_naming_the_provider_in_the_clients_dialect():
    failure = llm_stage.bad_answer(OpenAIToGemini(), AttributeError("'int' object has no attribute 'get'"))
    assert isinstance(failure, BadUpstreamResponse)
    assert failure.why == {"provider": "gemini", "detail": "AttributeError: 'int' object has no attribute 'get'"}
    status, headers, body = error_response(failure, "openai")
    assert status == 502 and (b"content-type", b"application/json") in headers
    assert json.loads(body)["error"] == {
        "message": "invalid upstream response: gemini answered JSON that is not its API's shape",
        "type": "server_error", "param": None, "code": "bad_upstream_response"}
    malformed = llm_stage.bad_answer(AnthropicToOpenAI("groq"), MalformedAnswer("a JSON array where an object is expected"))
    status, _, body = error_response(malformed, "anthropic")
    assert status == 502 and json.loads(body) == {"type": "error", "error": {
        "type": "api_error", "message": "invalid upstream response: groq answered a JSON array where an object is expected"}}


# -- streams: a non-object event is skipped -----------------------------------------------------------

def test_anthropic_stream_skips_events_that_are_not_objects():
    stream = _streaming(OpenAIToAnthropic()).stream()
    upstream = sse_frames([
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "model": "claude-x",
                                                                "usage": {"input_tokens": 3}}}),
        ("content_block_start", [1]),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", 7),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "hello"}}),
        ("message_delta", "null"),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        ("message_stop", {"type": "message_stop"}),
    ])
    completion, _ = openai_stream(stream.feed(upstream) + stream.finish())
    assert completion.choices[0].message.content == "hello" and completion.choices[0].finish_reason == "stop"


def test_gemini_stream_skips_events_that_are_not_objects():
    stream = _streaming(OpenAIToGemini()).stream()
    upstream = sse_frames([(None, [1]), (None, {"candidates": [{"content": {"parts": [{"text": "hel"}]}}]}),
                           (None, 7), (None, {"candidates": [{"content": {"parts": [{"text": "lo"}]},
                                                              "finishReason": "STOP"}]})])
    completion, _ = openai_stream(stream.feed(upstream) + stream.finish())
    assert completion.choices[0].message.content == "hello"


def test_bedrock_stream_skips_events_that_are_not_objects():
    stream = _streaming(OpenAIToBedrock()).stream()
    not_object = encode_event({":event-type": "contentBlockDelta", ":content-type": "application/json",
                               ":message-type": "event"}, b"[1]")
    upstream = b"".join([event("messageStart", {"role": "assistant"}), not_object,
                         event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "hello"}}),
                         event("messageStop", {"stopReason": "end_turn"})])
    completion, _ = openai_stream(stream.feed(upstream) + stream.finish())
    assert completion.choices[0].message.content == "hello"


def test_bedrock_exception_whose_body_is_not_an_object_still_ends_the_stream():
    stream = _streaming(OpenAIToBedrock()).stream()
    out = stream.feed(encode_event({":message-type": "exception", ":exception-type": "throttlingException",
                                    ":content-type": "application/json"}, b"[1]")) + stream.finish()
    error = json.loads(events(out)[0][1])["error"]
    assert error["type"] == "throttlingException" and out.endswith(b"data: [DONE]\n\n")


def test_bedrock_framing_botocore_refuses_is_malformed():
    stream = _streaming(OpenAIToBedrock()).stream()
    frame = bytearray(event("messageStart", {"role": "assistant"}))
    frame[-1] ^= 0xFF  # the message CRC no longer matches
    with pytest.raises(MalformedAnswer, match="ChecksumMismatch"):
        stream.feed(bytes(frame))


def test_openai_compatible_stream_skips_events_that_are_not_objects():
    stream = _streaming(AnthropicToOpenAI(), _anthropic_request(stream=True)).stream()
    upstream = sse_frames([(None, [1]), (None, {"id": "c1", "choices": [{"delta": {"content": "hello"}}]}),
                           (None, 7), (None, {"id": "c1", "choices": [{"delta": {}, "finish_reason": "stop"}]}),
                           (None, "[DONE]")])
    message = anthropic_stream(stream.feed(upstream) + stream.finish())
    assert [block.text for block in message.content] == ["hello"]  # type: ignore[union-attr]


# -- streams: what a translator cannot go on from ends the client's stream in its dialect -------------

class _Response:
    """An upstream response whose whole body came with its headers (``UpstreamResponse.ready``)."""

    def __init__(self, body: bytes) -> None:
        self._body = body

    def ready(self) -> tuple[list[bytes], bool]:
        return [self._body], True


async def _client_stream(t: Translation, upstream: bytes) -> tuple[bytes, Any]:
    x = SimpleNamespace(tracer=SimpleNamespace(active=False), translation=t, error=None, error_kind=None, why=None)
    stream = t.stream()
    out = b"".join([chunk async for chunk in llm_stage.translated_chunks(x, _Response(upstream), stream)])  # type: ignore[arg-type]
    assert stream.done and stream.broken
    return out, x


@pytest.mark.parametrize("t, upstream", [
    (OpenAIToAnthropic(), sse_frames([("message_start", {"type": "message_start", "message": [1]})])),
    (OpenAIToGemini(), sse_frames([(None, {"candidates": [1]})])),
    (OpenAIToBedrock(), event("contentBlockStart", {"contentBlockIndex": 0, "start": [1]})),
], ids=lambda v: type(v).__name__ if isinstance(v, Translation) else "")
async def test_an_openai_client_stream_ends_with_an_error_event_and_done(t, upstream):
    _streaming(t)
    more = sse_frames([(None, {"never": "read"})]) if not isinstance(t, OpenAIToBedrock) else b""
    out, x = await _client_stream(t, upstream + more)
    got = events(out)
    assert got[-1][1] == "[DONE]"
    assert json.loads(got[-2][1])["error"] == {
        "message": f"invalid upstream response: {t.provider} answered JSON that is not its API's shape",
        "type": "server_error", "param": None, "code": "bad_upstream_response"}
    assert x.error_kind == "BadUpstreamResponse" and x.why["provider"] == t.provider
    assert x.error == f"invalid upstream response: {t.provider} answered JSON that is not its API's shape"


async def test_an_anthropic_client_stream_ends_with_an_error_event():
    t = _streaming(AnthropicToOpenAI("mistral"), _anthropic_request(stream=True))
    upstream = sse_frames([(None, {"id": "c1", "choices": [{"delta": {"content": "hel"}}]}), (None, {"choices": [1]}),
                           (None, {"id": "c1", "choices": [{"delta": {"content": "lo"}}]})])
    out, x = await _client_stream(t, upstream)
    got = events(out)
    assert [name for name, _ in got] == ["message_start", "content_block_start", "content_block_delta", "error"]
    assert json.loads(got[-1][1]) == {"type": "error", "error": {
        "type": "api_error", "message": "invalid upstream response: mistral answered JSON that is not its API's shape"}}
    assert b'"lo"' not in out  # nothing after the event the translator could not go on from
    assert x.why["detail"].startswith("AttributeError")


async def test_text_before_the_event_that_broke_reaches_the_client_first():
    t = _streaming(OpenAIToAnthropic())
    upstream = sse_frames([
        ("message_start", {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 3}}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "hel"}}),
        ("message_delta", {"type": "message_delta", "usage": [1]}),
    ])
    out, _ = await _client_stream(t, upstream)  # one chunk: the events before the bad one are kept
    got = [json.loads(data) for _, data in events(out)[:-1]]
    assert [c["choices"][0]["delta"].get("content") for c in got[:-1]] == ["", "hel"]
    assert got[-1]["error"]["code"] == "bad_upstream_response"
