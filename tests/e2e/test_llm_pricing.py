"""The cost of each LLM request (issue 30, "Money"; docs/pricing.md) through a real in-process gateway and
the provider mocks: ``llm.cost`` in the access log (and its CEL fields), the request history (JSON and
CEL), the trace's ``llmUsage`` event, the server span and ``trioproxy_gen_ai_cost_usd_total``, for a
whole and a streamed answer, a translated one, a model without a price, and a ``config.prices`` override."""

from __future__ import annotations

import os

import httpx
import openai
import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from fixtures.mock_anthropic import MockAnthropic
from fixtures.mock_gemini import THOUGHTS, MockGemini
from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway
from tests.e2e.test_observability import OtlpReceiver, _attributes, requests_of
from tests.e2e.test_trace import watch

GATEWAY = """
config:
  history: {{size: 100}}
  logging: {{fields: {{add: {{micro_usd: "llm.cost * 1000000.0"}}}}}}
{extra}
binds:
- port: {port}
  listeners:
  - routes:
    - backends:
      - ai: {{name: mock, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
"""

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]}
#: 1000 prompt tokens (400 of them cached) and 1000 completion tokens of gpt-4o-mini:
#: 600 x $0.15 + 400 x $0.075 + 1000 x $0.60 per million
HEADERS = {"x-mock-total-tokens": "2000", "x-mock-cached-tokens": "400"}
COST = (600 * 0.15 + 400 * 0.075 + 1000 * 0.6) / 1e6


async def serve(nursery, extra: str = ""):
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    return await start_gateway(nursery, GATEWAY, port=free_port(), mock=mock.port, extra=extra)


async def history(gw, count: int, expression: str | None = None) -> list[dict]:
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin:
        with trio.fail_after(10):
            while True:
                params = {"expression": expression} if expression else None
                entries = (await admin.get("/api/requests", params=params)).json()
                if len(entries) >= count:
                    return entries
                await trio.sleep(0.01)


def cost_samples(text: str) -> dict[tuple[str, str], float]:
    families = {f.name: f for f in text_string_to_metric_families(text)}
    family = families["trioproxy_gen_ai_cost_usd"]
    return {(s.labels["provider"], s.labels["model"]): s.value for s in family.samples
            if s.name == "trioproxy_gen_ai_cost_usd_total"}


@pytest.mark.parametrize("stream", [False, True])
async def test_the_cost_of_an_answer_everywhere(nursery, log_lines, stream):  # noqa: F811
    gw = await serve(nursery)
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        answer = await client.post("/v1/chat/completions", json={**CHAT, "stream": stream}, headers=HEADERS)
        assert answer.status_code == 200
        if stream:  # the usage chunk the gateway asked for is not the client's
            assert '"usage"' not in answer.text
        metrics = await client.get(f"http://{gw.info.stats}/metrics")
    # the trace: one llmUsage event, after the answer's usage was read
    events = await reader.events()
    [usage] = [e["message"] for e in events if e["message"]["type"] == "llmUsage"]
    assert usage == {"type": "llmUsage", "provider": "openAI", "model": "gpt-4o-mini", "cost": pytest.approx(COST),
                     "inputTokens": 1000, "outputTokens": 1000, "totalTokens": 2000, "responseModel": "gpt-4o-mini",
                     "cachedInputTokens": 400}
    types = [e["message"]["type"] for e in events]
    assert types.index("llmUsage") < types.index("requestFinished")
    # the access log, and CEL over llm.cost in its fields
    [line] = requests_of(await log_lines())
    assert line["gen_ai.usage.cost"] == pytest.approx(COST)
    assert line["micro_usd"] == pytest.approx(720.0)
    # the history: JSON and CEL
    [entry] = await history(gw, 1)
    assert entry["cost"] == pytest.approx(COST) and entry["model"] == "gpt-4o-mini"
    assert len(await history(gw, 0, "llm.cost > 0.0007")) == 1
    assert await history(gw, 0, "llm.cost > 0.001") == []
    # Prometheus
    assert cost_samples(metrics.text) == {("openai", "gpt-4o-mini"): pytest.approx(COST)}


async def test_costs_add_up_per_model_and_a_model_without_a_price_costs_null(nursery, log_lines):  # noqa: F811
    gw = await serve(nursery)
    async with gw.client() as client:
        for _ in range(3):
            assert (await client.post("/v1/chat/completions", json=CHAT, headers=HEADERS)).status_code == 200
        unknown = await client.post("/v1/chat/completions", json={**CHAT, "model": "my-fine-tune"}, headers=HEADERS)
        assert unknown.status_code == 200
        metrics = await client.get(f"http://{gw.info.stats}/metrics")
    assert cost_samples(metrics.text) == {("openai", "gpt-4o-mini"): pytest.approx(3 * COST)}
    entries = await history(gw, 4)
    assert [e["cost"] for e in entries] == [None, pytest.approx(COST), pytest.approx(COST), pytest.approx(COST)]
    assert len(await history(gw, 0, "has(llm.cost)")) == 3  # absent from the history's CEL view when unknown
    lines = requests_of(await log_lines())
    assert "gen_ai.usage.cost" not in lines[-1]  # no price: no field
    assert lines[-1]["micro_usd"] is None  # llm.cost is null: the CEL field has no value
    assert lines[-1]["gen_ai.usage.input_tokens"] == 1000


