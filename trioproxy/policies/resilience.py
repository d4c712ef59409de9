"""Specs of resilient routing (docs/resilience.md): outlier detection (``health``), load balancing
(``loadBalancer``), the retry budget and LLM virtual models. Values only: the decisions are in
``upstream/health.py`` and ``upstream/balancer.py``, the attempts in ``proxy/attempts.py``.
"""

from __future__ import annotations

from typing import Literal

from attrs import frozen

__all__ = ["ActiveCheckSpec", "BalancerSpec", "HealthSpec", "RetryBudget", "VirtualModel", "VirtualTarget"]


@frozen
class ActiveCheckSpec:
    """``health.activeCheck`` (host backends): ``GET path`` every ``interval``; a 2xx within
    ``timeout`` passes. ``unhealthy_threshold`` failed checks in a row take the target out until
    ``healthy_threshold`` checks in a row pass (Envoy's health checks)."""

    path: str = "/"
    interval: float = 10.0
    timeout: float = 1.0
    unhealthy_threshold: int = 3
    healthy_threshold: int = 2


@frozen
class HealthSpec:
    """Outlier detection of one backend (agentgateway's ``health.eviction``; defaults: Envoy's
    outlier detection). A target that fails ``consecutive_failures`` times in a row, or whose
    failures reach ``failure_percentage`` of at least ``minimum_requests`` calls within ``interval``,
    is ejected for ``duration`` × its number of ejections, at most ``max_duration``; then one probe
    request is let through, and its success brings the target back."""

    consecutive_failures: int = 5          # Envoy consecutive_5xx
    duration: float = 30.0                 # Envoy base_ejection_time
    max_duration: float = 300.0            # Envoy max_ejection_time
    interval: float = 10.0                 # Envoy interval: the failure-rate window, the multiplier's decay step
    failure_percentage: float | None = None  # Envoy failure_percentage_threshold (85), off by default as there
    minimum_requests: int = 50             # Envoy failure_percentage_request_volume
    #: statuses that count as failures (besides connect errors, resets and timeouts): 5xx and 429
    failure_statuses: Literal["5xx+429", "5xx"] = "5xx+429"
    check: ActiveCheckSpec | None = None   # active health checks (host backends)


#: what a virtual model's targets and an ``llm:`` model get when they set no ``health``
DEFAULT_HEALTH = HealthSpec()


@frozen
class BalancerSpec:
    """``loadBalancer``: how a target is picked among the healthy ones of equal priority."""

    mode: Literal["weighted", "leastRequest"] = "weighted"
    #: how fast a latency average fades when the target is not used (seconds to 1/e)
    decay_time: float = 10.0


@frozen
class RetryBudget:
    """At most ``percent`` of the requests in flight on a route may be retries (Envoy's retry
    budget: 20 %, with at least ``min_concurrency`` retries allowed at once)."""

    percent: float = 20.0
    min_concurrency: int = 3


DEFAULT_RETRY_BUDGET = RetryBudget()


@frozen
class VirtualTarget:
    """One target of a virtual model: a backend of the ``llm:`` route and the model it is asked for."""

    backend: int              # index into the route's backends
    model: str                # the name resolved against llm.models (and given to its transformation)
    weight: int = 1
    priority: int = 0
    when: str | None = None   # conditional: CEL


@frozen
class VirtualModel:
    """``llm.virtualModels[]``: one public name standing for several targets."""

    mode: Literal["failover", "weighted", "conditional"]
    targets: tuple[VirtualTarget, ...]
    #: fail over when the first body byte takes longer than this from the call's start
    first_token_timeout: float | None = None
