"""The request history stays bounded through the gateway's own recording path (issue 34: "history
bounded under 100,000 requests, memory flat"): 100,000 requests over the in-memory harness (the
HTTP/1.1 frontend, the pipeline, request telemetry), each to a path of its own, half of them 404s
whose ``why`` lists every route they missed (the largest entry a refusal records). tracemalloc
counts what the gateway's own modules allocated and still hold after 20,000 and after 100,000
requests: the history keeps its last ``size`` entries, so 80,000 more leave it flat."""

from __future__ import annotations

import gc
import tracemalloc

from tests.memory_harness import memory_gateway

SIZE = 1000
CONFIG = f"""
config: {{history: {{size: {SIZE}}}}}
binds:
- port: 3000
  listeners:
  - routes:
    - name: api
      matches: [{{path: {{pathPrefix: /api/}}}}]
      policies: {{directResponse: {{status: 200, body: "ok"}}}}
    - name: admin
      matches: [{{path: {{pathPrefix: /admin/}}, method: POST}}]
      backends: [{{host: "b.test:80"}}]
"""


async def _send(client, first: int, count: int) -> None:
    for i in range(first, first + count):
        # even: answered by the route's directResponse; odd: a 404 whose why names both routes and what each missed
        path = f"/api/{i}" if i % 2 == 0 else f"/nowhere/{i}"
        response = await client.request("GET", path)
        assert response.status == (200 if i % 2 == 0 else 404)


def _held_by_gateway() -> int:
    """Bytes allocated by trioproxy's modules and still alive (the harness's own records apart)."""
    gc.collect()
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(True, "*/trioproxy/*")])
    return sum(stat.size for stat in snapshot.statistics("filename"))


async def test_history_memory_is_flat_over_100000_requests(autojump_clock):
    async with memory_gateway(CONFIG) as gw:
        client = gw.connect()
        history = gw.runtime.history
        await _send(client, 0, 2_000)  # warm: the pool, caches, interned strings
        tracemalloc.start()
        try:
            await _send(client, 2_000, 18_000)
            at_20k = _held_by_gateway()
            await _send(client, 20_000, 80_000)
            at_100k = _held_by_gateway()
        finally:
            tracemalloc.stop()
        assert history.total == 100_000
        assert len(history.entries) == SIZE
        newest = history.newest(2)
        assert [s.path for s in newest] == ["/nowhere/99999", "/api/99998"]
        assert newest[0].why is not None and newest[0].why["evaluated"] == 2  # the entries hold their why
    # 80,000 more requests, each with a path of its own: a history that kept them would grow by
    # megabytes (tens of bytes per path alone); a bounded one stays within noise
    assert at_100k - at_20k < 256 * 1024, (at_20k, at_100k)
