"""The request history (``config.history``, ``/api/requests``): summaries of the last requests,
bounded in memory, CEL-filtered when read, against a real in-process gateway."""

from __future__ import annotations

import json

import httpx
import pytest
import trio

from fixtures.mock_openai import MockOpenAI
from tests.conftest import LOOPBACK_SERVERS, free_port, start_gateway, start_routes
from tests.e2e.test_basic_auth import basic, users_yaml
from trioproxy.config import ConfigError, parse_config
from trioproxy.config.dump import config_dump
from trioproxy.telemetry.history import History, Summary, subject_of

ROUTES = """\
config:
  history: {{size: {size}}}
binds:
- port: {port}
  listeners:
  - name: main
    routes:
    - name: limited
      matches: [{{path: {{pathPrefix: /limited}}}}]
      policies:
        localRateLimit: [{{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: echo
      matches: [{{path: {{pathPrefix: /echo}}}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


async def _history(admin: httpx.AsyncClient, count: int, query: str = "") -> list[dict]:
    """``/api/requests`` once it holds ``count`` entries (a request is recorded just after its answer)."""
    with trio.fail_after(10):
        while True:
            entries = (await admin.get("/api/requests" + query)).json()
            if len(entries) >= count:
                return entries
            await trio.sleep(0.01)


async def _start(nursery, backend, size: int = 1000):
    return await start_gateway(nursery, ROUTES, port=free_port(), backend=backend.port, size=size)


async def test_newest_first_with_fields_and_reasons(nursery, backend):
    gw = await _start(nursery, backend)
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin, gw.client() as client:
        assert (await client.get("/echo/one?x=1")).status_code == 200
        assert (await client.post("/echo/two", content=b"hello")).status_code == 200
        assert (await client.get("/limited")).status_code == 200
        assert (await client.get("/limited")).status_code == 429
        assert (await client.get("/nowhere")).status_code == 404
        entries = await _history(admin, 5)
    assert [(e["method"], e["path"], e["status"]) for e in entries] == [
        ("GET", "/nowhere", 404), ("GET", "/limited", 429), ("GET", "/limited", 200), ("POST", "/echo/two", 200),
        ("GET", "/echo/one", 200)]
    times = [e["time"] for e in entries]
    assert times == sorted(times, reverse=True)
    first = entries[-1]
    assert "echo" in first["route"] and entries[2]["route"] != first["route"]
    assert first["backend"] and first["host"].startswith("127.0.0.1")
    assert first["durationMs"] > 0 and first["reason"] is None and first["subject"] is None
    assert first["inputTokens"] is None and first["outputTokens"] is None
    assert entries[1]["reason"] == "rate limit exceeded"
    assert entries[1]["errorKind"] == "RateLimited"
    assert entries[0]["reason"] == "route not found" and entries[0]["route"] is None
    assert entries[0]["errorKind"] == "RouteNotFound"


async def test_bounded_by_size_and_limit(nursery, backend):
    gw = await _start(nursery, backend, size=50)
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin, gw.client() as client:
        for i in range(200):
            await client.get(f"/echo/{i}")
        with trio.fail_after(10):
            while (await admin.get("/api/requests?limit=1")).json()[0]["path"] != "/echo/199":
                await trio.sleep(0.01)
        entries = (await admin.get("/api/requests")).json()
        assert len(entries) == 50
        assert [e["path"] for e in entries] == [f"/echo/{i}" for i in range(199, 149, -1)]
        assert [e["path"] for e in (await admin.get("/api/requests?limit=3")).json()] == [
            "/echo/199", "/echo/198", "/echo/197"]


def test_memory_stays_flat():
    history = History(50)
    for i in range(100_000):
        history.record(Summary(float(i), "GET", "/", "h", "r", "b", 200, 1.0, None, None, None, None, None, None))
    assert len(history.entries) == 50 and history.entries.maxlen == 50 and history.total == 100_000
    assert [s.time for s in history.newest(2)] == [99_999.0, 99_998.0]
    history.resize(10)  # a reload: the newest that fit stay
    assert len(history.entries) == 10 and history.newest(1)[0].time == 99_999.0


async def test_cel_filter(nursery, backend):
    gw = await _start(nursery, backend)
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin, gw.client() as client:
        await client.get("/limited")
        await client.get("/limited")
        await client.post("/echo/a")
        await client.get("/echo/b")
        await _history(admin, 4)

        async def paths(expression: str) -> list[str]:
            answer = await admin.get("/api/requests", params={"expression": expression})
            assert answer.status_code == 200, answer.text
            return [e["path"] for e in answer.json()]

        assert await paths("response.code == 429") == ["/limited"]
        assert await paths('request.method == "POST"') == ["/echo/a"]
        assert await paths('request.path.startsWith("/echo")') == ["/echo/b", "/echo/a"]
        assert await paths('response.reason.contains("rate limit")') == ["/limited"]
        assert await paths('request.route.endsWith("echo") && response.durationMs >= 0.0') == ["/echo/b", "/echo/a"]
        limited = (await admin.get("/api/requests", params={"expression": "response.code == 200", "limit": "1"})).json()
        assert [e["path"] for e in limited] == ["/echo/b"]


@pytest.mark.parametrize("query, message", [
    ({"expression": "request.method =="}, "invalid expression: "),
    ({"expression": "status == 200"}, "invalid expression: unknown variable 'status'"),
    ({"limit": "abc"}, "invalid limit 'abc'"),
    ({"limit": "0"}, "invalid limit '0'"),
    ({"limit": "-3"}, "invalid limit '-3'"),
    ({"follow": "maybe"}, "invalid follow 'maybe'"),
])
async def test_bad_query(nursery, backend, query, message):
    gw = await _start(nursery, backend)
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin:
        answer = await admin.get("/api/requests", params=query)
    assert answer.status_code == 400
    assert answer.text.startswith(message)


async def test_size_zero_keeps_nothing(nursery, backend):
    gw = await _start(nursery, backend, size=0)
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin, gw.client() as client:
        for _ in range(3):
            assert (await client.get("/echo")).status_code == 200
        await trio.sleep(0.2)  # nothing is expected: give a (wrong) record the time to land
        assert (await admin.get("/api/requests")).json() == []


async def test_follow_streams_new_entries(nursery, backend):
    gw = await _start(nursery, backend)
    async with httpx.AsyncClient(base_url=gw.admin_url, timeout=10) as admin, gw.client() as client:
        await client.get("/echo/before")
        await _history(admin, 1)
        params = {"follow": "true", "expression": 'request.path != "/echo/skip"'}
        async with admin.stream("GET", "/api/requests", params=params) as stream:
            assert stream.headers["content-type"] == "text/event-stream"
            lines = stream.aiter_lines()
            assert await lines.__anext__() == ": ready"
            await client.get("/echo/skip")
            await client.get("/echo/after")
            with trio.fail_after(10):
                async for line in lines:
                    if line.startswith("data: "):
                        break
            entry = json.loads(line.removeprefix("data: "))
            assert entry["path"] == "/echo/after" and entry["status"] == 200


def test_config_history_size_validated():
    with pytest.raises(ConfigError, match=r"config\.history\.size"):
        parse_config("config:\n  history: {size: -1}\nbinds: []\n", env=LOOPBACK_SERVERS)
    assert parse_config("binds: []\n", env=LOOPBACK_SERVERS).history.size == 1000
    seven = parse_config("config:\n  history: {size: 7}\nbinds: []\n", env=LOOPBACK_SERVERS)
    assert seven.history.size == 7 and config_dump(seven)["config"]["history"] == {"size": 7}


def test_subject_of():
    assert subject_of({"sub": "alice"}, None, None) == "alice"
    assert subject_of(None, None, {"username": "bob"}) == "bob"
    assert subject_of(None, {"name": "ci", "key": "<redacted>"}, None) == "ci"
    assert subject_of(None, {"key": "<redacted>"}, None) == "apiKey"
    assert subject_of(None, None, None) is None


async def test_llm_tokens_and_model(nursery):
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    gw = await start_gateway(nursery, """
        binds:
        - port: {port}
          listeners:
          - routes:
            - backends:
              - ai: {{name: mock, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
        """, port=free_port(), mock=mock.port)
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin, gw.client() as client:
        answer = await client.post("/v1/chat/completions", json={
            "model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello there"}]})
        assert answer.status_code == 200
        usage = answer.json()["usage"]
        [entry] = await _history(admin, 1)
        assert (entry["inputTokens"], entry["outputTokens"]) == (usage["prompt_tokens"], usage["completion_tokens"])
        assert entry["model"] == "gpt-4o-mini" and entry["backend"] == "mock"
        found = (await admin.get("/api/requests", params={"expression": "llm.inputTokens > 0"})).json()
        assert len(found) == 1


async def test_subject_and_auth_refusals(nursery, backend):
    gw = await start_routes(nursery, """
        - policies:
            basicAuth:
              mode: strict
              realm: staff
              htpasswd: {users}
            authorization: {{rules: ['basicAuth.username != "bob"']}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, users=users_yaml())
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin, gw.client() as client:
        assert (await client.get("/a", headers=basic("alice", "wonderland"))).status_code == 200
        assert (await client.get("/b", headers=basic("bob", "builder"))).status_code == 403
        assert (await client.get("/c")).status_code == 401
        entries = await _history(admin, 3)
    assert [(e["path"], e["subject"], e["status"]) for e in entries] == [
        ("/c", None, 401), ("/b", "bob", 403), ("/a", "alice", 200)]
    assert entries[0]["reason"] == "basic authentication failure: no basic authentication credentials found"
    assert entries[1]["reason"].startswith("authorization failed") and entries[2]["reason"] is None
