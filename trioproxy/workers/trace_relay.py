"""``/debug/trace`` across workers: the supervisor's watchers, claimed by requests of any worker.

The supervisor publishes each waiting watcher (its id and CEL expression) in a small shared
table, and keeps a one-byte "someone waits" flag in front of it. A worker's request reads that
byte (``WorkerTraceHub.watchers`` is a list whose truthiness is the flag) — no round trip while
nobody traces. When it is set, the worker evaluates the expressions itself and claims a watcher
under an exclusive ``fcntl.lockf`` on the table: a slot still waiting with the same id is taken
and emptied in one locked step, so exactly one request of all workers wins it. The claimed
request's events go to the supervisor over the worker's control channel, tagged with the id;
the supervisor feeds them to the watcher's stream as if the request had been its own.
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

_MAGIC = b"TPTRACE1"
_FLAG_AT = 8  # 1 while some slot waits
_HEADER = 64
_SLOT_HEAD = struct.Struct("<B3xiq")  # state, expression length, watcher id
_EXPRESSION_BYTES = 4 * 8192  # cel.MAX_EXPRESSION_LENGTH characters of UTF-8
_SLOT_SIZE = _SLOT_HEAD.size + _EXPRESSION_BYTES
SLOTS = 16  # watchers published at once; more wait in the supervisor until a slot frees
_FREE, _WAITING = 0, 1


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
        waiting = any(mm[_HEADER + i * _SLOT_SIZE] == _WAITING for i in range(SLOTS))
        mm[_FLAG_AT] = 1 if waiting else 0

    def publish(self, watcher_id: int, expression: str) -> bool:
        """Offer a watcher to the workers; False when every slot is taken."""
        data = expression.encode()
        self._lock()
        try:
            for i in range(SLOTS):
                offset = _HEADER + i * _SLOT_SIZE
                if self.mm[offset] == _FREE:
                    self.mm[offset + _SLOT_HEAD.size:offset + _SLOT_HEAD.size + len(data)] = data
                    _SLOT_HEAD.pack_into(self.mm, offset, _WAITING, len(data), watcher_id)
                    self.mm[_FLAG_AT] = 1
                    return True
            return False
        finally:
            self._unlock()

    def take(self, watcher_id: int) -> bool:
        """Claim (workers) or withdraw (supervisor) a watcher: True for the one caller that found it waiting."""
        self._lock()
        try:
            for i in range(SLOTS):
                offset = _HEADER + i * _SLOT_SIZE
                state, _, found = _SLOT_HEAD.unpack_from(self.mm, offset)
                if state == _WAITING and found == watcher_id:
                    self.mm[offset] = _FREE
                    self._update_flag()
                    return True
            return False
        finally:
            self._unlock()

    def waiting(self) -> list[tuple[int, str]]:
        """(watcher id, expression) of every waiting watcher, oldest first."""
        found = []
        self._lock()
        try:
            for i in range(SLOTS):
                offset = _HEADER + i * _SLOT_SIZE
                state, length, watcher_id = _SLOT_HEAD.unpack_from(self.mm, offset)
                if state == _WAITING:
                    start = offset + _SLOT_HEAD.size
                    found.append((watcher_id, self.mm[start:start + length].decode()))
        finally:
            self._unlock()
        return sorted(found)


class _SharedFlag(list[Watcher]):
    """``TraceHub.watchers`` of a worker: the gateway's ``if runtime.trace.watchers`` reads one shared byte."""

    def __init__(self, table: TraceTable) -> None:
        super().__init__()
        self._mm = table.mm

    def __bool__(self) -> bool:
        return self._mm[_FLAG_AT] != 0


