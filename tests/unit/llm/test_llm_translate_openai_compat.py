"""Anthropic Messages in (Claude Code, the ``anthropic`` SDK), OpenAI-compatible chat completions out:
one test per row of docs/llm-providers.md, "Translation". Answers are read back with the ``anthropic``
SDK's own types and stream accumulator; refusals come in Anthropic's error shape."""

from __future__ import annotations

import json

import pytest

from tests.llm_translate_helpers import anthropic_message, anthropic_stream, sse_frames
from trioproxy.llm.translate import AnthropicToOpenAI, TranslationError, translation_for


def messages_request(**fields) -> bytes:
    return json.dumps({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}],
                       **fields}).encode()


def translated(**fields) -> dict:
    out = AnthropicToOpenAI().request(messages_request(**fields))
    assert out.path == "/v1/chat/completions"
    return json.loads(out.body)


def test_chosen_by_provider_and_path():
    assert isinstance(translation_for("openAI", "/v1/messages"), AnthropicToOpenAI)
    assert isinstance(translation_for("azure", "/v1/messages?beta=true"), AnthropicToOpenAI)
    assert translation_for("anthropic", "/v1/messages") is None


def test_credential_and_anthropic_headers():
    t = AnthropicToOpenAI()
    headers = t.headers([(b"x-api-key", b"k"), (b"anthropic-version", b"2023-06-01"), (b"anthropic-beta", b"x")])
    assert headers == [(b"authorization", b"Bearer k"), (b"accept-encoding", b"identity")]
    kept = t.headers([(b"authorization", b"Bearer backend"), (b"x-api-key", b"client")])
    assert kept == [(b"authorization", b"Bearer backend"), (b"accept-encoding", b"identity")]


def test_system_sampling_stop_and_metadata():
    body = translated(system=[{"type": "text", "text": "be ", "cache_control": {"type": "ephemeral"}},
                              {"type": "text", "text": "brief"}],
                      temperature=0.3, top_p=0.8, stop_sequences=["END"], metadata={"user_id": "u"},
                      stream=True, thinking={"type": "disabled"})
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    assert (body["max_completion_tokens"], body["temperature"], body["top_p"], body["stop"], body["user"]) == \
        (100, 0.3, 0.8, ["END"], "u")
    assert "max_tokens" not in body  # deprecated at OpenAI, refused by its reasoning models
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


def test_max_tokens_stays_for_other_openai_compatible_providers():
    out = AnthropicToOpenAI("gemini").request(messages_request())
    assert json.loads(out.body)["max_tokens"] == 100


def test_images_base64_and_url():
    content = [{"type": "text", "text": "what"},
               {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "aGk="}},
               {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]
    body = translated(messages=[{"role": "user", "content": content}])
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "what"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGk="}},
        {"type": "image_url", "image_url": {"url": "https://x/a.png"}}]


def test_tools_tool_use_and_tool_results():
    tools = [{"name": "get", "description": "d", "input_schema": {"type": "object"}}]
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "tu1", "name": "get", "input": {"q": 1}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu1", "content": [{"type": "text", "text": "42"}]},
                    {"type": "text", "text": "thanks"}]}]
    body = translated(messages=messages, tools=tools,
                      tool_choice={"type": "any", "disable_parallel_tool_use": True})
    assert body["tools"] == [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"},
                                                               "description": "d"}}]
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is False
    assert body["messages"][1] == {"role": "assistant", "content": "calling", "tool_calls": [
        {"id": "tu1", "type": "function", "function": {"name": "get", "arguments": '{"q": 1}'}}]}
    assert body["messages"][2] == {"role": "tool", "tool_call_id": "tu1", "content": "42"}
    assert body["messages"][3] == {"role": "user", "content": "thanks"}


@pytest.mark.parametrize(("choice", "expected"), [
    ({"type": "auto"}, "auto"), ({"type": "none"}, "none"),
    ({"type": "tool", "name": "get"}, {"type": "function", "function": {"name": "get"}})])
