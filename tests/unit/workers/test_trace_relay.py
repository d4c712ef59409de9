"""``/debug/trace`` across workers, in one process: a supervisor's hub and two workers' hubs on one
shared watcher table, the control channel replaced by handing each claimed request's events over
by hand, so the order in which claims and events arrive is the test's to choose."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
import trio

from trioproxy.cel import compile_expression
from trioproxy.redaction import Redaction
from trioproxy.telemetry.trace import FOLLOW_PENDING, Tracer, Watcher
from trioproxy.workers.trace_relay import SupervisorTraceHub, TraceTable, WorkerTraceHub, forward_events


class Relay:
    """A supervisor hub and ``workers`` worker hubs sharing one table; claims wait in ``claims``
    until ``deliver`` hands their events to the supervisor."""

    def __init__(self, workers: int = 2) -> None:
        self.table = TraceTable.create()
        self.supervisor = SupervisorTraceHub(self.table)
        self.claims: list[tuple[int, int, int, Watcher]] = []  # (worker, watcher id, sequence, watcher)
        self.workers = [WorkerTraceHub(TraceTable(os.dup(self.table.fd)), self._forward(i)) for i in range(workers)]

    def _forward(self, worker: int) -> Any:
        def forward(watcher_id: int, sequence: int, watcher: Watcher) -> None:
            self.claims.append((worker, watcher_id, sequence, watcher))
        return forward

    def request(self, worker: int, path: str = "/", *, finish: bool = True) -> Tracer | None:
        """A request arriving at ``worker``: its tracer sends one event naming ``path``, then finishes."""
        tracer = self.workers[worker].claim(0.0, lambda: {"request": {"path": path}})
        if tracer is not None:
            tracer.event("requestSnapshot", path=path)
            if finish:
                tracer.finish(200, None)
        return tracer

    def deliver(self, claim: tuple[int, int, int, Watcher], *, end: bool = True) -> None:
        worker, watcher_id, sequence, watcher = claim
        while True:
            try:
                event = watcher.receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            self.supervisor.deliver(watcher_id, event, worker, sequence)
        if end:
            self.supervisor.finished(watcher_id, 0, sequence)

    def deliver_all(self) -> None:
        for claim in self.claims:
            self.deliver(claim)
        self.claims.clear()


async def _events(watcher: Watcher) -> list[dict[str, Any]]:
    """A watcher's events, read to the end of its stream."""
    events = []
    while True:
        try:
            events.append(await watcher.next_event())
        except trio.EndOfChannel:
            return events


async def _paths(follower: Any, count: int) -> list[str]:
    """The paths of the next ``count`` requests on a follower's stream, each read to its end."""
    paths = []
    for _ in range(count):
        watcher = await follower.next_request()
        events = await _events(watcher)
        assert events[-1]["message"]["type"] == "requestFinished" and watcher.dropped == 0
        paths.append(events[0]["message"]["path"])
        follower.done(watcher)
    return paths


async def test_a_follower_gets_every_request_of_a_burst_claimed_before_the_supervisor_hears_of_any():
    relay = Relay()
    follower = relay.supervisor.follow()
    sent = [f"/r{i}" for i in range(40)]
    for i, path in enumerate(sent):  # 40 requests claimed on two workers while no event has arrived
        assert relay.request(i % 2, path) is not None
    assert sorted(c[2] for c in relay.claims) == list(range(1, 41))  # one sequence number each
    relay.deliver_all()
    assert await _paths(follower, 40) == sent
    assert relay.supervisor.traced == 40 and sum(w.traced for w in relay.workers) == 40
    follower.close()
    assert relay.table.waiting() == [] and not relay.table.waiting_flag() and relay.supervisor.open == 0


async def test_claims_are_streamed_in_the_order_their_first_events_arrive():
    relay = Relay()
    follower = relay.supervisor.follow()
    relay.request(0, "/a")
    relay.request(1, "/b")
    first, second = relay.claims
    relay.deliver(second, end=False)
    relay.deliver(first)
    relay.supervisor.finished(second[1], 0, second[2])
    assert await _paths(follower, 2) == ["/b", "/a"]


