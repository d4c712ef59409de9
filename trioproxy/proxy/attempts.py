"""Resilient upstream calls: which target each attempt goes to, and whether there is another
attempt (docs/resilience.md).

A request's **plan** lists the targets it may go to: a route's backends (one priority group, by
weight), or an ``llm.virtualModels`` entry's targets (``failover``: groups by priority;
``weighted``: one group; ``conditional``: each target whose ``when`` holds, in order). Each attempt:

1. picks a target: the first priority group with a healthy target not yet tried, and in it one by
   the route's balancer (``upstream/balancer.py``); an ejected target gets only the one probe
   ``upstream/health.py`` lets through. When nothing healthy is left, the untried targets anyway
   (in order), then any again (a ``retry`` to the same target waits its backoff). A target whose
   own quota (``llm.models[].localRateLimit``) has no budget left is never picked: it is skipped
   (a ``failover`` trace event, reason ``rate limited``); when no target of the request is left
   within its quota before the first call, the request is 429 ``rate limit exceeded``;
2. takes the call from the target's ``requests`` quota, runs its backend stages and prepares the
   body for it (``Gateway.attempt``: each target in its own dialect), and calls it; with
   ``firstTokenTimeout`` the call counts as failed when its first body byte takes longer;
3. tells the target's outlier detection and latency the outcome.

Another attempt follows a failure (connect error, reset, timeout, slow first token; a 429 or 5xx
on a virtual model, a status in ``retry.codes`` with a ``retry`` policy) while there are attempts
left — each target of a virtual model once, or ``retry.attempts`` more — the body can be sent
again, and the route's **retry budget** admits it: retries in flight at most ``budgetPercent`` of the
route's requests in flight (at least ``minRetryConcurrency``). All of it happens before the
response head is handed on: nothing has reached the client, so a failure after the first byte
is never retried (the client sees the broken stream).

Each attempt after the first is a trace event (``failover`` to another target, ``retry`` to the
same one), each call a client span; ``x.attempts`` names every target called (access log
``llm.attempts``, when more than one); a target skipped for its quota was not called and is named
in ``llm.skipped`` instead.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from math import inf
from typing import Any

import attrs
import trio
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from ..config.model import Address, Backend, Config, Route
from ..errors import ProxyError, RateLimited, UpstreamTimeout
from ..policies.ratelimit_local import LocalRateLimiter, most_constrained
from ..policies.resilience import (
    DEFAULT_HEALTH,
    DEFAULT_RETRY_BUDGET,
    BalancerSpec,
    HealthSpec,
    RetryBudget,
    VirtualModel,
)
from ..policies.retry import RetrySpec, retryable_error
from ..upstream.balancer import Balancer
from ..upstream.health import HealthRegistry, failed_status, retry_after_seconds
from ..upstream.health_check import HealthChecker
from ..upstream.pool import UpstreamPool, UpstreamResponse
from .exchange import Exchange
from .stage import Phase

__all__ = ["Candidate", "FirstTokenTimeout", "Plan", "Resilience", "run_attempts", "target_key"]

WEIGHTED = BalancerSpec()


class FirstTokenTimeout(UpstreamTimeout):
    default_message = "first token timeout"


def target_key(backend: Backend) -> str:
    """What outlier detection and the balancer know a target by: a host backend by its address, an
    ``ai`` backend by its name and address (two keys to one provider are two targets)."""
    return backend.name if backend.ai is None else f"{backend.name}@{backend.target}"


@attrs.define
class Candidate:
    backend: Backend
    phase: Phase
    weight: int = 1
    #: ``llm:`` format: the model sent to this target (None: the backend's own, or the client's)
    override: str | None = None
    key: str = ""
    #: the target's own quota (``llm.models[].localRateLimit``)
    limiter: LocalRateLimiter | None = None

    def __attrs_post_init__(self) -> None:
        if not self.key:
            self.key = target_key(self.backend)


@attrs.define
class Plan:
    candidates: list[Candidate]
    groups: list[list[int]]  # candidate indices by priority, best first
    balancer: BalancerSpec = WEIGHTED
    virtual: VirtualModel | None = None
    #: the LLM request body, read once (the ``llm:`` format), replayed to each target
    body: bytes | None = None
    #: some target has its own quota (``Candidate.limiter``)
    limited: bool = attrs.field(init=False, default=False)

    def __attrs_post_init__(self) -> None:
        self.limited = any(c.limiter is not None for c in self.candidates)

    @classmethod
    def single(cls, candidate: Candidate, body: bytes | None = None) -> Plan:
        return cls([candidate], [[0]], body=body)

    @property
    def first_token_timeout(self) -> float | None:
        return self.virtual.first_token_timeout if self.virtual is not None else None


class RetryBudgetState:
    """One route's requests and retries in flight (Envoy's retry budget)."""

    __slots__ = ("requests", "retries")

    def __init__(self) -> None:
        self.requests = 0
        self.retries = 0

    def admits(self, budget: RetryBudget) -> bool:
        return self.retries < max(budget.min_concurrency, budget.percent / 100.0 * self.requests)


class _EjectedCollector(Collector):
    def __init__(self, resilience: Resilience) -> None:
        self.resilience = resilience

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily("trioproxy_upstream_ejected",
                                   "1 while a target is ejected by outlier detection (probing included)",
                                   labels=["target"])
        now = _now()
        for key, health in self.resilience.health:
            family.add_metric([key], 0.0 if health.state(now) == "healthy" else 1.0)
        yield family


def _checked_targets(config: Config) -> Iterator[tuple[str, Address, HealthSpec]]:
    """The host backends of ``config`` with an active health check, each target once."""
    seen: set[str] = set()
    for bind in config.binds:
        for listener in bind.listeners:
            for route in listener.routes:
                for backend in route.backends:
                    spec = backend.health
                    key = target_key(backend)
                    if spec is not None and spec.check is not None and backend.ai is None and key not in seen:
                        seen.add(key)
                        yield key, backend.target, spec


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:  # collected outside Trio (a test's registry read)
        return 0.0


class Resilience:
    """The process's memory of its targets (kept across reloads): outlier detection, latency and
    load, the retry budgets; and their metrics."""

    def __init__(self, registry: CollectorRegistry | None = None, rng: random.Random | None = None, *,
                 pool: UpstreamPool | None = None, config: Callable[[], Config] | None = None) -> None:
        self.rng = rng if rng is not None else random.Random()
        self.balancer = Balancer(self.rng)
        self.budgets: dict[str, RetryBudgetState] = {}
        self.ejections: Counter | None = None
        self.retries: Counter | None = None
        self.health = HealthRegistry(self._ejected)
        self.checker = HealthChecker(pool, self.health, lambda: _checked_targets(config())) \
            if pool is not None and config is not None else None
        if registry is not None:
            self.ejections = Counter("trioproxy_upstream_ejections", "Targets ejected by outlier detection",
                                     ["target", "reason"], registry=registry)
            self.retries = Counter("trioproxy_upstream_retries", "Attempts after a request's first, by outcome "
                                   "(attempted, budget_exhausted)", ["route", "outcome"], registry=registry)
            registry.register(_EjectedCollector(self))

    async def run_checks(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The active health checks (``health.activeCheck``), in the root nursery until cancelled."""
        if self.checker is None:
            task_status.started()
            return
        await self.checker.run(task_status=task_status)

    def config_changed(self) -> None:
        """A reload: the active checks' targets may have changed."""
        if self.checker is not None:
            self.checker.targets_changed()

    def seed(self, rng: random.Random) -> None:
        """The random source of every pick and jittered wait (a test makes them deterministic)."""
        self.rng = self.balancer.rng = rng

    def _ejected(self, key: str, reason: str) -> None:
        if self.ejections is not None:
            self.ejections.labels(key, reason).inc()

    def budget(self, route: str) -> RetryBudgetState:
        state = self.budgets.get(route)
        if state is None:
            state = self.budgets[route] = RetryBudgetState()
        return state

    def snapshot(self, backends: Iterable[tuple[str, Backend]]) -> list[dict[str, Any]]:
        """``GET /api/upstreams``: each target of the config with its health and load."""
        now = _now()
        out = []
        seen: set[str] = set()
        for route, backend in backends:
            key = target_key(backend)
            if key in seen:
                continue
            seen.add(key)
            health = self.health.targets.get(key)
            load = self.balancer.loads.get(key)
            entry: dict[str, Any] = {"target": key, "backend": backend.name, "address": str(backend.target),
                                     "kind": backend.kind, "route": route, "outlierDetection": backend.health is not None}
            entry.update(health.snapshot(now) if health is not None else {
                "state": "healthy", "ejections": 0, "multiplier": 0, "consecutiveFailures": 0, "ejectedFor": None,
                "reason": None})
            entry["inFlight"] = load.in_flight if load is not None else 0
            entry["latencyMs"] = round(load.latency(now, 10.0) * 1000, 1) if load is not None else None
            out.append(entry)
        return out

    # --- choosing ---------------------------------------------------------------------------

    def available(self, candidate: Candidate, now: float) -> bool:
        spec = candidate.backend.health
        if spec is None:
            return True
        health = self.health.targets.get(candidate.key)
        return health is None or health.available(now)

    @staticmethod
    def within_limits(candidate: Candidate, now: float) -> bool:
        """Whether the target's own quota has budget left (no quota: always)."""
        limiter = candidate.limiter
        return limiter is None or limiter.peek(now).allowed

    def choose(self, plan: Plan, tried: Sequence[int], now: float, skipped: list[int] | None = None) -> int | None:
        """The next attempt's candidate (module docstring, step 1); None when every candidate it could
        take is over its quota. ``skipped`` gets the candidates over their quota in the chosen one's
        priority group and before it, or all of them when the chosen one was tried already (they would
        have been tried)."""
        groups = plan.groups
        within = [self.within_limits(c, now) for c in plan.candidates] if plan.limited else None
        chosen = self._choose(plan, tried, now, within)
        if within is not None and skipped is not None:  # a target tried again comes after every untried one
            level = len(groups) if chosen is None or chosen in tried else \
                next(n for n, g in enumerate(groups) if chosen in g)
            skipped.extend(i for g in groups[:level + 1] for i in g if not within[i] and i not in tried)
        return chosen

    def _choose(self, plan: Plan, tried: Sequence[int], now: float, within: list[bool] | None) -> int | None:
        def allowed(i: int) -> bool:
            return within is None or within[i]

        for group in plan.groups:
            ready = [i for i in group if i not in tried and allowed(i) and self.available(plan.candidates[i], now)]
            if ready:
                return self._pick(plan, ready, now)
        untried = [i for group in plan.groups for i in group if i not in tried and allowed(i)]
        if untried:  # nothing healthy left: try the ejected ones rather than fail (Envoy's panic)
            return untried[0]
        for group in plan.groups:
            ready = [i for i in group if allowed(i) and self.available(plan.candidates[i], now)]
            if ready:
                return self._pick(plan, ready, now)
        return next((i for group in plan.groups for i in group if allowed(i)), None)

    def _pick(self, plan: Plan, indices: list[int], now: float) -> int:
        if len(indices) == 1:
            return indices[0]
        spec = plan.balancer
        chosen = self.balancer.pick([plan.candidates[i].key for i in indices],
                                    [plan.candidates[i].weight for i in indices], spec.mode, now, spec.decay_time)
        return indices[chosen]

    def backoff(self, spec: RetrySpec | None, retry: int) -> float:
        """The wait before the ``retry``-th call to a target tried already: ``backoff``, or with
        ``maxBackoff`` a random time up to ``backoff × 2^(retry-1)`` capped there (full jitter)."""
        if spec is None or not spec.backoff:
            return 0.0
        if spec.max_backoff is None:
            return spec.backoff
        return self.rng.uniform(0.0, min(spec.max_backoff, spec.backoff * 2 ** (retry - 1)))


