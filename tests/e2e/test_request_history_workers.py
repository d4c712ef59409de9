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
    sent = 0

    async def get(i: int) -> None:
        assert (await fresh_get(f"{gw.url}/h{i}")).status_code == 200

    # a new connection each, N at once: the workers accept from one queue, and one idle worker can
    # win every sequential accept (CI saw {'0': 0, '1': 20}), so batches go until both served some
    for _ in range(10):
        async with trio.open_nursery() as batch:
            for i in range(sent, sent + N):
                batch.start_soon(get, i)
        sent += N
        spread = await gw.per_worker()
        if all(spread.get(w, 0) > 0 for w in ("0", "1")):
            break
    async with httpx.AsyncClient(base_url=gw.admin_url, timeout=10) as admin:
        with trio.fail_after(30):
            while len(entries := (await admin.get("/api/requests")).json()) < sent:
                await trio.sleep(0.05)
        paths = sorted(e["path"] for e in entries)
        assert paths == sorted(f"/h{i}" for i in range(sent))
        assert all(e["status"] == 200 and e["method"] == "GET" for e in entries)
        only = (await admin.get("/api/requests", params={"expression": 'request.path == "/h3"'})).json()
        assert [e["path"] for e in only] == ["/h3"]
    spread = await gw.per_worker()
    assert all(spread[w] > 0 for w in ("0", "1")), spread
