"""Standard gRPC health checking (``grpc.health.v1.Health``) for ``trioproxy ratelimit-server``.

``Check`` answers the current status; ``Watch`` streams it: the current status at once, then each
change (SERVING while the server runs, NOT_SERVING from the moment it starts shutting down). A
service the server does not have is ``NOT_FOUND`` for ``Check`` and a ``SERVICE_UNKNOWN`` message
for ``Watch``, whose stream stays open, as the protocol says.

The server is grpcio's sync server, where a stream holds one worker thread for as long as it is
open; so ``Watch`` streams get their own allowance of threads (``--health-watchers``, added to the
pool) and one over it is refused with ``RESOURCE_EXHAUSTED``: watchers never take the threads
``ShouldRateLimit`` calls need.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc  # type: ignore[import-untyped]
from grpc_health.v1 import health_pb2  # type: ignore[import-untyped]  # the official messages

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class Health:
    def __init__(self, services: tuple[str, ...], max_watchers: int) -> None:
        self.services = ("", *services)  # "": the server as a whole
        self.max_watchers = max_watchers
        self.watchers = 0
        self._status: int = SERVING
        self._changed = threading.Condition()

    @property
    def status(self) -> int:
        return self._status

    def set(self, status: int) -> None:
        with self._changed:
            self._status = status
            self._changed.notify_all()

    def check(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.service not in self.services:
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        return health_pb2.HealthCheckResponse(status=self._status)

    def watch(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        with self._changed:
            if self.watchers >= self.max_watchers:
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                              f"too many health watchers (--health-watchers {self.max_watchers})")
            self.watchers += 1
        try:
            yield from self._statuses(request.service in self.services, context)
        finally:
            with self._changed:
                self.watchers -= 1

    def _statuses(self, known: bool, context: grpc.ServicerContext) -> Iterator[Any]:
        def wake() -> None:
            with self._changed:
                self._changed.notify_all()

        context.add_callback(wake)  # the client went away or the server stops: end the stream
        sent: int | None = None
        while context.is_active():
            with self._changed:
                status = self._status if known else SERVICE_UNKNOWN
                if status == sent:
                    self._changed.wait(1.0)  # bounded: a wake-up between is_active() and here
                    continue
            sent = status
            yield health_pb2.HealthCheckResponse(status=status)
