"""``llm/translate/bedrock.py`` in-process (issue 35): the SigV4 headers (the client's credential and
stale AWS headers dropped, a session token added, the default region), the Converse request's path,
refusals and tool config, the whole answer (ids, defaults, cache usage) and the ConverseStream events
chunk by chunk (tool ids, reasoning and other deltas dropped, exceptions ending the stream once). Bodies
and answers are checked against botocore's own bedrock-runtime service model; what comes back is read
by the ``openai`` SDK."""

from __future__ import annotations

import json
from typing import Any

import botocore.session
import pytest
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from fixtures.mock_bedrock import ACCESS_KEY, SECRET_KEY, _check, _SignedAt, encode_event
from tests.llm_translate_helpers import openai_completion, request
from trioproxy.llm.translate import OpenAIToBedrock, TranslationError, sign_request
from trioproxy.llm.translate.sse import SseReader

SERVICE = botocore.session.get_session().get_service_model("bedrock-runtime")
EVENTS = SERVICE.operation_model("ConverseStream").output_shape.members["stream"].members
CREDENTIALS = Credentials(ACCESS_KEY, SECRET_KEY)
HOST = "bedrock-runtime.eu-west-1.amazonaws.com"
URL = f"https://{HOST}/model/m/converse"


def signed_as_expected(headers: dict[bytes, bytes], credentials: Credentials, region: str, body: bytes) -> None:
    check = AWSRequest(method="POST", url=URL, data=body, headers={"host": HOST, "content-type": "application/json"})
    expected = _SignedAt(credentials, region, headers[b"x-amz-date"].decode()).expected(check)
    assert headers[b"authorization"].decode() == expected


# --- signing -------------------------------------------------------------------------------------


def test_signing_replaces_the_client_credential_and_stale_aws_headers():
    body = b'{"messages":[]}'
    client = [(b"host", HOST.encode()), (b"content-type", b"application/json"), (b"authorization", b"Bearer k"),
              (b"x-amz-date", b"19990101T000000Z"), (b"x-amz-security-token", b"old"),
              (b"x-amz-content-sha256", b"stale"), (b"x-keep", b"authorization")]
    out = sign_request(CREDENTIALS, "eu-west-1", "POST", URL, client, body)
    names = [k for k, _ in out]
    assert names == [b"host", b"content-type", b"x-keep", b"authorization", b"x-amz-date"]
    headers = dict(out)
    assert headers[b"x-keep"] == b"authorization" and headers[b"x-amz-date"] != b"19990101T000000Z"
    signed_as_expected(headers, CREDENTIALS, "eu-west-1", body)


def test_a_session_token_goes_with_the_signature():
    temporary = Credentials(ACCESS_KEY, SECRET_KEY, "session-token-1")
    out = sign_request(temporary, "eu-west-1", "POST", URL, [(b"host", HOST.encode()),
                                                            (b"content-type", b"application/json")], b"{}")
    assert [k for k, _ in out][2:] == [b"authorization", b"x-amz-date", b"x-amz-security-token"]
    headers = dict(out)
    assert headers[b"x-amz-security-token"] == b"session-token-1"
    signed_as_expected(headers, temporary, "eu-west-1", b"{}")


def test_the_translation_signs_with_its_region_or_us_east_1_and_not_without_credentials():
    headers = [(b"host", HOST.encode()), (b"content-type", b"application/json")]
    for t, region in ((OpenAIToBedrock(CREDENTIALS, "eu-west-1"), "eu-west-1"), (OpenAIToBedrock(CREDENTIALS),
                                                                                 "us-east-1")):
        out = dict(t.sign("POST", URL, headers, b'{"a":1}'))
        assert f"/{region}/bedrock/aws4_request".encode() in out[b"authorization"]
        signed_as_expected(out, CREDENTIALS, region, b'{"a":1}')
    assert OpenAIToBedrock().sign("POST", URL, headers + [(b"authorization", b"Bearer k")], b"") == \
        headers + [(b"authorization", b"Bearer k")]


# --- the request ---------------------------------------------------------------------------------


def converse(**fields: Any) -> dict[str, Any]:
    out = OpenAIToBedrock().request(request(**fields))
    body = json.loads(out.body)
    _check(body, SERVICE.operation_model("ConverseStream" if out.streaming else "Converse").input_shape, "", top=True)
    return body


def refused(body: bytes) -> TranslationError:
    with pytest.raises(TranslationError) as caught:
        OpenAIToBedrock().request(body)
    return caught.value