async def test_a_watcher_waiting_behind_a_follower_gets_the_next_request():
    """As in one process: the claim that takes the follower's slot puts it behind the others."""
    relay = Relay()
    follower = relay.supervisor.follow()
    once = relay.supervisor.watch()
    follower_id, once_id = (w for w, _ in relay.table.waiting())
    relay.request(0, "/1")
    assert [w for w, _ in relay.table.waiting()] == [once_id, follower_id]
    relay.request(1, "/2")
    assert [w for w, _ in relay.table.waiting()] == [follower_id]
    relay.request(0, "/3")
    assert [(c[1], c[2]) for c in relay.claims] == [(follower_id, 1), (once_id, 0), (follower_id, 2)]
    relay.deliver_all()
    assert await _paths(follower, 2) == ["/1", "/3"]
    events = [await once.next_event(), await once.next_event()]
    assert events[0]["message"]["path"] == "/2" and events[1]["message"]["type"] == "requestFinished"
    relay.supervisor.forget(once)
    follower.close()
    assert relay.supervisor.open == 0 and not relay.table.waiting_flag()


async def test_a_watcher_waiting_before_a_follower_gets_the_first_request():
    relay = Relay()
    once = relay.supervisor.watch()
    follower = relay.supervisor.follow()
    relay.request(0, "/1")
    relay.request(1, "/2")
    relay.deliver_all()
    assert (await once.next_event())["message"]["path"] == "/1"
    assert await _paths(follower, 1) == ["/2"]
    assert relay.supervisor.traced == 2
    relay.supervisor.forget(once)
    follower.close()


async def test_a_replay_watcher_comes_before_a_follower():
    relay = Relay()
    follower = relay.supervisor.follow()
    replay = relay.supervisor.watch(first=True)
    relay.request(1, "/replayed")
    assert relay.claims[0][2] == 0 and relay.supervisor._by_id[relay.claims[0][1]] is replay
    relay.supervisor.forget(replay)
    follower.close()


async def test_a_follower_filters_in_the_worker():
    relay = Relay()
    follower = relay.supervisor.follow(compile_expression('request.path.startsWith("/v1")').matches)
    assert relay.request(0, "/other") is None
    assert relay.request(1, "/v1/x") is not None
    relay.deliver_all()
    assert await _paths(follower, 1) == ["/v1/x"]
    follower.close()


async def test_a_reader_far_behind_withdraws_the_slot_until_it_catches_up():
    relay = Relay(workers=1)
    follower = relay.supervisor.follow()
    for i in range(FOLLOW_PENDING + 3):  # three claimed before the supervisor sees the reader is full
        relay.request(0, f"/r{i}")
    relay.deliver_all()
    assert follower.pending == FOLLOW_PENDING and relay.supervisor.traced == FOLLOW_PENDING
    assert not relay.table.waiting_flag() and relay.request(0, "/missed") is None
    assert await _paths(follower, 1) == ["/r0"]  # room again: offered again, under a new id
    assert relay.request(0, "/again") is not None
    relay.deliver_all()
    assert (await _paths(follower, FOLLOW_PENDING))[-1] == "/again"
    follower.close()
    assert relay.supervisor._followers == {} and relay.supervisor._relayed == {}


async def test_events_of_a_request_claimed_for_a_reader_that_left_are_ignored():
    relay = Relay()
    follower = relay.supervisor.follow()
    relay.request(0, "/late")
    follower.close()
    assert not relay.table.waiting_flag() and relay.request(1, "/after") is None
    relay.deliver_all()
    assert relay.supervisor.traced == 0 and relay.supervisor._relayed == {} and relay.supervisor._claimed_by == {}


async def test_a_followed_request_whose_worker_exits_ends_its_stream():
    relay = Relay()
    follower = relay.supervisor.follow()
    relay.request(0, "/dies", finish=False)  # its worker exits before the request ends
    relay.request(1, "/lives")
    dies, lives = relay.claims
    relay.deliver(dies, end=False)
    relay.deliver(lives, end=False)
    relay.supervisor.worker_gone(0)
    watcher = await follower.next_request()
    events = await _events(watcher)
    assert [e["message"]["type"] for e in events] == ["requestSnapshot"]  # ended, without requestFinished
    assert watcher.dropped == 0
    follower.done(watcher)
    assert list(relay.supervisor._relayed) == [(lives[1], lives[2])]  # the other worker's goes on
    relay.supervisor.finished(lives[1], 0, lives[2])
    assert await _paths(follower, 1) == ["/lives"]
    follower.close()


