"""Translation through a running gateway, with the official SDKs as clients and the strict provider
mocks (fixtures/) as upstreams: the OpenAI SDK against an ``anthropic`` and a native ``gemini`` backend,
the Anthropic SDK against an OpenAI-compatible one; refusals as the SDK's own 400 error; both forms
of request and response in the trace."""

from __future__ import annotations

import base64
import json

import anthropic
import openai
import pytest
import trio

from fixtures.mock_anthropic import MockAnthropic
from fixtures.mock_bedrock import ACCESS_KEY, REGION, SECRET_KEY, MockBedrock
from fixtures.mock_gemini import MockGemini
from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway
from tests.e2e.test_trace import watch

GATEWAY = """
binds:
- port: {port}
  listeners:
  - routes:
    - backends:
      - ai:
          name: llm
          provider: {provider}
          hostOverride: 127.0.0.1:{mock}
{extra}
      policies:
        backendAuth: {{key: sk-provider}}
"""

TOOLS = [{"type": "function", "function": {"name": "weather", "description": "the weather",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


async def serve(nursery, mock, provider: str, extra: str = ""):
    await nursery.start(mock.serve, 0)
    return await start_gateway(nursery, GATEWAY, port=free_port(), mock=mock.port, provider=provider,
                               extra=extra)


def openai_client(gw) -> openai.OpenAI:
    return openai.OpenAI(api_key="sk-client", base_url=f"{gw.url}/v1", max_retries=0, timeout=10)


async def test_openai_sdk_to_anthropic_whole_streamed_and_tools(nursery):
    mock = MockAnthropic()
    gw = await serve(nursery, mock, "{anthropic: {}}")

    def run():
        client = openai_client(gw)
        whole = client.chat.completions.create(
            model="claude-x", messages=[{"role": "system", "content": "be brief"},
                                        {"role": "user", "content": "hello there"}])
        chunks = list(client.chat.completions.create(
            model="claude-x", messages=[{"role": "user", "content": "one two three"}], stream=True,
            stream_options={"include_usage": True}))
        call = client.chat.completions.create(model="claude-x", messages=[{"role": "user", "content": "rain?"}],
                                              tools=TOOLS)
        tool_call = call.choices[0].message.tool_calls[0]
        answer = client.chat.completions.create(model="claude-x", tools=TOOLS, messages=[
            {"role": "user", "content": "rain?"}, call.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": tool_call.id, "content": "sunny"}])
        return whole, chunks, call, answer

    whole, chunks, call, answer = await trio.to_thread.run_sync(run)
    assert whole.choices[0].message.content == "hello there" and whole.choices[0].finish_reason == "stop"
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens > 0
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "one two three"
    assert chunks[-1].usage is not None and chunks[-1].choices == []
    assert call.choices[0].finish_reason == "tool_calls"
    assert json.loads(call.choices[0].message.tool_calls[0].function.arguments) == {"q": "rain?"}
    assert answer.choices[0].message.content == "result: sunny"
    first = mock.requests[0]
    assert first.path == "/v1/messages" and first.header("x-api-key") == "sk-provider"
    assert first.header("anthropic-version") == "2023-06-01"
    assert first.json == {"model": "claude-x", "max_tokens": 4096, "system": "be brief",
                          "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}]}


async def test_untranslatable_is_the_sdks_400_naming_the_field(nursery):
    mock = MockAnthropic()
    gw = await serve(nursery, mock, "{anthropic: {}}")

    def run():
        try:
            openai_client(gw).chat.completions.create(model="claude-x", messages=[{"role": "user", "content": [
                {"type": "input_audio", "input_audio": {"data": "aGk=", "format": "wav"}}]}])
        except openai.BadRequestError as error:
            return error
        raise AssertionError("translated silently")

    error = await trio.to_thread.run_sync(run)
    assert error.status_code == 400 and error.body["param"] == "messages[0].content[0].type"
    assert error.body["message"] == ("messages[0].content[0].type: content type 'input_audio' cannot be "
                                     "translated to anthropic")
    assert mock.requests == []  # refused before anything went upstream


async def test_provider_error_in_the_clients_dialect(nursery):
    mock = MockAnthropic()
    gw = await serve(nursery, mock, "{anthropic: {}}")

    def run():
        try:
            openai_client(gw).chat.completions.create(model="claude-x", messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,aGk="}}]}])
        except openai.BadRequestError as error:
            return error
        raise AssertionError("no error")

    error = await trio.to_thread.run_sync(run)
    assert "media_type" in error.body["message"] and error.body["type"] == "invalid_request_error"


async def test_anthropic_sdk_to_openai_compatible(nursery):
    mock = MockOpenAI()
    gw = await serve(nursery, mock, "{openAI: {}}")

    def run():
        client = anthropic.Anthropic(api_key="sk-client", base_url=gw.url, max_retries=0, timeout=10)
        whole = client.messages.create(model="gpt-x", max_tokens=100, system="be brief",
                                       messages=[{"role": "user", "content": "hello there"}])
        with client.messages.stream(model="gpt-x", max_tokens=100,
                                    messages=[{"role": "user", "content": "one two"}]) as stream:
            streamed = stream.get_final_message()
        try:
            client.messages.create(model="gpt-x", max_tokens=10, messages=[{"role": "user", "content": "x"}],
                                   extra_body={"top_k": 3})
        except anthropic.BadRequestError as error:
            return whole, streamed, error
        raise AssertionError("top_k translated silently")

    whole, streamed, error = await trio.to_thread.run_sync(run)
    assert whole.content[0].text == "hello there" and whole.stop_reason == "end_turn"
    assert whole.usage.input_tokens > 0 and whole.usage.output_tokens > 0
    assert streamed.content[0].text == "one two" and streamed.usage.output_tokens > 0
    assert error.body["error"]["message"] == "top_k: the field 'top_k' cannot be translated to openAI"
    first = mock.requests[0]
    assert first.path == "/v1/chat/completions" and first.header("authorization") == "Bearer sk-provider"
    assert first.header("anthropic-version") is None
    assert first.json["messages"][0] == {"role": "system", "content": "be brief"}
    assert mock.requests[1].json["stream_options"] == {"include_usage": True}


async def test_openai_sdk_to_native_gemini(nursery):
    mock = MockGemini()
    gw = await serve(nursery, mock, "{gemini: {}}", "          pathOverride: /v1beta/models/{{model}}:generateContent")

    def run():
        client = openai_client(gw)
        whole = client.chat.completions.create(model="gemini-x", max_tokens=20,
                                               messages=[{"role": "user", "content": "hello there"}])
        chunks = list(client.chat.completions.create(
            model="gemini-x", messages=[{"role": "user", "content": "a b c"}], stream=True))
        call = client.chat.completions.create(model="gemini-x", messages=[{"role": "user", "content": "rain?"}],
                                              tools=TOOLS)
        return whole, chunks, call

    whole, chunks, call = await trio.to_thread.run_sync(run)
    assert whole.choices[0].message.content == "hello there"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "a b c"
    assert call.choices[0].message.tool_calls[0].function.name == "weather"
    first = mock.requests[0]
    assert first.path == "/v1beta/models/gemini-x:generateContent" and first.header("x-goog-api-key") == "sk-provider"
    assert mock.requests[1].path == "/v1beta/models/gemini-x:streamGenerateContent"
    assert mock.requests[1].query == "alt=sse"


@pytest.mark.parametrize("stream", [False, True])
async def test_trace_has_the_client_and_provider_forms(nursery, stream):
    mock = MockAnthropic()
    gw = await serve(nursery, mock, "{anthropic: {}}")
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        response = await client.post("/v1/chat/completions", json={
            "model": "claude-x", "stream": stream, "messages": [{"role": "user", "content": "hi there"}]})
    assert response.status_code == 200
    events = await reader.events()
    bodies = {e["message"]["stage"]: base64.b64decode(e["message"]["body"]).decode()
              for e in events if e["message"]["type"] == "bodySnapshot"}
    assert set(bodies) >= {"client request", "final request", "provider response", "response"}
    translation = next(e["message"] for e in events if e["message"].get("kind") == "llmTranslation")
    assert translation == {"type": "policy", "kind": "llmTranslation", "result": "translated", "client": "openai",
                           "provider": "anthropic", "path": "/v1/messages"}
    final = next(e["message"]["requestState"] for e in events if e["message"].get("stage") == "final request")
    assert final["llm"]["provider"] == "anthropic" and final["llm"]["model"] == "claude-x"
    assert "max_tokens" in bodies["final request"] and "max_tokens" not in bodies["client request"]
    assert "chat.completion" in bodies["response"] and "chat.completion" not in bodies["provider response"]


async def test_openai_sdk_to_bedrock_signed_with_sigv4(nursery, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    mock = MockBedrock()
    gw = await serve(nursery, mock, f"{{bedrock: {{region: {REGION}}}}}")

    def run():
        client = openai_client(gw)
        whole = client.chat.completions.create(model="anthropic.claude-v2:1", max_tokens=20,
                                               messages=[{"role": "system", "content": "brief"},
                                                         {"role": "user", "content": "hello there"}])
        chunks = list(client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a b"}], stream=True,
            stream_options={"include_usage": True}))
        call = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "rain?"}], tools=TOOLS)
        return whole, chunks, call

    whole, chunks, call = await trio.to_thread.run_sync(run)
    assert whole.choices[0].message.content == "hello there" and whole.usage.total_tokens > 0
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "a b"
    assert chunks[-1].usage.total_tokens > 0
    assert json.loads(call.choices[0].message.tool_calls[0].function.arguments) == {"q": "rain?"}
    first = mock.requests[0]
    assert first.path == "/model/anthropic.claude-v2:1/converse"
    assert first.header("authorization").startswith(f"AWS4-HMAC-SHA256 Credential={ACCESS_KEY}/")
    assert mock.requests[1].path == "/model/m/converse-stream"


async def test_bedrock_with_a_wrong_secret_is_the_providers_403_in_openai_dialect(nursery, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    gw = await serve(nursery, MockBedrock(), f"{{bedrock: {{region: {REGION}}}}}")
    async with gw.client() as client:
        response = await client.post("/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 403
    assert response.json()["error"]["message"].startswith("The request signature we calculated does not match")


LIMITED = """
binds:
- port: {port}
  listeners:
  - routes:
    - policies:
        localRateLimit: [{{maxTokens: 1000, tokensPerFill: 1000, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: llm, provider: {{anthropic: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
"""


@pytest.mark.parametrize("stream", [False, True])
async def test_translated_usage_is_charged_even_when_the_client_stream_has_none(nursery, stream):
    mock = MockAnthropic()
    await nursery.start(mock.serve, 0)
    gw = await start_gateway(nursery, LIMITED, port=free_port(), mock=mock.port)
    async with gw.client(headers={"authorization": "Bearer k"}) as client:
        first = await client.post("/v1/chat/completions", json={
            "model": "claude-x", "stream": stream, "messages": [{"role": "user", "content": "one two three"}]})
        second = await client.post("/v1/chat/completions", json={
            "model": "claude-x", "messages": [{"role": "user", "content": "x"}]})
    assert first.status_code == 200 and (b'"usage"' in first.content) is not stream  # not asked for: not sent
    remaining = int(second.headers["x-ratelimit-remaining"])
    assert remaining < 1000 - 2  # the first answer's tokens (counted from Anthropic's usage) were charged


async def test_a_dialect_bedrock_cannot_take_is_refused_not_passed_through(nursery, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    mock = MockBedrock()
    gw = await serve(nursery, mock, f"{{bedrock: {{region: {REGION}}}}}")
    async with gw.client() as client:
        messages = await client.post("/v1/messages", json={
            "model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
        embeddings = await client.post("/v1/embeddings", json={"model": "m", "input": "hi"})
    assert messages.status_code == 400 and messages.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "path: a request to /v1/messages cannot be translated to bedrock"}}
    assert embeddings.status_code == 400 and embeddings.json()["error"]["param"] == "path"
    assert mock.requests == []


async def test_bedrock_without_credentials_is_a_500_naming_the_variables(nursery, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    gw = await serve(nursery, MockBedrock(), f"{{bedrock: {{region: {REGION}}}}}")
    async with gw.client() as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": [
            {"role": "user", "content": "hi"}]})
    assert response.status_code == 500 and "AWS_ACCESS_KEY_ID" in response.text


LLM_FORMAT = """
llm:
  port: {port}
  models:
  - name: claude
    provider: anthropic
    params: {{model: claude-x, apiKey: sk-provider, hostOverride: "127.0.0.1:{mock}"}}
"""


async def test_llm_format_model_to_anthropic_is_translated(nursery):
    mock = MockAnthropic()
    await nursery.start(mock.serve, 0)
    gw = await start_gateway(nursery, LLM_FORMAT, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        response = await client.post("/v1/chat/completions", json={
            "model": "claude", "messages": [{"role": "user", "content": "hello there"}]})
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "hello there"
    assert mock.requests[0].json["model"] == "claude-x"  # the model the entry sends, in the provider's format
