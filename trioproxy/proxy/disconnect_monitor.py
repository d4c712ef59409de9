"""Client disconnects noticed without a task per request: one epoll set for the process.

Once a request's body is read, the gateway must learn at once that its client went away, so that
an abandoned request stops its upstream call (an LLM answer can take seconds). Through ASGI alone
that takes a task per request blocked in ``receive`` until the request ends and then cancelled:
~240k instructions per request (spawn, cancel, the unwinding; bench/llm_callgrind.py), about a
tenth of the gateway's whole cost per proxied request.

A server that hands the app its client socket's descriptor (the ``asgi.CLIENT_FD`` scope
extension) lets the gateway register it here instead: ``EPOLLRDHUP`` (the peer closed or
half-closed its side) and ``EPOLLHUP``/``EPOLLERR`` (reset) are reported; bytes the client sends
ahead (a pipelined request) are not, and stay unread in the kernel. One system task waits on the
epoll descriptor through Trio and runs the callback of each descriptor that reported, once. A
request costs two ``epoll_ctl`` calls and two dict operations. Linux only (``select.epoll``);
elsewhere, and for servers without the extension, the gateway keeps its watcher task.
"""

from __future__ import annotations

import select
from collections.abc import Callable

import trio

__all__ = ["DisconnectMonitor", "available"]

_EVENTS = getattr(select, "EPOLLRDHUP", 0) | getattr(select, "EPOLLHUP", 0) | getattr(select, "EPOLLERR", 0)


def available() -> bool:
    return hasattr(select, "epoll")


class DisconnectMonitor:
    """Descriptors being watched and what to call when their peer goes. The epoll descriptor is
    opened, and the task waiting on it started (a Trio system task), by the first ``watch`` of a
    Trio run, and both end with the run."""

    def __init__(self) -> None:
        self._epoll: select.epoll | None = None
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._run: object = None  # the Trio run whose system task waits on the epoll descriptor

    def watch(self, fd: int, gone: Callable[[], None]) -> bool:
        """Call ``gone()`` (once) if the peer of ``fd`` closes or resets before ``unwatch(fd)``.
        False when ``fd`` is watched already (one request at a time per connection): the caller
        watches some other way."""
        if fd in self._callbacks:
            return False
        epoll = self._epoll
        if epoll is None:
            epoll = self._epoll = select.epoll()
        run = trio.lowlevel.current_trio_token()
        if self._run is not run:
            self._run = run
            trio.lowlevel.spawn_system_task(self._wait, epoll, name="trioproxy disconnect monitor")
        epoll.register(fd, _EVENTS)
        self._callbacks[fd] = gone
        return True

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd`` (nothing to do if it reported already); before the server reads
        from, reuses or closes it."""
        if self._callbacks.pop(fd, None) is not None and self._epoll is not None:
            self._epoll.unregister(fd)

    @property
    def watching(self) -> int:
        return len(self._callbacks)

    async def _wait(self, epoll: select.epoll) -> None:
        """Runs until the Trio run ends (system tasks are cancelled then); the epoll descriptor
        goes with it."""
        callbacks = self._callbacks
        try:
            while True:
                await trio.lowlevel.wait_readable(epoll.fileno())
                for fd, _ in epoll.poll(0):
                    gone = callbacks.pop(fd, None)
                    if gone is not None:
                        epoll.unregister(fd)
                        gone()
        finally:
            if self._epoll is epoll:
                self._epoll = self._run = None
                callbacks.clear()
            epoll.close()
