"""The config's resilience fields, described once like ``document.py``'s (docs/resilience.md):
``health`` (outlier detection, agentgateway's name), ``loadBalancer`` and ``llm.virtualModels``.
``document.py`` refers to these classes by one field each; ``resilience_compile.py`` compiles them."""

from __future__ import annotations

from typing import Annotated, Literal

from .describe import Integer, described, field
from .scalars import CEL, DURATION, PATH

Duration = Annotated[float, DURATION]
CelText = Annotated[str, CEL]
Percent = Annotated[int, Integer(1, 100)]


@described
class Eviction:
    """When a target is ejected and for how long (Envoy's outlier detection defaults)."""

    consecutive_failures: Annotated[int, Integer(1, 1000)] = field(
        "Failures in a row (connect error, reset, timeout, 5xx, 429) that eject the target.", default=5)
    duration: Duration = field(
        "Base ejection time: an ejection lasts this × the number of ejections so far.", default=30.0)
    max_duration: Duration = field("Longest ejection (trioproxy; Envoy's max_ejection_time).", default=300.0)
    interval: Duration = field(
        "Window of the failure rate, and the time a target must stay healthy to take one off its"
        " ejection count (trioproxy).", default=10.0)
    failure_percentage: Percent | None = field(
        "Eject when this share (percent) of the calls in one interval failed (trioproxy; off when absent).",
        default=None)
    minimum_requests: Annotated[int, Integer(1, 1_000_000)] = field(
        "Calls an interval needs before failurePercentage applies (trioproxy).", default=50)


@described
class ActiveCheck:
    """Active health checks of a host backend (trioproxy; Envoy's HTTP health checks)."""

    path: Annotated[str, PATH] = field("Path of the GET request; a 2xx answer passes.", default="/")
    interval: Duration = field("Time between checks.", default=10.0)
    timeout: Duration = field("A check without an answer by then fails.", default=1.0)
    unhealthy_threshold: Annotated[int, Integer(1, 1000)] = field(
        "Failed checks in a row that take the backend out.", default=3)
    healthy_threshold: Annotated[int, Integer(1, 1000)] = field(
        "Passed checks in a row that bring it back.", default=2)


@described
class Health:
    """Outlier detection: failing targets are ejected, then probed back with one request."""

    eviction: Eviction | None = field("Settings for temporarily removing unhealthy targets.", default=None)
    count_429: bool = field(
        "Count 429 answers as failures (trioproxy; a 429 or 503 with retry-after always ejects for that long).",
        name="count429", default=True)
    active_check: ActiveCheck | None = field(
        "Active health checks (host backends only; trioproxy): GET a path on a timer.", default=None)


@described
class LoadBalancer:
    """How a route picks among its healthy backends (trioproxy)."""

    mode: Literal["weighted", "leastRequest"] = field(
        "weighted: at random by weight; leastRequest: power of two choices over requests in flight and a"
        " peak-EWMA of latency.", default="weighted")
    decay_time: Duration = field("How fast a latency average fades (seconds to 1/e).", default=10.0)


@described
class LlmFailoverTarget:
    """A failover target."""

    model: str = field("Model name, resolved against llm.models as a client's request would be.")
    priority: Annotated[int, Integer(0, 1000)] = field(
        "Targets are grouped by priority; lower values are tried first.", default=0)


@described
class LlmWeightedTarget:
    """A weighted target."""

    model: str = field("Model name, resolved against llm.models as a client's request would be.")
    weight: Annotated[int, Integer(0, 1_000_000)] = field("Relative share of traffic.", default=1)


@described
class LlmConditionalTarget:
    """A conditional target."""

    when: CelText | None = field(
        "CEL over request.headers, jwt, key, team and llm.promptSize; omit only on the last target.", default=None)
    model: str = field("Model name, resolved against llm.models as a client's request would be.")


@described
class LlmFailoverRouting:
    """Targets by priority."""

    targets: tuple[LlmFailoverTarget, ...] = field("The targets, grouped by priority.")


@described
class LlmWeightedRouting:
    """Targets by weight."""

    targets: tuple[LlmWeightedTarget, ...] = field("The targets, chosen by weight.")


@described
class LlmConditionalRouting:
    """Targets by condition."""

    targets: tuple[LlmConditionalTarget, ...] = field("The targets, the first whose condition holds chosen.")


@described(one_of=("failover", "weighted", "conditional"))
class LlmVirtualModelRouting:
    """How a virtual model picks its target; the others are the fallbacks when it fails."""

    failover: LlmFailoverRouting | None = field("By priority, the best healthy target of a level.", default=None)
    weighted: LlmWeightedRouting | None = field("By weight among the healthy targets.", default=None)
    conditional: LlmConditionalRouting | None = field("The first target whose condition holds.", default=None)


@described
class LlmVirtualModel:
    """A public model name standing for several llm.models targets."""

    name: str = field("The model name clients ask for.")
    routing: LlmVirtualModelRouting = field("How a target is chosen.")
    first_token_timeout: Duration | None = field(
        "Fail over when a target's first response byte takes longer than this (trioproxy).", default=None)
