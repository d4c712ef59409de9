"""What a finished request leaves behind, apart from its answer: its metrics, its server span, and
its access-log line with its history entry (names: docs/observability.md).

Three functions, one per sink, called by the pipeline (``pipeline.Pipeline.finish``) once a request
or a WebSocket session has ended: the request path itself does no telemetry beyond that call and
the client span around its upstream call (``otel.ClientSpan``). They read the finished exchange
and allocate nothing the sink does not keep: this runs for every request.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..llm.providers import PASSTHROUGH, operation_name, semconv_provider
from ..telemetry.history import History, Summary, subject_of
from ..telemetry.otel import OtelTracing
from ..telemetry.trace import activation

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..telemetry.access_log import AccessLog
    from ..telemetry.metrics import Metrics
    from .exchange import Exchange

__all__ = ["end_server_span", "log_request", "observe_request"]

_NO_LLM: dict[str, Any] = {}  # read only


def _gen_ai_names(x: Exchange, llm: dict[str, Any]) -> tuple[str, str]:
    """gen-ai semantic-convention values: (operation, provider), as agentgateway's metric labels."""
    return operation_name(x.llm_kind or PASSTHROUGH), semconv_provider(llm["provider"])


def _names(x: Exchange) -> tuple[str, str, str]:
    """(gateway, listener, route) keys, empty when the request did not get that far."""
    listener = x.listener.key if x.listener else ""
    return listener.split("/bind/", 1)[0] if listener else "", listener, x.route.key if x.route else ""


def _finished(x: Exchange, status: int) -> Callable[[], dict[str, Any]]:
    """CEL's view of the finished request (span and log fields), built only if a field asks."""
    return lambda: {**activation(x), "response": {"code": status}}


def observe_request(metrics: Metrics, bind: str, x: Exchange, status: int, seconds: float) -> None:
    """``trioproxy_requests`` and its duration; an LLM call that succeeded adds its token usage,
    duration and, when streamed, its time to first token."""
    gateway, listener, route = _names(x)
    metrics.observe(bind, gateway, listener, route, x.backend.name if x.backend else "", x.scope["method"], status,
                    x.error_kind or "", seconds)
    llm = x.llm
    if llm is None:
        return
    operation, provider = _gen_ai_names(x, llm)
    cost = llm.get("cost")
    if cost is not None:  # spent even when the client left mid-stream (499)
        metrics.cost(route, provider, llm.get("responseModel") or llm.get("model") or "", cost)
    if status >= 400:
        return
    first_token = x.first_chunk - x.arrival if x.first_chunk is not None and llm.get("streaming") else None
    metrics.gen_ai(
        (operation, provider, llm.get("model") or "", llm.get("responseModel") or "", gateway, listener, route),
        (("input", llm.get("inputTokens")), ("output", llm.get("outputTokens")),
         ("cached_input", llm.get("cachedInputTokens")), ("reasoning", llm.get("reasoningTokens"))),
        seconds, first_token, llm.get("outputTokens"))


def end_server_span(otel: OtelTracing | None, x: Exchange, status: int) -> None:
    """End the request's server span (``x.span``, not None): named ``{operation} {model}`` for an
    LLM call, as the semantic conventions name it, with the route and the call's gen-ai values."""
    span = x.span
    if otel is None:  # tracing turned off by a reload meanwhile
        OtelTracing.finish(span, status, {}, x.error)
        return
    attributes: dict[str, Any] = {"http.route": (x.route.key if x.route else "") or None}
    llm = x.llm
    if llm is not None:
        operation, provider = _gen_ai_names(x, llm)
        model = llm.get("model")
        span.update_name(f"{operation} {model}" if model else operation)
        attributes.update({
            "gen_ai.request.model": model, "gen_ai.response.model": llm.get("responseModel"),
            "gen_ai.provider.name": provider, "gen_ai.usage.input_tokens": llm.get("inputTokens"),
            "gen_ai.usage.output_tokens": llm.get("outputTokens"),
            "gen_ai.usage.cache_read.input_tokens": llm.get("cachedInputTokens"), "gen_ai.operation.name": operation,
            "gen_ai.usage.cost": llm.get("cost")})
    attributes["error.type"] = x.error_kind
    otel.finish_request(span, status, attributes, x.error, _finished(x, status))


