"""The trace machinery without a gateway: ``TraceHub`` bookkeeping, a ``Tracer``'s records
(times, severities, scope) and each watcher's memory budget (trioproxy/telemetry/trace.py).

tests/e2e/test_trace.py runs real traces end to end and tests/unit/telemetry/test_trace_state.py the snapshot
payloads; a mutation run found these counts and fields unguarded by both.
Virtual time: ``trio.current_time()`` stays put under ``MockClock`` unless a test sleeps.
"""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trioproxy.proxy.exchange import Exchange
from trioproxy.telemetry.trace import (
    DEFAULT_MAX_WATCHERS,
    DEFAULT_WATCHER_BUDGET,
    NULL_TRACER,
    BodyCapture,
    TooManyWatchers,
    TraceHub,
    Tracer,
    Watcher,
    activation,
    approximate_size,
)


@pytest.fixture
def clock() -> trio.testing.MockClock:
    return trio.testing.MockClock()


def tracer(budget: int = DEFAULT_WATCHER_BUDGET, arrival: float | None = None) -> tuple[Tracer, Watcher]:
    watcher = Watcher(None, 16, budget)
    return Tracer(watcher, trio.current_time() if arrival is None else arrival, 0), watcher


def test_approximate_size_is_about_the_json_length():
    assert approximate_size("ab") == 4  # "ab"
    assert approximate_size(3) == approximate_size(None) == 8
    assert approximate_size({"k": "ab"}) == 2 + 1 + 4 + 4
    assert approximate_size(["ab", 1]) == 2 + (4 + 1) + (8 + 1)
    assert approximate_size({"a": ["x", "yz"]}) == 2 + 1 + 4 + (2 + 4 + 5)


def test_the_hub_settings_come_from_the_arguments_then_the_environment(monkeypatch):
    monkeypatch.setenv("TRIOPROXY_TRACE_MAX_WATCHERS", "3")
    monkeypatch.setenv("TRIOPROXY_TRACE_WATCHER_BUDGET", "1000")
    monkeypatch.setenv("TRIOPROXY_TRACE_BODY_LIMIT", "10")
    hub = TraceHub()
    assert (hub.max_watchers, hub.watcher_budget, hub.body_limit, hub.open) == (3, 1000, 10, 0)
    hub = TraceHub(max_watchers=5, watcher_budget=50, body_limit=0)
    assert (hub.max_watchers, hub.watcher_budget, hub.body_limit) == (5, 50, 0)
    monkeypatch.setenv("TRIOPROXY_TRACE_MAX_WATCHERS", "many")
    assert TraceHub().max_watchers == DEFAULT_MAX_WATCHERS


def test_the_hub_counts_open_readers_and_refuses_past_the_limit():
    hub = TraceHub(max_watchers=3)
    first, second, _ = hub.watch(), hub.watch(), hub.watch()
    assert hub.open == 3
    with pytest.raises(TooManyWatchers, match=r"^too many trace watchers \(limit 3\)$"):
        hub.watch()
    hub.forget(first)
    hub.forget(first)  # a reader forgotten twice (request end, then disconnect) counts once
    assert hub.open == 2
    hub.watch()
    hub.forget(second)
    assert hub.open == 2


def test_a_request_goes_to_the_first_watcher_whose_filter_matches_and_is_counted():
    hub = TraceHub()
    picky = hub.watch(lambda context: False)
    anyone = hub.watch()
    got = hub.claim(0.0, lambda: {})
    assert got is not None and got.watcher is anyone
    assert hub.watchers == [picky]
    hub.watch()
    hub.claim(0.0, lambda: {})
    assert hub.traced == 2


async def test_event_times_are_microseconds_since_arrival(clock):
    now = trio.current_time()
    tr, watcher = tracer(arrival=now - 2.0)
    tr.event("later", start=now - 1.0, scope=["s"])
    tr.event("at arrival", start=now - 2.0)
    records = [watcher.receive.receive_nowait() for _ in range(2)]
    assert (records[0]["eventStart"], records[0]["eventEnd"], records[0]["scope"]) == (1_000_000, 2_000_000, ["s"])
    assert records[1]["eventStart"] == 0
    assert "scope" not in records[1]


async def test_the_first_event_at_arrival_ends_at_zero(clock):
    tr, watcher = tracer()
    tr.event("first")
    assert watcher.receive.receive_nowait()["eventEnd"] == 0


@pytest.mark.parametrize(("status", "error", "severity"), [
    (200, None, "success"), (399, None, "success"), (400, None, "warn"), (499, "x", "warn"),
    (500, None, "error"), (0, "upstream reset", "error"), (0, None, "success"),
])
async def test_request_finished_severity(clock, status, error, severity):
    tr, watcher = tracer()
    tr.finish(status, error)
    record = watcher.receive.receive_nowait()
    assert (record["severity"], record["message"]) == (severity, {"type": "requestFinished", "status": status,
                                                                  "error": error})


async def test_nothing_is_recorded_after_request_finished(clock):
    tr, watcher = tracer()
    tr.finish(200, None)
    tr.event("late")
    tr.finish(500, None)
    assert watcher.receive.receive_nowait()["message"]["type"] == "requestFinished"
    with pytest.raises(trio.EndOfChannel):
        watcher.receive.receive_nowait()
    assert tr.dropped == 0


async def test_a_response_snapshot_keeps_its_severity_and_the_response_headers(clock):
    tr, watcher = tracer()
    x = Exchange({"type": "http", "method": "GET", "path": "/", "headers": []}, None, None, 0.0)  # type: ignore[arg-type]
    tr.response_snapshot("response", x, 503, [(b"x-a", b"1")], severity="warn")
    record = watcher.receive.receive_nowait()
    assert record["severity"] == "warn"
    assert record["message"]["requestState"]["response"] == {"code": 503, "headers": {"x-a": "1"}}


async def test_the_budget_counts_queued_events_until_the_reader_has_written_them(clock):
    size = approximate_size({"eventStart": None, "eventEnd": 0, "severity": "info", "message": {"type": "e"}})
    tr, watcher = tracer(budget=2 * size)
    assert (watcher.queued_bytes, watcher.high_water) == (0, 0)
    tr.event("e")
    tr.event("e")
    assert (watcher.queued_bytes, watcher.high_water, tr.dropped) == (2 * size, 2 * size, 0)
    tr.event("e")  # exactly at the budget fitted; one more does not
    assert tr.dropped == 1
    await watcher.next_event()
    assert watcher.queued_bytes == 2 * size  # the first is being written out: still counted
    await watcher.next_event()
    assert watcher.queued_bytes == size
    tr.event("e")
    assert (watcher.queued_bytes, watcher.high_water) == (2 * size, 2 * size)


async def test_an_event_larger_than_the_whole_budget_is_dropped(clock):
    tr, watcher = tracer(budget=100)
    tr.event("big", text="x" * 200)
    assert (tr.dropped, watcher.queued_bytes) == (1, 0)


def test_the_null_tracer_is_falsy():
    assert not NULL_TRACER


def test_a_body_capture_fills_its_last_byte():
    capture = BodyCapture(3)
    capture.feed(b"ab")
    capture.feed(b"cd")
    assert (capture.parts, capture.truncated) == ([b"ab", b"c"], True)


def test_the_activation_defaults_scheme_and_version():
    x = Exchange({"type": "http", "method": "GET", "path": "/", "headers": [(b"host", b"h")]},  # type: ignore[arg-type]
                 None, None, 0.0)
    request = activation(x)["request"]
    assert (request["scheme"], request["version"]) == ("http", "HTTP/1.1")
