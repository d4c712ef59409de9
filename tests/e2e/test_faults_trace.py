"""Fault suite, trace rows (docs/reliability.md rows 3 and 6): readers of ``/debug/trace`` that
never read, too many readers, and filters that try to read credentials."""

from __future__ import annotations

import base64
import json

import httpx
import trio

from tests.e2e.test_trace import watch
from tests.fault_helpers import wait_until
from trioproxy.telemetry.trace import TraceHub

# Row 3: watchers that never read, and too many watchers ------------------------------------------


async def _silent_watcher(gateway) -> trio.SocketStream:
    """A /debug/trace reader that sends its request and never reads a byte of the answer."""
    stream = await trio.open_tcp_stream(gateway.info.admin.host, gateway.info.admin.port)
    await stream.send_all(b"POST /debug/trace HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n")
    return stream


async def test_row3_silent_watchers_with_big_bodies_stay_within_their_budget(gateway):
    hub = gateway.info.runtime.trace
    hub.watcher_budget = 256 * 1024  # small, so that 1 MB bodies must be dropped, not queued
    silent = [await _silent_watcher(gateway) for _ in range(hub.max_watchers)]
    await wait_until(lambda: len(hub.watchers) == hub.max_watchers, what="every watcher registered")
    watchers = list(hub.watchers)
    payload = b"x" * (1024 * 1024)
    statuses = []

    async def one(client: httpx.AsyncClient) -> None:
        statuses.append((await client.post("/upload", content=payload)).status_code)

    with trio.fail_after(30):
        async with gateway.client(limits=httpx.Limits(max_connections=50)) as client:
            async with trio.open_nursery() as requests:
                for _ in range(hub.max_watchers):
                    requests.start_soon(one, client)
    assert statuses == [200] * hub.max_watchers  # never slowed down or failed by the readers
    assert hub.traced == hub.max_watchers
    # Each reader holds at most its budget of unread events (before the fix: every body, unbounded).
    assert all(0 < w.high_water <= w.budget == 256 * 1024 for w in watchers)
    assert all(w.dropped >= 1 for w in watchers)  # at least the request body's snapshot each
    metric = gateway.info.runtime.metrics.registry.get_sample_value("trioproxy_trace_events_dropped_total")
    assert metric is not None and metric >= hub.max_watchers  # at least each reader's request body
    for stream in silent:
        await stream.aclose()
    await wait_until(lambda: hub.open == 0, what="silent watchers forgotten once they hang up")


async def test_row3_watchers_past_the_cap_get_429_and_a_slot_frees_when_one_leaves(nursery, gateway):
    hub = gateway.info.runtime.trace
    hub.max_watchers = 3
    readers = [await watch(nursery, gateway) for _ in range(3)]
    assert [r.status for r in readers] == [200] * 3
    async with httpx.AsyncClient(timeout=5) as client:
        refused = await client.post(f"{gateway.admin_url}/debug/trace")
    assert refused.status_code == 429
    assert refused.text == "too many trace watchers (limit 3)"
    async with gateway.client() as client:  # one request: the first reader gets it and its stream ends
        assert (await client.get("/")).status_code == 200
    await readers[0].events()
    await wait_until(lambda: hub.open == 2, what="the finished reader's slot freed")
    assert (await watch(nursery, gateway)).status == 200


async def test_row3_budget_accounting_drops_past_the_budget_and_frees_on_read():
    hub = TraceHub(buffer=1000, watcher_budget=2000)
    drops = []
    hub.on_drop = lambda: drops.append(1)
    watcher = hub.watch()
    tracer = hub.claim(trio.current_time(), dict)
    assert tracer is not None
    for _ in range(50):
        tracer.event("bodySnapshot", stage="request", body="A" * 300)
    assert watcher.queued_bytes <= 2000 and watcher.high_water <= 2000
    kept = len(watcher.sizes)
    assert 0 < kept < 50 and tracer.dropped == len(drops) == 50 - kept
    # Reading frees the budget: room again for new events.
    for _ in range(kept):
        await watcher.next_event()
    tracer.event("bodySnapshot", stage="request", body="B" * 300)
    assert tracer.dropped == 50 - kept
    tracer.finish(200, None)  # requestFinished always gets through
    events = [await watcher.next_event(), await watcher.next_event()]
    assert [e["message"]["type"] for e in events] == ["bodySnapshot", "requestFinished"]


# Row 6: redaction, and filters that see only redacted values --------------------------------------


async def test_row6_a_trace_filter_cannot_probe_a_credential(nursery, gateway):
    reader = await watch(nursery, gateway,
                         'request.headers["authorization"].startsWith("Bearer s") || request.path == "/second"')
    async with gateway.client() as client:
        await client.get("/first", headers={"authorization": "Bearer secret"})
        await client.get("/second", headers={"authorization": "Bearer secret"})
    events = await reader.events()
    first = events[1]["message"]["requestState"]["request"]
    assert first["path"] == "/second"  # the probe never matched the real value
    assert first["headers"]["authorization"] == "<redacted>"


async def test_row6_a_filter_sees_the_redacted_value(nursery, gateway):
    reader = await watch(nursery, gateway, 'request.headers["x-auth-token"] == "<redacted>"')
    async with gateway.client() as client:
        await client.get("/plain")
        await client.get("/with-token", headers={"x-auth-token": "s3cret"})
    events = await reader.events()
    assert events[1]["message"]["requestState"]["request"]["path"] == "/with-token"


async def test_row6_credential_headers_and_query_parameters_are_redacted(nursery, gateway):
    reader = await watch(nursery, gateway)
    async with gateway.client() as client:
        response = await client.get(
            "/?access_token=s3cret1&api_key=s3cret2&key=s3cret3&token=s3cret4&q=visible",
            headers={"x-auth-token": "s3cret5", "proxy-authorization": "Basic s3cret6", "cookie": "s=s3cret7"})
    assert response.status_code == 200
    events = await reader.events()
    text = json.dumps([e for e in events if e["message"]["type"] != "bodySnapshot"])
    assert not any(f"s3cret{i}" in text for i in range(1, 8)), text
    assert "q=visible" in text
    snapshot = events[1]["message"]["requestState"]["request"]
    assert snapshot["uri"] == ("/?access_token=<redacted>&api_key=<redacted>&key=<redacted>&token=<redacted>"
                               "&q=visible")
    # The backend still gets the real values: redaction is for traces only.
    body = next(e for e in events if e["message"]["type"] == "bodySnapshot")
    echoed = json.loads(base64.b64decode(body["message"]["body"]))
    assert "s3cret1" in json.dumps(echoed)
