"""Compiles the resilience fields (``resilience_document.py``) into ``policies/resilience.py``'s specs;
``compile.py`` calls these at one place each."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from ..policies.resilience import DEFAULT_HEALTH, ActiveCheckSpec, BalancerSpec, HealthSpec, VirtualModel, VirtualTarget
from ..policies.retry import RetrySpec
from .resilience_document import Health, LlmVirtualModel, LoadBalancer

if TYPE_CHECKING:
    from . import document as d
    from . import model as m
    from .describe import Reader
    from .model import LlmModelRoute

__all__ = ["backend_health", "balancer_spec", "for_backend", "health_spec", "retry_spec", "virtual_models"]


def health_spec(value: Health | None) -> HealthSpec | None:
    if value is None:
        return None
    eviction = value.eviction
    fields: dict[str, Any] = {"failure_statuses": "5xx+429" if value.count_429 else "5xx"}
    if eviction is not None:
        fields.update(consecutive_failures=eviction.consecutive_failures, duration=eviction.duration,
                      max_duration=eviction.max_duration, interval=eviction.interval,
                      failure_percentage=eviction.failure_percentage, minimum_requests=eviction.minimum_requests)
    check = value.active_check
    if check is not None:
        fields["check"] = ActiveCheckSpec(check.path, check.interval, check.timeout, check.unhealthy_threshold,
                                          check.healthy_threshold)
    spec = HealthSpec(**fields)
    return DEFAULT_HEALTH if spec == DEFAULT_HEALTH else spec


def backend_health(backend: d.Backend, r: Reader) -> HealthSpec | None:
    """A backend's own ``health``; an active check only on a host backend."""
    value = backend.policies.health if backend.policies is not None else None
    spec = health_spec(value)
    if spec is not None and spec.check is not None and backend.ai is not None:
        r.at(value, "activeCheck", "active health checks apply to host backends, not ai providers")
        return attrs.evolve(spec, check=None)
    return spec


def for_backend(spec: HealthSpec | None, backend: m.Backend) -> HealthSpec | None:
    """A route's ``health`` for one of its backends: without the active check on an ``ai`` backend."""
    if spec is not None and spec.check is not None and backend.ai is not None:
        return attrs.evolve(spec, check=None)
    return spec


def balancer_spec(value: LoadBalancer | None) -> BalancerSpec | None:
    return BalancerSpec(value.mode, value.decay_time) if value is not None else None


def retry_spec(value: d.Retry) -> RetrySpec:
    from ..policies.resilience import RetryBudget

    return RetrySpec(value.attempts, tuple(sorted(set(value.codes))), value.backoff, value.max_backoff,
                     RetryBudget(float(value.budget_percent), value.min_retry_concurrency))


def virtual_models(llm: d.Llm, entries: list[LlmModelRoute], r: Reader) -> list[LlmModelRoute]:
    """``llm.virtualModels`` as ``LlmModelRoute`` entries whose ``virtual`` lists their targets, each
    resolved against the (sorted) ``entries`` of ``llm.models`` as a client's model would be."""
    from ..llm.models import model_matches
    from .model import LlmModelRoute

    out: list[LlmModelRoute] = []
    for virtual in llm.virtual_models:
        routing = virtual.routing
        mode, targets_doc = _routing(virtual)
        if targets_doc is None:
            continue
        targets: list[VirtualTarget] = []
        for i, target in enumerate(targets_doc):
            entry = next((e for e in entries if e.virtual is None and model_matches(e.pattern, target.model)), None)
            if entry is None:
                r.at(target, "model", f"model {target.model!r} matches no llm.models entry")
                continue
            when = getattr(target, "when", None)
            if mode == "conditional" and when is None and i != len(targets_doc) - 1:
                r.at(target, None, "a target without a condition is the fallback and must be the last one")
            targets.append(VirtualTarget(entry.backend, target.model, getattr(target, "weight", 1),
                                         getattr(target, "priority", 0), when))
        if not targets:
            r.at(routing, None, "a virtual model needs at least one target")
            continue
        if any(e.pattern == virtual.name for e in entries):
            r.at(virtual, "name", f"{virtual.name!r} is also an llm.models name")
        if mode == "failover":
            targets.sort(key=lambda t: t.priority)  # stable: config order within a priority
        out.append(LlmModelRoute(virtual.name, targets[0].backend, None,
                                 VirtualModel(mode, tuple(targets), virtual.first_token_timeout)))
    return out


def _routing(virtual: LlmVirtualModel) -> tuple[Any, Any]:
    routing = virtual.routing
    if routing.failover is not None:
        return "failover", routing.failover.targets
    if routing.weighted is not None:
        return "weighted", routing.weighted.targets
    if routing.conditional is not None:
        return "conditional", routing.conditional.targets
    return "failover", None
