"""Standard gRPC health checking (``grpc.health.v1.Health``) for ``trioproxy ratelimit-server``.

``Check`` answers the current status; ``Watch`` streams it: the current status at once, then each
change (SERVING while the server runs, NOT_SERVING from the moment it starts shutting down, after
which the stream ends with UNAVAILABLE). A service the server does not have is ``NOT_FOUND`` for
``Check`` and a ``SERVICE_UNKNOWN`` message for ``Watch``, whose stream stays open, as the protocol
says.

Watch streams are bounded (``--health-watchers``): one over the bound is refused with
``RESOURCE_EXHAUSTED``. On the Trio server a watcher is a small task, not a thread, but the bound
keeps a misbehaving client from holding an unbounded number of streams.

No transport in here: ``server.py`` maps the methods onto ``wire_server``'s calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
from grpc_health.v1 import health_pb2  # type: ignore[import-untyped]  # the official messages (no grpcio import)

from .wire_server import RESOURCE_EXHAUSTED, UNAVAILABLE, GrpcError

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class Health:
    def __init__(self, services: tuple[str, ...], max_watchers: int) -> None:
        self.services = ("", *services)  # "": the server as a whole
        self.max_watchers = max_watchers
        self.watchers = 0
        self.stopping = False
        self._status: int = SERVING
        self._changed = trio.Event()

    @property
    def status(self) -> int:
        return self._status

    def set(self, status: int) -> None:
        self._status = status
        self._changed.set()
        self._changed = trio.Event()

    def stop(self) -> None:
        """Shutting down: watchers hear NOT_SERVING, then their streams end."""
        self.stopping = True
        self.set(NOT_SERVING)

    def check(self, service: str) -> int | None:
        """The status of ``service``; None when the server has no such service (NOT_FOUND)."""
        return self._status if service in self.services else None

    async def watch(self, service: str, send: Callable[[int], Awaitable[None]]) -> None:
        if self.watchers >= self.max_watchers:
            raise GrpcError(RESOURCE_EXHAUSTED, f"too many health watchers (--health-watchers {self.max_watchers})")
        self.watchers += 1
        try:
            known = service in self.services
            sent: int | None = None
            while True:
                changed = self._changed
                status = self._status if known else SERVICE_UNKNOWN
                if status != sent:
                    await send(status)
                    sent = status
                if self.stopping:
                    raise GrpcError(UNAVAILABLE, "the server is shutting down")
                await changed.wait()
        finally:
            self.watchers -= 1
