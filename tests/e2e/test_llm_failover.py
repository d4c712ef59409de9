"""Virtual models against real sockets: a gateway in this process, three strict OpenAI mocks failing
on command (``MockOpenAI.fail``), and the official ``openai`` SDK as the client (docs/resilience.md)."""

from __future__ import annotations

import httpx
import openai
import pytest

from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway

CONFIG = """
llm:
  port: {port}
  models:
  - {{name: a, provider: openAI, params: {{model: model-a, apiKey: key-a, hostOverride: "127.0.0.1:{a}"}}}}
  - {{name: b, provider: openAI, params: {{model: model-b, apiKey: key-b, hostOverride: "127.0.0.1:{b}"}}}}
  - {{name: c, provider: openAI, params: {{model: model-c, apiKey: key-c, hostOverride: "127.0.0.1:{c}"}}}}
  virtualModels:
  - name: smart
    firstTokenTimeout: 500ms
    routing:
      failover:
        targets: [{{model: a}}, {{model: b, priority: 1}}, {{model: c, priority: 2}}]
"""


async def gateway_and_mocks(nursery):  # type: ignore[no-untyped-def]
    mocks = [MockOpenAI() for _ in range(3)]
    for mock in mocks:
        await nursery.start(mock.serve)
    gw = await start_gateway(nursery, CONFIG, port=free_port(), a=mocks[0].port, b=mocks[1].port, c=mocks[2].port)
    client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="client-key", max_retries=0, timeout=10)
    return gw, mocks, client


def ask() -> dict:
    return {"model": "smart", "messages": [{"role": "user", "content": "hello there"}]}


async def test_a_503_primary_is_ejected_after_five_failures_and_every_request_succeeds(nursery):
    gw, (a, b, c), client = await gateway_and_mocks(nursery)
    a.fail("status", status=503)
    answers = [await client.chat.completions.create(**ask()) for _ in range(30)]
    assert all(r.choices[0].message.content == "hello there" for r in answers)
    assert [r.model for r in answers] == ["model-b"] * 30  # b answered, with its own model name
    assert a.count == 5 and b.count == 30 and c.count == 0  # then a is ejected for 30 s
    assert {r.header("authorization") for r in b.requests} == {"Bearer key-b"}
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin:
        upstreams = (await admin.get("/api/upstreams")).json()["upstreams"]
    assert {u["backend"]: u["state"] for u in upstreams} == {"a": "ejected", "b": "healthy", "c": "healthy"}


async def test_429_with_retry_after_moves_traffic_until_then(nursery):
    gw, (a, b, c), client = await gateway_and_mocks(nursery)
    a.fail("status", status=429, retry_after=3600, count=1)
    first = await client.chat.completions.create(**ask())
    later = [await client.chat.completions.create(**ask()) for _ in range(5)]
    assert first.model == "model-b" and all(r.model == "model-b" for r in later)
    assert a.count == 1  # ejected for the hour it asked for, though it would answer now


async def test_a_primary_hanging_before_its_first_byte_fails_over_at_first_token_timeout(nursery):
    gw, (a, b, c), client = await gateway_and_mocks(nursery)
    a.fail("hang", count=1)
    stream = await client.chat.completions.create(**ask(), stream=True)
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    assert text == "hello there" and b.count == 1
    await a.wait_until(lambda m: m.disconnects == 1)  # the gateway gave up on a


async def test_a_stream_broken_after_its_first_chunk_is_broken_for_the_client_not_retried(nursery):
    gw, (a, b, c), client = await gateway_and_mocks(nursery)
    a.fail("midstream", count=1)
    stream = await client.chat.completions.create(**ask(), stream=True)
    pieces: list[str] = []
    with pytest.raises((openai.APIError, httpx.HTTPError)):
        async for chunk in stream:
            pieces.append(chunk.choices[0].delta.content or "")
    assert pieces == ["partial"]  # what a sent, once; never followed by another target's answer
    assert b.count == 0 and c.count == 0


async def test_the_openai_sdks_model_list_has_the_virtual_model_too(nursery):
    gw, mocks, client = await gateway_and_mocks(nursery)
    models = [model async for model in client.models.list()]
    assert [(m.id, m.owned_by) for m in models] == [("a", "openAI"), ("b", "openAI"), ("c", "openAI"),
                                                    ("smart", "trioproxy")]
    assert all(not mock.requests for mock in mocks)  # answered by the gateway itself
    answer = await client.chat.completions.create(**ask())  # and what it lists can be asked for
    assert answer.choices[0].message.content == "hello there"