async def test_a_config_override_changes_the_cost(nursery):
    gw = await serve(nursery, "  prices: {gpt-4o-mini: {output: 2}, my-fine-tune: {input: 1, output: 1}}")
    async with gw.client() as client:
        for model in ("gpt-4o-mini", "my-fine-tune"):
            answer = await client.post("/v1/chat/completions", json={**CHAT, "model": model}, headers=HEADERS)
            assert answer.status_code == 200
        metrics = await client.get(f"http://{gw.info.stats}/metrics")
    overridden = (600 * 0.15 + 400 * 0.075 + 1000 * 2) / 1e6  # output changed, cachedInput kept
    assert cost_samples(metrics.text) == {("openai", "gpt-4o-mini"): pytest.approx(overridden),
                                          ("openai", "my-fine-tune"): pytest.approx(2000 / 1e6)}
    fine_tune, mini = await history(gw, 2)
    assert (mini["cost"], fine_tune["cost"]) == (pytest.approx(overridden), pytest.approx(2000 / 1e6))


async def test_a_translated_answer_is_priced_from_the_provider_s_usage(nursery, log_lines):  # noqa: F811
    """The OpenAI SDK against an ``anthropic`` backend: Anthropic's usage (cache reads and writes
    apart from ``input_tokens``) priced, streamed and whole (``_charge_translated``)."""
    mock = MockAnthropic()
    await nursery.start(mock.serve, 0)
    gw = await start_gateway(nursery, """
        config:
          prices: {{claude-cached: {{input: 1, output: 5, cachedInput: 0.1, cacheWrite: 1.25}}}}
        binds:
        - port: {port}
          listeners:
          - routes:
            - backends:
              - ai: {{name: claude, provider: {{anthropic: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
              policies:
                backendAuth: {{key: sk-provider}}
        """, port=free_port(), mock=mock.port)

    def run() -> None:
        client = openai.OpenAI(api_key="sk-client", base_url=f"{gw.url}/v1", max_retries=0, timeout=10)
        client.chat.completions.create(model="claude-cached", messages=[{"role": "user", "content": "hello there"}])
        for _ in client.chat.completions.create(model="claude-cached", stream=True,
                                                messages=[{"role": "user", "content": "hello there"}]):
            pass

    await trio.to_thread.run_sync(run)
    lines = requests_of(await log_lines())
    assert len(lines) == 2
    for line in lines:
        assert line["gen_ai.provider.name"] == "anthropic"
        fresh, read, write = (line["gen_ai.usage.input_tokens"], line["gen_ai.usage.cache_read.input_tokens"],
                              line["gen_ai.usage.cache_creation.input_tokens"])
        assert (read, write) == (5, 3)
        expected = (fresh * 1 + read * 0.1 + write * 1.25 + line["gen_ai.usage.output_tokens"] * 5) / 1e6
        assert line["gen_ai.usage.cost"] == pytest.approx(expected) and expected > 0


async def test_the_server_span_carries_the_cost(nursery):
    from trioproxy.config.model import Address
    from trioproxy.frontend.server import listen_socket, serve_app

    receiver = OtlpReceiver()
    sock = listen_socket(Address("127.0.0.1", 0), "receiver")
    await nursery.start(serve_app, receiver.app, sock, 1.0, trio.Event())
    gw = await serve(nursery, f'  tracing: {{otlpEndpoint: "http://127.0.0.1:{sock.getsockname()[1]}", otlpProtocol: http, '
                              'randomSampling: true}')
    async with gw.client() as client:
        assert (await client.post("/v1/chat/completions", json=CHAT, headers=HEADERS)).status_code == 200
    await trio.testing.wait_all_tasks_blocked()
    assert await trio.to_thread.run_sync(gw.info.runtime.otel.processor.force_flush, 10000)
    with trio.fail_after(10):
        while not any(s.kind == s.SPAN_KIND_SERVER for s in receiver.spans):
            await receiver.got.wait()
            receiver.got = trio.Event()
    server = next(s for s in receiver.spans if s.kind == s.SPAN_KIND_SERVER)
    attributes = _attributes(server)
    assert attributes["gen_ai.usage.cost"] == pytest.approx(COST)
    assert attributes["gen_ai.request.model"] == "gpt-4o-mini"