@attrs.define
class Replay:
    """The client's request body, once read, for the next attempt (None: streamed, not replayable)."""

    body: bytes | None = None


#: one call to a candidate (its number, from 0); it fills ``Replay`` once the body is read
Attempt = Callable[[Candidate, int, Replay], Awaitable[UpstreamResponse]]


async def run_attempts(resilience: Resilience, x: Exchange, route: Route, plan: Plan, attempt: Attempt,
                       reset: Callable[[], None]) -> UpstreamResponse:
    """The calls of one request to ``plan``'s targets until one answers (module docstring)."""
    spec = x.retry
    if spec is None and plan.virtual is None and len(plan.candidates) == 1 and not plan.limited \
            and plan.candidates[0].backend.health is None:
        return await attempt(plan.candidates[0], 0, Replay(plan.body))  # one call, nothing to remember
    budget = resilience.budget(route.key)
    limits = spec.budget if spec is not None else DEFAULT_RETRY_BUDGET
    most = len(plan.candidates) if plan.virtual is not None else 1
    if spec is not None:
        most = max(most, spec.attempts + 1)
    tried: list[int] = []
    skipped: list[int] = []  # over their quota, each reported once; without retry they use up their attempt
    replay = Replay(plan.body)
    budget.requests += 1
    holding = False  # a retry's slot in the budget, from its admission to the end of its call
    try:
        n = 0
        index = _choose(resilience, x, plan, tried, skipped, 0)
        if index is None:
            raise _over_quota(plan)
        while True:
            candidate = plan.candidates[index]
            if n:
                if index in tried:
                    wait = resilience.backoff(spec, tried.count(index))
                    if wait:
                        await trio.sleep(wait)
                reset()
            if candidate.limiter is not None:
                _charge_request(x, candidate)  # nothing awaited since it was chosen, but a retry's backoff
            x.target_limiter = candidate.limiter  # the answer's tokens go to the target called last
            tried.append(index)
            x.attempts = [*(x.attempts or ()), candidate.backend.name]
            response, error, reason = await _call(resilience, x, plan, candidate, n, replay, attempt)
            x.outcomes = [*(x.outcomes or ()), _outcome(response, error)]
            if holding:
                budget.retries -= 1
                holding = False
            n += 1
            again = reason is not None and n + (len(skipped) if spec is None else 0) < most and replay.body is not None
            following = _choose(resilience, x, plan, tried, skipped, n, most if spec is None else None) \
                if again else None
            if following is None or not budget.admits(limits):
                if following is not None:  # refused by the budget
                    if resilience.retries is not None:
                        resilience.retries.labels(route.key, "budget_exhausted").inc()
                    x.tracer.event("retry", severity="warn", attempt=n, result="budget exhausted", reason=reason)
                if error is not None:
                    raise error
                assert response is not None
                return response
            budget.retries += 1  # taken now: the awaits below let other requests ask the budget
            holding = True
            if response is not None:
                await response.aclose()  # the client never sees a response that is retried
            if resilience.retries is not None:
                resilience.retries.labels(route.key, "attempted").inc()
            if following != index:
                x.tracer.event("failover", severity="warn", attempt=n, reason=reason, previous=candidate.backend.name,
                               next=plan.candidates[following].backend.name)
            else:
                x.tracer.event("retry", severity="warn", attempt=n, reason=reason)
            index = following
    finally:
        if holding:
            budget.retries -= 1
        budget.requests -= 1


