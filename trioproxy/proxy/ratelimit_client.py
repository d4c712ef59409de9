"""``localRateLimit`` entries with ``perClientAddress: true``: a bucket per client address, checked
before authentication (issue 27).

A wrong password costs the gateway a bcrypt check (~90 ms of a core); the other entries of
``localRateLimit`` run after authentication (only authenticated requests spend budget), so they
cannot stop a client from buying checks. These run first, keyed by ``source.address``: past its
budget a client gets ``429 rate limit exceeded`` before any credential is looked at. Buckets are
kept for the ``MAX_CLIENTS`` most recently seen addresses (the oldest is dropped, its next request
starts full), per process (``--workers``: per worker), and start full at a reload.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ..errors import RateLimited
from ..policies.ratelimit_local import LocalRateLimiter, LocalRateLimitSpec
from .stage import Stage

if TYPE_CHECKING:
    from .exchange import Exchange

MAX_CLIENTS = 10_000


class ClientRateLimitStage(Stage):
    """One ``LocalRateLimiter`` per client address, least recently seen dropped past ``MAX_CLIENTS``."""

    kind = "localRateLimit"
    __slots__ = ("count", "key", "limiters", "specs")

    def __init__(self, specs: tuple[LocalRateLimitSpec, ...], key: str, count: Callable[[str, str, str], None]) -> None:
        self.specs = specs
        self.key = key
        self.count = count
        self.limiters: OrderedDict[str, LocalRateLimiter] = OrderedDict()

    def limiter_for(self, address: str, now: float) -> LocalRateLimiter:
        limiter = self.limiters.get(address)
        if limiter is not None:
            self.limiters.move_to_end(address)
            return limiter
        limiter = self.limiters[address] = LocalRateLimiter(self.specs, now)
        if len(self.limiters) > MAX_CLIENTS:
            self.limiters.popitem(last=False)
        return limiter

    async def request(self, x: Exchange) -> None:
        client = x.scope.get("client")
        address = str(client[0]) if client else ""
        limiter = self.limiter_for(address, trio.current_time())
        decision = limiter.admit(trio.current_time())
        if x.tracer.active:
            x.tracer.event("policy", severity="info" if decision.allowed else "warn", kind="localRateLimit",
                           result="allowed" if decision.allowed else "rejected", perClientAddress=address,
                           limit=decision.limit, remaining=decision.remaining, reset=decision.reset_seconds)
        self.count("localRateLimit", self.key, "allowed" if decision.allowed else "rejected")
        if not decision.allowed:
            raise RateLimited(headers=LocalRateLimiter.headers(decision),
                              why={**limiter.refusal(trio.current_time()), "perClientAddress": address})
