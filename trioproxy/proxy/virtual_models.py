"""Plans (proxy/attempts.py) of a route's backends and of ``llm.virtualModels`` entries
(docs/resilience.md, "Virtual models")."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from ..cel import Expression, compile_expression
from ..config.model import Backend, LlmModelRoute, Route
from ..errors import LlmRequestError
from ..llm.models import model_matches, transformed_model
from ..policies.ratelimit_local import LocalRateLimiter
from ..policies.resilience import BalancerSpec, VirtualModel
from ..telemetry.trace import activation
from .attempts import WEIGHTED, Candidate, Plan
from .exchange import Exchange
from .stage import Phase

__all__ = ["prompt_size", "route_plan", "virtual_plan"]

_plans: dict[int, tuple[Route, Plan | None]] = {}


def route_plan(route: Route, backends: Sequence[Backend], phases: Sequence[Phase]) -> Plan | None:
    """The route's backends of weight > 0 as one priority group (computed once per compiled route)."""
    cached = _plans.get(id(route))
    if cached is not None and cached[0] is route:
        return cached[1]
    plan = None
    if backends:
        candidates = [Candidate(b, p, b.weight) for b, p in zip(backends, phases)]
        plan = Plan(candidates, [list(range(len(candidates)))], route.balancer or WEIGHTED)
    if len(_plans) > 4096:  # old configs' routes
        _plans.clear()
    _plans[id(route)] = (route, plan)
    return plan


@lru_cache(maxsize=256)
def _expression(source: str) -> Expression:
    return compile_expression(source)  # checked when the config was read


def prompt_size(request: dict[str, Any]) -> int:
    """An estimate of the prompt's tokens (4 characters a token) over its texts: messages, input,
    prompt, system, contents (CEL ``llm.promptSize``)."""
    chars = 0
    stack: list[Any] = [request.get(k) for k in ("messages", "input", "prompt", "system", "contents")]
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            chars += len(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return (chars + 3) // 4


def _target_entry(route: Route, model: str) -> LlmModelRoute | None:
    return next((e for e in route.models if e.virtual is None and model_matches(e.pattern, model)), None)


def _override(route: Route, model: str, request: dict[str, Any]) -> str | None:
    """The model a target is asked for: its entry's transformation over the target's name, else its
    ``params.model``, else the target's name."""
    entry = _target_entry(route, model)
    backend = route.backends[entry.backend] if entry is not None else None
    if entry is not None and entry.model_expression is not None:
        computed = transformed_model(entry, {**request, "model": model})
        if computed is not None:
            return computed
    if backend is not None and backend.ai is not None and backend.ai.model:
        return None
    return model


def virtual_plan(x: Exchange, route: Route, phases: Sequence[Phase], virtual: VirtualModel,
                 request: dict[str, Any], body: bytes, limiters: Sequence[LocalRateLimiter | None] = ()) -> Plan:
    """The targets of ``virtual`` for this request: by priority (failover), by weight (weighted),
    or those whose condition holds, in order (conditional; the first is chosen, the others are its
    fallbacks). 404 ``model_not_found`` when no condition holds."""
    targets = virtual.targets
    if virtual.mode == "conditional":
        act = activation(x)
        act["llm"] = {**(act.get("llm") or {}), "promptSize": prompt_size(request),
                      "requestModel": request.get("model")}  # key and team: activation() sets them
        targets = tuple(t for t in targets if t.when is None or _expression(t.when).evaluate(act) is True)
        if not targets:
            raise LlmRequestError(404, "no target of the virtual model matches the request", "model_not_found",
                                  detail=f"no 'when' of virtual model {str(request.get('model'))[:200]!r} holds")
    candidates = [Candidate(route.backends[t.backend], phases[t.backend], t.weight,
                            _override(route, t.model, request), limiter=limiters[t.backend] if limiters else None)
                  for t in targets]
    if virtual.mode == "weighted":
        groups = [list(range(len(candidates)))]
    elif virtual.mode == "conditional":
        groups = [[i] for i in range(len(candidates))]
    else:
        groups = []
        for i, t in enumerate(targets):
            if groups and targets[groups[-1][0]].priority == t.priority:
                groups[-1].append(i)
            else:
                groups.append([i])
    balancer = route.balancer or (WEIGHTED if virtual.mode == "weighted" else _LEAST_REQUEST)
    return Plan(candidates, groups, balancer, virtual, body)

#: within a failover priority level, the best target by load and latency (agentgateway: "a composite
#: score factoring in health and latency")
_LEAST_REQUEST = BalancerSpec("leastRequest")
