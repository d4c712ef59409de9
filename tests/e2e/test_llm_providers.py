"""LLM provider defaults (docs/llm-providers.md): config → target/path/TLS, the credential header,
and Anthropic's format through a running gateway against the mock provider (JSON and SSE usage
charged to a token limit, provider errors passed through and counted)."""

from __future__ import annotations

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway
from tests.e2e.test_trace import watch
from trioproxy.config import ConfigError
from trioproxy.config.backend_tls import SYSTEM_TRUST
from trioproxy.config.loader import parse_config
from trioproxy.config.model import Address
from trioproxy.llm.providers import provider_headers
from trioproxy.llm.usage import Usage, UsageReader


def ai_backend(provider: str, extra: str = ""):
    text = f"""
binds:
- port: 8080
  listeners:
  - routes:
    - backends:
      - ai: {{name: llm, provider: {provider}{extra}}}
"""
    return parse_config(text, env={}).binds[0].listeners[0].routes[0].backends[0]


@pytest.mark.parametrize(("provider", "host", "path", "key_header"), [
    ("{openAI: {}}", "api.openai.com", "/v1/chat/completions", b"authorization"),
    ("{anthropic: {}}", "api.anthropic.com", "/v1/messages", b"x-api-key"),
    ("{gemini: {model: gemini-2.0-flash}}", "generativelanguage.googleapis.com", "/v1beta/openai/chat/completions",
     b"authorization"),
    ("{azure: {resourceName: acme}}", "acme.openai.azure.com", "/openai/v1/chat/completions", b"api-key"),
    ("{azure: {resourceName: acme, resourceType: openAI, apiVersion: 2024-02-15-preview}}", "acme.openai.azure.com",
     "/openai/deployments/{model}/chat/completions?api-version=2024-02-15-preview", b"api-key"),
    ("{azure: {resourceName: acme, apiVersion: 2024-02-15-preview, model: gpt-4o}}", "acme.openai.azure.com",
     "/openai/deployments/gpt-4o/chat/completions?api-version=2024-02-15-preview", b"api-key"),
    ("{azure: {resourceName: acme, resourceType: foundry, projectName: p1}}", "acme.services.ai.azure.com",
     "/api/projects/p1/openai/v1/chat/completions", b"api-key"),
])
def test_provider_defaults_are_https_on_443_with_the_provider_path(provider, host, path, key_header):
    backend = ai_backend(provider)
    assert str(backend.target) == f"{host}:443"
    assert backend.tls == SYSTEM_TRUST  # system trust store, SNI and hostname = the provider's host
    assert backend.ai.path_override is None
    assert backend.ai.upstream_path("completions") == path  # a chat request (Anthropic: its Messages API)
    assert backend.ai.key_header == key_header
    assert backend.ai.stream_usage_option == ("anthropic" not in provider)


def test_host_override_keeps_plain_http_and_the_client_path_unless_told():
    plain = ai_backend("{anthropic: {}}", ", hostOverride: '127.0.0.1:9000'")
    assert (plain.target, plain.tls, plain.ai.upstream_path("messages")) == (Address("127.0.0.1", 9000), None, None)
    assert type(plain.target) is Address
    assert ai_backend("{openAI: {}}", ", pathOverride: /x").ai.path_override == "/x"
    assert str(ai_backend("{openAI: {}}", ", pathOverride: /x").target) == "api.openai.com:443"


@pytest.mark.parametrize(("provider", "message"), [
    ("{}", "expected exactly one of: openAI, anthropic, gemini, vertex, azure, bedrock, groq"),
    ("{openAI: {}, anthropic: {}}", "expected exactly one of"),
    ("{azure: {apiVersion: v1}}", "resourceName: required field is missing"),
    ("{bedrock: {}}", "bedrock.region: required field is missing"),
    ("{vertex: {}}", "vertex.projectId: required field is missing"),
    ("{copilot: {}}", "'copilot' is an agentgateway feature that trioproxy does not implement"),
])
def test_bad_provider_is_a_one_line_positioned_error(provider, message):
    with pytest.raises(ConfigError) as info:
        ai_backend(provider)
    assert message in str(info.value)


def test_provider_headers_move_the_bearer_key():
    headers = [(b"host", b"x"), (b"authorization", b"Bearer sk-ant-1"), (b"x-api-key", b"client"), (b"a", b"b")]
    assert provider_headers(headers, "anthropic", b"x-api-key") == [
        (b"host", b"x"), (b"x-api-key", b"sk-ant-1"), (b"a", b"b"), (b"anthropic-version", b"2023-06-01")]
    assert provider_headers([(b"anthropic-version", b"2024-01-01")], "anthropic", b"x-api-key") == [
        (b"anthropic-version", b"2024-01-01")]  # the client's version is kept
    assert provider_headers([(b"authorization", b"bearer k")], "azure", b"api-key") == [(b"api-key", b"k")]
    assert provider_headers([(b"authorization", b"Basic k")], "azure", b"api-key") == [(b"authorization", b"Basic k")]


# --- Anthropic usage, pure --------------------------------------------------------------------------


def anthropic_sse(input_tokens: int, outputs: list[int]) -> bytes:
    events = [("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "model": "claude-x", "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}),
        ("content_block_delta", {"type": "content_block_delta", "delta": {"text": '"usage": {'}})]
    events += [("message_delta", {"type": "message_delta", "usage": {"output_tokens": n}}) for n in outputs]
    events.append(("message_stop", {"type": "message_stop"}))
    return b"".join(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events)


