"""OpenAI chat completions in, Anthropic Messages out: one test per row of docs/llm-providers.md,
"Translation". Answers are read back with the ``openai`` SDK's own types and stream accumulator."""

from __future__ import annotations

import json

import pytest

from tests.llm_translate_helpers import openai_completion, openai_stream, request, sse_frames
from trioproxy.llm.translate import OpenAIToAnthropic, TranslationError, translation_for


def translated(**fields) -> dict:
    t = OpenAIToAnthropic()
    out = t.request(request(**fields))
    assert out.path == "/v1/messages"
    return json.loads(out.body)


def test_chosen_by_provider_and_path():
    assert isinstance(translation_for("anthropic", "/v1/chat/completions"), OpenAIToAnthropic)
    assert translation_for("anthropic", "/v1/messages") is None  # already the provider's dialect
    assert translation_for("openAI", "/v1/chat/completions") is None


def test_system_and_developer_messages_become_system():
    body = translated(messages=[{"role": "system", "content": "be brief"},
                                {"role": "developer", "content": [{"type": "text", "text": "in French"}]},
                                {"role": "user", "content": "hi"}])
    assert body["system"] == "be brief\n\nin French"
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]


def test_max_tokens_required_by_anthropic_gets_a_default():
    assert translated()["max_tokens"] == 4096
    assert translated(max_tokens=7)["max_tokens"] == 7
    assert translated(max_completion_tokens=9, max_tokens=7)["max_tokens"] == 9


def test_sampling_stop_and_user():
    body = translated(temperature=0.5, top_p=0.9, stop="END", user="u1", stream=True,
                      stream_options={"include_usage": True})
    assert (body["temperature"], body["top_p"], body["stop_sequences"]) == (0.5, 0.9, ["END"])
    assert body["metadata"] == {"user_id": "u1"} and body["stream"] is True
    assert "stream_options" not in body  # Anthropic always reports usage and rejects the field


def test_images_by_url_and_base64():
    content = [{"type": "text", "text": "what is it"},
               {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "high"}},
               {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}}]
    blocks = translated(messages=[{"role": "user", "content": content}])["messages"][0]["content"]
    assert blocks[1] == {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}
    assert blocks[2] == {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}}


