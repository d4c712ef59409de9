"""``/debug/trace`` across workers: the supervisor's watchers, claimed by requests of any worker.

The supervisor publishes each waiting watcher (its id and CEL expression) in a small shared
table, and keeps a one-byte "someone waits" flag in front of it. A worker's request reads that
byte (``WorkerTraceHub.watchers`` is a list whose truthiness is the flag) — no round trip while
nobody traces. When it is set, the worker evaluates the expressions itself and claims a watcher
under an exclusive ``fcntl.lockf`` on the table: a slot still waiting with the same id is taken
and emptied in one locked step, so exactly one request of all workers wins it. The claimed
request's events go to the supervisor over the worker's control channel, tagged with the id;
the supervisor feeds them to the watcher's stream as if the request had been its own.

A follower (``/debug/trace?follow=true``) is one *standing* slot instead: a claim does not empty
it but counts it (the count is the claimed request's sequence number, sent with its events) and
moves it behind the other waiting slots, as a claim moves a follower behind the other watchers
in one process (``TraceHub.claim``: the same ``Follower``, whose ``offer`` this hub publishes).
The supervisor turns each new (follower, sequence) into one request of the follower's stream
(``Follower.accept``). So no request is missed while the claim travels to the supervisor, however
many arrive at once on however many workers; a one-shot watcher would have to be re-armed by the
supervisor after each claim, and the requests in between went untraced.
"""

from __future__ import annotations

import fcntl
import struct
from collections.abc import Callable, Mapping
from typing import Any

import trio

from ..cel import CelError, compile_expression
from ..telemetry.trace import Follower, TraceHub, Tracer, Watcher
from . import shared_memory

_MAGIC = b"TPTRACE2"
_FLAG_AT = 8  # 1 while some slot waits
_TURN = struct.Struct("<q")  # at 16: the last place in line given out (a slot's ``turn``)
_TURN_AT = 16
_HEADER = 64
_SLOT_HEAD = struct.Struct("<B3xiqqq")  # state, expression length, watcher id, turn, claims
_EXPRESSION_BYTES = 4 * 8192  # cel.MAX_EXPRESSION_LENGTH characters of UTF-8
_SLOT_SIZE = _SLOT_HEAD.size + _EXPRESSION_BYTES
SLOTS = 16  # watchers published at once; more wait in the supervisor until a slot frees
_FREE, _WAITING, _FOLLOWING = 0, 1, 2


class TraceTable:
    """The shared watcher slots (created by the supervisor, attached by workers from an inherited fd)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.mm = shared_memory.attach(fd, _MAGIC, "trace relay: not a trioproxy watcher table")

    @classmethod
    def create(cls) -> TraceTable:
        return cls(shared_memory.create("trioproxy-trace-", _HEADER + SLOTS * _SLOT_SIZE, _MAGIC))

    def waiting_flag(self) -> bool:
        return self.mm[_FLAG_AT] != 0

    def _lock(self) -> None:
        fcntl.lockf(self.fd, fcntl.LOCK_EX, 1, 0)

    def _unlock(self) -> None:
        fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, 0)

    def _update_flag(self) -> None:
        mm = self.mm
        waiting = any(mm[_HEADER + i * _SLOT_SIZE] != _FREE for i in range(SLOTS))
        mm[_FLAG_AT] = 1 if waiting else 0

    def _next_turn(self) -> int:
        """A place behind every slot's (under the lock)."""
        turn: int = _TURN.unpack_from(self.mm, _TURN_AT)[0] + 1
        _TURN.pack_into(self.mm, _TURN_AT, turn)
        return turn

    def publish(self, watcher_id: int, expression: str, *, following: bool, first: bool) -> bool:
        """Offer a watcher to the workers (``following``: a standing slot, see the module's
        docstring; ``first``: ahead of every slot); False when every slot is taken."""
        data = expression.encode()
        self._lock()
        try:
            for i in range(SLOTS):
                offset = _HEADER + i * _SLOT_SIZE
                if self.mm[offset] == _FREE:
                    self.mm[offset + _SLOT_HEAD.size:offset + _SLOT_HEAD.size + len(data)] = data
                    turn = -self._next_turn() if first else self._next_turn()
                    _SLOT_HEAD.pack_into(self.mm, offset, _FOLLOWING if following else _WAITING, len(data),
                                         watcher_id, turn, 0)
                    self.mm[_FLAG_AT] = 1
                    return True
            return False
        finally:
            self._unlock()

    def take(self, watcher_id: int) -> int | None:
        """Claim a watcher: None when it no longer waits (another request won it, or it was
        withdrawn); for a one-shot slot 0, and the slot is emptied; for a following slot the
        claimed request's sequence number (1, 2, ...), and the slot goes to the back of the line."""
        self._lock()
        try:
            for i in range(SLOTS):
                offset = _HEADER + i * _SLOT_SIZE
                state, length, found, _, claims = _SLOT_HEAD.unpack_from(self.mm, offset)
                if found == watcher_id and state == _WAITING:
                    self.mm[offset] = _FREE
                    self._update_flag()
                    return 0
                if found == watcher_id and state == _FOLLOWING:
                    sequence: int = claims + 1
                    _SLOT_HEAD.pack_into(self.mm, offset, state, length, found, self._next_turn(), sequence)
                    return sequence
            return None
        finally:
            self._unlock()

    def withdraw(self, watcher_id: int) -> None:
        """The supervisor takes a slot back (its reader left; a claimed one-shot is gone already)."""
        self._lock()
        try:
            for i in range(SLOTS):
                offset = _HEADER + i * _SLOT_SIZE
                state, _, found, _, _ = _SLOT_HEAD.unpack_from(self.mm, offset)
                if state != _FREE and found == watcher_id:
                    self.mm[offset] = _FREE
                    self._update_flag()
                    return
        finally:
            self._unlock()

    def waiting(self) -> list[tuple[int, str]]:
        """(watcher id, expression) of every waiting watcher, in the order they take requests."""
        found = []
        self._lock()
        try:
            for i in range(SLOTS):
                offset = _HEADER + i * _SLOT_SIZE
                state, length, watcher_id, turn, _ = _SLOT_HEAD.unpack_from(self.mm, offset)
                if state != _FREE:
                    start = offset + _SLOT_HEAD.size
                    found.append((turn, watcher_id, self.mm[start:start + length].decode()))
        finally:
            self._unlock()
        return [(watcher_id, expression) for _, watcher_id, expression in sorted(found)]