def log_request(access: AccessLog, history: History, bind: str, x: Exchange, status: int, seconds: float) -> None:
    """The request's summary in the history (always on, one tuple) and its access-log line, when
    the log's level lets it through (the gateway's own 5xx answers at ``warning``)."""
    own_error = x.error_kind is not None
    if history.size:
        history.record(_summary(x, status, seconds, own_error))
    if access.enabled(status if own_error else 200):
        access.record(_access_fields(bind, x, status, seconds), status, own_error, _finished(x, status))


def _summary(x: Exchange, status: int, seconds: float, own_error: bool) -> Summary:
    llm = x.llm or _NO_LLM
    return Summary(
        time.time(), x.scope["method"], x.scope["path"], x.host, x.route.key if x.route else "",
        x.backend.name if x.backend else "", status, seconds * 1000.0, llm.get("inputTokens"),
        llm.get("outputTokens"), subject_of(x.jwt, x.api_key, x.basic_auth) if x.jwt or x.api_key or x.basic_auth else None,
        x.error if own_error else None, x.error_kind, llm.get("model"), llm.get("cost"), x.why)


def _access_fields(bind: str, x: Exchange, status: int, seconds: float) -> dict[str, Any]:
    """The line's fields, agentgateway's names; those without a value are left out (not set and
    filtered: this runs for every request)."""
    gateway, listener, route = _names(x)
    scope = x.scope
    fields: dict[str, Any] = {"bind": bind}
    if gateway:
        fields["gateway"] = gateway
    if listener:
        fields["listener"] = listener
    if route:
        fields["route"] = route
    if x.backend:
        fields["endpoint"] = str(x.backend.target)
    if client := scope.get("client"):
        fields["src.addr"] = f"{client[0]}:{client[1]}"
    fields["http.method"] = scope["method"]
    if x.host:
        fields["http.host"] = x.host
    fields["http.path"] = scope["path"]
    fields["http.version"] = scope.get("http_version", "1.1")
    fields["http.status"] = status
    fields["duration"] = f"{seconds * 1000:.1f}ms"
    if x.error:
        fields["error"] = x.error
    if x.why is not None:
        fields["why"] = x.why
    if x.jwt is not None and isinstance(x.jwt.get("sub"), str):
        fields["jwt.sub"] = x.jwt["sub"]  # as agentgateway; never the token
    if x.llm is not None:
        _add_gen_ai_fields(fields, x, x.llm)
    if x.attempts is not None and len(x.attempts) > 1:  # failover or retries: every target tried, in order
        fields["llm.attempts" if x.llm is not None else "attempts"] = ",".join(x.attempts)
    if x.skipped:  # targets over their own quota (llm.models[].localRateLimit): not called
        fields["llm.skipped"] = ",".join(x.skipped)
    if x.mcp is not None:  # mcp.method, mcp.name, mcp.target, mcp.result (mcp_stage.py)
        fields.update((k, v) for k, v in x.mcp.items() if v is not None)
    if x.limits:
        fields["ratelimit"] = ",".join([f"{d.remaining}/{d.limit}" for _, d in x.limits])
    elif x.error_kind == "RateLimited":
        fields["ratelimit"] = "rejected"
    if x.span is not None:
        fields["trace.id"] = OtelTracing.trace_id(x.span)
    return fields


#: the line's gen-ai fields after operation and provider, and the ``x.llm`` key each reads
_GEN_AI_FIELDS = (
    ("gen_ai.request.model", "model"), ("gen_ai.response.model", "responseModel"),
    ("gen_ai.usage.input_tokens", "inputTokens"), ("gen_ai.usage.output_tokens", "outputTokens"),
    ("gen_ai.usage.cache_read.input_tokens", "cachedInputTokens"),
    ("gen_ai.usage.cache_creation.input_tokens", "cacheCreationInputTokens"),
    ("gen_ai.usage.reasoning.output_tokens", "reasoningTokens"),
    ("gen_ai.usage.cost", "cost"),  # USD (docs/pricing.md)
)


def _add_gen_ai_fields(fields: dict[str, Any], x: Exchange, llm: dict[str, Any]) -> None:
    fields["gen_ai.operation.name"], fields["gen_ai.provider.name"] = _gen_ai_names(x, llm)
    for name, key in _GEN_AI_FIELDS:
        if (value := llm.get(key)) is not None:
            fields[name] = value
