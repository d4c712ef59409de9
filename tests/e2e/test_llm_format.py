"""The short ``llm:`` format: models on their own port, chosen by the request body's model."""

from __future__ import annotations

import pytest

from fixtures.mock_openai import MockOpenAI
from tests.conftest import LOOPBACK_SERVERS, free_port, start_gateway
from trioproxy.config import ConfigError, parse_config
from trioproxy.llm.models import model_matches

LLM = """
llm:
  port: {port}
  models:
  - name: smart
    provider: openAI
    params:
      model: gpt-5.5
      apiKey: $LLM_FORMAT_KEY
      hostOverride: 127.0.0.1:{mock}
  - name: anthropic/*
    provider: openAI
    params:
      hostOverride: 127.0.0.1:{mock}
    transformation:
      model: llmRequest.model.stripPrefix("anthropic/")
  - name: anthropic/special
    provider: openAI
    params:
      model: pinned
      hostOverride: 127.0.0.1:{mock}
      pathOverride: /custom/chat/completions
"""


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("LLM_FORMAT_KEY", "sk-test")


def chat(model: str | None) -> dict:
    body: dict = {"messages": [{"role": "user", "content": "hi"}]}
    if model is not None:
        body["model"] = model
    return body


def test_model_patterns():
    assert model_matches("gpt-4o", "gpt-4o") and not model_matches("gpt-4o", "gpt-4o-mini")
    assert model_matches("anthropic/*", "anthropic/claude") and not model_matches("anthropic/*", "openai/x")
    assert model_matches("*-mini", "gpt-4o-mini") and model_matches("*", "anything")


async def test_models_are_chosen_by_the_body_and_rewritten_as_configured(nursery):
    mock = MockOpenAI()
    await nursery.start(mock.serve)
    gw = await start_gateway(nursery, LLM, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        smart = await client.post("/v1/chat/completions", json=chat("smart"),
                                  headers={"authorization": "Bearer client-token"})
        assert smart.status_code == 200
        stripped = await client.post("/v1/chat/completions", json=chat("anthropic/claude-x"))
        assert stripped.status_code == 200
        special = await client.post("/v1/chat/completions", json=chat("anthropic/special"))
        assert special.status_code == 200  # more specific than anthropic/*, although listed after it
    first, second, third = mock.requests
    assert first.json["model"] == "gpt-5.5" and first.header("authorization") == "Bearer sk-test"
    assert second.json["model"] == "claude-x" and second.header("authorization") is None
    assert third.json["model"] == "pinned" and third.path == "/custom/chat/completions"


@pytest.mark.parametrize("body, status, code", [
    (chat("unknown"), 404, "model_not_found"),
    (chat(None), 400, "missing_model"),
])
async def test_a_request_no_model_takes_gets_agentgateways_json_error(nursery, body, status, code):
    mock = MockOpenAI()
    await nursery.start(mock.serve)
    gw = await start_gateway(nursery, LLM, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        answer = await client.post("/v1/chat/completions", json=body)
        not_json = await client.post("/v1/chat/completions", content=b"not json")
    assert answer.status_code == status and answer.headers["content-type"] == "application/json"
    assert answer.json()["error"]["code"] == code and answer.json()["error"]["type"] == "invalid_request_error"
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_request_body"
    assert mock.requests == []


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, env=LOOPBACK_SERVERS)
    return info.value.problems


def test_llm_model_without_host_override_reaches_the_provider_over_tls():
    config = parse_config("llm:\n  models:\n  - name: m\n    provider: anthropic\n", env=LOOPBACK_SERVERS)
    (backend,) = config.binds[0].listeners[0].routes[0].backends
    assert (str(backend.target), backend.tls is not None) == ("api.anthropic.com:443", True)


def test_llm_format_errors_name_their_place():
    text = ("binds:\n- port: 4000\nllm:\n  models:\n  - name: a/*/b\n    provider: openAI\n"
            "    params: {hostOverride: '127.0.0.1:1'}\n  - name: x\n    provider: bedrock\n"
            "  - name: y\n    provider: nope\n    params: {hostOverride: '127.0.0.1:1'}\n"
            "  - name: z\n    provider: openAI\n")
    assert problems(text) == [
        "<config>:4:3: llm.port: port 4000 is already bound by binds[0]",
        "<config>:5:11: llm.models[0].name: model name wildcard must be either at the beginning or the end: 'a/*/b'",
        "<config>:9:15: llm.models[1].provider: 'bedrock' needs a region: use a binds ai backend with provider: "
        "{bedrock: {region}}",
        "<config>:11:15: llm.models[2].provider: unknown provider 'nope' (expected one of: openAI, anthropic, gemini,"
        " vertex, azure, bedrock, groq, mistral, deepseek, openrouter, together, fireworks, xai, cerebras, ollama, vllm)",
    ]  # models[3] has no hostOverride: the provider's own host over TLS (docs/llm-providers.md)
    (providers,) = problems("llm:\n  providers: []\n  models: []\n")
    assert providers.endswith("llm.providers: 'providers' is an agentgateway feature that trioproxy does "
                              "not implement")  # virtualModels are implemented: docs/resilience.md


def test_llm_compiles_to_a_bind_with_ai_backends():
    config = parse_config("llm:\n  models:\n  - {name: m, provider: openAI, params: {hostOverride: '127.0.0.1:9'}}\n",
                          env=LOOPBACK_SERVERS)
    (bind,) = config.binds
    assert bind.port == 4000  # agentgateway's default
    (route,) = bind.listeners[0].routes
    assert route.backends[0].kind == "ai" and route.backends[0].target.port == 9 and route.models[0].pattern == "m"
