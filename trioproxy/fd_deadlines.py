"""Deadlines on a task's wait for one socket, without a cancel scope per wait.

Two waits of every proxied request have a time limit: the client's keep-alive connection waiting
for its next request head (``http1IdleTimeout``, ``requestHeaderTimeout``) and the backend's
answer (``responseHeaderTimeout``, ``backendRequestTimeout``). A Trio ``CancelScope`` with a
deadline costs 4-5 us to enter and leave (its deadline bookkeeping runs through generator context
managers), a timer here ~0.5 us (``python -m bench.trio_costs``); the three scopes a request entered
were an eighth of its instructions (``bench/llm_callgrind.py``, bench/README.md "Session 42"). Both waits are a wait for one descriptor to become readable,
and what their deadline must do is end that wait: ``trio.lowlevel.notify_closing`` does exactly
that, the waiting task gets ``trio.ClosedResourceError``.

So a ``Timer`` is armed for a descriptor and a deadline, and disarmed when the wait is over: a
heap push and a flag. One Trio system task per ``FdDeadlines`` sleeps until the earliest armed
deadline; when it passes, the timer is marked ``fired`` and ``notify_closing`` wakes the
descriptor's waiter, which tells a timeout from a closed connection by ``timer.fired``.

The callers' rules:

* only the task that armed a timer waits on its descriptor while it is armed;
* it disarms the timer before the descriptor is closed or given to anyone else (a ``finally``):
  descriptor numbers are reused;
* a fired timer's descriptor is no longer registered with Trio: the next wait on it registers it
  again (one ``epoll_ctl``), and a wait that had just ended sees nothing (a request that arrived
  as the time ran out is served).

A disarmed timer stays in the heap until it reaches the top or disarmed timers outnumber the
armed ones by a thousand (the heap is rebuilt then, as Trio's own deadline heap is).
"""

from __future__ import annotations

import heapq
import itertools
import math

import trio

__all__ = ["FdDeadlines", "Timer"]


class Timer:
    """One armed deadline on a descriptor's wait."""

    __slots__ = ("armed", "fd", "fired")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.armed = True
        self.fired = False  # the deadline passed while armed: the waiter was woken


class FdDeadlines:
    """The armed timers of one Trio run and the system task that fires them (started by the first
    ``arm``; it ends with the run)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._order = itertools.count()  # ties broken by arming order, never by comparing timers
        self._armed = 0
        self._sleep: trio.CancelScope | None = None  # the reaper's sleep, until ``_wake_at``
        self._wake_at = math.inf
        self._run: object = None

    def __len__(self) -> int:
        """Timers armed now."""
        return self._armed

    def arm(self, fd: int, deadline: float) -> Timer:
        """Wake ``fd``'s waiter with ``ClosedResourceError`` at ``deadline`` unless disarmed first."""
        timer = Timer(fd)
        self._armed += 1
        heap = self._heap
        heapq.heappush(heap, (deadline, next(self._order), timer))
        if deadline < self._wake_at:  # earlier than the reaper sleeps (or it is not running)
            self._wake_earlier(deadline)
        if len(heap) > 2 * self._armed + 1000:
            self._prune()
        return timer

    def disarm(self, timer: Timer) -> None:
        if timer.armed:
            timer.armed = False
            self._armed -= 1

    def fire(self, timer: Timer) -> None:
        """Fire ``timer`` now (a server shutting down ends its idle waits)."""
        if timer.armed:
            self.disarm(timer)
            timer.fired = True
            trio.lowlevel.notify_closing(timer.fd)

    def _wake_earlier(self, deadline: float) -> None:
        run = trio.lowlevel.current_trio_token()
        if self._run is not run:  # the first timer of this run: start its reaper
            self._run = run
            self._sleep = None
            trio.lowlevel.spawn_system_task(self._reap, name="trioproxy fd deadlines")
        self._wake_at = deadline
        if self._sleep is not None:
            self._sleep.deadline = deadline

    def _prune(self) -> None:
        heap = self._heap = [entry for entry in self._heap if entry[2].armed]
        heapq.heapify(heap)

    async def _reap(self) -> None:
        try:
            while True:
                heap = self._heap
                now = trio.current_time()
                while heap:
                    deadline, _, timer = heap[0]
                    if timer.armed and deadline > now:
                        break
                    heapq.heappop(heap)
                    self.fire(timer)
                self._wake_at = heap[0][0] if heap else math.inf
                with trio.CancelScope(deadline=self._wake_at) as self._sleep:
                    await trio.sleep_forever()
                self._sleep = None
        finally:  # the run ends: its descriptors are gone, and another run starts afresh
            for _, _, timer in self._heap:
                timer.armed = False
            self._heap, self._armed = [], 0
            self._sleep, self._wake_at, self._run = None, math.inf, None