def test_path_model_override_and_flags():
    t = OpenAIToBedrock()
    assert t.include_usage is False
    profile = "arn:aws:bedrock:us-east-1:123:inference-profile/us.anthropic.claude"
    out = t.request(request(), profile)
    assert out.path == "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A123%3Ainference-profile%2Fus.anthropic.claude/converse"
    assert out.streaming is False and t.model == profile
    t = OpenAIToBedrock()
    out = t.request(request(stream=True, stream_options={"include_usage": True}))
    assert out.path == "/model/m/converse-stream" and out.streaming is True and t.include_usage is True


def test_refusals_name_the_field_and_bedrock():
    error = refused(json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode())
    assert (error.field, error.text) == ("model", "model: a missing model cannot be translated to bedrock")
    error = refused(b"nope")
    assert (error.dialect, error.text) == ("openai", "body: a body that is not JSON cannot be translated to bedrock")
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert refused(request(tools=tools, parallel_tool_calls=False)).text == \
        "parallel_tool_calls: false (Converse has no switch for it) cannot be translated to bedrock"
    assert refused(request(tools=tools, tool_choice="none")).text == \
        "tool_choice: 'none' (Converse has no such choice) cannot be translated to bedrock"
    url = [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]
    assert refused(request(messages=[{"role": "user", "content": url}])).text == \
        "messages[0].content[0].image_url.url: an image by http(s) URL (Converse takes bytes) cannot be translated to bedrock"
    svg = [{"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,PHN2Zy8+"}}]
    assert refused(request(messages=[{"role": "user", "content": svg}])).text == \
        "messages[0].content[0].image_url.url: an image of type image/svg+xml cannot be translated to bedrock"


@pytest.mark.parametrize(("choice", "expected"), [
    (None, None), ("auto", {"auto": {}}), ("required", {"any": {}}),
    ({"type": "function", "function": {"name": "function:b"}}, {"tool": {"name": "function:b"}}),
])
def test_tool_config(choice, expected):
    tools = [{"type": "function", "function": {"name": "function:b", "description": "d"}},
             {"type": "function", "function": {"name": "c"}}]
    config = converse(tools=tools, **({"tool_choice": choice} if choice else {}))["toolConfig"]
    assert config.get("toolChoice") == expected
    assert config["tools"] == [
        {"toolSpec": {"name": "function:b", "description": "d",
                      "inputSchema": {"json": {"type": "object", "properties": {}}}}},
        {"toolSpec": {"name": "c", "inputSchema": {"json": {"type": "object", "properties": {}}}}}]


# --- the whole answer ----------------------------------------------------------------------------


def answered(answer: dict[str, Any], model: str = "m") -> tuple[OpenAIToBedrock, dict[str, Any]]:
    _check(answer, SERVICE.operation_model("Converse").output_shape, "")
    t = OpenAIToBedrock()
    t.request(request(model=model))
    body = t.response(200, json.dumps(answer).encode())
    openai_completion(body)
    return t, json.loads(body)