def test_tool_choice(choice, expected):
    assert translated(tools=[{"name": "get", "input_schema": {"type": "object"}}],
                      tool_choice=choice)["tool_choice"] == expected


@pytest.mark.parametrize(("fields", "field"), [
    ({"top_k": 5}, "top_k"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "thinking"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": [
        {"type": "image", "source": {}}]}]}]}, "messages[0].content[0].content[0].type"),
    ({"mcp_servers": [{"url": "x"}]}, "mcp_servers"),
])
def test_refused_with_the_field_named_in_anthropic_dialect(fields, field):
    with pytest.raises(TranslationError) as caught:
        AnthropicToOpenAI().request(messages_request(**fields))
    body = json.loads(caught.value.message)
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(field + ":") and caught.value.field == field


def test_response_text_tool_calls_stop_reason_and_usage():
    t = AnthropicToOpenAI()
    t.request(messages_request())
    answer = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-x", "choices": [{
        "index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "sure", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"q":1}'}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13,
                  "prompt_tokens_details": {"cached_tokens": 4}}}
    message = anthropic_message(t.response(200, json.dumps(answer).encode()))
    assert message.stop_reason == "tool_use" and message.content[0].text == "sure"
    assert (message.content[1].name, message.content[1].input) == ("get", {"q": 1})
    assert (message.usage.input_tokens, message.usage.output_tokens, message.usage.cache_read_input_tokens) == (6, 3, 4)


@pytest.mark.parametrize(("finish", "reason"), [("stop", "end_turn"), ("length", "max_tokens"),
                                                 ("content_filter", "refusal")])
def test_stop_reasons(finish, reason):
    t = AnthropicToOpenAI()
    t.request(messages_request())
    answer = {"id": "c", "model": "g", "choices": [{"index": 0, "finish_reason": finish,
                                                    "message": {"role": "assistant", "content": "x"}}]}
    assert anthropic_message(t.response(200, json.dumps(answer).encode())).stop_reason == reason


def test_error_body_in_anthropic_dialect():
    t = AnthropicToOpenAI()
    t.request(messages_request())
    out = json.loads(t.response(429, b'{"error": {"message": "slow", "type": "rate_limit_exceeded"}}'))
    assert out == {"type": "error", "error": {"type": "rate_limit_exceeded", "message": "slow"}}


def _chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> dict:
    return {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x",
            "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}],
            "usage": usage}


@pytest.mark.parametrize("piece", [3, 10_000])
def test_stream_text_tool_calls_and_usage(piece):
    t = AnthropicToOpenAI()
    t.request(messages_request(stream=True))
    upstream = sse_frames([(None, c) for c in [
        _chunk({"role": "assistant", "content": ""}), _chunk({"content": "Hel"}), _chunk({"content": "lo"}),
        _chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function",
                                "function": {"name": "get", "arguments": ""}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q":'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        _chunk({}, "tool_calls"),
        _chunk(None, usage={"prompt_tokens": 8, "completion_tokens": 5, "total_tokens": 13})]] + [(None, "[DONE]")])
    stream = t.stream()
    out = b"".join(stream.feed(upstream[i:i + piece]) for i in range(0, len(upstream), piece)) + stream.finish()
    message = anthropic_stream(out)
    assert [b.type for b in message.content] == ["text", "tool_use"]
    assert message.content[0].text == "Hello" and message.content[1].input == {"q": 1}
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (8, 5)


def test_stream_error_becomes_an_error_event():
    t = AnthropicToOpenAI()
    t.request(messages_request(stream=True))
    stream = t.stream()
    out = stream.feed(sse_frames([(None, _chunk({"content": "a"})),
                                  (None, {"error": {"message": "boom", "type": "server_error"}})])) + stream.finish()
    assert b'event: error\ndata: {"type":"error","error":{"type":"server_error","message":"boom"}}' in out
    assert b"message_stop" not in out
