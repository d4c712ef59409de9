"""A gateway in front of the strict provider mock (fixtures/mock_openai.py), for tests that use the
official ``openai`` and ``anthropic`` SDKs as clients (tests/compat/test_llm_sdk_*.py).

The routes carry a token budget, so a test can compare the tokens an SDK reports with what the
limiter charged: ``LlmGateway.charged()`` is how far ``x-ratelimit-remaining`` fell since the last
look (read on a models-list request, which costs nothing). Sync SDK clients run in a worker thread
(``trio.to_thread.run_sync``); the async ones run in the test's trio loop.
"""

from __future__ import annotations

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from fixtures.mock_openai import MockOpenAI

from .conftest import Gateway, free_port, start_gateway

BUDGET = 100_000

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: openai
      matches: [{{path: {{pathPrefix: /openai}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        localRateLimit: [{{maxTokens: {budget}, tokensPerFill: {budget}, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: gpt, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
        policies: {{backendAuth: {{key: sk-openai-test}}}}
    - name: anthropic
      matches: [{{path: {{pathPrefix: /anthropic}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        localRateLimit: [{{maxTokens: {budget}, tokensPerFill: {budget}, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: claude, provider: {{anthropic: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
        policies: {{backendAuth: {{key: sk-ant-test}}}}
    - name: small
      matches: [{{path: {{pathPrefix: /small}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        localRateLimit: [{{maxTokens: 10, tokensPerFill: 10, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: small, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
    - name: small-claude
      matches: [{{path: {{pathPrefix: /claude-small}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        localRateLimit: [{{maxTokens: 10, tokensPerFill: 10, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: small-claude, provider: {{anthropic: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
    - name: keyed
      matches: [{{path: {{pathPrefix: /keyed}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        apiKey: {{keys: [{{key: sk-good}}]}}
      backends:
      - ai: {{name: keyed, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
    - name: keyed-claude
      matches: [{{path: {{pathPrefix: /claude-keyed}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        apiKey: {{keys: [{{key: sk-good}}]}}
      backends:
      - ai: {{name: keyed-claude, provider: {{anthropic: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
    - name: down
      matches: [{{path: {{pathPrefix: /down}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
      backends:
      - ai: {{name: down, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{closed}"}}
    - name: down-claude
      matches: [{{path: {{pathPrefix: /claude-down}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
      backends:
      - ai: {{name: down-claude, provider: {{anthropic: {{}}}}, hostOverride: "127.0.0.1:{closed}"}}
"""


class LlmGateway:
    def __init__(self, gateway: Gateway, mock: MockOpenAI) -> None:
        self.gateway = gateway
        self.mock = mock
        self.url = gateway.url
        self._remaining = {"openai": BUDGET, "anthropic": BUDGET}

    async def charged(self, route: str = "openai") -> int:
        """Tokens the route's limiter charged since the last call (its ``x-ratelimit-remaining``)."""
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            response = await client.get(f"/{route}/v1/models", headers={"x-api-key": "k"})
        assert response.status_code == 200, response.text
        remaining = int(response.headers["x-ratelimit-remaining"])
        spent, self._remaining[route] = self._remaining[route] - remaining, remaining
        return spent

    async def metric(self, name: str, suffix: str = "_count") -> list[tuple[dict[str, str], float]]:
        """The samples of one metric family (``name`` + ``suffix``) at the stats server: (labels, value)."""
        async with httpx.AsyncClient(timeout=10) as client:
            text = (await client.get(f"http://{self.gateway.info.stats}/metrics")).text
        return [(dict(s.labels), s.value) for family in text_string_to_metric_families(text) if family.name == name
                for s in family.samples if s.name == name + suffix]


async def start_llm_gateway(nursery: trio.Nursery) -> LlmGateway:
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    gateway = await start_gateway(nursery, CONFIG, port=free_port(), mock=mock.port, budget=BUDGET,
                                  closed=free_port())
    return LlmGateway(gateway, mock)


async def wait_finished(gateway: LlmGateway, route: str, requests: int) -> None:
    """Until the route has ``requests`` LLM calls recorded (``gen_ai_server_request_duration``): a call is
    charged and recorded as it ends, just after the client had its last byte, so a look at the budget
    right after a stream could come before its charge."""
    with trio.fail_after(10):
        while True:
            samples = await gateway.metric("trioproxy_gen_ai_server_request_duration")
            if sum(value for labels, value in samples if labels.get("route", "").endswith("/" + route)) >= requests:
                return
            await trio.sleep(0.02)
