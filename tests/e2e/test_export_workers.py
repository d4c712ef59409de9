"""``POST /api/replay`` under ``--workers 2``: the supervisor's admin server publishes the replay's
watcher to the workers like any other (its expression as text), whichever worker the replayed
request reaches claims it, removes the marker header, and the fresh trace comes back whole."""

from __future__ import annotations

import httpx
import trio

from tests.conftest import free_port
from tests.e2e.test_trace import TraceReader
from tests.e2e.test_workers import launch, routes  # noqa: F401  (fixture)


async def test_replay_across_workers(launch, backend, nursery):  # noqa: F811
    port = free_port()
    gw = await launch(routes(port, backend.port), bind_port=port)

    class Admin:  # what TraceReader reads of a gateway
        admin_url = gw.admin_url

    reader = await nursery.start(TraceReader(Admin).run)
    async with httpx.AsyncClient(timeout=30) as client:
        original = await client.post(f"{gw.url}/w/replayed?x=1", content=b"hello",
                                     headers={"x-api-key": "k-secret", "x-visible": "v"})
    events = await reader.events()
    assert original.status_code == 200
    bystander = await nursery.start(TraceReader(Admin).run)  # an older watcher of any request
    async with httpx.AsyncClient(base_url=gw.admin_url, timeout=60) as admin:
        for _ in range(3):  # the kernel may hand each replay to either worker
            before = len(backend.seen)
            with trio.fail_after(60):
                replayed = await admin.post("/api/replay", json={"trace": events})
            assert replayed.status_code == 200, replayed.text
            result = replayed.json()
            assert backend.seen[before:] == [("POST", "/w/replayed?x=1", 5)]
            received = dict(backend.last_headers)
            assert "x-api-key" not in received and "x-trioproxy-replay" not in received
            assert received["x-visible"] == "v"
            assert result["trace"][-1]["message"] == {"type": "requestFinished", "status": 200, "error": None}
            initial = next(e for e in result["trace"] if e["message"].get("stage") == "initial request")
            assert initial["message"]["requestState"]["request"]["path"] == "/w/replayed"
    async with httpx.AsyncClient(timeout=30) as client:
        await client.get(f"{gw.url}/w/after")
    seen = await bystander.events()  # the replays went first; it took the next request
    first = next(e for e in seen if e["message"].get("stage") == "initial request")
    assert first["message"]["requestState"]["request"]["path"] == "/w/after"