async def test_a_reload_applies_new_prices_to_the_next_answers(nursery, tmp_path, mock_clock):
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    path = tmp_path / "gw.yaml"
    text = GATEWAY.format(port=free_port(), mock=mock.port, extra="  prices: {gpt-4o-mini: {output: OUT}}")
    path.write_text(text.replace("OUT", "1"))
    gw = await start_gateway(nursery, path.read_text().replace("{", "{{").replace("}", "}}"), config_path=str(path))

    async def cost() -> float:
        async with gw.client() as client:
            assert (await client.post("/v1/chat/completions", json=CHAT, headers=HEADERS)).status_code == 200
        await trio.testing.wait_all_tasks_blocked()
        return (await history(gw, 1))[0]["cost"]

    assert await cost() == pytest.approx((600 * 0.15 + 400 * 0.075 + 1000 * 1) / 1e6)
    replacement = tmp_path / "gw.yaml.new"
    replacement.write_text(text.replace("OUT", "3"))
    os.replace(replacement, path)  # renamed into place: applied at the watcher's next poll
    for _ in range(40):
        mock_clock.jump(0.125)
        await trio.testing.wait_all_tasks_blocked()
    assert gw.info.runtime.metrics.registry.get_sample_value("trioproxy_config_reloads_total",
                                                             {"result": "applied"}) == 1
    assert await cost() == pytest.approx((600 * 0.15 + 400 * 0.075 + 1000 * 3) / 1e6)


@pytest.mark.parametrize("method", ["generateContent", "streamGenerateContent?alt=sse"])
async def test_gemini_native_thoughts_and_cached_tokens_are_priced(nursery, log_lines, method):  # noqa: F811
    """Gemini's own API passed through: ``promptTokenCount`` includes the cached tokens, the thoughts are
    output billed at ``reasoning``; ``modelVersion`` is the model priced."""
    mock = MockGemini()
    await nursery.start(mock.serve, 0)
    gw = await start_gateway(nursery, """
        config:
          prices: {{gemini/gemini-cached-thinking: {{input: 0.3, output: 2.5, cachedInput: 0.075, reasoning: 4}}}}
        binds:
        - port: {port}
          listeners:
          - routes:
            - backends:
              - ai: {{name: gemini, provider: {{gemini: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
              policies:
                backendAuth: {{key: sk-provider}}
        """, port=free_port(), mock=mock.port)
    body = {"contents": [{"role": "user", "parts": [{"text": "hello there gemini, think about it"}]}]}
    async with gw.client() as client:
        answer = await client.post(f"/v1beta/models/gemini-cached-thinking:{method}", json=body)
    assert answer.status_code == 200, answer.text
    [line] = requests_of(await log_lines())
    prompt, cached = line["gen_ai.usage.input_tokens"], line["gen_ai.usage.cache_read.input_tokens"]
    output, thoughts = line["gen_ai.usage.output_tokens"], line["gen_ai.usage.reasoning.output_tokens"]
    assert thoughts == THOUGHTS and 0 < cached < prompt
    expected = ((prompt - cached) * 0.3 + cached * 0.075 + (output - thoughts) * 2.5 + thoughts * 4) / 1e6
    assert line["gen_ai.usage.cost"] == pytest.approx(expected)


async def test_a_client_gone_mid_stream_still_costs_what_was_reported(nursery):
    """Anthropic reports the input tokens first (``message_start``): a client that leaves after it is a
    499 whose cost the history and the counter still hold, since the provider bills them."""
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    gw = await start_gateway(nursery, """
        binds:
        - port: {port}
          listeners:
          - routes:
            - backends:
              - ai: {{name: claude, provider: {{anthropic: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
              policies:
                backendAuth: {{key: sk-ant}}
        """, port=free_port(), mock=mock.port)
    body = {"model": "claude-haiku-4-5", "max_tokens": 64, "stream": True,
            "messages": [{"role": "user", "content": "hello"}]}
    async with gw.client() as client:
        async with client.stream("POST", "/v1/messages", json=body, headers={
                "x-mock-total-tokens": "2000", "x-mock-chunks": "1000", "x-mock-chunk-delay-ms": "20"}) as response:
            async for chunk in response.aiter_raw():
                if b"message_start" in chunk:
                    break  # gone, with the input tokens reported
        [entry] = await history(gw, 1)
        metrics = await client.get(f"http://{gw.info.stats}/metrics")
    # 1000 input tokens at $1 and message_start's first output token at $5, per million
    assert entry["status"] == 499 and entry["cost"] == pytest.approx((1000 * 1 + 1 * 5) / 1e6)
    assert cost_samples(metrics.text) == {("anthropic", "claude-haiku-4-5"): pytest.approx(1005 / 1e6)}
