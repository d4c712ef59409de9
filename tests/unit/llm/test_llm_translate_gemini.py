"""OpenAI chat completions in, Gemini generateContent / streamGenerateContent out: one test per row of
docs/llm-providers.md, "Translation". Request bodies are checked against ``google-genai``'s own types
(which forbid unknown fields); answers are read back with the ``openai`` SDK."""

from __future__ import annotations

import json

import pytest
from google.genai import types

from tests.llm_translate_helpers import openai_completion, openai_stream, request, sse_frames
from trioproxy.llm.translate import OpenAIToGemini, TranslationError, translation_for


def translated(**fields) -> tuple[str, dict]:
    out = OpenAIToGemini().request(request(**fields))
    body = json.loads(out.body)
    for content in body["contents"]:
        types.Content.model_validate(content)  # Gemini's field names, nothing else
    if "generationConfig" in body:
        types.GenerationConfig.model_validate(body["generationConfig"])
    for tool in body.get("tools", ()):
        types.Tool.model_validate(tool)
    if "toolConfig" in body:
        types.ToolConfig.model_validate(body["toolConfig"])
    return out.path, body


def test_chosen_by_provider_and_path():
    native = "/v1beta/models/{model}:generateContent"
    assert isinstance(translation_for("gemini", "/v1/chat/completions", native), OpenAIToGemini)
    # the default gemini endpoint is Google's OpenAI-compatible one: nothing to translate
    assert translation_for("gemini", "/v1/chat/completions", "/v1beta/openai/chat/completions") is None


def test_path_by_model_and_streaming():
    assert translated()[0] == "/v1beta/models/m:generateContent"
    assert translated(stream=True, model="models/gemini-2.5-flash")[0] == \
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


def test_api_key_moves_to_x_goog_api_key():
    headers = OpenAIToGemini().headers([(b"authorization", b"Bearer k1"), (b"accept-encoding", b"gzip")])
    assert (b"x-goog-api-key", b"k1") in headers and (b"accept-encoding", b"identity") in headers
    assert not any(name == b"authorization" for name, _ in headers)


def test_system_roles_and_generation_config():
    _, body = translated(messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                                   {"role": "assistant", "content": "yo"}, {"role": "user", "content": "again"}],
                         max_tokens=5, temperature=0.1, top_p=0.5, stop=["X"], seed=3, presence_penalty=0.2,
                         response_format={"type": "json_object"})
    assert body["systemInstruction"] == {"parts": [{"text": "be brief"}]}
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["generationConfig"] == {"maxOutputTokens": 5, "temperature": 0.1, "topP": 0.5, "stopSequences": ["X"],
                                        "seed": 3, "presencePenalty": 0.2, "responseMimeType": "application/json"}


def test_json_schema_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    _, body = translated(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
    assert body["generationConfig"]["responseJsonSchema"] == schema


def test_base64_image_inline():
    content = [{"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,aGk="}}]
    _, body = translated(messages=[{"role": "user", "content": content}])
    assert body["contents"][0]["parts"] == [{"inlineData": {"mimeType": "image/jpeg", "data": "aGk="}}]


def test_tools_calls_and_results_by_name():
    tools = [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"q":1}'}}]},
                {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 3}'},
                {"role": "tool", "tool_call_id": "c1", "content": "plain"}]
    _, body = translated(messages=messages, tools=tools,
                         tool_choice={"type": "function", "function": {"name": "get"}})
    assert body["tools"] == [{"functionDeclarations": [{"name": "get", "parametersJsonSchema": {"type": "object"}}]}]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get"]}}
    assert body["contents"][1]["parts"] == [{"functionCall": {"name": "get", "args": {"q": 1}}}]
    assert body["contents"][2]["parts"] == [{"functionResponse": {"name": "get", "response": {"temp": 3}}},
                                            {"functionResponse": {"name": "get", "response": {"content": "plain"}}}]


@pytest.mark.parametrize(("fields", "field"), [
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}]},
     "messages[0].content[0].image_url.url"),
    ({"messages": [{"role": "tool", "tool_call_id": "nope", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"parallel_tool_calls": False, "tools": [{"type": "function", "function": {"name": "f"}}]},
     "parallel_tool_calls"),
    ({"logit_bias": {"1": 2}}, "logit_bias"), ({"n": 3}, "n"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "response_format"),
])
def test_refused_with_the_field_named(fields, field):
    with pytest.raises(TranslationError) as caught:
        OpenAIToGemini().request(request(**fields))
    assert caught.value.field == field and json.loads(caught.value.message)["error"]["param"] == field


def test_response_text_function_call_and_usage():
    t = OpenAIToGemini()
    t.request(request())
    answer = {"candidates": [{"content": {"role": "model", "parts": [
        {"text": "thinking...", "thought": True}, {"text": "hi"}, {"functionCall": {"name": "get", "args": {"q": 1}}}]},
        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 2, "thoughtsTokenCount": 3,
                          "totalTokenCount": 9}, "modelVersion": "gemini-2.5-flash", "responseId": "r1"}
    types.GenerateContentResponse.model_validate(answer)
    completion = openai_completion(t.response(200, json.dumps(answer).encode()))
    choice = completion.choices[0]
    assert choice.message.content == "hi" and choice.finish_reason == "tool_calls"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"q": 1}
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (4, 5)


@pytest.mark.parametrize(("reason", "finish"), [("STOP", "stop"), ("MAX_TOKENS", "length"),
                                                 ("SAFETY", "content_filter"), ("RECITATION", "content_filter")])
def test_finish_reasons(reason, finish):
    t = OpenAIToGemini()
    t.request(request())
    answer = {"candidates": [{"content": {"role": "model", "parts": [{"text": "x"}]}, "finishReason": reason}]}
    assert openai_completion(t.response(200, json.dumps(answer).encode())).choices[0].finish_reason == finish


def test_error_body_in_openai_dialect():
    t = OpenAIToGemini()
    t.request(request())
    error = {"error": {"code": 400, "message": "Invalid JSON payload received.", "status": "INVALID_ARGUMENT"}}
    out = json.loads(t.response(400, json.dumps(error).encode()))
    assert out["error"]["message"] == "Invalid JSON payload received." and out["error"]["type"] == "INVALID_ARGUMENT"


def test_stream_text_function_call_and_usage():
    t = OpenAIToGemini()
    t.request(request(stream=True, stream_options={"include_usage": True}))
    pieces = [
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}], "responseId": "r2"},
        {"candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]}}]},
        {"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"name": "get", "args": {"a": 1}}}]},
                         "finishReason": "STOP"}],
         "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7}},
    ]
    upstream = sse_frames([(None, p) for p in pieces])
    stream = t.stream()
    out = b"".join(stream.feed(upstream[i:i + 5]) for i in range(0, len(upstream), 5)) + stream.finish()
    completion, chunks = openai_stream(out)
    message = completion.choices[0].message
    assert message.content == "Hello" and completion.choices[0].finish_reason == "tool_calls"
    assert json.loads(message.tool_calls[0].function.arguments) == {"a": 1}
    assert chunks[-1].usage.total_tokens == 7 and completion.id == "r2"
