"""The official ``google-genai`` SDK as the client of a gateway in front of the strict Gemini mock
(fixtures/mock_gemini.py): Gemini's native API (``:generateContent``, ``:streamGenerateContent?alt=sse``,
``:countTokens``) passes to a ``gemini`` backend with the provider's key in ``x-goog-api-key``, the
tokens the SDK reports are what the token budget charged (``usageMetadata``, thoughts and cached
tokens included), and the gateway's own errors are Gemini's error JSON, so the SDK raises its typed
``errors.ClientError``/``ServerError`` with the message (docs/llm-providers.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
import trio
from google import genai
from google.genai import errors, types

from fixtures.mock_gemini import THOUGHTS, MockGemini
from tests.conftest import Gateway, free_port, start_gateway
from tests.llm_sdk_helpers import LlmGateway, wait_finished
from trioproxy.config.loader import parse_config
from trioproxy.llm.providers import endpoint_kind
from trioproxy.llm.usage import UsageReader

BUDGET = 100_000
T = TypeVar("T")


async def in_asyncio(call: Callable[[], Awaitable[T]]) -> T:
    """google-genai's async client (``client.aio``) runs on asyncio only: in its own loop, in a thread."""
    async def main() -> Any:
        return await call()
    return await trio.to_thread.run_sync(lambda: asyncio.run(main()))

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: gemini
      matches: [{{path: {{pathPrefix: /gemini}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        localRateLimit: [{{maxTokens: {budget}, tokensPerFill: {budget}, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: gemini, provider: {{gemini: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
        policies: {{backendAuth: {{key: sk-provider}}}}
    - name: pinned
      matches: [{{path: {{pathPrefix: /pinned}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
      backends:
      - ai: {{name: pinned, provider: {{gemini: {{model: gemini-pinned}}}}, hostOverride: "127.0.0.1:{mock}"}}
    - name: vertex
      matches: [{{path: {{pathPrefix: /vertex}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        localRateLimit: [{{maxTokens: {budget}, tokensPerFill: {budget}, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: vertex, provider: {{vertex: {{projectId: p1, region: us-central1}}}}, hostOverride: "127.0.0.1:{mock}"}}
        policies: {{backendAuth: {{key: ya29.gateway-token}}}}
    - name: small
      matches: [{{path: {{pathPrefix: /small}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
        localRateLimit: [{{maxTokens: 10, tokensPerFill: 10, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: small, provider: {{gemini: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
    - name: down
      matches: [{{path: {{pathPrefix: /down}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
      backends:
      - ai: {{name: down, provider: {{gemini: {{}}}}, hostOverride: "127.0.0.1:{closed}"}}
    - name: bedrock
      matches: [{{path: {{pathPrefix: /bedrock}}}}]
      policies:
        urlRewrite: {{path: {{prefix: /}}}}
      backends:
      - ai: {{name: bedrock, provider: {{bedrock: {{region: us-east-1}}}}, hostOverride: "127.0.0.1:{closed}"}}
"""


class GeminiGateway:
    def __init__(self, gateway: Gateway, mock: MockGemini) -> None:
        self.gateway = gateway
        self.url = gateway.url
        self.mock = mock
        self._remaining = BUDGET
        self.calls = 0

    def client(self, prefix: str = "/gemini") -> genai.Client:
        return genai.Client(api_key="client-key", http_options=types.HttpOptions(
            base_url=f"{self.url}{prefix}", timeout=10_000, retry_options=types.HttpRetryOptions(attempts=1)))

    async def charged(self) -> int:
        """Tokens the route's limiter charged by the one call since the last look, seen on a countTokens
        call (free) once that call was recorded as finished."""
        self.calls += 1
        await wait_finished(LlmGateway(self.gateway, None), "gemini", self.calls)  # type: ignore[arg-type]
        self.calls += 1
        async with httpx.AsyncClient(base_url=self.url, timeout=10) as client:
            response = await client.post("/gemini/v1beta/models/m:countTokens",
                                         json={"contents": [{"role": "user", "parts": [{"text": "x"}]}]})
        assert response.status_code == 200, response.text
        remaining = int(response.headers["x-ratelimit-remaining"])
        spent, self._remaining = self._remaining - remaining, remaining
        return spent


async def start(nursery) -> GeminiGateway:
    mock = MockGemini()
    await nursery.start(mock.serve, 0)
    gateway = await start_gateway(nursery, CONFIG, port=free_port(), mock=mock.port, budget=BUDGET,
                                  closed=free_port())
    return GeminiGateway(gateway, mock)


def test_native_gemini_paths_are_their_own_endpoint_kinds():
    assert endpoint_kind("/v1beta/models/gemini-2.5-flash:generateContent") == "generate_content"
    assert endpoint_kind("/v1/models/gemini-2.5-flash:streamGenerateContent") == "generate_content"
    assert endpoint_kind("/v1beta/models/gemini-2.5-flash:countTokens") == "gemini_count_tokens"


@pytest.mark.parametrize(("provider", "path", "upstream"), [
    ("{gemini: {}}", "/v1/models/gemini-2.5-flash:generateContent", "/v1beta/models/{model}:{method}"),
    ("{vertex: {projectId: p1, region: us-central1}}", "/v1beta/models/gemini-2.5-flash:countTokens",
     "/v1/projects/p1/locations/us-central1/publishers/google/models/{model}:{method}"),
])
def test_without_host_override_the_native_methods_go_to_the_providers_native_path(provider, path, upstream):
    text = f"binds:\n- port: 8080\n  listeners:\n  - routes:\n    - backends:\n      - ai: {{name: g, provider: {provider}}}\n"
    backend = parse_config(text, env={}).binds[0].listeners[0].routes[0].backends[0]
    assert backend.ai.upstream_path(endpoint_kind(path)) == upstream


def test_usage_metadata_is_read_whole_streamed_and_as_a_json_array():
    meta = {"promptTokenCount": 10, "candidatesTokenCount": 4, "thoughtsTokenCount": 6,
            "cachedContentTokenCount": 8, "totalTokenCount": 20}
    reader = UsageReader(b"application/json")
    reader.feed(b'{"candidates": [], "modelVersion": "gemini-x", "usageMetadata": %s}' % str(meta).replace(
        "'", '"').encode())
    usage = reader.finish()
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, usage.cached_input_tokens,
            usage.reasoning_tokens, usage.model) == (10, 10, 20, 8, 6, "gemini-x")
    reader = UsageReader(b"text/event-stream")
    reader.feed(b'data: {"usageMetadata": {"promptTokenCount": 10}}\r\n\r\n')
    reader.feed(b'data: {"usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 3}}\r\n\r\n')
    usage = reader.finish()
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (10, 3, 13)
    reader = UsageReader(b"application/json")
    reader.feed(b'[{"usageMetadata": {"promptTokenCount": 2}}, {"usageMetadata": {"promptTokenCount": 2, '
                b'"candidatesTokenCount": 5, "totalTokenCount": 7}}]')
    usage = reader.finish()
    assert usage is not None and usage.total_tokens == 7


async def test_sync_whole_and_streamed_report_the_tokens_charged(nursery):
    gw = await start(nursery)
    client = gw.client()

    def run():
        whole = client.models.generate_content(model="gemini-2.5-flash", contents="hello there gateway",
                                               config=types.GenerateContentConfig(temperature=0.5))
        chunks = list(client.models.generate_content_stream(model="gemini-2.5-flash", contents="one two three"))
        return whole, chunks

    whole, chunks = await trio.to_thread.run_sync(run)
    assert whole.text == "hello there gateway"
    first, second = [r for r in gw.mock.requests if not r.path.endswith(":countTokens")]
    assert first.path == "/v1/models/gemini-2.5-flash:generateContent"
    assert first.header("x-goog-api-key") == "sk-provider" and first.header("authorization") is None
    assert first.json == {"contents": [{"parts": [{"text": "hello there gateway"}], "role": "user"}],
                          "generationConfig": {"temperature": 0.5}}  # forwarded as sent: no model, no usage option
    assert second.path == "/v1/models/gemini-2.5-flash:streamGenerateContent" and second.query == "alt=sse"
    assert "".join(c.text or "" for c in chunks) == "one two three"
    assert chunks[-1].usage_metadata is not None


async def test_tokens_each_call_reports_are_what_the_limiter_charged(nursery):
    gw = await start(nursery)
    client = gw.client()
    whole = await trio.to_thread.run_sync(lambda: client.models.generate_content(
        model="gemini-2.5-flash", contents="hello there gateway"))
    assert whole.usage_metadata.total_token_count == await gw.charged() > 0
    chunks = await trio.to_thread.run_sync(lambda: list(client.models.generate_content_stream(
        model="gemini-2.5-flash", contents="one two three")))
    assert chunks[-1].usage_metadata.total_token_count == await gw.charged() > 0
    whole = await in_asyncio(lambda: client.aio.models.generate_content(model="gemini-2.5-thinking",
                                                                         contents="think about it"))
    assert whole.usage_metadata.thoughts_token_count == THOUGHTS
    assert whole.usage_metadata.total_token_count == await gw.charged() > THOUGHTS  # thoughts are charged
    async def stream():
        return [c async for c in await client.aio.models.generate_content_stream(
            model="gemini-2.5-cached", contents="a b c d e f")]
    chunks = await in_asyncio(stream)
    meta = chunks[-1].usage_metadata
    assert meta.cached_content_token_count == meta.prompt_token_count // 2
    assert meta.total_token_count == await gw.charged() > 0
    metric = LlmGateway(gw.gateway, None).metric  # type: ignore[arg-type]
    expected = {"reasoning": THOUGHTS, "cached_input": meta.cached_content_token_count}
    with trio.move_on_after(10):  # recorded as the request ends, just after the client's last byte
        while True:
            samples = await metric("trioproxy_gen_ai_client_token_usage", "_sum")
            by_type = {labels["gen_ai_token_type"]: value for labels, value in samples
                       if labels["gen_ai_operation_name"] == "generate_content"
                       and labels["gen_ai_system"] == "gcp.gemini"}
            if all(by_type.get(k) == v for k, v in expected.items()):
                break
            await trio.sleep(0.05)
    assert {k: by_type.get(k) for k in expected} == expected


async def test_count_tokens_passes_and_costs_nothing(nursery):
    gw = await start(nursery)
    counted = await in_asyncio(lambda: gw.client().aio.models.count_tokens(model="gemini-2.5-flash",
                                                                            contents="one two three"))
    assert counted.total_tokens is not None and counted.total_tokens > 0
    assert gw.mock.requests[-1].path == "/v1/models/gemini-2.5-flash:countTokens"
    assert await gw.charged() == 0


async def test_the_backends_model_replaces_the_one_in_the_path(nursery):
    gw = await start(nursery)
    await in_asyncio(lambda: gw.client("/pinned").aio.models.generate_content(model="gemini-2.5-flash", contents="hi"))
    seen = gw.mock.requests[-1]
    assert seen.path == "/v1/models/gemini-pinned:generateContent" and seen.header("x-goog-api-key") == "client-key"


async def test_token_budget_429_is_a_client_error_with_its_message(nursery):
    gw = await start(nursery)
    client = gw.client("/small")
    await in_asyncio(lambda: client.aio.models.generate_content(model="gemini-2.5-flash",
                                                                contents=" ".join(["word"] * 20)))
    with pytest.raises(errors.ClientError) as info:
        await trio.to_thread.run_sync(lambda: client.models.generate_content(model="gemini-2.5-flash",
                                                                             contents="hi"))
    assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"
    assert info.value.message == "rate limit exceeded"
    async def stream():
        return [c async for c in await client.aio.models.generate_content_stream(model="gemini-2.5-flash",
                                                                                contents="hi")]
    with pytest.raises(errors.ClientError) as streamed:
        await in_asyncio(stream)
    assert streamed.value.code == 429


async def test_unreachable_provider_is_a_server_error_and_bedrock_refuses_in_geminis_shape(nursery):
    gw = await start(nursery)
    with pytest.raises(errors.ServerError) as down:
        await in_asyncio(lambda: gw.client("/down").aio.models.generate_content(model="gemini-2.5-flash",
                                                                                 contents="hi"))
    assert down.value.code == 503 and down.value.status == "UNAVAILABLE"
    assert down.value.message.startswith("upstream connect error")
    with pytest.raises(errors.ClientError) as refused:
        await in_asyncio(lambda: gw.client("/bedrock").aio.models.generate_content(model="gemini-2.5-flash",
                                                                                    contents="hi"))
    assert refused.value.code == 400 and refused.value.status == "INVALID_ARGUMENT"
    assert refused.value.message == "path: a request to /bedrock/v1/models/gemini-2.5-flash:generateContent cannot be " \
                                    "translated to bedrock"


async def test_an_unknown_field_reaches_the_strict_mock_and_its_error_the_sdk(nursery):
    gw = await start(nursery)
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as client:
        response = await client.post("/gemini/v1beta/models/m:generateContent",
                                     json={"contents": [{"role": "user", "parts": [{"text": "x"}]}], "model": "m"})
    assert response.status_code == 400 and response.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert 'Unknown name "model"' in response.json()["error"]["message"]


async def test_vertex_mode_keeps_the_oauth_bearer_token_and_is_counted(nursery):
    from google.oauth2.credentials import Credentials

    gw = await start(nursery)
    client = genai.Client(vertexai=True, project="p1", location="us-central1", credentials=Credentials("ya29.client"),
                          http_options=types.HttpOptions(base_url=f"{gw.url}/vertex", timeout=10_000,
                                                         retry_options=types.HttpRetryOptions(attempts=1)))
    whole = await trio.to_thread.run_sync(lambda: client.models.generate_content(
        model="gemini-2.5-thinking", contents="hello vertex"))
    chunks = await in_asyncio(lambda: _collect(client.aio.models.generate_content_stream(
        model="gemini-2.5-flash", contents="one two")))
    assert whole.text == "hello vertex" and whole.usage_metadata.thoughts_token_count == THOUGHTS
    assert "".join(c.text or "" for c in chunks) == "one two"
    first, second = gw.mock.requests
    assert first.path == "/v1beta1/projects/p1/locations/us-central1/publishers/google/models/" \
                         "gemini-2.5-thinking:generateContent"
    assert first.header("authorization") == "Bearer ya29.gateway-token" and first.header("x-goog-api-key") is None
    assert second.path.endswith("gemini-2.5-flash:streamGenerateContent") and second.query == "alt=sse"
    spent = whole.usage_metadata.total_token_count + chunks[-1].usage_metadata.total_token_count
    await wait_finished(LlmGateway(gw.gateway, None), "vertex", 2)  # type: ignore[arg-type]
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        response = await http.post("/vertex/v1beta1/projects/p1/locations/us-central1/publishers/google/models/"
                                   "m:countTokens", json={"contents": [{"role": "user", "parts": [{"text": "x"}]}]})
    assert BUDGET - int(response.headers["x-ratelimit-remaining"]) == spent


async def _collect(stream):
    return [c async for c in await stream]