def _choose(resilience: Resilience, x: Exchange, plan: Plan, tried: list[int], skipped: list[int],
            n: int, most: int | None = None) -> int | None:
    """``Resilience.choose``, each target newly skipped for its quota a ``failover`` trace event;
    with ``most``, the skipped targets count as attempts (a virtual model: each target once)."""
    passed: list[int] = []
    index = resilience.choose(plan, tried, trio.current_time(), passed)
    passed = [i for i in passed if i not in skipped]
    skipped.extend(passed)
    if most is not None and n + len(skipped) >= most:
        index = None  # the targets over their quota took the attempts left
    for i in passed:
        x.skipped = [*(x.skipped or ()), plan.candidates[i].backend.name]
        x.tracer.event("failover", severity="warn", attempt=n, reason="rate limited",
                       previous=plan.candidates[i].backend.name,
                       next=plan.candidates[index].backend.name if index is not None else None)
    return index


def _outcome(response: UpstreamResponse | None, error: ProxyError | None) -> str:
    """One attempt as its ``why`` lists it (proxy/why.py): ``ok``, ``status 503`` or the error's text."""
    if error is not None:
        return error.message
    assert response is not None
    return "ok" if response.status < 400 else f"status {response.status}"


def _charge_request(x: Exchange, candidate: Candidate) -> None:
    """The attempt taken from the target's quota (its ``requests`` buckets); its ``tokens`` buckets
    are charged with the answer's usage (``Gateway``'s finish hooks, ``x.target_limiter``)."""
    limiter = candidate.limiter
    assert limiter is not None
    decision = limiter.admit(trio.current_time())
    if x.tracer.active:
        x.tracer.event("policy", severity="info" if decision.allowed else "warn", kind="localRateLimit",
                       target=candidate.backend.name, result="allowed" if decision.allowed else "rejected",
                       limit=decision.limit, remaining=decision.remaining, reset=decision.reset_seconds)
    if not decision.allowed:  # spent by other requests during a retry's backoff
        raise RateLimited(headers=LocalRateLimiter.headers(decision),
                          why={**limiter.refusal(trio.current_time()), "target": candidate.backend.name})