def test_anthropic_json_and_sse_usage():
    reader = UsageReader("application/json")
    reader.feed(json.dumps({"type": "message", "model": "claude-x",
                            "usage": {"input_tokens": 12, "output_tokens": 30}}).encode())
    assert reader.finish() == Usage(12, 30, 42, "claude-x")
    body = anthropic_sse(25, [7, 15])
    for split in range(0, len(body), 37):
        reader = UsageReader("text/event-stream")
        reader.feed(body[:split])
        reader.feed(body[split:])
        assert reader.finish() == Usage(25, 15, 40, "claude-x")  # input from message_start, last output


# --- through the gateway ----------------------------------------------------------------------------

ANTHROPIC = """
    binds:
    - port: {port}
      listeners:
      - routes:
        - name: claude
          policies:
            localRateLimit: [{{maxTokens: 100, tokensPerFill: 100, fillInterval: 1h, type: tokens}}]
          backends:
          - ai: {{name: anthropic, provider: {{anthropic: {{model: claude-forced}}}}, hostOverride: "127.0.0.1:{mock}"}}
            policies: {{backendAuth: {{key: sk-ant-test}}}}
        - name: nokey
          matches: [{{path: {{pathPrefix: /nokey}}}}]
          backends:
          - ai: {{name: anthropic-nokey, provider: {{anthropic: {{}}}}, hostOverride: "127.0.0.1:{mock}",
                 pathOverride: /v1/messages}}
"""
MESSAGES = {"model": "claude-client", "max_tokens": 64, "messages": [{"role": "user", "content": "hello claude"}]}


async def start_mock(nursery) -> MockOpenAI:
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    return mock


async def test_anthropic_json_usage_is_charged_and_the_key_goes_in_x_api_key(nursery, mock_clock):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, ANTHROPIC, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        first = await client.post("/v1/messages", json=MESSAGES, headers={
            "x-mock-total-tokens": "60", "authorization": "Bearer client"})
        second = await client.post("/v1/messages", json=MESSAGES, headers={"x-mock-total-tokens": "60"})
        third = await client.post("/v1/messages", json=MESSAGES)
        metrics = await client.get(f"http://{gw.info.stats}/metrics")
    assert (first.status_code, second.status_code, third.status_code) == (200, 200, 429)
    assert first.json()["usage"] == {"input_tokens": 30, "output_tokens": 30}
    assert second.headers["x-ratelimit-remaining"] == "40"  # the first 60 tokens were charged
    seen = mock.messages_requests[0]
    assert seen.path == "/v1/messages"  # hostOverride keeps the client's path
    assert seen.header("x-api-key") == "sk-ant-test" and seen.header("authorization") is None
    assert seen.header("anthropic-version") == "2023-06-01"
    assert seen.json["model"] == "claude-forced" and "stream_options" not in seen.json
    families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
    tokens = {(s.labels["gen_ai_token_type"], s.labels["gen_ai_request_model"]): s.value
              for s in families["trioproxy_gen_ai_client_token_usage"].samples if s.name.endswith("_sum")}
    assert tokens == {("input", "claude-forced"): 60.0, ("output", "claude-forced"): 60.0}


async def test_anthropic_sse_usage_is_charged_and_traced(nursery, mock_clock):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, ANTHROPIC, port=free_port(), mock=mock.port)
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        stream = await client.post("/v1/messages", json={**MESSAGES, "stream": True},
                                   headers={"x-mock-total-tokens": "150", "x-mock-chunks": "3"})
        blocked = await client.post("/v1/messages", json=MESSAGES)
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    names = [line[7:] for line in stream.text.split("\n") if line.startswith("event: ")]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert "stream_options" not in mock.messages_requests[0].json  # Anthropic would answer 400
    assert blocked.status_code == 429  # 150 tokens (75 in, 75 out) crossed the 100-token budget
    events = await reader.events()
    charged = next(e["message"] for e in events if e["message"]["type"] == "policy" and "tokens" in e["message"])
    assert charged["kind"] == "localRateLimit" and charged["tokens"] == 150
    final = next(e["message"]["requestState"] for e in events if e["message"].get("stage") == "final request")
    assert final["llm"]["provider"] == "anthropic" and final["request"]["headers"]["x-api-key"] == "<redacted>"


@pytest.mark.parametrize("status", [401, 429, 500, 503])
async def test_provider_errors_reach_the_client_unchanged_and_are_counted(nursery, mock_clock, status):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, ANTHROPIC, port=free_port(), mock=mock.port)
    reader = await watch(nursery, gw)
    headers = {"x-mock-status": str(status)}
    async with gw.client() as client:
        # 401 is the mock's own answer to a missing x-api-key; the others are forced.
        response = await client.post("/nokey" if status == 401 else "/v1/messages", json=MESSAGES,
                                     headers={} if status == 401 else headers)
        metrics = await client.get(f"http://{gw.info.stats}/metrics")
    assert response.status_code == status
    assert response.json()["type"] == "error"  # the provider's body, not the gateway's
    assert response.headers["content-type"] == "application/json"
    result = next(e["message"] for e in await reader.events() if e["message"]["type"] == "backendCallResult")
    assert result["status"] == status
    families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
    counted = {s.labels["status"]: s.value for s in families["trioproxy_requests"].samples}
    assert counted == {str(status): 1.0}
