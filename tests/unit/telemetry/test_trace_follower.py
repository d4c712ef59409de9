"""``trace.Follower`` (``/debug/trace?follow=true``) on its own: one place among ``max_watchers``,
requests handed over in claim order with a watcher always armed, a bound on the requests waiting
behind a slow reader, and everything released when the reader leaves."""

from __future__ import annotations

import httpx
import pytest

from trioproxy.telemetry.trace import FOLLOW_PENDING, TooManyWatchers, TraceHub


def _claim(hub: TraceHub):
    return hub.claim(0.0, lambda: {})


async def test_every_claim_rearms_and_requests_come_out_in_claim_order():
    hub = TraceHub(max_watchers=2)
    follower = hub.follow()
    assert hub.open == 1 and hub.watchers == [follower]
    tracers = [_claim(hub) for _ in range(5)]
    assert all(t is not None for t in tracers)
    assert hub.watchers == [follower] and hub.open == 1  # still armed, still one place
    for tracer in tracers:
        tracer.finish(200, None)
    for tracer in tracers:
        assert await follower.next_request() is tracer.watcher
        follower.done(tracer.watcher)
    assert follower.pending == 0
    follower.close()
    assert hub.open == 0 and hub.watchers == []


async def test_pending_requests_are_bounded_and_room_rearms():
    hub = TraceHub()
    follower = hub.follow()
    tracers = [_claim(hub) for _ in range(FOLLOW_PENDING)]
    assert all(t is not None for t in tracers)
    assert _claim(hub) is None and hub.watchers == []  # a reader this far behind misses requests
    follower.done(await follower.next_request())
    assert _claim(hub) is not None  # room again: armed again
    follower.close()
    assert hub.open == 0 and hub.watchers == []


async def test_a_follower_takes_one_place_among_max_watchers():
    hub = TraceHub(max_watchers=1)
    follower = hub.follow()
    with pytest.raises(TooManyWatchers):
        hub.watch()
    with pytest.raises(TooManyWatchers):
        hub.follow()
    follower.close()
    follower.close()  # idempotent
    hub.forget(hub.watch())
    assert hub.open == 0


async def test_follow_other_than_true_or_false_is_400(gateway):
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(f"{gateway.admin_url}/debug/trace", params={"follow": "yes please"})
    assert response.status_code == 400
    assert response.text.startswith("invalid follow 'yes please'")


async def test_a_watcher_waiting_behind_a_follower_gets_the_next_request():
    """A claim puts the follower behind the others waiting: a one-shot reader is not starved."""
    hub = TraceHub()
    follower = hub.follow()
    once = hub.watch()
    first, second, third = (_claim(hub) for _ in range(3))
    assert first.watcher is not once and second.watcher is once and third.watcher is not once
    assert follower.pending == 2 and hub.watchers == [follower]
    hub.forget(once)
    follower.close()
    assert hub.open == 0 and hub.watchers == []
