"""``--workers 2``: real supervisor and worker processes; budgets, traces and metrics stay whole
(docs/workers.md). Waits poll with deadlines; nothing sleeps to synchronise."""

from __future__ import annotations

import os
import signal

import httpx
import pytest
import trio

from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, run_cli
from tests.e2e.test_trace import TraceReader
from tests.workers_helpers import WorkersGateway, start_workers
from trioproxy.config import ConfigError, parse_config

CHAT = {"model": "client-model", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
async def launch(tmp_path):
    started: list[WorkersGateway] = []

    async def start(config_yaml: str, **kwargs) -> WorkersGateway:
        gw = await start_workers(tmp_path, config_yaml, **kwargs)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.stop()


def routes(port: int, backend: int, policies: str = "{}", prefix: str = "/") -> str:
    return f"""
        binds:
        - port: {port}
          listeners:
          - routes:
            - matches: [{{path: {{pathPrefix: "{prefix}"}}}}]
              policies: {policies}
              backends: [{{host: "127.0.0.1:{backend}"}}]
    """


async def fresh_get(url: str, **kwargs) -> httpx.Response:
    """One request on its own connection, so the kernel may hand it to either worker."""
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.get(url, **kwargs)


async def test_request_budget_admits_exactly_n_under_200_concurrent_clients(launch, backend):
    port = free_port()
    gw = await launch(routes(port, backend.port, "{localRateLimit: [{maxTokens: 50, tokensPerFill: 50, fillInterval: 1m}]}"),
                      bind_port=port)
    statuses: list[int] = []

    async def client() -> None:
        statuses.append((await fresh_get(f"{gw.url}/")).status_code)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(200):
                nursery.start_soon(client)
    assert sorted(statuses) == [200] * 50 + [429] * 150
    assert backend.requests == 50
    spread = await gw.per_worker()
    assert sum(spread.values()) == 200 and all(spread[w] > 0 for w in ("0", "1")), spread


async def test_token_budget_is_charged_once_per_response_across_workers(launch, nursery):
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    port = free_port()
    gw = await launch(f"""
        binds:
        - port: {port}
          listeners:
          - routes:
            - name: llm
              policies:
                localRateLimit: [{{maxTokens: 100, tokensPerFill: 100, fillInterval: 1h, type: tokens}}]
              backends:
              - ai:
                  name: mock
                  provider: {{openAI: {{model: forced-model}}}}
                  hostOverride: "127.0.0.1:{mock.port}"
                  pathOverride: /v1/chat/completions
                policies:
                  backendAuth: {{key: sk-test}}
    """, bind_port=port)
    statuses = []
    for _ in range(5):  # 30 tokens each: admitted while a token is left, so four pass, the fifth is refused
        async with httpx.AsyncClient(timeout=30) as client:
            statuses.append((await client.post(f"{gw.url}/chat", json=CHAT,
                                               headers={"x-mock-total-tokens": "30"})).status_code)
    assert statuses == [200, 200, 200, 200, 429]
    async with httpx.AsyncClient(timeout=10) as client:
        limiters = (await client.get(f"{gw.admin_url}/api/limiters")).json()["limiters"]
    assert [e["balance"] for e in limiters[0]["entries"]] == [100 - 4 * 30]  # charged once each, shared


async def test_a_trace_watcher_gets_exactly_one_request_while_traffic_hits_both_workers(launch, backend, nursery):
    port = free_port()
    gw = await launch(routes(port, backend.port), bind_port=port)
    readers = [await nursery.start(TraceReader(gw).run) for _ in range(3)]
    readers.append(await nursery.start(TraceReader(gw, 'request.path == "/r77"').run))  # compiled in the workers
    statuses: list[int] = []

    async def client(i: int) -> None:
        statuses.append((await fresh_get(f"{gw.url}/a{i}")).status_code)

    with trio.fail_after(60):
        async with trio.open_nursery() as traffic:
            for i in range(100):
                traffic.start_soon(client, i)
    for _ in range(6):  # the filtered watcher waits for its path, whichever worker gets it
        assert (await fresh_get(f"{gw.url}/r77")).status_code == 200
    assert statuses == [200] * 100
    traced = []
    for reader in readers:
        events = await reader.events()
        finished = [e for e in events if e["message"]["type"] == "requestFinished"]
        assert len(finished) == 1, events
        snapshot = next(e for e in events if e["message"]["type"] == "requestSnapshot")
        traced.append(snapshot["message"]["requestState"]["request"]["path"])
    assert traced[3] == "/r77"
    assert len(set(traced)) == 4  # four watchers, four different requests
    assert await gw.total("trioproxy_trace_claims_total") == 4  # one claim per watcher, over both workers
    spread = await gw.per_worker()
    assert all(spread[w] > 0 for w in ("0", "1")), spread


async def test_an_idle_trace_flag_costs_no_claim(launch, backend):
    port = free_port()
    gw = await launch(routes(port, backend.port), bind_port=port)
    for _ in range(5):
        assert (await fresh_get(f"{gw.url}/")).status_code == 200
    assert await gw.total("trioproxy_trace_claims_total") == 0


async def test_metrics_totals_equal_the_requests_sent(launch, backend):
    port = free_port()
    gw = await launch(routes(port, backend.port), bind_port=port)

    async def client(i: int) -> None:
        assert (await fresh_get(f"{gw.url}/status/{200 + i % 2}")).status_code == 200 + i % 2

    with trio.fail_after(60):
        async with trio.open_nursery() as traffic:
            for i in range(60):
                traffic.start_soon(client, i)
    assert await gw.total("trioproxy_requests_total") == 60
    assert await gw.total("trioproxy_requests_total", status="201") == 30
    assert await gw.total("trioproxy_request_duration_seconds_count") == 60
    assert sum((await gw.per_worker()).values()) == 60
    assert await gw.total("trioproxy_build_info") == 1  # the supervisor's own, not one per worker
    async with httpx.AsyncClient() as admin:  # the web UI's traffic summary sums the workers too
        summary = (await admin.get(f"{gw.admin_url}/api/metrics")).json()
    assert sum(row["count"] for row in summary["requests"]) == 60
    assert sum(row["count"] for row in summary["latency"]) == 60


async def test_a_killed_worker_is_restarted_and_the_gateway_keeps_serving(launch, backend):
    port = free_port()
    gw = await launch(routes(port, backend.port), bind_port=port)
    await gw.wait_line(r"worker 1 serving")
    old = gw.worker_pids()
    mark = len(gw.lines)
    os.kill(old[0], signal.SIGKILL)
    for _ in range(10):  # the other worker serves meanwhile
        assert (await fresh_get(f"{gw.url}/")).status_code == 200
    await gw.wait_line(r"worker 0 \(pid \d+\) exited with code -9; starting a new one", start=mark)
    found = await gw.wait_line(r"trioproxy: worker 0 serving \(pid (\d+)\)", start=mark)
    assert int(found.group(1)) != old[0]
    assert await gw.total("trioproxy_worker_restarts_total", worker="0") == 1
    assert await gw.total("trioproxy_workers_running") == 2
    assert (await fresh_get(f"{gw.url}/")).status_code == 200


async def test_a_trace_of_a_request_whose_worker_dies_ends(launch, backend, nursery):
    port = free_port()
    gw = await launch(routes(port, backend.port), bind_port=port)
    await gw.wait_line(r"worker 1 serving")
    reader = await nursery.start(TraceReader(gw).run)

    async def hang() -> None:
        try:
            await fresh_get(f"{gw.url}/hang")
        except httpx.HTTPError:
            pass  # its worker was killed

    nursery.start_soon(hang)
    with trio.fail_after(30):
        await backend.hang_started.wait()
        while not reader._events:  # the claimed request's first events reached the supervisor
            await trio.sleep(0.02)
    for pid in gw.worker_pids().values():  # whichever worker holds it
        os.kill(pid, signal.SIGKILL)
    events = await reader.events()  # the stream ends instead of waiting forever
    assert events and all(e["message"]["type"] != "requestFinished" for e in events)


async def test_sigterm_drains_requests_in_flight_on_both_workers_and_exits_0(launch, backend):
    port = free_port()
    gw = await launch(routes(port, backend.port), bind_port=port)
    statuses: list[int] = []

    async def slow() -> None:
        statuses.append((await fresh_get(f"{gw.url}/slow?ms=1500")).status_code)

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(slow)
            while backend.requests < 12:  # every request reached the backend: all in flight
                await trio.sleep(0.01)
            spread = await gw.per_worker()  # nothing finished yet: counts are 0, but both workers are listed
            assert set(spread) == {"0", "1"}
            gw.proc.send_signal(signal.SIGTERM)
        code = await trio.to_thread.run_sync(gw.proc.wait)
    assert statuses == [200] * 12
    assert code == 0
    text = "".join(gw.lines)
    assert "Traceback" not in text
    assert sum('"message":"request"' in line for line in gw.lines) == 12  # each drained request's access line
    assert "drained" in text


async def test_a_reload_reaches_every_worker_and_a_rejected_one_none(launch, backend, tmp_path):
    port = free_port()
    gw = await launch(routes(port, backend.port, prefix="/old"), bind_port=port)
    (tmp_path / "gw.yaml").write_text(routes(port, backend.port, prefix="/new"))
    with trio.fail_after(30):
        while True:  # every worker: 20 fresh connections all see the new routes
            statuses = [(await fresh_get(f"{gw.url}/new")).status_code for _ in range(20)]
            if statuses == [200] * 20:
                break
            await trio.sleep(0.1)
    assert [(await fresh_get(f"{gw.url}/old")).status_code for _ in range(10)] == [404] * 10
    (tmp_path / "gw.yaml").write_text("binds: [{port: nope}]\n")
    with trio.fail_after(30):
        while await gw.total("trioproxy_config_reloads_total", result="rejected") < 1:
            await trio.sleep(0.1)
    assert [(await fresh_get(f"{gw.url}/new")).status_code for _ in range(10)] == [200] * 10
    assert await gw.total("trioproxy_config_synchronized") == 0


def test_bad_workers_flag_is_a_one_line_error(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text("binds: [{port: 0, listeners: [{routes: [{policies: {directResponse: {status: 200}}}]}]}]\n")
    result = run_cli("--config", str(path), "--workers", "many")
    assert result.returncode == 2
    assert result.stderr.strip() == ("trioproxy: error: --workers: expected auto or a number of worker processes "
                                     "from 1 to 256, got 'many'")


def test_validate_only_ignores_workers(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text("config: {workers: 4}\nbinds: []\n")
    result = run_cli("--config", str(path), "--validate-only", "--workers", "2")
    assert result.returncode == 0, result.stderr


def test_config_workers_is_a_count_or_auto():
    assert parse_config("config: {workers: auto}\nbinds: []\n").workers == 0  # resolved at start
    assert parse_config("config: {workers: 3}\nbinds: []\n").workers == 3
    assert parse_config("binds: []\n").workers == 1
    with pytest.raises(ConfigError) as error:
        parse_config("config:\n  workers: 0\nbinds: []\n", source="gw.yaml")
    assert error.value.problems == [
        "gw.yaml:2:12: config.workers: expected auto or a number of worker processes from 1 to 256, got '0'"]
