"""Cached and reasoning tokens survive translation (docs/llm-providers.md, "Translation"): Anthropic's
``cache_read_input_tokens``/``cache_creation_input_tokens``, Gemini's ``cachedContentTokenCount``/
``thoughtsTokenCount`` and Bedrock's ``cacheReadInputTokens``/``cacheWriteInputTokens`` reach the OpenAI
SDK as ``prompt_tokens_details.cached_tokens`` and ``completion_tokens_details.reasoning_tokens``,
streamed and not; an OpenAI-compatible provider's cached tokens reach the Anthropic SDK as
``cache_read_input_tokens``; and the gateway counts them (token budget, ``gen_ai`` metrics) as it
does for the same provider passed through."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest
import trio

from fixtures._mock_llm import CACHE_READ, CACHE_WRITE
from fixtures.mock_anthropic import MockAnthropic
from fixtures.mock_bedrock import ACCESS_KEY, SECRET_KEY, MockBedrock
from fixtures.mock_gemini import THOUGHTS, MockGemini
from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway
from tests.llm_sdk_helpers import LlmGateway, wait_finished

BUDGET = 100_000

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
""" + "".join(f"""
    - name: {name}
      matches: [{{{{path: {{{{pathPrefix: /{name}}}}}}}}}]
      policies:
        urlRewrite: {{{{path: {{{{prefix: /}}}}}}}}
        localRateLimit: [{{{{maxTokens: {BUDGET}, tokensPerFill: {BUDGET}, fillInterval: 1h, type: tokens}}}}]
        backendAuth: {{{{key: sk-provider}}}}
      backends:
      - ai:
          name: {name}
          provider: {provider}
          hostOverride: "127.0.0.1:{{{name}}}"{extra}
""" for name, provider, extra in (
    ("anthropic", "{{anthropic: {{}}}}", ""),
    ("gemini", "{{gemini: {{}}}}", "\n          pathOverride: /v1beta/models/{{model}}:generateContent"),
    ("bedrock", "{{bedrock: {{region: us-east-1}}}}", ""),
    ("openai", "{{openAI: {{}}}}", ""),
))


class Gateway:
    def __init__(self, llm: LlmGateway) -> None:
        self.llm = llm
        self.url = llm.url
        self.remaining = {name: BUDGET for name in ("anthropic", "gemini", "bedrock", "openai")}
        self.calls = dict.fromkeys(self.remaining, 0)

    def openai(self, route: str) -> openai.OpenAI:
        return openai.OpenAI(api_key="sk-client", base_url=f"{self.url}/{route}/v1", max_retries=0, timeout=10)

    async def charged(self, route: str, calls: int) -> int:
        """The route's budget spent by the ``calls`` made since the last look: the budget left before a
        small chat request (its ``x-ratelimit-remaining``), whose own tokens are then taken off the new
        baseline."""
        self.calls[route] += calls
        await wait_finished(self.llm, route, self.calls[route])
        self.calls[route] += 1
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            response = await client.post(f"/{route}/v1/chat/completions", json={"model": "m", "messages": HELLO})
        assert response.status_code == 200, response.text
        remaining = int(response.headers["x-ratelimit-remaining"])
        spent = self.remaining[route] - remaining
        self.remaining[route] = remaining - response.json()["usage"]["total_tokens"]
        return spent

    async def counted(self, system: str, token_type: str, expected: float | None) -> float:
        """The tokens of one type the metrics counted, once they reach ``expected`` (None: any count
        above 0; they are recorded when the request ends, just after the client had its last byte),
        or what they are after 10s."""
        with trio.move_on_after(10):
            while True:
                samples = await self.llm.metric("trioproxy_gen_ai_client_token_usage", "_sum")
                value = sum(value for labels, value in samples
                            if labels["gen_ai_system"] == system and labels["gen_ai_token_type"] == token_type)
                if value == expected or (expected is None and value > 0):
                    break
                await trio.sleep(0.05)
        return value


