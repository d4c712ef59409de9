"""``llm/translate/openai_compat.py`` in-process (issue 35): every field of an Anthropic Messages request
type-checked and refused by its path with the exact words the client sees (in Anthropic's error shape),
what is dropped on purpose (cache_control, citations, thinking blocks), the whole chat completion read
back as a Message (defaults, stop reasons, usage with cached tokens) and the stream event by event
(block indexes, starts and stops, ``[DONE]``, errors, usage). Answers are checked with the ``openai``
SDK's types and what comes back with the ``anthropic`` SDK's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.llm_translate_helpers import anthropic_message, anthropic_stream, sse_frames
from trioproxy.llm.translate import AnthropicToOpenAI, TranslationError
from trioproxy.llm.translate.sse import SseReader


def messages_request(**fields: Any) -> bytes:
    return json.dumps({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
                       **fields}).encode()


def refused(body: bytes, provider: str = "openAI") -> TranslationError:
    with pytest.raises(TranslationError) as caught:
        AnthropicToOpenAI(provider).request(body)
    error = caught.value
    assert error.dialect == "anthropic"
    assert json.loads(error.message) == {"type": "error", "error": {"type": "invalid_request_error",
                                                                    "message": error.text}}
    return error


def user(*blocks: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": list(blocks)}]}


def assistant(*blocks: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": list(blocks)}]}


@pytest.mark.parametrize(("fields", "field", "what"), [
    ({"model": 5}, "model", "a int"), ({"system": 5}, "system", "a int"), ({"messages": "hi"}, "messages", "a str"),
    ({"messages": []}, "messages", "an empty or missing list"), ({"max_tokens": "7"}, "max_tokens", "a str"),
    ({"temperature": "hot"}, "temperature", "a str"), ({"top_p": True}, "top_p", "a bool"),
    ({"stop_sequences": "END"}, "stop_sequences", "a str"), ({"stream": "yes"}, "stream", "a str"),
    ({"tools": {}}, "tools", "a dict"), ({"tool_choice": "auto"}, "tool_choice", "a str"),
    ({"tool_choice": {"type": 1}}, "tool_choice.type", "a int"),
    ({"tool_choice": {"type": "tool", "name": 3}}, "tool_choice.name", "a int"),
    ({"tool_choice": {"type": "weird"}}, "tool_choice.type", "tool_choice type 'weird'"),
    ({"tool_choice": {"type": "auto", "disable_parallel_tool_use": "y"}}, "tool_choice.disable_parallel_tool_use",
     "a str"),
    ({"tool_choice": {"type": "auto", "x": 1}}, "tool_choice.x", "'x'"),
    ({"metadata": "x"}, "metadata", "a str"), ({"metadata": {"user_id": 5}}, "metadata.user_id", "a int"),
    ({"metadata": {"user_id": "u", "x": 1}}, "metadata.x", "'x'"),
    ({"system": [{"type": "image"}]}, "system[0].type", "block type 'image' here"),
    ({"system": [{"type": 5}]}, "system[0].type", "a int"),
    ({"system": [{"type": "text", "text": 5}]}, "system[0].text", "a int"),
    ({"system": [{"type": "text", "text": "s", "x": 1}]}, "system[0].x", "'x'"),
    ({"system": [5]}, "system[0]", "a int where an object is expected"),
    ({"tools": [{"name": "f", "type": 3}]}, "tools[0].type", "a int"),
    ({"tools": [{"type": "bash_20250124", "name": "bash"}]}, "tools[0].type", "the server tool 'bash_20250124'"),
    ({"tools": [{"name": 5}]}, "tools[0].name", "a int"), ({"tools": [{"name": "f", "description": 5}]},
                                                          "tools[0].description", "a int"),
    ({"tools": [{"name": "f", "input_schema": "x"}]}, "tools[0].input_schema", "a str"),
    ({"tools": [{"name": "f", "x": 1}]}, "tools[0].x", "'x'"),
    ({"tools": [5]}, "tools[0]", "a int where an object is expected"),
    ({"messages": [5]}, "messages[0]", "a int where an object is expected"),
    ({"messages": [{"role": 5, "content": "x"}]}, "messages[0].role", "a int"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role", "role 'system'"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "a int"),
    ({"messages": [{"role": "user", "content": "x", "x": 1}]}, "messages[0].x", "'x'"),
    (user(5), "messages[0].content[0]", "a int where an object is expected"),
    (user({"type": 5}), "messages[0].content[0].type", "a int"),
    (user({"type": "text", "text": 5}), "messages[0].content[0].text", "a int"),
    (user({"type": "text", "text": "t", "x": 1}), "messages[0].content[0].x", "'x'"),
    (user({"type": "thinking", "thinking": "t"}), "messages[0].content[0].type", "user content type 'thinking'"),
    (user({"type": "tool_use", "id": "c"}), "messages[0].content[0].type", "user content type 'tool_use'"),
    (assistant({"type": "image", "source": {}}), "messages[1].content[0].type", "assistant content type 'image'"),
    (assistant({"type": "tool_result", "tool_use_id": "c"}), "messages[1].content[0].type",
     "assistant content type 'tool_result'"),
    (assistant({"type": "tool_use", "id": 5}), "messages[1].content[0].id", "a int"),
    (assistant({"type": "tool_use", "id": "c", "name": 5}), "messages[1].content[0].name", "a int"),
    (assistant({"type": "tool_use", "id": "c", "name": "f", "input": "x"}), "messages[1].content[0].input", "a str"),
    (user({"type": "tool_result", "tool_use_id": 5}), "messages[0].content[0].tool_use_id", "a int"),
    (user({"type": "tool_result", "tool_use_id": "c", "content": 5}), "messages[0].content[0].content", "a int"),
    (user({"type": "tool_result", "tool_use_id": "c", "is_error": "y"}), "messages[0].content[0].is_error", "a str"),
    (user({"type": "tool_result", "tool_use_id": "c", "content": [{"type": "text", "text": 1}]}),
     "messages[0].content[0].content[0].text", "a int"),
    (user({"type": "image", "source": "x"}), "messages[0].content[0].source", "a str"),
    (user({"type": "image", "source": {"type": "file", "file_id": "f"}}), "messages[0].content[0].source.type",
     "image source type 'file'"),
    (user({"type": "image", "source": {"type": 5}}), "messages[0].content[0].source.type", "a int"),
    (user({"type": "image", "source": {"type": "base64", "media_type": 5, "data": "x"}}),
     "messages[0].content[0].source.media_type", "a int"),
    (user({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": 5}}),
     "messages[0].content[0].source.data", "a int"),
    (user({"type": "image", "source": {"type": "url", "url": 5}}), "messages[0].content[0].source.url", "a int"),
    (user({"type": "image", "source": {"type": "url", "url": "https://x", "x": 1}}),
     "messages[0].content[0].source.x", "'x'"),
])
def test_every_field_is_type_checked_and_refused_by_its_path(fields, field, what):
    error = refused(messages_request(**fields))
    assert error.field == field
    assert error.text == f"{field}: {what} cannot be translated to openAI"


def test_unreadable_body_and_the_provider_named():
    error = refused(b"{", "groq")
    assert (error.field, error.text) == ("body", "body: a body that is not JSON cannot be translated to groq")
    assert refused(messages_request(top_k=1), "groq").text == "top_k: the field 'top_k' cannot be translated to groq"


def test_dropped_on_purpose_and_the_neutral_values():
    body = json.loads(AnthropicToOpenAI().request(messages_request(
        system=[{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}, "citations": None},
                {"type": "text"}],
        tools=[{"type": "custom", "name": "f", "cache_control": {"type": "ephemeral"}}],
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "a", "cache_control": {"type": "ephemeral"}, "citations": []},
            {"type": "text"},
            {"type": "tool_result", "tool_use_id": "c", "content": [{"type": "text", "text": "x", "citations": []},
                                                                   {"type": "text", "text": "y"}]},
            {"type": "tool_result", "tool_use_id": "d", "is_error": True, "content": "bad"},
            {"type": "tool_result", "tool_use_id": "e"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"}, {"type": "redacted_thinking", "data": "d"},
                {"type": "text", "text": "ok", "citations": []}, {"type": "tool_use", "id": "t1", "name": "g"}]},
            {"role": "assistant", "content": []}],
        thinking={"type": "disabled"}, service_tier="standard_only", metadata={})).body)
    assert body == {
        "model": "m", "max_completion_tokens": 100,
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "tool", "tool_call_id": "c", "content": "xy"},
            {"role": "tool", "tool_call_id": "d", "content": "Error: bad"},
            {"role": "tool", "tool_call_id": "e", "content": ""},
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": "ok", "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
            {"role": "assistant", "content": None}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}]}


def test_a_string_system_two_assistant_texts_and_an_image_url_left_out():
    body = json.loads(AnthropicToOpenAI().request(messages_request(system="be brief", messages=[
        {"role": "user", "content": [{"type": "image", "source": {"type": "url"}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])).body)
    assert body["messages"] == [{"role": "system", "content": "be brief"},
                                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": ""}}]},
                                {"role": "assistant", "content": "ab"}]


def test_user_turns_only_of_tool_results_and_mixed_parts():
    body = json.loads(AnthropicToOpenAI("vllm").request(messages_request(messages=[
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "r"}]},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}}]}],
        tool_choice={"type": "tool", "name": "f", "disable_parallel_tool_use": True}, max_tokens=7)).body)
    assert body["messages"] == [
        {"role": "tool", "tool_call_id": "c", "content": "r"},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "https://x/i.png"}}]}]
    assert body["max_tokens"] == 7 and "max_completion_tokens" not in body
    assert body["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert body["parallel_tool_calls"] is False


def test_request_model_stream_and_provider_options():
    t = AnthropicToOpenAI()
    assert t.streaming is False
    out = t.request(messages_request(), "gpt-route")
    assert json.loads(out.body)["model"] == "gpt-route" and t.model == "gpt-route" and out.streaming is False
    azure = json.loads(AnthropicToOpenAI("azure").request(messages_request()).body)
    assert azure["max_completion_tokens"] == 100 and "max_tokens" not in azure
    # a provider that refuses stream_options: none sent, streamed or not
    mistral = AnthropicToOpenAI("mistral", stream_usage_option=False)
    assert "stream_options" not in json.loads(mistral.request(messages_request(stream=True)).body)
    assert json.loads(mistral.request(messages_request()).body) == {
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}
    bare = AnthropicToOpenAI()
    bare.request(json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode())
    assert bare.model == ""


# --- the whole answer ----------------------------------------------------------------------------


def answered(answer: dict[str, Any], *, check: bool = True) -> tuple[AnthropicToOpenAI, dict[str, Any]]:
    if check:
        ChatCompletion.model_validate(answer)
    t = AnthropicToOpenAI()
    t.request(messages_request(model="asked"))
    body = t.response(200, json.dumps(answer).encode())
    anthropic_message(body)
    return t, json.loads(body)


def test_answer_in_full():
    use = {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "prompt_tokens_details": {"cached_tokens": 4}}
    t, out = answered({"id": "chatcmpl-9", "object": "chat.completion", "created": 1, "model": "gpt-y", "choices": [{
        "index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "x", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "[1]"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{oops"}}]}}], "usage": use})
    assert out == {"id": "chatcmpl-9", "type": "message", "role": "assistant", "model": "gpt-y",
                   "content": [{"type": "text", "text": "x"}, {"type": "tool_use", "id": "c1", "name": "f", "input": {}},
                               {"type": "tool_use", "id": "c2", "name": "g", "input": {}}],
                   "stop_reason": "max_tokens", "stop_sequence": None,
                   "usage": {"input_tokens": 6, "output_tokens": 3, "cache_read_input_tokens": 4}}
    assert t.raw == use and t.use == out["usage"]


def test_answer_fields_left_out_get_defaults():
    # not valid completions: what a minimal OpenAI-compatible server may send
    t, out = answered({"choices": [{"message": {"tool_calls": [{"function": {"arguments": '{"a":1}'}}, {}]},
                                    "finish_reason": "an_unknown_reason"}], "usage": "n/a"}, check=False)
    assert (out["id"], out["model"], out["stop_reason"]) == ("msg_translated", "asked", "end_turn")
    assert out["content"] == [{"type": "tool_use", "id": "", "name": "", "input": {"a": 1}},
                              {"type": "tool_use", "id": "", "name": "", "input": {}}]
    assert out["usage"] == {"input_tokens": 0, "output_tokens": 0} and t.raw is None
    t, out = answered({"choices": [{}], "usage": {"completion_tokens": 2}}, check=False)
    assert out["content"] == [] and out["stop_reason"] == "end_turn"
    assert out["usage"] == {"input_tokens": 0, "output_tokens": 2} and t.raw == {"completion_tokens": 2}
    _, out = answered({"choices": [], "usage": {"prompt_tokens": 5}}, check=False)
    assert out["usage"] == {"input_tokens": 5, "output_tokens": 0}


# --- the stream ----------------------------------------------------------------------------------


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, usage: dict[str, Any] | None = None,
          **top: Any) -> dict[str, Any]:
    out = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "gpt-s",
           "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": usage,
           **top}
    ChatCompletionChunk.model_validate(out)
    return out


def events(data: bytes) -> list[tuple[str, Any]]:
    reader = SseReader()
    return [(name, json.loads(d)) for name, d in reader.feed(data) + reader.finish()]


def streamed(items: list[Any], tail: str = "") -> tuple[Any, bytes, bytes]:
    t = AnthropicToOpenAI()
    t.request(messages_request(model="asked", stream=True))
    stream = t.stream()
    assert stream.done is False
    fed = stream.feed(sse_frames([(None, i) for i in items]) + tail.encode())
    return stream, fed, stream.finish()


def test_stream_blocks_open_and_close_in_order():
    stream, fed, finished = streamed([
        chunk({"role": "assistant", "content": ""}), chunk({"content": "a"}),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "c2", "type": "function", "function": {"name": "g",
                                                                                      "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk({"content": "b"}), chunk({}, "length"), chunk(None, usage={"prompt_tokens": 9, "completion_tokens": 2,
                                                                         "total_tokens": 11}),
        "[DONE]", chunk({"content": "after the end"})])
    got = events(fed)
    assert [name for name, _ in got] == [name for name, data in got] and finished == b"" and stream.done is True
    assert fed.endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')  # nothing after [DONE]
    assert [data for _, data in got] == [
        {"type": "message_start", "message": {"id": "chatcmpl-s", "type": "message", "role": "assistant", "model": "gpt-s",
                                              "content": [], "stop_reason": None, "stop_sequence": None,
                                              "usage": {"input_tokens": 0, "output_tokens": 0}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "c1", "name": "f", "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"x":'}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2,
         "content_block": {"type": "tool_use", "id": "c2", "name": "g", "input": {}}},
        {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "1}"}},
        {"type": "content_block_stop", "index": 2},
        {"type": "content_block_start", "index": 3, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 3, "delta": {"type": "text_delta", "text": "b"}},
        {"type": "content_block_stop", "index": 3},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None},
         "usage": {"input_tokens": 9, "output_tokens": 2}},
        {"type": "message_stop"}]
    assert stream.raw == {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    assert stream.use == {"input_tokens": 9, "output_tokens": 2}


def test_stream_without_done_ids_or_content_still_ends_well_formed():
    raw = {"choices": [{"index": 0, "delta": {"tool_calls": [{"function": {}}]}, "finish_reason": "weird"}]}
    more = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}
    stream, fed, finished = streamed(["not json", raw, more],
                                     tail='data: {"choices": [{"delta": {"content": "z"}}]}')
    got = [data for _, data in events(fed + finished)]
    assert got[0]["message"]["id"] == "msg_translated" and got[0]["message"]["model"] == "asked"
    assert got[1:] == [  # a call without an index is the first
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "", "name": "",
                                                                      "input": {}}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "z"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
         "usage": {"input_tokens": 0, "output_tokens": 0}},
        {"type": "message_stop"}]
    assert stream.done is True and stream.raw is None and stream.finish() == b""
    message = anthropic_stream(fed + finished)
    assert message.content[1].text == "z"


def test_an_empty_stream_is_still_a_message():
    stream, fed, finished = streamed([])
    assert fed == b""
    got = events(finished)
    assert [name for name, _ in got] == ["message_start", "message_delta", "message_stop"]
    assert got[0][1]["message"]["id"] == "msg_translated" and got[0][1]["message"]["model"] == "asked"
    assert anthropic_stream(finished).stop_reason == "end_turn"


def test_stream_errors_end_it_once():
    stream, fed, finished = streamed([chunk({"content": "a"}), {"error": {"message": "boom"}}, chunk({"content": "b"})])
    got = events(fed)
    assert got[-1] == ("error", {"type": "error", "error": {"type": "api_error", "message": "boom"}})
    assert [data["type"] for _, data in got] == ["message_start", "content_block_start", "content_block_delta", "error"]
    assert finished == b"" and stream.done is True
    _, fed, _ = streamed([{"error": {"type": "", "code": 500}}])
    assert events(fed) == [("error", {"type": "error", "error": {"type": "api_error", "message": ""}})]
