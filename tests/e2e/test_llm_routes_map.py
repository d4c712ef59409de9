"""An ai policy's ``routes`` map (agentgateway's ``policies.ai.routes``: request path suffix → route
type) replaces the built-in choice of endpoint kind by path (docs/llm-providers.md, "Endpoints"): a
path mapped to ``passthrough`` is forwarded untouched, a custom path mapped to ``completions`` is
parsed (model override, stream usage asked and stripped) and counted, and a kind that is unknown or
that trioproxy lacks is a config error naming the path."""

from __future__ import annotations

import json

import pytest

from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway
from trioproxy.config.loader import ConfigError, parse_config
from trioproxy.llm.providers import resolve_route

BACKEND = "binds:\n- port: 8080\n  listeners:\n  - routes:\n    - backends:\n      - {backend}\n        policies: {{ai: {{routes: {routes}}}}}\n"


def backend(routes: str, backend: str = "ai: {name: l, provider: {openAI: {}}}"):
    return parse_config(BACKEND.format(backend=backend, routes=routes), env={}).binds[0].listeners[0].routes[0] \
        .backends[0]


def config_error(routes: str, backend_: str = "ai: {name: l, provider: {openAI: {}}}") -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(BACKEND.format(backend=backend_, routes=routes), env={})
    return str(info.value)


def test_the_routes_map_is_ordered_longest_suffix_first_and_star_last():
    ai = backend('{"*": passthrough, /v1/x: completions, /v1/messages/count_tokens: anthropicTokenCount, '
                 '/v1/messages: messages, ":generateContent": generateContent}').ai
    assert ai.routes == (("/v1/messages/count_tokens", "count_tokens"), (":generateContent", "generate_content"),
                         ("/v1/messages", "messages"), ("/v1/x", "completions"), ("*", "passthrough"))
    assert resolve_route(ai.routes, "/api/v1/messages/count_tokens") == "count_tokens"
    assert resolve_route(ai.routes, "/v1/messages") == "messages"
    assert resolve_route(ai.routes, "/v1/files") == "passthrough"
    assert resolve_route((("/v1/x", "models"),), "/other") == "completions"  # no "*": completions


def test_an_unknown_or_unimplemented_kind_is_a_config_error_naming_the_path():
    assert ("binds[0].listeners[0].routes[0].backends[0].policies.ai.routes./v1/x: expected one of: completions, "
            "messages") in config_error("{/v1/x: chat}")
    assert ("binds[0].listeners[0].routes[0].backends[0].policies.ai.routes: '/v1/rerank': route kind 'rerank' "
            "is an agentgateway feature that trioproxy does not implement") in config_error("{/v1/rerank: rerank}")
    assert "policies.ai: an ai policy applies to an ai backend, not a host" in config_error(
        "{/x: completions}", "host: 127.0.0.1:1")
    with pytest.raises(ConfigError) as other:
        parse_config(BACKEND.format(backend="ai: {name: l, provider: {openAI: {}}}", routes="{}").replace(
            "routes: {}", "promptGuard: {}"), env={})
    assert "policies.ai.promptGuard: 'promptGuard' is an agentgateway feature that trioproxy does not implement" \
        in str(other.value)


CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: mapped
      matches: [{{path: {{pathPrefix: /mapped}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        localRateLimit: [{{maxTokens: 1000, tokensPerFill: 1000, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: mapped, provider: {{openAI: {{model: gpt-forced}}}}, hostOverride: "127.0.0.1:{mock}"}}
        policies:
          ai: {{routes: {{/v1/chat/completions: passthrough, /v2/generate: completions, "*": passthrough}}}}
    - name: custom
      matches: [{{path: {{pathPrefix: /custom}}}}]
      policies:
        urlRewrite: {{path: {{full: /v1/chat/completions}}}}
        localRateLimit: [{{maxTokens: 1000, tokensPerFill: 1000, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: custom, provider: {{openAI: {{model: gpt-forced}}}}, hostOverride: "127.0.0.1:{mock}"}}
        policies:
          ai: {{routes: {{/v2/generate: completions, "*": passthrough}}}}
    - name: inherited
      matches: [{{path: {{pathPrefix: /inherited}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        ai: {{routes: {{/v1/chat/completions: passthrough}}}}
      backends:
      - ai: {{name: inherited, provider: {{openAI: {{model: gpt-forced}}}}, hostOverride: "127.0.0.1:{mock}"}}
    - name: default
      matches: [{{path: {{pathPrefix: /default}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
      backends:
      - ai: {{name: default, provider: {{openAI: {{model: gpt-forced}}}}, hostOverride: "127.0.0.1:{mock}"}}
"""

STREAM = {"model": "gpt-client", "stream": True, "messages": [{"role": "user", "content": "one two three"}]}


async def start(nursery):
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    return mock, await start_gateway(nursery, CONFIG, port=free_port(), mock=mock.port)


@pytest.mark.parametrize("route", ["mapped", "inherited"])
async def test_a_path_mapped_to_passthrough_is_forwarded_untouched(nursery, route):
    mock, gw = await start(nursery)
    body = json.dumps(STREAM, indent=1).encode()  # not compact: any rewrite would show
    async with gw.client() as client:
        response = await client.post(f"/{route}/v1/chat/completions", content=body,
                                     headers={"content-type": "application/json"})
        default = await client.post("/default/v1/chat/completions", content=body,
                                    headers={"content-type": "application/json"})
    assert response.status_code == 200
    passed, rewritten = mock.requests[0], mock.requests[1]
    assert passed.path == "/v1/chat/completions" and passed.body == body  # no model override, no stream_options
    assert default.status_code == 200 and rewritten.json["model"] == "gpt-forced"  # without the map: parsed
    assert rewritten.json["stream_options"] == {"include_usage": True}


async def test_a_custom_path_mapped_to_completions_is_parsed_and_counted(nursery):
    mock, gw = await start(nursery)
    async with gw.client() as client:
        response = await client.post("/custom/v2/generate", json=STREAM)
        after = await client.post("/custom/v2/generate", json={**STREAM, "stream": False})
    seen = mock.requests[0]
    assert response.status_code == 200 and seen.path == "/v1/chat/completions"
    assert seen.json["model"] == "gpt-forced" and seen.json["stream_options"] == {"include_usage": True}
    events = [line for line in response.text.splitlines() if line.startswith("data: {")]
    assert events and all('"usage"' not in e for e in events)  # the usage the gateway asked for: stripped
    assert int(after.headers["x-ratelimit-remaining"]) < 1000  # the streamed answer's tokens were charged