@pytest.fixture
async def gw(nursery, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    mocks = {"anthropic": MockAnthropic(), "gemini": MockGemini(), "bedrock": MockBedrock(), "openai": MockOpenAI()}
    for mock in mocks.values():
        await nursery.start(mock.serve, 0)
    gateway = await start_gateway(nursery, CONFIG, port=free_port(), **{k: m.port for k, m in mocks.items()})
    return Gateway(LlmGateway(gateway, mocks["openai"]))


HELLO = [{"role": "user", "content": "hello there gateway"}]


def whole_then_streamed(gw: Gateway, route: str, model: str):
    """The OpenAI SDK's whole answer, then (a second function, called once the whole one was checked)
    its streamed answer with ``include_usage``. The gateway's counting is checked on the whole answer
    and on fully read streams (``test_streams_are_counted``): the SDK drops the connection as soon as
    it reads ``[DONE]``, which the gateway may take for a client gone before the end of the response."""
    client = gw.openai(route)

    def streamed() -> openai.types.CompletionUsage:
        chunks = list(client.chat.completions.create(model=model, messages=HELLO, stream=True,
                                                     stream_options={"include_usage": True}))
        assert chunks[-1].usage is not None
        return chunks[-1].usage

    whole = client.chat.completions.create(model=model, messages=HELLO)
    assert whole.usage is not None
    return whole.usage, streamed


async def test_anthropic_cache_reads_are_openais_cached_tokens(gw):
    whole, streamed = await trio.to_thread.run_sync(whole_then_streamed, gw, "anthropic", "claude-cached")
    assert whole.prompt_tokens_details.cached_tokens == CACHE_READ
    assert whole.prompt_tokens > CACHE_READ + CACHE_WRITE  # cache reads and writes are input too
    assert whole.total_tokens == await gw.charged("anthropic", 1)
    assert await gw.counted("anthropic", "cached_input", CACHE_READ) == CACHE_READ
    assert await trio.to_thread.run_sync(streamed) == whole


async def test_gemini_cached_and_thoughts_are_openais_cached_and_reasoning_tokens(gw):
    whole, streamed = await trio.to_thread.run_sync(whole_then_streamed, gw, "gemini", "gemini-cached-thinking")
    assert whole.prompt_tokens_details.cached_tokens == whole.prompt_tokens // 2 > 0
    assert whole.completion_tokens_details.reasoning_tokens == THOUGHTS < whole.completion_tokens
    assert whole.total_tokens == await gw.charged("gemini", 1)
    assert await gw.counted("gcp.gemini", "reasoning", THOUGHTS) == THOUGHTS
    cached = whole.prompt_tokens_details.cached_tokens
    assert await gw.counted("gcp.gemini", "cached_input", cached) == cached
    assert await trio.to_thread.run_sync(streamed) == whole


async def test_bedrock_cache_reads_are_openais_cached_tokens(gw):
    whole, streamed = await trio.to_thread.run_sync(whole_then_streamed, gw, "bedrock", "model-cached")
    assert whole.prompt_tokens_details.cached_tokens == CACHE_READ
    assert whole.prompt_tokens > CACHE_READ + CACHE_WRITE
    assert whole.total_tokens == await gw.charged("bedrock", 1)
    assert await gw.counted("aws.bedrock", "cached_input", CACHE_READ) == CACHE_READ
    assert await trio.to_thread.run_sync(streamed) == whole


@pytest.mark.parametrize(("route", "model", "system", "reasoning"), [
    ("anthropic", "claude-cached", "anthropic", 0), ("gemini", "gemini-cached-thinking", "gcp.gemini", THOUGHTS),
    ("bedrock", "model-cached", "aws.bedrock", 0)])
@pytest.mark.parametrize("include_usage", [False, True])
async def test_streams_are_counted_with_their_cached_and_reasoning_tokens(gw, route, model, system, reasoning,
                                                                          include_usage):
    body = {"model": model, "messages": HELLO, "stream": True}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as client:
        response = await client.post(f"/{route}/v1/chat/completions", json=body)  # read to its end
    assert response.status_code == 200 and (b'"usage":{' in response.content) is include_usage
    assert await gw.charged(route, 1) > 0
    expected = None if route == "gemini" else CACHE_READ  # gemini: half the prompt, whatever it counts
    cached = await gw.counted(system, "cached_input", expected)
    assert cached == expected if expected is not None else cached > 0
    assert await gw.counted(system, "reasoning", reasoning) == reasoning


async def test_openai_cached_tokens_are_anthropics_cache_reads(gw):
    def run():
        client = anthropic.Anthropic(api_key="sk-client", base_url=f"{gw.url}/openai", max_retries=0, timeout=10)
        headers = {"x-mock-cached-tokens": "4", "x-mock-total-tokens": "30"}
        whole = client.messages.create(model="gpt-x", max_tokens=50, messages=HELLO, extra_headers=headers)
        with client.messages.stream(model="gpt-x", max_tokens=50, messages=HELLO, extra_headers=headers) as stream:
            streamed = stream.get_final_message()
        return whole.usage, streamed.usage

    for usage in await trio.to_thread.run_sync(run):
        assert usage.cache_read_input_tokens == 4
        assert usage.input_tokens + usage.cache_read_input_tokens + usage.output_tokens == 30
    assert await gw.charged("openai", 2) == 60
    assert await gw.counted("openai", "cached_input", 8) == 8
