"""Every examples/<feature>/config.yaml validates, starts, and answers as its README says.

The examples name fixed ports (gateway 3000/3001, echo backend 8080, mock OpenAI 8000, rate limit
service 8081); here each becomes a free port, and the bundled fixtures run in the test.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import httpx
import pytest

from fixtures.mock_openai import MockOpenAI
from tests.conftest import ROOT, free_port, start_gateway
from tests.rls_helpers import ratelimit_server
from trioproxy.config import load_config

EXAMPLES = ROOT / "examples"
NAMES = sorted(p.parent.name for p in EXAMPLES.glob("*/config.yaml"))


def test_the_expected_examples_exist_with_a_readme():
    assert {"basic", "local-ratelimit", "llm-token-limits", "global-ratelimit", "jwt", "tracing"} <= set(NAMES)
    for name in NAMES:
        readme = (EXAMPLES / name / "README.md").read_text()
        assert f"examples/{name}/config.yaml" in readme, name


@pytest.mark.parametrize("name", NAMES)
def test_every_example_validates_as_shipped(name):
    assert load_config(EXAMPLES / name / "config.yaml").binds


async def start(nursery, name: str, store: Path | None = None, **targets: int):
    """The example with its fixed ports (and its key store, when given) replaced; returns (gateway,
    {example port: url})."""
    text = (EXAMPLES / name / "config.yaml").read_text()
    if store is not None:
        text = text.replace("store: trioproxy.db", f"store: {store}")
    for fixed, port in (("127.0.0.1:8080", "echo"), ("127.0.0.1:8000", "mock"), ("127.0.0.1:8081", "rls")):
        if port in targets:
            text = text.replace(fixed, f"127.0.0.1:{targets[port]}")
    ports = {3000: free_port(), 3001: free_port()}
    for fixed, port in ports.items():
        text = text.replace(f"port: {fixed}", f"port: {port}")
    gw = await start_gateway(nursery, text.replace("{", "{{").replace("}", "}}"))
    return gw, {fixed: f"http://127.0.0.1:{gw.info.ports[port]}" for fixed, port in ports.items()
                if port in gw.info.ports}


async def test_basic(nursery, backend):
    _, url = await start(nursery, "basic", echo=backend.port)
    async with httpx.AsyncClient() as client:
        echoed = (await client.get(f"{url[3000]}/hello")).json()
    assert echoed["path"] == "/hello" and ["x-via", "trioproxy"] in echoed["headers"]


async def test_local_ratelimit(nursery, backend, mock_clock):
    _, url = await start(nursery, "local-ratelimit", echo=backend.port)
    async with httpx.AsyncClient() as client:
        statuses = [(await client.get(f"{url[3000]}/")).status_code for _ in range(6)]
    assert statuses == [200] * 5 + [429]


async def test_llm_token_limits(nursery, mock_clock):
    mock = MockOpenAI()
    await nursery.start(mock.serve)
    _, url = await start(nursery, "llm-token-limits", mock=mock.port)
    body = {"model": "fast/gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient() as client:
        assert (await client.post(f"{url[3000]}/v1/chat/completions", json=body)).status_code == 200
        unknown = await client.post(f"{url[3000]}/v1/chat/completions", json={**body, "model": "other"})
        assert unknown.status_code == 404
        limited = await client.post(f"{url[3001]}/v1/chat/completions",
                                    json={"messages": [{"role": "user", "content": "hi"}]},
                                    headers={"x-mock-total-tokens": "2500"})
        assert limited.status_code == 200  # the response that crosses the budget is delivered
        over = await client.post(f"{url[3001]}/v1/chat/completions", json={"messages": []})
    assert over.status_code == 429
    assert [r.json["model"] for r in mock.requests] == ["gpt-4o-mini", "gpt-4o-mini"]


async def test_llm_failover(nursery):
    mock = MockOpenAI()
    await nursery.start(mock.serve)
    _, url = await start(nursery, "llm-failover", mock=mock.port)
    body = {"model": "smart", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient() as client:
        answers = [await client.post(f"{url[3000]}/v1/chat/completions", json=body) for _ in range(3)]
    assert [a.status_code for a in answers] == [200] * 3
    assert [r.json["model"] for r in mock.requests] == ["gpt-4o-mini"] * 3
    assert {r.header("authorization") for r in mock.requests} == {"Bearer fallback-key"}


async def test_global_ratelimit(nursery, backend):
    with ratelimit_server(EXAMPLES / "global-ratelimit" / "ratelimit-config.yaml", "--store", "memory") as rls:
        _, url = await start(nursery, "global-ratelimit", echo=backend.port, rls=rls.port)
        async with httpx.AsyncClient() as client:
            statuses = [(await client.get(f"{url[3000]}/limited")).status_code for _ in range(4)]
            other = (await client.get(f"{url[3000]}/other")).status_code
    assert statuses == [200, 200, 200, 429] and other == 200


async def test_jwt(nursery, backend):
    spec = importlib.util.spec_from_file_location("make_token", EXAMPLES / "jwt" / "make_token.py")
    assert spec is not None and spec.loader is not None
    make_token = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_token)
    _, url = await start(nursery, "jwt", echo=backend.port)
    async with httpx.AsyncClient(base_url=url[3000]) as client:
        assert (await client.get("/public")).status_code == 200
        assert (await client.get("/api")).status_code == 401
        eng = await client.get("/api", headers={"authorization": f"Bearer {make_token.token('eng')}"})
        sales = await client.get("/api", headers={"authorization": f"Bearer {make_token.token('sales')}"})
    assert (eng.status_code, sales.status_code) == (200, 403)


async def test_tracing_serves_without_a_collector(nursery, backend):
    gw, url = await start(nursery, "tracing", echo=backend.port)
    async with httpx.AsyncClient() as client:
        echoed = (await client.get(f"{url[3000]}/hello")).json()
    assert any(name == "traceparent" for name, _ in echoed["headers"])  # randomSampling: true
    assert gw.info.runtime.otel is not None


async def test_llm_keys(nursery, tmp_path):
    mock = MockOpenAI()
    await nursery.start(mock.serve)
    gw, url = await start(nursery, "llm-keys", store=tmp_path / "keys.db", mock=mock.port)
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient() as client:
        assert (await client.post(f"{url[3000]}/v1/chat/completions", json=body)).status_code == 401
        made = await client.post(f"{gw.admin_url}/api/keys", json={
            "name": "alice", "models": ["gpt-4o-mini"], "limits": {"tokens": {"day": 2000}}})
        auth = {"authorization": f"Bearer {made.json()['key']}"}
        assert (await client.post(f"{url[3000]}/v1/chat/completions", json=body, headers=auth)).status_code == 200
        refused = await client.post(f"{url[3000]}/v1/chat/completions", json={**body, "model": "gpt-4o"},
                                    headers=auth)
    assert refused.status_code == 403
    assert refused.json()["error"]["message"] == "model 'gpt-4o' is not allowed for key alice"
    assert not (EXAMPLES / "llm-keys" / "trioproxy.db").exists()


def test_examples_are_listed_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for name in NAMES:
        assert f"examples/{name}" in readme, name
    assert Path(EXAMPLES / "jwt" / "jwks.json").exists()
