"""``llm/translate/anthropic.py`` in-process (issue 35): the Messages request as a whole (no key that
was not asked for), the whole answer's defaults and usage (cache reads and writes in the prompt), and
the stream event by event: ids and model from ``message_start``, text in a block's start, thinking
deltas dropped, the finish, ``done`` at ``message_stop`` or an error, a stream cut short still ended,
the usage merged across events as the gateway counts it. Answers and events are Anthropic's shapes
checked with the ``anthropic`` SDK's types; what comes back is read by the ``openai`` SDK."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from anthropic.types import Message, MessageCreateParams, RawMessageStreamEvent

from tests.llm_translate_helpers import openai_completion, openai_stream, request, sse_frames
from trioproxy.llm.translate import OpenAIToAnthropic, TranslationError
from trioproxy.llm.translate.sse import SseReader

EVENT = pydantic.TypeAdapter(RawMessageStreamEvent)
PARAMS = pydantic.TypeAdapter(MessageCreateParams)


def body_of(**fields: Any) -> dict[str, Any]:
    t = OpenAIToAnthropic()
    out = t.request(request(**fields))
    assert out.path == "/v1/messages" and out.streaming is bool(fields.get("stream"))
    body = json.loads(out.body)
    PARAMS.validate_python(body)
    return body


# --- the request ---------------------------------------------------------------------------------


def test_the_whole_request_holds_only_what_was_asked():
    t = OpenAIToAnthropic()
    assert t.include_usage is False
    out = t.request(request())
    assert out.streaming is False and t.model == "m" and t.streaming is False
    assert json.loads(out.body) == {"model": "m", "max_tokens": 4096,
                                    "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    # the route's model wins; a client without one and no route model sends none, and answers are named ""
    assert json.loads(OpenAIToAnthropic().request(request(), "claude-r").body)["model"] == "claude-r"
    bare = OpenAIToAnthropic()
    bare.request(json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode())
    assert bare.model == ""


def test_tools_without_description_and_parallel_calls_off_without_a_choice():
    tools = [{"type": "function", "function": {"name": "f"}}]
    body = body_of(tools=tools, parallel_tool_calls=False)
    assert body["tools"] == [{"name": "f", "input_schema": {"type": "object", "properties": {}}}]
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    body = body_of(tools=tools, parallel_tool_calls=True)
    assert "tool_choice" not in body
    assert "tool_choice" not in body_of(parallel_tool_calls=False)  # no tools: nothing to run in parallel


def test_unreadable_bodies_are_refused_naming_anthropic():
    with pytest.raises(TranslationError) as caught:
        OpenAIToAnthropic().request(b"{")
    assert (caught.value.field, caught.value.dialect) == ("body", "openai")
    assert caught.value.text == "body: a body that is not JSON cannot be translated to anthropic"


# --- the whole answer ----------------------------------------------------------------------------


def answered(answer: dict[str, Any], *, check: bool = True, model: str = "m") -> tuple[OpenAIToAnthropic, dict]:
    if check:
        Message.model_validate(answer)
    t = OpenAIToAnthropic()
    t.request(request(model=model))
    body = t.response(200, json.dumps(answer).encode())
    openai_completion(body)
    return t, json.loads(body)


MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "stop_reason": "end_turn",
           "stop_sequence": None, "usage": {"input_tokens": 7, "output_tokens": 2}}


def test_answer_text_blocks_joined_and_usage_without_cache_fields():
    t, out = answered({**MESSAGE, "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                              {"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    assert (out["id"], out["model"]) == ("msg_1", "claude-x")
    assert out["choices"][0]["message"]["content"] == "ab" and out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"] == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    assert t.use == out["usage"] and t.raw == MESSAGE["usage"]


def test_answer_cache_reads_and_writes_count_in_the_prompt():
    use = {"input_tokens": 3, "output_tokens": 1, "cache_read_input_tokens": 20, "cache_creation_input_tokens": 5}
    _, out = answered({**MESSAGE, "content": [], "usage": use})
    assert out["usage"] == {"prompt_tokens": 28, "completion_tokens": 1, "total_tokens": 29,
                            "prompt_tokens_details": {"cached_tokens": 20}}


def test_answer_fields_anthropic_left_out_get_defaults():
    # not a valid Message: what a proxy in between or an older API version may send
    _, out = answered({"content": [{"type": "text"}, {"type": "tool_use"}, {"type": "text", "text": "z"}],
                       "stop_reason": "some_new_reason"}, check=False, model="asked")
    assert (out["id"], out["model"]) == ("", "asked")
    assert out["choices"][0]["message"] == {
        "role": "assistant", "content": "z", "refusal": None,
        "tool_calls": [{"id": "", "type": "function", "function": {"name": "", "arguments": "{}"}}]}
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


# --- the stream ----------------------------------------------------------------------------------

START = ("message_start", {"type": "message_start", "message": {
    "id": "msg_s", "type": "message", "role": "assistant", "model": "claude-s", "content": [], "stop_reason": None,
    "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1, "cache_read_input_tokens": 30,
                                     "cache_creation_input_tokens": 2}}})
STOP = ("message_stop", {"type": "message_stop"})


def delta(**fields: Any) -> tuple[str, dict[str, Any]]:
    return ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": fields})


def ending(reason: str | None, **use: Any) -> tuple[str, dict[str, Any]]:
    return ("message_delta", {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None},
                              "usage": {"output_tokens": 5, **use}})


def frames(data: bytes) -> list[Any]:
    reader = SseReader()
    return [d if d == "[DONE]" else json.loads(d) for _, d in reader.feed(data) + reader.finish()]


def deltas(data: bytes) -> list[tuple[dict[str, Any], str | None]]:
    return [(f["choices"][0]["delta"], f["choices"][0]["finish_reason"]) for f in frames(data)
            if isinstance(f, dict) and f.get("choices")]


def stream_of(events: list[tuple[str, Any]], *, usage: bool = True, check: bool = True, tail: str = "",
              model: str = "asked") -> tuple[Any, bytes, bytes]:
    """``(stream, what feed gave, what finish gave)``; ``tail``: a last frame without its blank line."""
    if check:
        for name, event in events:
            if name not in ("ping", "error"):  # not in the SDK's union of message events
                EVENT.validate_python(event)
    t = OpenAIToAnthropic()
    t.request(request(model=model, stream=True, stream_options={"include_usage": usage}))
    stream = t.stream()
    assert stream.done is False
    fed = stream.feed(sse_frames(events) + tail.encode())
    return stream, fed, stream.finish()


def test_stream_ids_model_block_start_text_and_dropped_deltas():
    events = [START, ("content_block_start", {"type": "content_block_start", "index": 0,
                                              "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
              delta(type="thinking_delta", thinking="hmm"), delta(type="signature_delta", signature="sig"),
              ("content_block_start", {"type": "content_block_start", "index": 1,
                                       "content_block": {"type": "text", "text": "Hi "}}),
              delta(type="text_delta", text="there"), ("ping", {"type": "ping"}),
              ending("max_tokens"), STOP]
    stream, fed, finished = stream_of(events)
    assert finished == b"" and stream.done is True and fed.endswith(b"data: [DONE]\n\n")
    got = frames(fed)
    assert {(f["id"], f["model"]) for f in got[:-1]} == {("msg_s", "claude-s")}
    assert deltas(fed) == [({"role": "assistant", "content": ""}, None), ({"content": "Hi "}, None),
                           ({"content": "there"}, None), ({}, "length")]
    assert got[-2]["usage"] == {"prompt_tokens": 42, "completion_tokens": 5, "total_tokens": 47,
                                "prompt_tokens_details": {"cached_tokens": 30}}
    assert stream.use == got[-2]["usage"]
    assert stream.raw == {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 30,
                          "cache_creation_input_tokens": 2}


def test_stream_usage_merges_without_the_nulls_anthropic_sends():
    events = [START, ending("end_turn", input_tokens=None, cache_read_input_tokens=None), STOP]
    stream, fed, _ = stream_of(events)
    assert stream.raw == {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 30,
                          "cache_creation_input_tokens": 2}
    assert frames(fed)[-2]["usage"]["prompt_tokens"] == 42
    # a later input count replaces the earlier one, cache fields with it
    events = [START, ending("end_turn", input_tokens=4), STOP]
    stream, fed, _ = stream_of(events)
    assert frames(fed)[-2]["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}


def test_stream_tool_use_ids_and_reasons_anthropic_may_add():
    events = [START, ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {
        "type": "tool_use", "id": "toolu_1", "name": "get", "input": {}}}),
        delta(type="input_json_delta", partial_json='{"a":'), delta(type="input_json_delta", partial_json="1}"),
        ending("tool_use"), STOP]
    _, fed, _ = stream_of(events)
    assert deltas(fed) == [
        ({"role": "assistant", "content": ""}, None),
        ({"tool_calls": [{"index": 0, "id": "toolu_1", "type": "function",
                          "function": {"name": "get", "arguments": ""}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}, None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}, None), ({}, "tool_calls")]
    _, fed, _ = stream_of([START, ending("a_reason_added_later"), STOP], check=False)
    assert deltas(fed)[-1] == ({}, "stop")


def test_stream_events_named_only_by_their_event_line_and_odd_blocks():
    # not valid events: no "type" in the data (the SSE event name says it), fields left out
    events = [("message_start", {"message": {}}),
              ("content_block_start", {"index": 3, "content_block": {"type": "tool_use"}}),
              ("content_block_delta", {"index": 3, "delta": {"type": "input_json_delta"}}),
              ("content_block_delta", {"index": 0, "delta": {"type": "text_delta"}}),
              ("message_delta", {"delta": {}}), ("message_delta", {"delta": {"stop_reason": None}}),
              ("x", "not json")]
    tail = 'event: content_block_delta\ndata: {"index": 0, "delta": {"type": "text_delta", "text": "z"}}'
    stream, fed, finished = stream_of(events, check=False, model="asked", tail=tail)
    everything = fed + finished
    got = frames(everything)
    assert {(f["id"], f["model"]) for f in got[:-1]} == {("chatcmpl-translated", "asked")}
    assert deltas(everything) == [
        ({"role": "assistant", "content": ""}, None),
        ({"tool_calls": [{"index": 0, "id": "", "type": "function", "function": {"name": "", "arguments": ""}}]},
         None), ({"content": "z"}, None), ({}, "stop")]
    assert got[-2]["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert stream.done is True and stream.raw == {}


def test_a_stream_cut_short_still_ends_well_formed():
    events = [("message_start", {"type": "message_start", "message": {
        "id": "msg_c", "type": "message", "role": "assistant", "model": "claude-c", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 2, "output_tokens": 0}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}})]
    last = json.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "par"}})
    stream, fed, finished = stream_of(events, tail=f"event: content_block_delta\ndata: {last}")
    assert stream.done is True
    assert deltas(fed) == [({"role": "assistant", "content": ""}, None)]
    assert deltas(finished) == [({"content": "par"}, None), ({}, "stop")]
    assert frames(finished)[-2]["usage"] == {"prompt_tokens": 2, "completion_tokens": 0, "total_tokens": 2}
    assert frames(finished)[-1] == "[DONE]"
    completion, _ = openai_stream(fed + finished)
    assert completion.choices[0].message.content == "par" and completion.model == "claude-c"


def test_an_error_event_ends_the_stream_once():
    error = ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    stream, fed, finished = stream_of([START, error])
    assert stream.done is True and finished == b""
    assert frames(fed)[1:] == [{"error": {"message": "Overloaded", "type": "overloaded_error", "param": None,
                                          "code": None}}, "[DONE]"]
    stream, fed, finished = stream_of([("error", {"type": "error"})], check=False)
    assert frames(fed) == [{"error": {"message": "", "type": "api_error", "param": None, "code": None}}, "[DONE]"]
    assert finished == b""


def test_the_data_type_decides_over_the_event_line():
    events = [(None, START[1]), ("message", delta(type="text_delta", text="t")[1]), (None, ending("max_tokens")[1]),
              ("ping", STOP[1])]
    stream, fed, finished = stream_of(events)
    assert stream.done is True and finished == b""
    assert deltas(fed) == [({"role": "assistant", "content": ""}, None), ({"content": "t"}, None), ({}, "length")]