async def test_a_follower_claimed_delivered_and_claimed_again_stays_offered():
    relay = Relay()
    follower = relay.supervisor.follow()
    for i in range(3):  # each claim's events reach the supervisor before the next request comes
        assert relay.request(i % 2, f"/r{i}") is not None
        relay.deliver_all()
    assert await _paths(follower, 3) == ["/r0", "/r1", "/r2"]
    assert relay.supervisor.open == 1  # the follower's one place, whatever its requests did
    follower.close()


async def test_a_one_shot_watcher_is_claimed_once_and_its_slot_goes_to_one_waiting_for_it():
    relay = Relay(workers=1)
    relay.supervisor.max_watchers = 32  # TRIOPROXY_TRACE_MAX_WATCHERS may pass the table's 16 slots
    watchers = [relay.supervisor.watch() for _ in range(17)]  # one more than the table's slots
    assert len(relay.table.waiting()) == 16
    relay.supervisor.forget(watchers[16])  # withdrawn while it waited for a slot
    late = relay.supervisor.watch()
    relay.request(0, "/a")
    assert len(relay.table.waiting()) == 15  # the claim freed a slot; the supervisor hears of it later
    relay.deliver_all()
    assert relay.supervisor.traced == 1 and [w for w, _ in relay.table.waiting()][-1] == relay.supervisor._ids[id(late)]
    assert (await watchers[0].next_event())["message"]["path"] == "/a"
    assert (await watchers[0].next_event())["message"]["type"] == "requestFinished"
    with pytest.raises(trio.EndOfChannel):  # the stream ends with its request
        await watchers[0].next_event()
    assert watchers[0].dropped == 0
    for watcher in watchers[:16] + [late]:
        relay.supervisor.forget(watcher)
    assert relay.supervisor.open == 0 and relay.table.waiting() == [] and not relay.table.waiting_flag()
    assert relay.supervisor._expressions == {} and relay.supervisor._by_id == {} and relay.supervisor._ids == {}


async def test_a_replay_watcher_waiting_for_a_slot_is_published_before_the_others_waiting():
    relay = Relay(workers=1)
    relay.supervisor.max_watchers = 32
    watchers = [relay.supervisor.watch() for _ in range(18)]  # two wait for a slot
    replay = relay.supervisor.watch(first=True)
    relay.supervisor.forget(watchers[0])
    assert relay.table.waiting()[0][0] == relay.supervisor._ids[id(replay)]
    relay.request(0, "/replayed")
    assert relay.supervisor._by_id[relay.claims[0][1]] is replay


async def test_withdrawing_a_watcher_takes_its_slot_only():
    relay = Relay(workers=1)
    first, second, third = relay.supervisor.watch(), relay.supervisor.watch(), relay.supervisor.watch()
    first_id, _, third_id = (w for w, _ in relay.table.waiting())
    relay.supervisor.forget(second)
    assert [w for w, _ in relay.table.waiting()] == [first_id, third_id]
    relay.supervisor.forget(first)
    assert [w for w, _ in relay.table.waiting()] == [third_id]
    assert relay.table.waiting_flag() and relay.workers[0].watchers  # a worker's request still looks
    relay.request(0)
    assert not relay.table.waiting_flag() and not relay.workers[0].watchers
    relay.supervisor.forget(third)


async def test_a_slow_reader_loses_events_counted_but_never_the_last():
    relay = Relay(workers=1)
    relay.supervisor.buffer = 4
    drops: list[int] = []
    relay.supervisor.on_drop = lambda: drops.append(1)
    follower = relay.supervisor.follow()
    tracer = relay.request(0, "/big", finish=False)
    assert tracer is not None
    for i in range(9):
        tracer.event("bodySnapshot", stage=str(i))
    tracer.finish(200, None)
    relay.deliver_all()
    watcher = await follower.next_request()
    events = await _events(watcher)
    # the buffer holds 4: three events, and the slot kept for requestFinished
    assert [e["message"]["type"] for e in events] == ["requestSnapshot", "bodySnapshot", "bodySnapshot",
                                                      "requestFinished"]
    assert watcher.dropped == 7 and len(drops) == 7
    follower.done(watcher)
    follower.close()


