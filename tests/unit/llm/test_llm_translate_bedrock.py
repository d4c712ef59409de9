"""OpenAI chat completions in, Bedrock Converse / ConverseStream out: one test per row of
docs/llm-providers.md, "Translation". Bodies are checked against botocore's own service model, the
signature with botocore's signer, and the mock itself against botocore's own client."""

from __future__ import annotations

import json

import botocore.session
import pytest
import trio
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from fixtures._mock_llm import running
from fixtures.mock_bedrock import ACCESS_KEY, REGION, SECRET_KEY, MockBedrock, _check, _SignedAt, encode_event
from tests.llm_translate_helpers import openai_completion, openai_stream, request
from trioproxy.llm.translate import OpenAIToBedrock, TranslationError, sign_request, translation_for

SERVICE = botocore.session.get_session().get_service_model("bedrock-runtime")
CREDENTIALS = Credentials(ACCESS_KEY, SECRET_KEY)


def translated(**fields) -> tuple[str, dict]:
    out = OpenAIToBedrock(CREDENTIALS, REGION).request(request(**fields))
    body = json.loads(out.body)
    operation = "ConverseStream" if out.streaming else "Converse"
    _check(body, SERVICE.operation_model(operation).input_shape, "", top=True)  # raises on any unknown member
    return out.path, body


def test_chosen_by_provider_and_path():
    assert isinstance(translation_for("bedrock", "/v1/chat/completions", region="eu-west-1"), OpenAIToBedrock)


def test_path_by_model_and_streaming():
    assert translated(model="anthropic.claude-3-haiku-20240307-v1:0")[0] == \
        "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
    assert translated(stream=True)[0] == "/model/m/converse-stream"


def test_system_inference_config_and_alternation():
    _, body = translated(messages=[{"role": "system", "content": "brief"}, {"role": "user", "content": "a"},
                                   {"role": "user", "content": "b"}],
                         max_tokens=9, temperature=0.2, top_p=0.3, stop=["Z"])
    assert body["system"] == [{"text": "brief"}]
    assert body["messages"] == [{"role": "user", "content": [{"text": "a"}, {"text": "b"}]}]
    assert body["inferenceConfig"] == {"maxTokens": 9, "temperature": 0.2, "topP": 0.3, "stopSequences": ["Z"]}


def test_base64_image_as_bytes():
    content = [{"type": "image_url", "image_url": {"url": "data:image/webp;base64,aGk="}}]
    _, body = translated(messages=[{"role": "user", "content": content}])
    assert body["messages"][0]["content"] == [{"image": {"format": "webp", "source": {"bytes": "aGk="}}}]


def test_tools_tool_use_and_results():
    tools = [{"type": "function", "function": {"name": "get", "description": "d", "parameters": {"type": "object"}}}]
    messages = [{"role": "user", "content": "go"},
                {"role": "assistant", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "done"}]
    _, body = translated(messages=messages, tools=tools, tool_choice="required")
    assert body["toolConfig"] == {"tools": [{"toolSpec": {"name": "get", "description": "d",
                                                          "inputSchema": {"json": {"type": "object"}}}}],
                                  "toolChoice": {"any": {}}}
    assert body["messages"][1]["content"] == [{"toolUse": {"toolUseId": "c1", "name": "get", "input": {}}}]
    assert body["messages"][2]["content"] == [{"toolResult": {"toolUseId": "c1", "content": [{"text": "done"}]}}]


@pytest.mark.parametrize(("fields", "field"), [
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}]},
     "messages[0].content[0].image_url.url"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url",
                                                  "image_url": {"url": "data:image/tiff;base64,aGk="}}]}]},
     "messages[0].content[0].image_url.url"),
    ({"tool_choice": "none", "tools": [{"type": "function", "function": {"name": "f"}}]}, "tool_choice"),
    ({"parallel_tool_calls": False}, "parallel_tool_calls"), ({"seed": 4}, "seed"),
])
def test_refused_with_the_field_named(fields, field):
    with pytest.raises(TranslationError) as caught:
        OpenAIToBedrock().request(request(**fields))
    assert caught.value.field == field and "cannot be translated to bedrock" in caught.value.text


def test_signed_with_sigv4_over_the_final_body():
    body = b'{"messages":[]}'
    headers = [(b"host", b"bedrock-runtime.us-east-1.amazonaws.com"), (b"content-type", b"application/json"),
               (b"authorization", b"Bearer client-key"), (b"x-custom", b"1")]
    url = "https://bedrock-runtime.us-east-1.amazonaws.com/model/m/converse"
    signed = dict(sign_request(CREDENTIALS, REGION, "POST", url, headers, body))
    assert signed[b"authorization"].startswith(b"AWS4-HMAC-SHA256 Credential=AKIDMOCK/")
    assert b"SignedHeaders=content-type;host;x-amz-date," in signed[b"authorization"]
    check = AWSRequest(method="POST", url=url, data=body, headers={
        "host": "bedrock-runtime.us-east-1.amazonaws.com", "content-type": "application/json"})
    expected = _SignedAt(CREDENTIALS, REGION, signed[b"x-amz-date"].decode()).expected(check)
    assert signed[b"authorization"].decode() == expected
    assert signed[b"x-custom"] == b"1"