def test_answer_ids_defaults_and_cache_usage():
    use = {"inputTokens": 3, "outputTokens": 2, "totalTokens": 30, "cacheReadInputTokens": 20,
           "cacheWriteInputTokens": 5}
    t, out = answered({"output": {"message": {"role": "assistant", "content": [
        {"reasoningContent": {"reasoningText": {"text": "hm"}}}, {"text": "a"}, {"text": "b"},
        {"toolUse": {"toolUseId": "tu-1", "name": "f", "input": {}}}]}},
        "stopReason": "max_tokens", "usage": use, "metrics": {"latencyMs": 1}}, model="anthropic.c")
    assert (out["id"], out["model"]) == ("chatcmpl-bedrock", "anthropic.c")
    message = out["choices"][0]["message"]
    assert message["content"] == "ab" and out["choices"][0]["finish_reason"] == "length"
    assert message["tool_calls"] == [{"id": "tu-1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert out["usage"] == {"prompt_tokens": 28, "completion_tokens": 2, "total_tokens": 30,
                            "prompt_tokens_details": {"cached_tokens": 20}}
    assert t.raw == use and t.use == out["usage"]


def test_answer_without_usage_or_a_known_stop_reason():
    t = OpenAIToBedrock()
    t.request(request())
    # not the service model's shape: what a proxy in between or a newer API version may send
    out = json.loads(t.response(200, json.dumps({"output": {"message": {"content": [{"toolUse": {}}]}},
                                                 "stopReason": "malformed_model_output"}).encode()))
    assert out["choices"][0]["message"]["tool_calls"] == [
        {"id": "", "type": "function", "function": {"name": "", "arguments": "{}"}}]
    assert out["choices"][0]["finish_reason"] == "stop" and "usage" not in out and t.use is None
    _, out = answered({"output": {"message": {"role": "assistant", "content": [{"text": "x"}]}},
                       "stopReason": "end_turn", "usage": {"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
                       "metrics": {"latencyMs": 1}})
    assert out["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


# --- the stream ----------------------------------------------------------------------------------


def event(kind: str, body: dict[str, Any], check: bool = True) -> bytes:
    if check:
        _check(body, EVENTS[kind], kind)
    return encode_event({":event-type": kind, ":content-type": "application/json", ":message-type": "event"},
                        json.dumps(body).encode())


def exception(kind: str | None, payload: bytes) -> bytes:
    headers = {":message-type": "exception", ":content-type": "application/json"}
    if kind:
        headers[":exception-type"] = kind
    return encode_event(headers, payload)


def streamed(frames_in: list[bytes], usage: bool = True) -> tuple[Any, bytes, bytes]:
    t = OpenAIToBedrock()
    t.request(request(stream=True, stream_options={"include_usage": usage}))
    stream = t.stream()
    fed = stream.feed(b"".join(frames_in))
    return stream, fed, stream.finish()


def frames(data: bytes) -> list[Any]:
    reader = SseReader()
    return [d if d == "[DONE]" else json.loads(d) for _, d in reader.feed(data) + reader.finish()]


def deltas(data: bytes) -> list[tuple[dict[str, Any], str | None]]:
    return [(f["choices"][0]["delta"], f["choices"][0]["finish_reason"]) for f in frames(data)
            if isinstance(f, dict) and f.get("choices")]


def test_stream_tool_ids_dropped_deltas_and_a_reason_bedrock_may_add():
    stream, fed, finished = streamed([
        event("messageStart", {"role": "assistant"}),
        event("contentBlockStart", {"contentBlockIndex": 0, "start": {}}, check=False),
        event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "hm"}}}),
        event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "a"}}),
        event("contentBlockStart", {"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tu-2", "name": "g"}}}),
        event("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": '{"x":1}'}}}),
        event("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {}}}, check=False),
        event("contentBlockStart", {"contentBlockIndex": 3, "start": {"toolUse": {}}}, check=False),
        event("contentBlockStart", {"contentBlockIndex": 4, "start": {"toolUse": {"name": "h"}}}, check=False),
        event("contentBlockStart", {"contentBlockIndex": 5, "start": {"toolUse": {"toolUseId": "tu-5"}}}, check=False),
        event("messageStop", {"stopReason": "model_context_window_exceeded"}, check=False),
    ])
    assert deltas(fed) == [
        ({"role": "assistant", "content": ""}, None), ({"content": "a"}, None),
        ({"tool_calls": [{"index": 0, "id": "tu-2", "type": "function", "function": {"name": "g", "arguments": ""}}]},
         None),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"x":1}'}}]}, None),
        ({"tool_calls": [{"index": 1, "id": "", "type": "function", "function": {"name": "h", "arguments": ""}}]},
         None),
        ({"tool_calls": [{"index": 2, "id": "tu-5", "type": "function", "function": {"name": "", "arguments": ""}}]},
         None)]
    assert {f["id"] for f in frames(fed + finished)[:-1]} == {"chatcmpl-bedrock"}
    assert deltas(finished) == [({}, "stop")]
    # no metadata event: a zero usage chunk for the client, nothing for the gateway
    assert frames(finished)[-2]["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert stream.use is None and stream.raw is None


def test_stream_usage_from_metadata():
    use = {"inputTokens": 2, "outputTokens": 3, "totalTokens": 9, "cacheReadInputTokens": 4}
    stream, _, finished = streamed([event("messageStart", {"role": "assistant"}),
                                    event("messageStop", {"stopReason": "guardrail_intervened"}),
                                    event("metadata", {"usage": use, "metrics": {"latencyMs": 1}})])
    expected = {"prompt_tokens": 6, "completion_tokens": 3, "total_tokens": 9,
                "prompt_tokens_details": {"cached_tokens": 4}}
    assert deltas(finished) == [({}, "content_filter")] and frames(finished)[-2]["usage"] == expected
    assert stream.use == expected and stream.raw == use


def test_an_exception_ends_the_stream_once():
    stream, fed, finished = streamed([event("messageStart", {"role": "assistant"}),
                                      exception("throttlingException", b'{"message": "slow down"}')], usage=False)
    assert frames(fed) == [frames(fed)[0], {"error": {"message": "slow down", "type": "throttlingException",
                                                      "param": None, "code": None}}, "[DONE]"]
    assert deltas(fed) == [({"role": "assistant", "content": ""}, None)]
    assert finished == b""
    # no type, a body that is not JSON: the message is the type, the type api_error
    _, fed, finished = streamed([exception(None, b"<html>busy</html>")], usage=False)
    assert frames(fed) == [{"error": {"message": "api_error", "type": "api_error", "param": None, "code": None}},
                           "[DONE]"]
    assert finished == b""
    _, fed, _ = streamed([exception("internalServerException", b"")], usage=False)
    assert frames(fed)[0]["error"]["message"] == "internalServerException"