class _SharedFlag(list[Watcher | Follower]):
    """``TraceHub.watchers`` of a worker: the gateway's ``if runtime.trace.watchers`` reads one shared byte."""

    def __init__(self, table: TraceTable) -> None:
        super().__init__()
        self._mm = table.mm

    def __bool__(self) -> bool:
        return self._mm[_FLAG_AT] != 0


class WorkerTraceHub(TraceHub):
    """A worker's hub: claims the supervisor's watchers and forwards the events of the one it wins."""

    def __init__(self, table: TraceTable, forward: Callable[[int, int, Watcher], None],
                 on_claim: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self._on_claim = on_claim  # trioproxy_trace_claims_total: summed, it proves one claim per watcher
        self.table = table
        self.watchers = _SharedFlag(table)
        self._forward = forward  # starts the task that sends a claimed watcher's events to the supervisor
        self._compiled: dict[int, Callable[[Mapping[str, Any]], bool] | None] = {}

    def _matcher(self, watcher_id: int, expression: str) -> Callable[[Mapping[str, Any]], bool] | None:
        if watcher_id not in self._compiled:
            if len(self._compiled) > 1024:
                self._compiled.clear()
            try:
                self._compiled[watcher_id] = compile_expression(expression).matches
            except CelError:  # the supervisor compiled it already; never expected
                self._compiled[watcher_id] = lambda _context: False
        return self._compiled[watcher_id]

    def claim(self, arrival: float, activation: Callable[[], Mapping[str, Any]]) -> Tracer | None:
        context = None
        for watcher_id, expression in self.table.waiting():
            if expression:
                matches = self._matcher(watcher_id, expression)
                if matches is not None:
                    if context is None:
                        context = self.redaction.activation(activation())  # a filter must not probe secrets
                    if not matches(context):
                        continue
            sequence = self.table.take(watcher_id)
            if sequence is not None:
                # the budget and the drop count as in one process (trioproxy_trace_events_dropped)
                watcher = Watcher(None, self.buffer, self.watcher_budget, lambda: self.on_drop())
                self._forward(watcher_id, sequence, watcher)
                self.traced += 1
                self._on_claim()
                return Tracer(watcher, arrival, self.body_limit, self.redaction)
        return None


async def forward_events(watcher_id: int, sequence: int, watcher: Watcher,
                         send: Callable[[dict[str, Any]], Any]) -> None:
    """Worker side: a claimed watcher's events to the supervisor, then its end (with the drop count).
    ``sequence``: the request's number under a following slot (0 for a one-shot watcher)."""
    async with watcher.receive:
        async for event in watcher.receive:
            await send({"t": "trace", "w": watcher_id, "s": sequence, "e": event})
    await send({"t": "trace_end", "w": watcher_id, "s": sequence, "dropped": watcher.dropped})


Claim = tuple[int, int]  # (watcher id, sequence): one claimed request, as the supervisor tells them apart


class SupervisorTraceHub(TraceHub):
    """The supervisor's hub: ``/debug/trace`` watchers are published to the workers, whose events come back."""

    def __init__(self, table: TraceTable) -> None:
        super().__init__()
        self.table = table
        self._next_id = 1
        self._ids: dict[int, int] = {}  # id(watcher) -> watcher id, of the one-shot watchers
        self._by_id: dict[int, Watcher] = {}
        self._followers: dict[int, Follower] = {}  # following slot's watcher id -> its follower
        self._slot_of: dict[Follower, int] = {}  # a follower -> its following slot's id, while offered
        self._relayed: dict[Claim, Watcher | None] = {}  # a follower's claimed requests (None: not traced)
        self._expressions: dict[int, str] = {}
        self._unpublished: list[int] = []  # waiting for a free slot, oldest first
        self._dropped: dict[Claim, int] = {}
        self._claimed_by: dict[Claim, int] = {}  # claimed request -> index of the worker it runs in

    def _new_id(self, expression: Callable[[Mapping[str, Any]], bool] | None, first: bool) -> int:
        # ``first`` ones (``/api/replay``) get a negative id: published ahead of every waiting slot
        watcher_id = -self._next_id if first else self._next_id
        self._next_id += 1
        # trace_stream compiles the expression; its source is what the workers compile again
        self._expressions[watcher_id] = getattr(getattr(expression, "__self__", None), "source", "") or ""
        if first:
            self._unpublished.insert(0, watcher_id)
        else:
            self._unpublished.append(watcher_id)
        return watcher_id

    def watch(self, matches: Callable[[Mapping[str, Any]], bool] | None = None, *, first: bool = False) -> Watcher:
        watcher = super().watch(matches, first=first)
        watcher_id = self._new_id(matches, first)
        self._ids[id(watcher)] = watcher_id
        self._by_id[watcher_id] = watcher
        self._publish_pending()
        return watcher

    def offer(self, follower: Follower, waiting: bool) -> None:
        """A follower waits as a following slot in the table, published or withdrawn. A slot
        offered again gets a new id, so its sequence numbers never meet those of requests claimed
        before; its requests become the follower's watchers as their first events arrive."""
        if waiting and follower not in self._slot_of:
            slot = self._slot_of[follower] = self._new_id(follower.matches, first=False)
            self._followers[slot] = follower
            self._publish_pending()
        elif not waiting and follower in self._slot_of:
            self._withdraw(self._slot_of.pop(follower))
        if follower.closed:
            for watcher_id in [w for w, f in self._followers.items() if f is follower]:
                del self._followers[watcher_id]

    def _withdraw(self, watcher_id: int) -> None:
        if watcher_id in self._unpublished:
            self._unpublished.remove(watcher_id)
        else:
            self.table.withdraw(watcher_id)
        del self._expressions[watcher_id]
        self._publish_pending()

    def _publish_pending(self) -> None:
        while self._unpublished:
            watcher_id = self._unpublished[0]
            if not self.table.publish(watcher_id, self._expressions[watcher_id],
                                      following=watcher_id in self._followers, first=watcher_id < 0):
                return
            self._unpublished.pop(0)

    def forget(self, watcher: Watcher) -> None:
        watcher_id = self._ids.pop(id(watcher), None)
        if watcher_id is not None:  # events still on their way are ignored (``_claimed``)
            self._withdraw(watcher_id)
            del self._by_id[watcher_id]
        super().forget(watcher)

    def claim(self, arrival: float, activation: Callable[[], Mapping[str, Any]]) -> Tracer | None:
        return None  # the supervisor serves no requests of the binds

    def _claimed(self, watcher_id: int, sequence: int) -> Watcher | None:
        """The watcher of a claimed request, on its first event: the one-shot watcher leaves the
        waiting ones; a follower queues a new watcher for it."""
        if sequence:
            key = (watcher_id, sequence)
            if key in self._relayed:
                return self._relayed[key]
            follower = self._followers.get(watcher_id)
            accepted = self._relayed[key] = follower.accept() if follower is not None else None
            if accepted is not None:
                self.traced += 1
            return accepted
        watcher = self._by_id.get(watcher_id)
        if watcher is not None and watcher in self.watchers:  # first event: claimed
            self.watchers.remove(watcher)
            self.traced += 1
            self._publish_pending()  # its slot is free
        return watcher

    def deliver(self, watcher_id: int, event: dict[str, Any], worker: int, sequence: int) -> None:
        """An event of the request ``worker`` claimed for ``watcher_id`` (dropped if its reader left)."""
        key = (watcher_id, sequence)
        self._claimed_by[key] = worker
        watcher = self._claimed(watcher_id, sequence)
        if watcher is None:
            return
        stats = watcher.send.statistics()
        is_last = event["message"]["type"] == "requestFinished"
        if is_last or stats.current_buffer_used < stats.max_buffer_size - 1:  # a slot kept for the last
            try:
                watcher.send.send_nowait(event)
                return
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # its reader left
        self._dropped[key] = self._dropped.get(key, 0) + 1
        self.on_drop()

    def finished(self, watcher_id: int, dropped: int, sequence: int) -> None:
        key = (watcher_id, sequence)
        self._claimed_by.pop(key, None)
        watcher = self._relayed.pop(key, None) if sequence else self._by_id.get(watcher_id)
        extra = self._dropped.pop(key, 0)
        if watcher is not None:
            watcher.close(dropped + extra)

    def worker_gone(self, worker: int) -> None:
        """End the streams of the requests a worker that exited had claimed (they will never finish)."""
        for watcher_id, sequence in [key for key, index in self._claimed_by.items() if index == worker]:
            self.finished(watcher_id, 0, sequence)
