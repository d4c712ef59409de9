"""The admin JSON API under ``/api/`` that the web UI reads (documented in the README).

Every endpoint only reads the runtime: the limiters are observed without being refilled or
charged, the metrics are read from the gateway's own Prometheus registry (the numbers ``/metrics``
exposes), so a dashboard left open changes nothing the data plane decides.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import trio
from prometheus_client.metrics_core import Metric
from quart import Quart, request

from ..cel import CelError, compile_expression
from ..config.dump import config_dump
from ..proxy.runtime import Runtime
from .upstreams_api import register_upstreams

PERCENTILES = (0.5, 0.9, 0.99)


def register_api(app: Quart, runtime: Runtime) -> None:
    register_upstreams(app, runtime)  # /api/upstreams (upstreams_api.py)

    @app.get("/api/auth")
    async def api_auth() -> Any:
        # Reached only without a token (loopback); auth.require_token answers it otherwise.
        return {"required": False, "accepted": True}

    @app.get("/api/config")
    async def api_config() -> Any:
        return config_dump(runtime.state.config)

    @app.get("/api/statuses")
    async def api_statuses() -> Any:
        return statuses(runtime)

    @app.get("/api/limiters")
    async def api_limiters() -> Any:
        return {"limiters": limiters(runtime, trio.current_time())}

    @app.get("/api/metrics")
    async def api_metrics() -> Any:
        return metrics_summary(await runtime.metric_families())

    @app.route("/api/cel/validate", methods=["GET", "POST"])
    async def api_cel_validate() -> Any:
        expression = request.args.get("expression")
        if expression is None and request.method == "POST":
            body = await request.get_json(silent=True)
            expression = body.get("expression") if isinstance(body, dict) else None
        return validate_expression(expression)


def validate_expression(expression: Any) -> dict[str, Any]:
    """``{"valid": true}`` or ``{"valid": false, "error": ...}``; empty means "trace anything"."""
    if expression is None or (isinstance(expression, str) and not expression.strip()):
        return {"valid": True, "empty": True}
    try:
        compile_expression(expression)
    except CelError as error:
        return {"valid": False, "error": str(error)}
    return {"valid": True}


def statuses(runtime: Runtime) -> dict[str, Any]:
    """Resource statuses (manifests, when the runtime has them) and the config reload state."""
    found = _resource_statuses(runtime)
    reloads = {"applied": 0, "rejected": 0}
    for metric in runtime.metrics.config_reloads.collect():
        for sample in metric.samples:
            if sample.name.endswith("_total"):
                reloads[sample.labels.get("result", "")] = int(sample.value)
    return {
        "statuses": _jsonable(found) if found else [],
        "reload": {"ok": not runtime.reload_errors, "errors": list(runtime.reload_errors), **reloads,
                   "file": runtime.config_file},
    }


def _resource_statuses(runtime: Runtime) -> Any:
    """Statuses of Kubernetes-style resources, wherever the runtime keeps them.

    Looked up rather than imported: the runtime has them only when the config came from
    manifests (``runtime.statuses``, or ``statuses`` on the compiled config or in its dump).
    """
    for owner in (runtime, runtime.state, runtime.state.config):
        found = getattr(owner, "statuses", None)
        if callable(found):
            found = found()
        if found:
            return found
    return config_dump(runtime.state.config).get("statuses")


def _jsonable(value: Any) -> Any:
    """Statuses as plain data whatever shape another module gives them (attrs, dicts, lists)."""
    import attrs

    if attrs.has(type(value)):
        return _jsonable(attrs.asdict(value))
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def limiters(runtime: Runtime, now: float) -> list[dict[str, Any]]:
    """Every local rate limiter (a listener's, a route's, an ``llm.models`` target's): its entries'
    limit, remaining and reset, read without charging."""
    config = runtime.state.config
    listener_keys = {listener.key for bind in config.binds for listener in bind.listeners}
    target_keys = {f"{route.key}/model/{backend.name}" for bind in config.binds for listener in bind.listeners
                   for route in listener.routes for backend in route.backends if backend.target_limits}
    out = []
    for key, (specs, limiter) in runtime.state.limiters.items():
        entries = []
        for spec, (decision, balance) in zip(specs, limiter.observe(now)):
            entries.append({
                "type": spec.kind,
                "maxTokens": spec.max_tokens,
                "tokensPerFill": spec.tokens_per_fill,
                "fillIntervalSeconds": spec.fill_interval,
                "limit": decision.limit,
                "remaining": decision.remaining,
                "resetSeconds": decision.reset_seconds,
                "balance": balance,
            })
        scope = "listener" if key in listener_keys else "target" if key in target_keys else "route"
        out.append({"key": key, "scope": scope, "entries": entries})
    return out


def metrics_summary(families: Iterable[Metric]) -> dict[str, Any]:
    """Requests by route and status, latency percentiles per route (from the histogram buckets)."""
    requests: list[dict[str, Any]] = []
    # per (bind, route), summed over the other labels (method, status, backend...): le → count, and count/sum
    buckets: dict[tuple[str, str], dict[float, float]] = {}
    counts: dict[tuple[str, str], list[float]] = {}
    errors: list[dict[str, Any]] = []
    in_flight = 0
    for metric in families:
        for s in metric.samples:
            if s.name == "trioproxy_requests_total":
                requests.append({"bind": s.labels["bind"], "route": s.labels["route"],
                                 "status": int(s.labels["status"]), "count": int(s.value)})
            elif s.name == "trioproxy_request_duration_seconds_bucket":
                le = math.inf if s.labels["le"] == "+Inf" else float(s.labels["le"])
                series = buckets.setdefault((s.labels["bind"], s.labels["route"]), {})
                series[le] = series.get(le, 0.0) + s.value
            elif s.name == "trioproxy_request_duration_seconds_count":
                counts.setdefault((s.labels["bind"], s.labels["route"]), [0.0, 0.0])[0] += s.value
            elif s.name == "trioproxy_request_duration_seconds_sum":
                counts.setdefault((s.labels["bind"], s.labels["route"]), [0.0, 0.0])[1] += s.value
            elif s.name == "trioproxy_requests_in_flight":
                in_flight += int(s.value)
            elif s.name == "trioproxy_upstream_errors_total":
                errors.append({"bind": s.labels["bind"], "route": s.labels["route"],
                               "kind": s.labels["kind"], "count": int(s.value)})
    latency = []
    for (bind, route), series in buckets.items():
        count, total = counts.get((bind, route), [0.0, 0.0])
        points = sorted(series.items())
        latency.append({
            "bind": bind, "route": route, "count": int(count),
            "meanSeconds": total / count if count else None,
            "percentiles": {f"p{round(q * 100)}": histogram_quantile(q, points) for q in PERCENTILES},
        })
    return {
        "requests": requests,
        "latency": latency,
        "upstreamErrors": errors,
        "inFlight": in_flight,
    }


def histogram_quantile(q: float, points: list[tuple[float, float]]) -> float | None:
    """Prometheus' ``histogram_quantile``: linear interpolation inside the bucket holding rank q.

    ``points`` are cumulative (upper bound, count) pairs. A rank in the ``+Inf`` bucket answers
    the highest finite bound (what Prometheus does); no observations answer None.
    """
    points = sorted(points)
    if not points or points[-1][1] <= 0:
        return None
    rank = q * points[-1][1]
    lower, below = 0.0, 0.0
    for bound, cumulative in points:
        if cumulative >= rank:
            if math.isinf(bound):
                return lower
            if cumulative == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (cumulative - below)
        lower, below = bound, cumulative
    return lower
