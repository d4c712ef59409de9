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
epoll descriptor through Trio and runs the callback of each descriptor that reported, once. Linux
only (``select.epoll``); elsewhere, and for servers without the extension, the gateway keeps its
watcher task.

A registration is one-shot (``EPOLLONESHOT``) and outlives the request: ``unwatch`` only forgets
the callback, and the next request of the same connection (``asgi.CLIENT_CONNECTION``) finds its
socket still registered and armed, so a keep-alive request costs two dict operations and no
``epoll_ctl``. Re-registered (one ``epoll_ctl``) are a connection's first request, a descriptor
number now used by another connection (closing a socket removes it from every epoll set), and a
registration that reported between two requests (one-shot: it is disarmed until re-armed, and
re-arming reports a peer that is already gone at once).
"""

from __future__ import annotations

import select
from collections.abc import Callable

import trio

__all__ = ["DisconnectMonitor", "available"]

_EVENTS = getattr(select, "EPOLLRDHUP", 0) | getattr(select, "EPOLLHUP", 0) | getattr(select, "EPOLLERR", 0) | \
    getattr(select, "EPOLLONESHOT", 0)


def available() -> bool:
    return hasattr(select, "epoll")


class DisconnectMonitor:
    """Descriptors being watched and what to call when their peer goes. The epoll descriptor is
    opened, and the task waiting on it started (a Trio system task), by the first ``watch`` of a
    Trio run, and both end with the run."""

    def __init__(self) -> None:
        self._epoll: select.epoll | None = None
        self._callbacks: dict[int, Callable[[], None]] = {}
        #: descriptor -> the connection whose armed registration it holds (see the module docstring)
        self._armed: dict[int, object] = {}
        self._run: object = None  # the Trio run whose system task waits on the epoll descriptor

    def watch(self, fd: int, gone: Callable[[], None], connection: object = None) -> bool:
        """Call ``gone()`` (once) if the peer of ``fd`` closes or resets before ``unwatch(fd)``.
        ``connection``: what names the connection on ``fd`` (``asgi.CLIENT_CONNECTION``), so that
        its next request keeps the registration; None re-arms every time. False when ``fd`` is
        watched already (one request at a time per connection): the caller watches some other way."""
        if fd in self._callbacks:
            return False
        epoll = self._epoll
        if epoll is None or (connection is None or self._armed.get(fd) != connection):
            if epoll is None:
                epoll = self._epoll = select.epoll()
            run = trio.lowlevel.current_trio_token()
            if self._run is not run:
                self._run = run
                trio.lowlevel.spawn_system_task(self._wait, epoll, name="trioproxy disconnect monitor")
            try:
                epoll.register(fd, _EVENTS)
            except FileExistsError:  # registered, and disarmed or armed for a request before
                epoll.modify(fd, _EVENTS)
            if connection is not None:
                self._armed[fd] = connection
        self._callbacks[fd] = gone
        return True

    def unwatch(self, fd: int) -> None:
        """Stop watching ``fd`` (nothing to do if it reported already). Its registration stays,
        armed, for the connection's next request (the module docstring)."""
        self._callbacks.pop(fd, None)

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
                    self._armed.pop(fd, None)  # one-shot: disarmed until the next watch re-arms it
                    gone = callbacks.pop(fd, None)
                    if gone is not None:
                        gone()
        finally:
            if self._epoll is epoll:
                self._epoll = self._run = None
                callbacks.clear()
                self._armed.clear()
            epoll.close()