async def test_events_of_a_request_whose_one_shot_reader_left_are_ignored():
    relay = Relay(workers=1)
    once = relay.supervisor.watch()
    tracer = relay.request(0, "/gone", finish=False)
    assert tracer is not None
    relay.deliver(relay.claims[0], end=False)
    relay.supervisor.forget(once)  # the reader left
    tracer.finish(200, None)
    relay.deliver(relay.claims[0])
    assert relay.supervisor._dropped == {} and relay.supervisor._claimed_by == {} and relay.supervisor._by_id == {}


async def test_events_of_a_followed_request_whose_reader_left_are_counted_as_dropped():
    relay = Relay(workers=1)
    drops: list[int] = []
    relay.supervisor.on_drop = lambda: drops.append(1)
    follower = relay.supervisor.follow()
    tracer = relay.request(0, "/gone", finish=False)
    assert tracer is not None
    relay.deliver(relay.claims[0], end=False)
    follower.close()  # the reader left, the request goes on
    tracer.finish(200, None)
    relay.deliver(relay.claims[0])
    assert len(drops) == 1 and relay.supervisor._relayed == {} and relay.supervisor._dropped == {}


async def test_a_worker_counts_the_events_its_forwarding_drops():
    relay = Relay(workers=1)
    relay.workers[0].buffer = 3
    relay.workers[0].redaction = Redaction(headers=frozenset({b"x-secret"}))
    drops: list[int] = []
    relay.workers[0].on_drop = lambda: drops.append(1)
    relay.supervisor.watch()
    tracer = relay.request(0, "/w", finish=False)
    assert tracer is not None and tracer.body_limit == relay.workers[0].body_limit
    assert tracer.redaction is relay.workers[0].redaction
    for i in range(5):
        tracer.event("bodySnapshot", stage=str(i))
    assert tracer.dropped == 4 and len(drops) == 4


async def test_a_worker_offers_a_request_to_the_first_watcher_whose_expression_matches():
    relay = Relay(workers=1)
    v1 = relay.supervisor.watch(compile_expression('request.path.startsWith("/v1")').matches)
    v2 = relay.supervisor.watch(compile_expression('request.path.startsWith("/v2")').matches)
    relay.request(0, "/v2/x")
    relay.request(0, "/v1/x")
    assert [relay.supervisor._by_id[c[1]] for c in relay.claims] == [v2, v1]
    relay.deliver_all()
    assert relay.supervisor.traced == 2
    for watcher in (v1, v2):
        relay.supervisor.forget(watcher)


def test_a_worker_never_matches_an_expression_it_cannot_compile():
    relay = Relay(workers=1)
    hub = relay.workers[0]
    assert hub._matcher(7, "request.path ==")({}) is False
    for watcher_id in range(2000):  # compiled expressions are cached, within a bound
        hub._matcher(watcher_id, "true")
    assert len(hub._compiled) <= 1025


async def test_forward_events_tags_each_event_and_the_end_with_the_claim():
    relay = Relay(workers=1)
    relay.supervisor.follow()
    relay.request(0, "/f")
    _, watcher_id, sequence, watcher = relay.claims[0]
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await forward_events(watcher_id, sequence, watcher, send)
    assert [(m["t"], m["w"], m["s"]) for m in sent] == [("trace", watcher_id, 1)] * 2 + [("trace_end", watcher_id, 1)]
    assert sent[0]["e"]["message"]["path"] == "/f" and sent[-1]["dropped"] == 0


def test_a_file_that_is_not_a_watcher_table_is_refused(tmp_path):
    path = tmp_path / "other"
    path.write_bytes(b"\0" * 4096)
    fd = os.open(path, os.O_RDWR)
    try:
        TraceTable(fd)
    except ValueError as error:
        assert str(error) == "trace relay: not a trioproxy watcher table"
    else:
        raise AssertionError("attached")
    finally:
        os.close(fd)


def test_the_table_lock_excludes_another_process():
    table = TraceTable.create()
    probe = ("import fcntl, sys\n"
             "try:\n    fcntl.lockf(int(sys.argv[1]), getattr(fcntl, sys.argv[2]) | fcntl.LOCK_NB, 1, 0)\n"
             "except BlockingIOError:\n    sys.exit(1)\n")

    def other_process_can_lock(kind: str) -> bool:
        return subprocess.run([sys.executable, "-c", probe, str(table.fd), kind], pass_fds=(table.fd,)).returncode == 0

    table._lock()
    assert not other_process_can_lock("LOCK_EX") and not other_process_can_lock("LOCK_SH")
    table._unlock()
    assert other_process_can_lock("LOCK_EX")