class WorkerTraceHub(TraceHub):
    """A worker's hub: claims the supervisor's watchers and forwards the events of the one it wins."""

    def __init__(self, table: TraceTable, forward: Callable[[int, Watcher], None],
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
            if self.table.take(watcher_id):
                watcher = Watcher(None, self.buffer)
                self._forward(watcher_id, watcher)
                self.traced += 1
                self._on_claim()
                return Tracer(watcher, arrival, self.body_limit, self.redaction)
        return None


async def forward_events(watcher_id: int, watcher: Watcher, send: Callable[[dict[str, Any]], Any]) -> None:
    """Worker side: a claimed watcher's events to the supervisor, then its end (with the drop count)."""
    async with watcher.receive:
        async for event in watcher.receive:
            await send({"t": "trace", "w": watcher_id, "e": event})
    await send({"t": "trace_end", "w": watcher_id, "dropped": watcher.dropped})


class SupervisorTraceHub(TraceHub):
    """The supervisor's hub: ``/debug/trace`` watchers are published to the workers, whose events come back."""

    def __init__(self, table: TraceTable) -> None:
        super().__init__()
        self.table = table
        self._next_id = 1
        self._ids: dict[int, int] = {}  # id(watcher) -> watcher id
        self._by_id: dict[int, Watcher] = {}
        self._expressions: dict[int, str] = {}
        self._unpublished: list[int] = []  # waiting for a free slot, oldest first
        self._dropped: dict[int, int] = {}
        self._claimed_by: dict[int, int] = {}  # watcher id -> index of the worker whose request it traces

    def watch(self, matches: Callable[[Mapping[str, Any]], bool] | None = None, *,
              follower: Follower | None = None, first: bool = False) -> Watcher:
        watcher = super().watch(matches, follower=follower, first=first)
        # workers offer a request to the waiting watchers by id, lowest first: ``first`` ones get a
        # negative id, so they come before every ordinary one
        watcher_id = -self._next_id if first else self._next_id
        self._next_id += 1
        self._ids[id(watcher)] = watcher_id
        self._by_id[watcher_id] = watcher
        # trace_stream compiles the expression; its source is what the workers compile again
        self._expressions[watcher_id] = getattr(getattr(matches, "__self__", None), "source", "") or ""
        if first:
            self._unpublished.insert(0, watcher_id)
        else:
            self._unpublished.append(watcher_id)
        self._publish_pending()
        return watcher

    def _publish_pending(self) -> None:
        while self._unpublished and self.table.publish(self._unpublished[0], self._expressions[self._unpublished[0]]):
            self._unpublished.pop(0)

    def forget(self, watcher: Watcher) -> None:
        watcher_id = self._ids.pop(id(watcher), None)
        if watcher_id is not None:
            if watcher_id in self._unpublished:
                self._unpublished.remove(watcher_id)
            else:
                self.table.take(watcher_id)  # still waiting: withdrawn; claimed: no-op
            self._by_id.pop(watcher_id, None)
            self._expressions.pop(watcher_id, None)
            self._dropped.pop(watcher_id, None)
            self._claimed_by.pop(watcher_id, None)
        super().forget(watcher)
        self._publish_pending()

    def claim(self, arrival: float, activation: Callable[[], Mapping[str, Any]]) -> Tracer | None:
        return None  # the supervisor serves no requests of the binds

    def deliver(self, watcher_id: int, event: dict[str, Any], worker: int = 0) -> None:
        """An event of the request ``worker`` claimed for ``watcher_id`` (dropped if its reader left)."""
        watcher = self._by_id.get(watcher_id)
        if watcher is None:
            return
        self._claimed_by[watcher_id] = worker
        if watcher in self.watchers:  # first event: claimed
            self.watchers.remove(watcher)
            self.traced += 1
            self._publish_pending()
            if watcher.on_claim is not None:
                watcher.on_claim(watcher)  # a follower arms (publishes) its next watcher
        stats = watcher.send.statistics()
        is_last = event.get("message", {}).get("type") == "requestFinished"
        if not is_last and stats.current_buffer_used >= stats.max_buffer_size - 1:
            self._dropped[watcher_id] = self._dropped.get(watcher_id, 0) + 1
            return
        try:
            watcher.send.send_nowait(event)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self._dropped[watcher_id] = self._dropped.get(watcher_id, 0) + 1

    def finished(self, watcher_id: int, dropped: int) -> None:
        self._claimed_by.pop(watcher_id, None)
        watcher = self._by_id.get(watcher_id)
        if watcher is not None:
            watcher.close(dropped + self._dropped.pop(watcher_id, 0))

    def worker_gone(self, worker: int) -> None:
        """End the streams of the requests a worker that exited had claimed (they will never finish)."""
        for watcher_id in [w for w, index in self._claimed_by.items() if index == worker]:
            self.finished(watcher_id, 0)
