"""An upstream LLM answer that is JSON but not the provider's shape, through a running gateway that
translates between dialects: a whole answer is a 502 in the client's dialect naming the provider, a
stream ends with the dialect's error event (the official SDKs raise their own error on it), and the
gateway's log has the failure as an access-log ``error``, never a traceback. docs/llm-providers.md,
"Answers the gateway cannot read"."""

from __future__ import annotations

import json

import anthropic
import httpx
import openai
import pytest
import trio

from fixtures._asgi import receive_request, serve_asgi
from tests.conftest import free_port, start_gateway
from tests.e2e.test_llm_translate_gateway import GATEWAY
from tests.e2e.test_observability import requests_of

GEMINI = "{gemini: {}}"
GEMINI_PATH = "          pathOverride: /v1beta/models/{{model}}:generateContent"


class BadProvider:
    """A provider that answers 200 with whatever ``body`` holds (as SSE when ``stream``)."""

    def __init__(self, body: bytes, stream: bool = False) -> None:
        self.body = body
        self.content_type = b"text/event-stream" if stream else b"application/json"
        self.requests = 0

    async def __call__(self, scope, receive, send) -> None:
        if await receive_request(scope, receive, send) is None:
            return
        self.requests += 1
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", self.content_type)]})
        await send({"type": "http.response.body", "body": self.body})


async def serve(nursery, body: bytes, provider: str, extra: str = "", *, stream: bool = False):
    bad = BadProvider(body, stream)
    port = await nursery.start(serve_asgi, bad, 0, "127.0.0.1")
    gw = await start_gateway(nursery, GATEWAY, port=free_port(), mock=port, provider=provider, extra=extra)
    return gw, bad


def no_traceback(lines: list[dict]) -> None:
    text = json.dumps(lines)
    assert "Traceback" not in text and "Error in ASGI Framework" not in text, text[:2000]


SHAPE = "JSON that is not its API's shape"


@pytest.mark.parametrize("provider, extra, path, body, message", [
    ("{anthropic: {}}", "", "/v1/chat/completions", b'{"content": [1]}', f"anthropic answered {SHAPE}"),
    ("{anthropic: {}}", "", "/v1/chat/completions", b"[1]", "anthropic answered a JSON array where an object is expected"),
    ("{anthropic: {}}", "", "/v1/chat/completions", b"7", "anthropic answered a JSON number where an object is expected"),
    (GEMINI, GEMINI_PATH, "/v1/chat/completions", b'{"candidates": [1]}', f"gemini answered {SHAPE}"),
    ("{openAI: {}}", "", "/v1/messages", b'{"choices": [1]}', f"openAI answered {SHAPE}"),
], ids=["anthropic-content", "anthropic-list", "anthropic-number", "gemini-candidates", "openai-choices"])
async def test_a_whole_answer_not_in_the_providers_shape_is_a_502_in_the_clients_dialect(
        nursery, log_lines, provider, extra, path, body, message):
    gw, bad = await serve(nursery, body, provider, extra)
    async with httpx.AsyncClient(base_url=gw.url) as client:
        response = await client.post(path, json={"model": "m", "max_tokens": 5,
                                                 "messages": [{"role": "user", "content": "hi"}]})
    assert bad.requests == 1
    assert response.status_code == 502 and response.headers["content-type"] == "application/json"
    text = f"invalid upstream response: {message}"
    if path == "/v1/messages":  # the Anthropic SDK's error shape
        assert response.json() == {"type": "error", "error": {"type": "api_error", "message": text}}
    else:
        assert response.json() == {"error": {"message": text, "type": "server_error", "param": None,
                                              "code": "bad_upstream_response"}}
    lines = await log_lines()
    no_traceback(lines)
    [line] = requests_of(lines)
    assert line["http.status"] == 502 and line["error"] == text


async def test_the_openai_sdk_gets_its_own_502_error(nursery):
    gw, _ = await serve(nursery, b'{"content": [{"type": "text", "text": 1}]}', "{anthropic: {}}")

    def run():
        client = openai.OpenAI(api_key="sk", base_url=f"{gw.url}/v1", max_retries=0, timeout=10)
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        return caught.value

    error = await trio.to_thread.run_sync(run)
    assert error.status_code == 502 and error.body["code"] == "bad_upstream_response"


@pytest.mark.parametrize("provider, extra, upstream", [
    ("{anthropic: {}}", "", b'event: message_start\ndata: {"type": "message_start", "message": [1]}\n\n'),
    (GEMINI, GEMINI_PATH, b'data: {"candidates": [{"content": {"parts": [{"text": "hel"}]}}]}\n\n'
                          b'data: {"candidates": [1]}\n\n'),
], ids=["anthropic", "gemini"])
async def test_an_openai_sdk_stream_ends_with_its_error_not_a_dropped_connection(
        nursery, log_lines, provider, extra, upstream):
    gw, _ = await serve(nursery, b"data: [1]\n\n" + upstream, provider, extra, stream=True)  # [1]: skipped

    def run():
        client = openai.OpenAI(api_key="sk", base_url=f"{gw.url}/v1", max_retries=0, timeout=10)
        seen = []
        with pytest.raises(openai.APIError) as caught:
            for chunk in client.chat.completions.create(model="m", stream=True,
                                                        messages=[{"role": "user", "content": "hi"}]):
                seen.append(chunk)
        return seen, caught.value

    seen, error = await trio.to_thread.run_sync(run)
    name = provider.strip("{}: ")
    assert error.message == f"invalid upstream response: {name} answered {SHAPE}"
    assert error.body["code"] == "bad_upstream_response"
    if name == "gemini":  # what came before the event that broke reached the client
        assert "".join(c.choices[0].delta.content or "" for c in seen) == "hel"
    lines = await log_lines()
    no_traceback(lines)
    [line] = requests_of(lines)
    assert line["http.status"] == 200 and line["error"] == error.message


async def test_an_anthropic_sdk_stream_ends_with_its_error_event(nursery, log_lines):
    upstream = (b'data: {"id": "c1", "choices": [{"delta": {"content": "hel"}}]}\n\n'
                b"data: 7\n\n"
                b'data: {"id": "c1", "choices": [{"delta": {"tool_calls": [1]}}]}\n\n'
                b"data: [DONE]\n\n")
    gw, _ = await serve(nursery, upstream, "{openAI: {}}", stream=True)

    def run():
        client = anthropic.Anthropic(api_key="sk", base_url=gw.url, max_retries=0, timeout=10)
        texts = []
        with pytest.raises(anthropic.APIStatusError) as caught:
            with client.messages.stream(model="m", max_tokens=5,
                                        messages=[{"role": "user", "content": "hi"}]) as stream:
                texts.extend(stream.text_stream)
        return texts, caught.value

    texts, error = await trio.to_thread.run_sync(run)
    assert texts == ["hel"]
    assert error.body == {"type": "error", "error": {
        "type": "api_error", "message": f"invalid upstream response: openAI answered {SHAPE}"}}
    lines = await log_lines()
    no_traceback(lines)
    [line] = requests_of(lines)
    assert line["error"] == f"invalid upstream response: openAI answered {SHAPE}"