def test_tools_tool_calls_and_results():
    tools = [{"type": "function", "function": {"name": "get", "description": "d",
                                               "parameters": {"type": "object", "properties": {"q": {}}}}}]
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"q":1}'}},
                    {"id": "c2", "type": "function", "function": {"name": "get", "arguments": '{"q":2}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "one"},
                {"role": "tool", "tool_call_id": "c2", "content": "two"},
                {"role": "user", "content": "and?"}]
    body = translated(messages=messages, tools=tools, tool_choice="required", parallel_tool_calls=False)
    assert body["tools"] == [{"name": "get", "description": "d",
                              "input_schema": {"type": "object", "properties": {"q": {}}}}]
    assert body["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}
    assert body["messages"][1]["content"][0] == {"type": "tool_use", "id": "c1", "name": "get", "input": {"q": 1}}
    results = body["messages"][2]  # both results and the next user message: one user turn
    assert [b["type"] for b in results["content"]] == ["tool_result", "tool_result", "text"]
    assert results["content"][0] == {"type": "tool_result", "tool_use_id": "c1", "content": "one"}


@pytest.mark.parametrize(("choice", "expected"), [
    ("auto", {"type": "auto"}), ("none", {"type": "none"}),
    ({"type": "function", "function": {"name": "get"}}, {"type": "tool", "name": "get"})])
def test_tool_choice(choice, expected):
    tools = [{"type": "function", "function": {"name": "get"}}]
    assert translated(tools=tools, tool_choice=choice)["tool_choice"] == expected


@pytest.mark.parametrize(("fields", "field"), [
    ({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "file", "file": {}}]}]}, "messages[0].content[0].type"),
    ({"n": 2}, "n"), ({"logprobs": True}, "logprobs"), ({"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"response_format": {"type": "json_object"}}, "response_format"), ({"seed": 1}, "seed"),
    ({"reasoning_effort": "low"}, "reasoning_effort"), ({"audio": {"voice": "x"}}, "audio"),
    ({"messages": [{"role": "function", "name": "f", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[1].tool_calls[0].function.arguments"),
    ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0].type"),
])
def test_refused_with_the_field_named_in_openai_dialect(fields, field):
    with pytest.raises(TranslationError) as caught:
        OpenAIToAnthropic().request(request(**fields))
    error = caught.value
    assert error.status == 400 and error.field == field
    body = json.loads(error.message)
    assert body["error"]["param"] == field and "cannot be translated to anthropic" in body["error"]["message"]
    assert body["error"]["message"].startswith(field + ":")


def test_neutral_values_are_accepted():
    translated(n=1, logprobs=False, frequency_penalty=0, presence_penalty=0.0, store=False,
               response_format={"type": "text"})


def test_response_text_tool_use_stop_reason_and_usage():
    t = OpenAIToAnthropic()
    t.request(request())
    answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
              "content": [{"type": "text", "text": "hello"},
                          {"type": "tool_use", "id": "tu1", "name": "get", "input": {"q": 1}}],
              "stop_reason": "tool_use", "stop_sequence": None,
              "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 4,
                        "cache_creation_input_tokens": 1}}
    completion = openai_completion(t.response(200, json.dumps(answer).encode()))
    choice = completion.choices[0]
    assert choice.message.content == "hello" and choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert (call.id, call.function.name, json.loads(call.function.arguments)) == ("tu1", "get", {"q": 1})
    assert completion.usage.prompt_tokens == 15 and completion.usage.completion_tokens == 5
    assert completion.usage.prompt_tokens_details.cached_tokens == 4


@pytest.mark.parametrize(("reason", "finish"), [("end_turn", "stop"), ("max_tokens", "length"),
                                                 ("stop_sequence", "stop"), ("refusal", "content_filter")])
def test_stop_reasons(reason, finish):
    t = OpenAIToAnthropic()
    t.request(request())
    answer = {"id": "m", "model": "c", "content": [], "stop_reason": reason, "usage": {}}
    assert json.loads(t.response(200, json.dumps(answer).encode()))["choices"][0]["finish_reason"] == finish


def test_error_body_in_openai_dialect():
    t = OpenAIToAnthropic()
    t.request(request())
    body = {"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}}
    out = json.loads(t.response(400, json.dumps(body).encode()))
    assert out["error"]["message"] == "max_tokens: Field required"
    assert out["error"]["type"] == "invalid_request_error"


ANTHROPIC_STREAM = [
    ("message_start", {"type": "message_start", "message": {
        "id": "msg_s", "type": "message", "role": "assistant", "model": "claude-x", "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 1}}}),
    ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ("ping", {"type": "ping"}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    ("content_block_start", {"type": "content_block_start", "index": 1,
                             "content_block": {"type": "tool_use", "id": "tu1", "name": "get", "input": {}}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1,
                             "delta": {"type": "input_json_delta", "partial_json": '{"q":'}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 1,
                             "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                       "usage": {"output_tokens": 7}}),
    ("message_stop", {"type": "message_stop"}),
]


@pytest.mark.parametrize("piece", [1, 7, 10_000])
def test_stream_text_tool_calls_and_usage(piece):
    t = OpenAIToAnthropic()
    t.request(request(stream=True, stream_options={"include_usage": True}))
    upstream = sse_frames(ANTHROPIC_STREAM)
    stream = t.stream()
    out = b"".join(stream.feed(upstream[i:i + piece]) for i in range(0, len(upstream), piece)) + stream.finish()
    completion, chunks = openai_stream(out)
    message = completion.choices[0].message
    assert message.content == "Hello" and completion.choices[0].finish_reason == "tool_calls"
    assert message.tool_calls[0].function.name == "get"
    assert json.loads(message.tool_calls[0].function.arguments) == {"q": 1}
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 12
    assert chunks[-1].usage.completion_tokens == 7
    assert completion.id == "msg_s"


def test_stream_without_include_usage_has_no_usage_chunk():
    t = OpenAIToAnthropic()
    t.request(request(stream=True))
    stream = t.stream()
    _, chunks = openai_stream(stream.feed(sse_frames(ANTHROPIC_STREAM)) + stream.finish())
    assert all(c.choices for c in chunks)


def test_stream_error_event_reaches_the_client():
    t = OpenAIToAnthropic()
    t.request(request(stream=True))
    stream = t.stream()
    out = stream.feed(sse_frames([ANTHROPIC_STREAM[0], ("error", {"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}})])) + stream.finish()
    assert b'"message":"Overloaded"' in out and out.endswith(b"data: [DONE]\n\n")
