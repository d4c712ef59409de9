"""``/debug/trace`` across workers, in one process: a supervisor's hub and two workers' hubs on one
shared watcher table, the control channel replaced by handing each claimed request's events over
by hand, so the order in which claims and events arrive is the test's to choose."""

from __future__ import annotations

import os
from typing import Any

import trio

from trioproxy.cel import compile_expression
from trioproxy.telemetry.trace import FOLLOW_PENDING, Tracer, Watcher
from trioproxy.workers.trace_relay import SupervisorTraceHub, TraceTable, WorkerTraceHub


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


async def _paths(follower: Any, count: int) -> list[str]:
    """The paths of the next ``count`` requests on a follower's stream, each read to its end."""
    paths = []
    for _ in range(count):
        watcher = await follower.next_request()
        events = []
        while True:
            try:
                events.append(await watcher.next_event())
            except trio.EndOfChannel:
                break
        assert events[-1]["message"]["type"] == "requestFinished"
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
    events = []
    while True:
        try:
            events.append(await watcher.next_event())
        except trio.EndOfChannel:
            break
    assert [e["message"]["type"] for e in events] == ["requestSnapshot"]  # ended, without requestFinished
    follower.done(watcher)
    assert list(relay.supervisor._relayed) == [(lives[1], lives[2])]  # the other worker's goes on
    relay.supervisor.finished(lives[1], 0, lives[2])
    assert await _paths(follower, 1) == ["/lives"]
    follower.close()