def test_response_text_tool_use_stop_reason_and_usage():
    t = OpenAIToBedrock()
    t.request(request(model="anthropic.claude"))
    answer = {"output": {"message": {"role": "assistant", "content": [
        {"text": "hi"}, {"toolUse": {"toolUseId": "t1", "name": "get", "input": {"a": 1}}}]}},
        "stopReason": "tool_use", "usage": {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7},
        "metrics": {"latencyMs": 5}}
    completion = openai_completion(t.response(200, json.dumps(answer).encode()))
    assert completion.model == "anthropic.claude" and completion.choices[0].finish_reason == "tool_calls"
    assert completion.choices[0].message.content == "hi"
    assert json.loads(completion.choices[0].message.tool_calls[0].function.arguments) == {"a": 1}
    assert completion.usage.total_tokens == 7


@pytest.mark.parametrize(("reason", "finish"), [("end_turn", "stop"), ("max_tokens", "length"),
                                                 ("guardrail_intervened", "content_filter")])
def test_stop_reasons(reason, finish):
    t = OpenAIToBedrock()
    t.request(request())
    answer = {"output": {"message": {"role": "assistant", "content": [{"text": "x"}]}}, "stopReason": reason}
    assert openai_completion(t.response(200, json.dumps(answer).encode())).choices[0].finish_reason == finish


def test_error_body_in_openai_dialect():
    t = OpenAIToBedrock()
    t.request(request())
    out = json.loads(t.response(400, b'{"message": "Malformed input request"}'))
    assert out["error"] == {"message": "Malformed input request", "type": "invalid_request_error",
                            "param": None, "code": None}


def _event(kind: str, body: dict) -> bytes:
    return encode_event({":event-type": kind, ":content-type": "application/json", ":message-type": "event"},
                        json.dumps(body).encode())


def test_stream_event_stream_to_chunks():
    t = OpenAIToBedrock()
    t.request(request(stream=True, stream_options={"include_usage": True}))
    upstream = b"".join([
        _event("messageStart", {"role": "assistant"}),
        _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hel"}}),
        _event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "lo"}}),
        _event("contentBlockStop", {"contentBlockIndex": 0}),
        _event("contentBlockStart", {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "f"}}}),
        _event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": '{"a"'}}}),
        _event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"toolUse": {"input": ":1}"}}}),
        _event("messageStop", {"stopReason": "tool_use"}),
        _event("metadata", {"usage": {"inputTokens": 5, "outputTokens": 6, "totalTokens": 11}, "metrics": {}}),
    ])
    stream = t.stream()
    out = b"".join(stream.feed(upstream[i:i + 13]) for i in range(0, len(upstream), 13)) + stream.finish()
    completion, chunks = openai_stream(out)
    assert completion.choices[0].message.content == "Hello"
    assert completion.choices[0].finish_reason == "tool_calls"
    assert json.loads(completion.choices[0].message.tool_calls[0].function.arguments) == {"a": 1}
    assert chunks[-1].usage.total_tokens == 11


def test_stream_exception_reaches_the_client():
    t = OpenAIToBedrock()
    t.request(request(stream=True))
    stream = t.stream()
    frame = encode_event({":message-type": "exception", ":exception-type": "throttlingException",
                          ":content-type": "application/json"}, b'{"message": "slow down"}')
    out = stream.feed(frame) + stream.finish()
    assert b'"message":"slow down"' in out and out.endswith(b"data: [DONE]\n\n")


async def test_the_mock_is_what_botocores_own_client_expects():
    """The mock answers botocore's bedrock-runtime client (Converse and ConverseStream), so its
    signature check, shapes and event-stream framing are the real API's."""
    async with running(MockBedrock()) as mock:
        def call() -> tuple[dict, list]:
            client = botocore.session.get_session().create_client(
                "bedrock-runtime", region_name=REGION, endpoint_url=f"http://127.0.0.1:{mock.port}",
                aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY)
            messages = [{"role": "user", "content": [{"text": "hello there"}]}]
            whole = client.converse(modelId="anthropic.claude-v2:1", messages=messages,
                                    inferenceConfig={"maxTokens": 10})
            streamed = list(client.converse_stream(modelId="m", messages=messages)["stream"])
            bad = botocore.session.get_session().create_client(
                "bedrock-runtime", region_name=REGION, endpoint_url=f"http://127.0.0.1:{mock.port}",
                aws_access_key_id=ACCESS_KEY, aws_secret_access_key="wrong")
            try:
                bad.converse(modelId="m", messages=messages)
            except bad.exceptions.ClientError as error:
                return whole, [*streamed, error.response["Error"]["Code"]]
            raise AssertionError("a wrong signature was accepted")

        whole, streamed = await trio.to_thread.run_sync(call)
    assert whole["output"]["message"]["content"] == [{"text": "hello there"}]
    assert streamed[0] == {"messageStart": {"role": "assistant"}}
    assert "".join(e["contentBlockDelta"]["delta"]["text"] for e in streamed if "contentBlockDelta" in e) == \
        "hello there"
    assert streamed[-1] == "InvalidSignatureException"
