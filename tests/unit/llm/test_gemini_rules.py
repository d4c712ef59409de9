"""``llm/translate/gemini.py`` in-process (issue 35): the request Gemini gets (path, key header, every
generationConfig / tool / refusal rule with the exact words the client sees), the whole answer (ids,
finish reasons, blocked prompts, usage with cached and thinking tokens) and the stream, chunk by chunk
(call ids and indexes, compact arguments, the finish, the usage chunk, mid-stream errors). Request
bodies are checked against ``google-genai``'s types, answers and streams are Gemini's own shapes
validated the same way, and what comes back is read by the ``openai`` SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.genai import types

from tests.llm_translate_helpers import openai_completion, openai_stream, request, sse_frames
from trioproxy.llm.translate import OpenAIToGemini, TranslationError
from trioproxy.llm.translate.sse import SseReader


def body_of(**fields: Any) -> dict[str, Any]:
    out = OpenAIToGemini().request(request(**fields))
    body = json.loads(out.body)
    for content in body["contents"]:
        types.Content.model_validate(content)
    if "systemInstruction" in body:
        types.Content.model_validate(body["systemInstruction"])
    if "generationConfig" in body:
        types.GenerationConfig.model_validate(body["generationConfig"])
    for tool in body.get("tools", ()):
        types.Tool.model_validate(tool)
    if "toolConfig" in body:
        types.ToolConfig.model_validate(body["toolConfig"])
    return body


def refused(body: bytes, model: str | None = None) -> TranslationError:
    with pytest.raises(TranslationError) as caught:
        OpenAIToGemini().request(body, model)
    return caught.value


# --- the request ---------------------------------------------------------------------------------


def test_path_model_override_and_flags():
    t = OpenAIToGemini()
    assert t.include_usage is False and t.streaming is False
    out = t.request(request(), "tuned/a b")
    assert out.path == "/v1beta/models/tuned%2Fa%20b:generateContent" and out.streaming is False
    assert t.model == "tuned/a b" and json.loads(out.body)["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    t = OpenAIToGemini()
    out = t.request(request(stream=True, stream_options={"include_usage": True}, model="models/g-1"))
    assert out.path == "/v1beta/models/g-1:streamGenerateContent?alt=sse" and out.streaming is True
    assert (t.streaming, t.include_usage, t.model) == (True, True, "models/g-1")
    # the route's model wins over the client's; a client with none needs the route's
    assert OpenAIToGemini().request(json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode(),
                                    "g-2").path == "/v1beta/models/g-2:generateContent"


def test_refusals_name_the_field_the_provider_and_the_dialect():
    no_model = json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode()
    error = refused(no_model)
    assert (error.field, error.text) == ("model", "model: a missing model cannot be translated to gemini")
    error = refused(b"[1")
    assert (error.field, error.dialect) == ("body", "openai")
    assert error.text == "body: a body that is not JSON cannot be translated to gemini"
    error = refused(request(logit_bias={"1": 2}))
    assert error.text == "logit_bias: the field 'logit_bias' cannot be translated to gemini"
    assert json.loads(error.message)["error"]["message"] == error.text


def test_bearer_key_moves_to_x_goog_api_key_and_nothing_else_moves():
    headers = OpenAIToGemini().headers([(b"authorization", b"BEARER  k2 "), (b"x-note", b"bearer zzz"),
                                        (b"accept-encoding", b"br")])
    assert headers == [(b"x-goog-api-key", b"k2"), (b"x-note", b"bearer zzz"), (b"accept-encoding", b"identity")]
    basic = OpenAIToGemini().headers([(b"authorization", b"Basic eDp5")])
    assert basic == [(b"authorization", b"Basic eDp5"), (b"accept-encoding", b"identity")]


def test_system_messages_joined_and_every_generation_key():
    body = body_of(messages=[{"role": "system", "content": "one"}, {"role": "developer", "content": "two"},
                             {"role": "user", "content": "q"}],
                   max_completion_tokens=9, temperature=0, top_p=1, stop="END", seed=0, frequency_penalty=0.5,
                   presence_penalty=-0.5)
    assert body["systemInstruction"] == {"parts": [{"text": "one\n\ntwo"}]}
    assert body["generationConfig"] == {"maxOutputTokens": 9, "temperature": 0, "topP": 1, "stopSequences": ["END"],
                                        "seed": 0, "frequencyPenalty": 0.5, "presencePenalty": -0.5}


def test_response_formats():
    assert "generationConfig" not in body_of(response_format={"type": "text"})
    assert body_of(response_format={"type": "json_object"})["generationConfig"] == {
        "responseMimeType": "application/json"}
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert body_of(response_format={"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})[
        "generationConfig"] == {"responseMimeType": "application/json", "responseJsonSchema": schema}
    error = refused(request(response_format={"type": "xml"}))
    assert (error.field, error.text) == ("response_format",
                                         'response_format: {"type": "xml"} cannot be translated to gemini')


def test_tools_with_and_without_descriptions():
    tools = [{"type": "function", "function": {"name": "a", "description": "does a",
                                               "parameters": {"type": "object", "properties": {}}}},
             {"type": "function", "function": {"name": "b"}}]
    body = body_of(tools=tools, parallel_tool_calls=True)
    assert body["tools"] == [{"functionDeclarations": [
        {"name": "a", "description": "does a", "parametersJsonSchema": {"type": "object", "properties": {}}},
        {"name": "b", "parametersJsonSchema": {"type": "object", "properties": {}}}]}]
    assert "toolConfig" not in body
    error = refused(request(tools=tools, parallel_tool_calls=False))
    assert error.text == "parallel_tool_calls: false (Gemini has no switch for it) cannot be translated to gemini"


@pytest.mark.parametrize(("choice", "config"), [
    ("auto", {"mode": "AUTO"}), ("required", {"mode": "ANY"}), ("none", {"mode": "NONE"}),
    ({"type": "function", "function": {"name": "b"}}, {"mode": "ANY", "allowedFunctionNames": ["b"]}),
])
def test_tool_choice_modes(choice, config):
    tools = [{"type": "function", "function": {"name": "b"}}]
    assert body_of(tools=tools, tool_choice=choice)["toolConfig"] == {"functionCallingConfig": config}


def test_parts_that_cannot_go_say_why():
    image = [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]
    error = refused(request(messages=[{"role": "user", "content": image}]))
    assert error.text == ("messages[0].content[0].image_url.url: an image by http(s) URL (Gemini takes inline "
                          "base64) cannot be translated to gemini")
    error = refused(request(messages=[{"role": "user", "content": "q"},
                                      {"role": "tool", "tool_call_id": "gone", "content": "x"}]))
    assert error.text == ("messages[1].tool_call_id: a tool result whose call is not in the conversation "
                          "cannot be translated to gemini")


def test_tool_results_keep_objects_and_wrap_anything_else():
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "[1, 2]"},
                {"role": "tool", "tool_call_id": "c1", "content": "{not json"}]
    assert body_of(messages=messages)["contents"][2]["parts"] == [
        {"functionResponse": {"name": "get", "response": {"content": "[1, 2]"}}},
        {"functionResponse": {"name": "get", "response": {"content": "{not json"}}}]


# --- the whole answer ----------------------------------------------------------------------------


def answered(answer: dict[str, Any], model: str = "m") -> tuple[OpenAIToGemini, dict[str, Any]]:
    types.GenerateContentResponse.model_validate(answer)
    t = OpenAIToGemini()
    t.request(request(model=model))
    body = t.response(200, json.dumps(answer).encode())
    openai_completion(body)  # the SDK reads it
    return t, json.loads(body)


def test_answer_ids_call_ids_by_part_and_defaults():
    t, out = answered({"candidates": [{"content": {"role": "model", "parts": [
        {"text": "a"}, {"text": "b", "thought": False}, {"functionCall": {"id": "fc-9", "name": "x", "args": {"k": 1}}},
        {"functionCall": {"name": "y"}}, {"functionCall": {"args": {"z": [1]}}}]}}]}, model="mine")
    assert (out["id"], out["model"]) == ("chatcmpl-gemini", "mine")
    message = out["choices"][0]["message"]
    assert message["content"] == "ab" and out["choices"][0]["finish_reason"] == "tool_calls"
    assert message["tool_calls"] == [
        {"id": "fc-9", "type": "function", "function": {"name": "x", "arguments": '{"k":1}'}},
        {"id": "call_3", "type": "function", "function": {"name": "y", "arguments": "{}"}},
        {"id": "call_4", "type": "function", "function": {"name": "", "arguments": '{"z":[1]}'}}]
    assert "usage" not in out and t.use is None and t.raw is None and t.counted() is None


@pytest.mark.parametrize(("reason", "calls", "finish"), [
    ("STOP", True, "tool_calls"), (None, True, "tool_calls"), ("MAX_TOKENS", True, "length"),
    ("MAX_TOKENS", False, "length"), ("OTHER", False, "stop"), ("FINISH_REASON_UNSPECIFIED", False, "stop"),
    (None, False, "stop"), ("MALFORMED_FUNCTION_CALL", False, "stop"), ("SPII", False, "content_filter"),
    ("PROHIBITED_CONTENT", False, "content_filter"), ("BLOCKLIST", False, "content_filter"),
    ("IMAGE_SAFETY", False, "content_filter"),
])
def test_answer_finish_reasons(reason, calls, finish):
    parts = [{"functionCall": {"name": "f", "args": {}}}] if calls else [{"text": "x"}]
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if reason:
        candidate["finishReason"] = reason
    _, out = answered({"candidates": [candidate]})
    assert out["choices"][0]["finish_reason"] == finish


def test_a_blocked_prompt_is_a_content_filter_finish():
    use = {"promptTokenCount": 6, "totalTokenCount": 6}
    t, out = answered({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}, "usageMetadata": use,
                       "responseId": "r9", "modelVersion": "gemini-x"})
    assert (out["id"], out["model"]) == ("r9", "gemini-x")
    assert out["choices"][0]["finish_reason"] == "content_filter" and out["choices"][0]["message"]["content"] == ""
    assert out["usage"] == {"prompt_tokens": 6, "completion_tokens": 0, "total_tokens": 6} and t.raw == use
    # no candidates and no block reason, or a block reason beside candidates: an ordinary stop
    assert answered({"candidates": []})[1]["choices"][0]["finish_reason"] == "stop"
    assert answered({"candidates": [{"content": {"role": "model", "parts": [{"text": "x"}]}}],
                     "promptFeedback": {"blockReason": "OTHER"}})[1]["choices"][0]["finish_reason"] == "stop"


def test_usage_counts_thinking_as_completion_and_reports_cached_and_reasoning():
    use = {"promptTokenCount": 10, "cachedContentTokenCount": 4, "thoughtsTokenCount": 3, "candidatesTokenCount": 2,
           "totalTokenCount": 15}
    t, out = answered({"candidates": [{"content": {"role": "model", "parts": [{"text": "x"}]}}], "usageMetadata": use})
    assert out["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15,
                            "prompt_tokens_details": {"cached_tokens": 4},
                            "completion_tokens_details": {"reasoning_tokens": 3}}
    assert t.use == out["usage"] and t.raw == use
    # only thinking, no prompt count: zeros where Gemini leaves the field out
    _, out = answered({"candidates": [], "usageMetadata": {"thoughtsTokenCount": 2}})
    assert out["usage"] == {"prompt_tokens": 0, "completion_tokens": 2, "total_tokens": 2,
                            "completion_tokens_details": {"reasoning_tokens": 2}}


# --- the stream ----------------------------------------------------------------------------------


def streamed(pieces: list[Any], *, usage: bool = True, whole: bool = True, tail: str = "") -> tuple[Any, bytes]:
    """The client's stream for Gemini's events (``tail``: a last event without its blank line)."""
    for piece in pieces:
        if isinstance(piece, dict) and "error" not in piece:
            types.GenerateContentResponse.model_validate(piece)
    t = OpenAIToGemini()
    t.request(request(stream=True, stream_options={"include_usage": usage}))
    stream = t.stream()
    upstream = sse_frames([(None, p) for p in pieces])
    out = stream.feed(upstream) if whole else b"".join(stream.feed(upstream[i:i + 3])
                                                       for i in range(0, len(upstream), 3))
    if tail:
        out += stream.feed(f"data: {tail}\n".encode())
    return stream, out + stream.finish()


def frames(data: bytes) -> list[Any]:
    reader = SseReader()
    return [d if d == "[DONE]" else json.loads(d) for _, d in reader.feed(data) + reader.finish()]


def deltas(data: bytes) -> list[tuple[dict[str, Any], str | None]]:
    return [(f["choices"][0]["delta"], f["choices"][0]["finish_reason"]) for f in frames(data)[:-1] if f["choices"]]


def test_stream_chunks_in_order_with_ids_indexes_and_compact_arguments():
    pieces = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "plan", "thought": True}, {"text": "He"}]}}],
         "responseId": "r1", "modelVersion": "gemini-v"},
        {"candidates": [{"content": {"role": "model", "parts": [
            {"text": "y"}, {"functionCall": {"name": "f", "args": {"a": 1, "b": [2]}}}]}}]},
        {"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"id": "g-id", "name": "g"}}, {"functionCall": {"args": {}}}]}}]},
    ]
    stream, out = streamed(pieces, whole=True)
    got = frames(out)
    assert {(f["id"], f["model"]) for f in got[:-1]} == {("r1", "gemini-v")}
    assert deltas(out) == [
        ({"role": "assistant", "content": ""}, None), ({"content": "He"}, None), ({"content": "y"}, None),
        ({"tool_calls": [{"index": 0, "id": "call_0", "type": "function",
                          "function": {"name": "f", "arguments": '{"a":1,"b":[2]}'}}]}, None),
        ({"tool_calls": [{"index": 1, "id": "g-id", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
         None),
        ({"tool_calls": [{"index": 2, "id": "call_2", "type": "function", "function": {"name": "", "arguments": "{}"}}]},
         None),
        ({}, "tool_calls")]
    # no usage from Gemini: a zero usage chunk for the client that asked, none seen by the gateway
    assert got[-2]["choices"] == [] and got[-2]["usage"] == {"prompt_tokens": 0, "completion_tokens": 0,
                                                             "total_tokens": 0}
    assert got[-1] == "[DONE]" and stream.use is None and stream.raw is None
    completion, _ = openai_stream(out)
    assert completion.choices[0].message.content == "Hey"


@pytest.mark.parametrize(("reason", "calls", "finish"), [
    (None, True, "tool_calls"), ("STOP", True, "tool_calls"), ("MAX_TOKENS", True, "length"),
    (None, False, "stop"), ("STOP", False, "stop"), ("MAX_TOKENS", False, "length"), ("SAFETY", False, "content_filter"),
    ("OTHER", False, "stop"),
])
def test_stream_finish_reasons(reason, calls, finish):
    parts = [{"functionCall": {"name": "f", "args": {}}}] if calls else [{"text": "x"}]
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if reason:
        candidate["finishReason"] = reason
    _, out = streamed([{"candidates": [candidate]}])
    assert deltas(out)[-1] == ({}, finish)


def test_stream_usage_a_later_event_without_candidates_and_a_last_event_without_blank_line():
    use = {"promptTokenCount": 3, "candidatesTokenCount": 1, "thoughtsTokenCount": 2, "totalTokenCount": 6}
    pieces = [{"candidates": [{"content": {"role": "model", "parts": [{"text": "a"}]}, "finishReason": "MAX_TOKENS"}]},
              {"usageMetadata": use}]
    tail = json.dumps({"candidates": [{"content": {"role": "model", "parts": [{"text": "b"}]}}]})
    stream, out = streamed(pieces, whole=False, tail=tail)
    assert deltas(out) == [({"role": "assistant", "content": ""}, None), ({"content": "a"}, None),
                           ({"content": "b"}, None), ({}, "length")]
    expected = {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6,
                "completion_tokens_details": {"reasoning_tokens": 2}}
    assert frames(out)[-2]["usage"] == expected and stream.use == expected and stream.raw == use


def test_stream_of_a_blocked_prompt_and_unreadable_events():
    stream, out = streamed(["not json", {"promptFeedback": {"blockReason": "SAFETY"}}], usage=False)
    assert deltas(out) == [({"role": "assistant", "content": ""}, None), ({}, "content_filter")]
    assert frames(out)[-1] == "[DONE]" and all("usage" not in f for f in frames(out)[:-1])
    # nothing readable: the stream still starts, finishes and ends
    _, out = streamed(["{oops"], usage=False)
    assert deltas(out) == [({"role": "assistant", "content": ""}, None), ({}, "stop")]


def test_stream_error_mid_stream_in_openai_shape():
    error = {"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}
    _, out = streamed([{"candidates": [{"content": {"role": "model", "parts": [{"text": "a"}]}}]}, error], usage=False)
    got = frames(out)
    assert got[2] == {"error": {"message": "Resource exhausted", "type": "RESOURCE_EXHAUSTED", "param": None,
                                "code": 429}}
    _, out = streamed([{"error": {}}], usage=False)
    assert frames(out)[0] == {"error": {"message": "", "type": "api_error", "param": None, "code": None}}
