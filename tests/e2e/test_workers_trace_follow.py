"""``--workers 2``: ``/debug/trace?follow=true`` on the supervisor keeps every request, whichever
worker served it: a back-to-back run in order, and bursts of concurrent requests whole (the
follower's slot stands in the shared table: no request waits for the supervisor to re-arm it)."""

from __future__ import annotations

import json

import httpx
import trio

from tests.conftest import free_port
from tests.e2e.test_workers import fresh_get, launch, routes  # noqa: F401  (fixture)

N = 20


async def test_follow_stream_keeps_every_request_across_workers(launch, backend, nursery):  # noqa: F811
    port = free_port()
    gw = await launch(routes(port, backend.port), bind_port=port)
    paths: list[str] = []
    ready = trio.Event()

    async def follow() -> None:
        async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None)) as client:
            async with client.stream("POST", f"{gw.admin_url}/debug/trace", params={"follow": "true"}) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line == ": ready":
                        ready.set()
                    elif line.startswith("data: "):
                        message = json.loads(line[6:])["message"]
                        if message["type"] == "requestSnapshot" and message["stage"] == "initial request":
                            paths.append(message["requestState"]["request"]["path"])

    async def get(path: str) -> None:
        assert (await fresh_get(f"{gw.url}{path}")).status_code == 200

    nursery.start_soon(follow)
    sent = [f"/w{i}" for i in range(N)]
    with trio.fail_after(60):
        await ready.wait()
        for path in sent:  # one after the other: the stream keeps their order
            await get(path)
        # Bursts at once, until both workers have served some: they accept from one queue, and one
        # idle worker can win every sequential accept (CI saw {'0': 0, '1': 20})
        for batch in range(10):
            more = [f"/b{batch}-{j}" for j in range(16)]
            async with trio.open_nursery() as at_once:
                for path in more:
                    at_once.start_soon(get, path)
            sent += more
            spread = await gw.per_worker()
            if all(spread.get(w, 0) > 0 for w in ("0", "1")):
                break
        while len(paths) < len(sent):
            await trio.sleep(0.02)
    assert paths[:N] == sent[:N] and sorted(paths) == sorted(sent)
    spread = await gw.per_worker()
    assert all(spread[w] > 0 for w in ("0", "1")), spread
