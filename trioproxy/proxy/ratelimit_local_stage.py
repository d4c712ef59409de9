"""``localRateLimit`` as a stage: admit against one limiter (all its entries) before any upstream
call; when an entry counts LLM tokens, charge the response's usage after the body (``finish``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from ..errors import RateLimited
from ..policies.ratelimit_local import LocalRateLimiter
from .stage import Stage

if TYPE_CHECKING:
    from .exchange import Exchange


class LocalRateLimitStage(Stage):
    """Requests budgets: 429 with ``x-ratelimit-*`` and ``retry-after`` when exhausted."""

    kind = "localRateLimit"
    __slots__ = ("count", "key", "limiter")

    def __init__(self, limiter: LocalRateLimiter, key: str, count: Callable[[str, str, str], None]) -> None:
        self.limiter = limiter  # a listener's is shared by all its routes; kept across unchanged reloads
        self.key = key  # the listener or route key (metrics label)
        self.count = count  # Metrics.ratelimit_decision

    async def request(self, x: Exchange) -> None:
        decision = self.limiter.admit(trio.current_time())
        tr = x.tracer
        if tr.active:
            tr.event("policy", severity="info" if decision.allowed else "warn", kind="localRateLimit",
                     result="allowed" if decision.allowed else "rejected",
                     limit=decision.limit, remaining=decision.remaining, reset=decision.reset_seconds)
        self.count("localRateLimit", self.key, "allowed" if decision.allowed else "rejected")
        if not decision.allowed:
            raise RateLimited(headers=LocalRateLimiter.headers(decision),
                              why=self.limiter.refusal(trio.current_time()))
        x.limits.append((self.limiter, decision))
        if tr.active:
            tr.snapshot("localRateLimit", x)


class TokenRateLimitStage(LocalRateLimitStage):
    """A limiter with a tokens entry: after the response, its ``usage.total_tokens`` is charged
    (may overshoot below zero; later requests wait until refills pay it back)."""

    __slots__ = ()

    def finish(self, x: Exchange) -> None:
        usage = x.usage
        if usage is None:
            return
        decision = self.limiter.charge_tokens(trio.current_time(), usage.total_tokens)
        if decision is not None and x.tracer.active:
            x.tracer.event("policy", kind="localRateLimit", result="charged", tokens=usage.total_tokens,
                           limit=decision.limit, remaining=decision.remaining, reset=decision.reset_seconds)


class TargetTokens:
    """A ``finish`` hook for the target that answered (``llm.models[].localRateLimit``, its quota):
    the answer's ``usage.total_tokens`` charged to its tokens buckets (``Exchange.target_limiter``)."""

    __slots__ = ("limiter",)

    def __init__(self, limiter: LocalRateLimiter) -> None:
        self.limiter = limiter

    def finish(self, x: Exchange) -> None:
        usage = x.usage
        if usage is None:
            return
        decision = self.limiter.charge_tokens(trio.current_time(), usage.total_tokens)
        if decision is not None and x.tracer.active:
            x.tracer.event("policy", kind="localRateLimit", result="charged", tokens=usage.total_tokens,
                           target=x.backend.name if x.backend is not None else None,
                           limit=decision.limit, remaining=decision.remaining, reset=decision.reset_seconds)


def local_rate_limit_stage(limiter: LocalRateLimiter, key: str,
                           count: Callable[[str, str, str], None]) -> LocalRateLimitStage:
    """The stage for ``limiter``: with a ``finish`` hook only when some entry counts tokens."""
    cls = TokenRateLimitStage if limiter.counts_tokens else LocalRateLimitStage
    return cls(limiter, key, count)
