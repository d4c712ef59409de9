"""Sends ``requestMirror`` copies (policies/mirror.py) from the root nursery, as tasks of
``Runtime.mirrors.run``: a copy never delays or fails the original and outlives it."""

from __future__ import annotations

import logging
from contextlib import aclosing

import trio

from ..asgi import Header
from ..config.model import Address
from ..errors import ProxyError
from ..policies.mirror import mirror_headers
from ..upstream.pool import UpstreamPool

__all__ = ["MirrorSender"]

log = logging.getLogger("trioproxy.mirror")


class MirrorSender:
    """Sends mirror copies from the root nursery; ``send`` never waits."""

    def __init__(self, pool: UpstreamPool, *, max_in_flight: int = 64, timeout: float = 10.0) -> None:
        self.pool = pool
        self.max_in_flight = max_in_flight
        self.timeout = timeout
        self.in_flight = 0
        self.sent = 0
        self.dropped = 0
        self.failed = 0
        self._nursery: trio.Nursery | None = None
        self._idle = trio.Event()
        self._idle.set()

    def send(self, target: Address, method: bytes, path: bytes, headers: list[Header], body: bytes) -> bool:
        """Start one copy; False (dropped) when not running or ``max_in_flight`` are under way."""
        if self._nursery is None or self.in_flight >= self.max_in_flight:
            self.dropped += 1
            return False
        self.in_flight += 1
        if self._idle.is_set():
            self._idle = trio.Event()
        self._nursery.start_soon(self._copy, target, method, path, mirror_headers(headers, body), body)
        return True

    async def _copy(self, target: Address, method: bytes, path: bytes, headers: list[Header], body: bytes) -> None:
        try:
            with trio.move_on_after(self.timeout) as scope:
                response = await self.pool.request(target, method, path, headers, body)
                async with aclosing(response.body()) as chunks:
                    async for _ in chunks:
                        pass
            if scope.cancelled_caught:
                self.failed += 1
                log.warning("mirror to %s: no answer within %gs", target, self.timeout)
            else:
                self.sent += 1
        except ProxyError as error:
            self.failed += 1
            log.warning("mirror to %s failed: %s", target, error.message)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()

    async def wait_idle(self) -> None:
        """Until no copy is under way (tests, and a drain that wants copies finished)."""
        await self._idle.wait()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the copies' nursery until cancelled (then copies under way are cancelled too)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
