"""``--workers 2``: one request history. Each worker sends its summaries to the supervisor, whose
``/api/requests`` shows the requests of every worker."""

from __future__ import annotations

import httpx
import trio

from tests.conftest import free_port
from tests.e2e.test_workers import fresh_get, launch, routes  # noqa: F401  (fixture)

N = 20


async def test_one_history_across_workers(launch, backend):  # noqa: F811
    port = free_port()
    gw = await launch(routes(port, backend.port), bind_port=port)
    for i in range(N):
        assert (await fresh_get(f"{gw.url}/h{i}")).status_code == 200
    async with httpx.AsyncClient(base_url=gw.admin_url, timeout=10) as admin:
        with trio.fail_after(30):
            while len(entries := (await admin.get("/api/requests")).json()) < N:
                await trio.sleep(0.05)
        paths = sorted(e["path"] for e in entries)
        assert paths == sorted(f"/h{i}" for i in range(N))
        assert all(e["status"] == 200 and e["method"] == "GET" for e in entries)
        only = (await admin.get("/api/requests", params={"expression": 'request.path == "/h3"'})).json()
        assert [e["path"] for e in only] == ["/h3"]
    spread = await gw.per_worker()
    assert all(spread[w] > 0 for w in ("0", "1")), spread
