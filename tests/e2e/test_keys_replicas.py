"""Two gateway processes on one real PostgreSQL store (docs/keys.md, "Replicas"): one budget, not
one per replica; a key revoked through one is refused by the other within a second; a SIGTERM
loses no settled spend."""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
from pathlib import Path

import httpx
import trio

from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway
from tests.postgres_helpers import PostgresCluster, find_bin_dir, postgres_cluster, postgres_url  # noqa: F401
from tests.workers_helpers import WorkersGateway, start_workers

CONFIG = """
config:
  store: {store}
  keys: {{failureMode: {mode}}}
binds:
- port: {port}
  listeners:
  - routes:
    - name: llm
      policies:
        apiKey: {{runtimeKeys: true, mode: strict}}
      backends:
      - ai: {{name: gpt, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
"""

BODY = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}


async def replica(tmp_path: Path, name: str, store: str, mock: int) -> WorkersGateway:
    directory = tmp_path / name
    directory.mkdir()
    port = free_port()
    return await start_workers(directory, CONFIG.format(store=json.dumps(store), port=port, mock=mock, mode="closed"),
                               workers=1, bind_port=port)


async def chat(gateway: WorkersGateway, secret: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(f"{gateway.url}/v1/chat/completions", json=BODY,
                                 headers={"authorization": f"Bearer {secret}", "x-mock-total-tokens": "20"})


async def test_two_replicas_share_one_budget_and_see_a_revocation_within_a_second(nursery, tmp_path,
                                                                                   postgres_url):  # noqa: F811
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    a = await replica(tmp_path, "a", postgres_url, mock.port)
    b = await replica(tmp_path, "b", postgres_url, mock.port)
    try:
        async with httpx.AsyncClient(base_url=a.admin_url, timeout=10) as admin:
            created = (await admin.post("/api/keys", json={"name": "shared",
                                                           "limits": {"requests": {"day": 10}}})).json()
        secret = created["key"]
        statuses: list[int] = []

        async def send(gateway: WorkersGateway) -> None:
            statuses.append((await chat(gateway, secret)).status_code)

        async with trio.open_nursery() as requests:  # 30 at once, half through each replica
            for i in range(30):
                requests.start_soon(send, a if i % 2 else b)
        assert sorted(statuses) == [200] * 10 + [429] * 20
        assert len(mock.chat_requests) == 10

        assert (await chat(b, secret)).status_code == 429  # each replica sees what the other admitted
        assert (await chat(a, secret)).status_code == 429

        async with httpx.AsyncClient(base_url=a.admin_url, timeout=10) as admin:
            fresh = (await admin.post("/api/keys", json={"name": "to-revoke"})).json()
        assert (await chat(b, fresh["key"])).status_code == 200  # b knows the key a made
        async with httpx.AsyncClient(base_url=a.admin_url, timeout=10) as admin:
            assert (await admin.delete(f"/api/keys/{fresh['id']}")).status_code == 200
        revoked_at = trio.current_time()
        with trio.fail_after(5):
            while (response := await chat(b, fresh["key"])).status_code == 200:
                await trio.sleep(0.02)
        assert trio.current_time() - revoked_at < 1.0
        assert response.status_code == 401 and "key revoked" in response.text
    finally:
        a.stop()
        b.stop()


async def test_sigterm_loses_no_settled_spend(nursery, tmp_path, postgres_url):  # noqa: F811
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    a = await replica(tmp_path, "a", postgres_url, mock.port)
    try:
        async with httpx.AsyncClient(base_url=a.admin_url, timeout=10) as admin:
            created = (await admin.post("/api/keys", json={"name": "durable"})).json()
        for _ in range(5):
            response = await chat(a, created["key"])
            assert response.status_code == 200, response.text
        a.proc.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            while a.proc.poll() is None:
                await trio.sleep(0.05)
        assert a.proc.returncode == 0, "".join(a.lines)
    finally:
        a.stop()
    b = await replica(tmp_path, "b", postgres_url, mock.port)
    try:
        async with httpx.AsyncClient(base_url=b.admin_url, timeout=10) as admin:
            rows = (await admin.get("/api/spend", params={"group_by": "key"})).json()
        rows = rows["rows"] if isinstance(rows, dict) else rows
        row = next(r for r in rows if r["group"] == created["id"])
        assert row["requests"] == 5
        assert row["totalTokens"] == 5 * 20
    finally:
        b.stop()


async def test_a_store_that_goes_down_is_503_when_closed_and_unmetered_when_open(nursery):
    """Two gateways on their own PostgreSQL, one ``failureMode: closed`` (the default), one ``open``:
    with the server stopped, a cached key gets 503 ``key store unavailable`` from the first and
    passes unmetered through the second; once it is back, the first admits again."""
    bin_dir = find_bin_dir()
    assert bin_dir is not None, "PostgreSQL is not installed (apt-get install postgresql; .ci/run does it)"
    directory = Path(tempfile.mkdtemp(prefix="trioproxy-pg-down-"))
    cluster = PostgresCluster(bin_dir, directory)
    try:
        await trio.to_thread.run_sync(cluster.start)
        mock = MockOpenAI()
        await nursery.start(mock.serve, 0)
        closed, opened = [await start_gateway(nursery, CONFIG, port=free_port(), mock=mock.port,
                                              store=json.dumps(cluster.url()), mode=mode)
                          for mode in ("closed", "open")]
        async with httpx.AsyncClient(base_url=closed.admin_url, timeout=10) as admin:
            secret = (await admin.post("/api/keys", json={"name": "k", "limits": {"tokens": {"day": 10**6}}})).json()["key"]
        for gateway in (closed, opened):  # each caches the key
            assert (await chat_url(gateway.url, secret)).status_code == 200
        await trio.to_thread.run_sync(cluster.stop, "fast")
        refused = await chat_url(closed.url, secret)
        assert refused.status_code == 503
        assert refused.json()["error"]["message"] == "key store unavailable"
        assert (await chat_url(opened.url, secret)).status_code == 200
        await trio.to_thread.run_sync(cluster.start_server)
        with trio.fail_after(20):  # the pool reconnects
            while (await chat_url(closed.url, secret)).status_code != 200:
                await trio.sleep(0.1)
    finally:
        await trio.to_thread.run_sync(cluster.stop)
        shutil.rmtree(directory, ignore_errors=True)




async def chat_url(url: str, secret: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(f"{url}/v1/chat/completions", json=BODY, headers={"authorization": f"Bearer {secret}"})