def _over_quota(plan: Plan) -> RateLimited:
    """429 when every target of the request is over its quota, with the most constrained one's
    ``x-ratelimit-*``."""
    now = trio.current_time()
    decisions = [c.limiter.peek(now) for c in plan.candidates if c.limiter is not None]
    targets = [{**c.limiter.refusal(now), "target": c.backend.name} for c in plan.candidates if c.limiter is not None]
    return RateLimited(headers=LocalRateLimiter.headers(most_constrained(decisions)) if decisions else [],
                       why={"policy": "localRateLimit", "targets": targets})


async def _call(resilience: Resilience, x: Exchange, plan: Plan, candidate: Candidate, n: int,
                replay: Replay, attempt: Attempt) -> tuple[UpstreamResponse | None, ProxyError | None, str | None]:
    """One call, its outcome told to the target's outlier detection and load: (response, error,
    why another attempt may follow, or None)."""
    spec = candidate.backend.health
    probe = False
    if spec is not None:
        probe = resilience.health.get(candidate.key, spec).admit(trio.current_time()) == "probe"
    load = resilience.balancer.start(candidate.key)
    started = trio.current_time()
    response: UpstreamResponse | None = None
    error: ProxyError | None = None
    told = False
    limit = plan.first_token_timeout
    try:
        try:
            if plan.virtual is None:
                response = await attempt(candidate, n, replay)
            else:  # an LLM answer: its first byte (or end) awaited before anything goes to the client
                with trio.CancelScope(deadline=started + limit if limit is not None else inf) as scope:
                    response = await attempt(candidate, n, replay)
                    if response.status < 400:
                        await response.prefetch()
                        broken = response.prefetch_error()
                        if broken is not None:
                            await response.aclose()
                            response = None
                            raise broken
                if scope.cancelled_caught:
                    if response is not None:
                        await response.aclose()
                        response = None
                    error = FirstTokenTimeout()
                    x.tracer.event("backendCallResult", start=started, severity="error", status=None,
                                   error=error.message)
        except ProxyError as failure:
            if not retryable_error(failure):
                raise
            error = failure
        now = trio.current_time()
        reason: str | None
        retry_after = None
        if error is not None:
            reason = error.message
            failed = True
        else:
            assert response is not None
            failed = failed_status(spec or DEFAULT_HEALTH, response.status)
            again = (x.retry is not None and response.status in x.retry.codes) or (plan.virtual is not None and failed)
            reason = f"status {response.status}" if again else None
            if response.status in (429, 503):
                value = next((v for k, v in response.headers if k.lower() == b"retry-after"), None)
                retry_after = retry_after_seconds(value, time.time())
        if spec is not None:
            resilience.health.record(candidate.key, spec, now, failed, retry_after=retry_after, probe=probe)
            told = True
        Balancer.finish(load, now, (now - started) if not failed else max(now - started, 1.0),
                        plan.balancer.decay_time)
        load = None  # type: ignore[assignment]
        return response, error, reason
    finally:
        if load is not None:
            load.in_flight -= 1
        if probe and not told:
            resilience.health.get(candidate.key, spec).release_probe()  # type: ignore[arg-type]
