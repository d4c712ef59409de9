"""``requestMirror``: copies of requests sent to another backend, whose answers are thrown away.

The stage only picks the request (``percentage``) and records the target in ``x.mirrors``; once
the request's upstream body is known the gateway hands each copy to ``MirrorSender``, which runs
it in the root nursery (a task of ``Runtime.mirrors.run``), so a copy never delays or fails the
original and outlives it. A copy carries the request's body only when it is buffered (an LLM
body, a retryable body) and is empty otherwise, as agentgateway's mirrors are. Bounded: at most
``max_in_flight`` copies at once (more are dropped and counted) and ``timeout`` seconds each.
"""

from __future__ import annotations

import logging
import random
from contextlib import aclosing
from typing import TYPE_CHECKING

import trio
from attrs import frozen

from ..asgi import Header
from ..errors import ProxyError
from .stage import SpecStage

if TYPE_CHECKING:
    from ..config.model import Address
    from ..exchange import Exchange
    from ..upstream import UpstreamPool

__all__ = ["MirrorSender", "MirrorSpec", "MirrorStage", "mirror_headers"]

log = logging.getLogger("trioproxy.mirror")


@frozen
class MirrorSpec:
    target: Address
    percentage: float  # 0.0 to 1.0


class MirrorStage(SpecStage[MirrorSpec]):
    kind = "requestMirror"
    __slots__ = ()

    async def request(self, x: Exchange) -> None:
        if self.spec.percentage >= 1.0 or random.random() < self.spec.percentage:
            x.mirrors = (*x.mirrors, self.spec.target)


def mirror_headers(headers: list[Header], body: bytes) -> list[Header]:
    """The upstream request's headers with the copy's own framing."""
    out = [h for h in headers if h[0] not in (b"content-length", b"transfer-encoding")]
    if body:
        out.append((b"content-length", str(len(body)).encode()))
    return out


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
