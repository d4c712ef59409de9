"""Prometheus metrics of the data plane, served by the stats server at ``/metrics``.

Each gateway process owns one ``Metrics`` (its own ``CollectorRegistry``), so in-process tests
can run several gateways without their counters mixing. Labelled children are cached per
label tuple so a request pays a dict lookup, not prometheus-client's label resolution.
"""

from __future__ import annotations

import platform
from bisect import bisect_left
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ..version import __version__

# ``_created`` series double every counter and histogram for a value dashboards never use.
disable_created_metrics()  # type: ignore[no-untyped-call]

_C = TypeVar("_C", Counter, Histogram)

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# OpenTelemetry's advised buckets for gen_ai.client.token.usage (powers of 4).
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864)
REQUEST_LABELS = ("bind", "gateway", "listener", "route", "backend", "method", "status", "reason")
# agentgateway's labels of its gen_ai metrics (gen_ai_system: the semconv provider name, e.g. openai).
GEN_AI_LABELS = ("gen_ai_operation_name", "gen_ai_system", "gen_ai_request_model", "gen_ai_response_model",
                 "gateway", "listener", "route")
# agentgateway's buckets: time to first token 1 ms-10 s, per output token 1 ms-2.5 s, request 10 ms-81.92 s.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
GEN_AI_DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


class _Histogram(Histogram):
    """prometheus-client's ``Histogram`` whose ``observe`` finds the bucket by bisection, not by a
    Python loop over the bounds (the same bucket: the first bound at or above the amount)."""

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        if exemplar or (self._labelnames and not self._labelvalues):  # (the parent: raises)
            super().observe(amount, exemplar)
            return
        self._sum.inc(amount)
        bounds = self._upper_bounds
        i = bisect_left(bounds, amount)
        if amount <= bounds[i]:  # (NaN: no bucket, as the loop)
            self._buckets[i].inc(1)


class _Value:
    """prometheus-client's ``MutexValue`` without its lock, in the children the request path changes
    (``_unlocked``): only the Trio run's thread changes them, and the stats server's scrape runs in
    that thread too, so a lock per change (about ten per request) guards nothing."""

    __slots__ = ("_exemplar", "_value")

    def __init__(self, value: float) -> None:
        self._value = value
        self._exemplar: object = None

    def inc(self, amount: float) -> None:
        self._value += amount

    def set(self, value: float, timestamp: float | None = None) -> None:
        self._value = value

    def set_exemplar(self, exemplar: object) -> None:
        self._exemplar = exemplar

    def get(self) -> float:
        return self._value

    def get_exemplar(self) -> object:
        return self._exemplar


def _unlocked(child: _C) -> _C:
    """``child`` (a labelled counter's or histogram's) with its values swapped for ``_Value``s."""
    if isinstance(child, Histogram):
        child._sum = _Value(child._sum.get())
        child._buckets = [_Value(bucket.get()) for bucket in child._buckets]
    else:
        child._value = _Value(child._value.get())
    return child


class Metrics:
    def __init__(self, *, open_upstream_connections: Callable[[], int] = lambda: 0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "trioproxy_requests", "Requests handled; reason names the gateway's own answer (empty when the "
            "backend answered).", REQUEST_LABELS, registry=self.registry,
        )
        self.duration = _Histogram(
            "trioproxy_request_duration_seconds", "Time from request arrival to the end of the response.",
            ["bind", "gateway", "listener", "route", "backend", "method", "status"], buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.upstream_errors = Counter(
            "trioproxy_upstream_errors", "Backend calls that failed, by route and reason.",
            ["bind", "route", "reason"], registry=self.registry,
        )
        self.token_usage = _Histogram(
            "trioproxy_gen_ai_client_token_usage", "LLM tokens per request, as the provider's usage reports them "
            "(OpenTelemetry gen_ai.client.token.usage).", ("gen_ai_token_type", *GEN_AI_LABELS),
            buckets=TOKEN_BUCKETS, registry=self.registry,
        )
        self.gen_ai_duration = _Histogram(
            "trioproxy_gen_ai_server_request_duration", "LLM request duration in seconds, arrival to the end of "
            "the answer (gen_ai.server.request.duration).", GEN_AI_LABELS, buckets=GEN_AI_DURATION_BUCKETS,
            registry=self.registry,
        )
        self.time_to_first_token = _Histogram(
            "trioproxy_gen_ai_server_time_to_first_token", "Seconds from the request's arrival to the first bytes "
            "of a streamed LLM answer (gen_ai.server.time_to_first_token).", GEN_AI_LABELS, buckets=TTFT_BUCKETS,
            registry=self.registry,
        )
        self.time_per_output_token = _Histogram(
            "trioproxy_gen_ai_server_time_per_output_token", "Seconds per output token after the first, of a "
            "streamed LLM answer (gen_ai.server.time_per_output_token).", GEN_AI_LABELS, buckets=TPOT_BUCKETS,
            registry=self.registry,
        )
        self.gen_ai_cost = Counter(
            "trioproxy_gen_ai_cost_usd", "USD spent on LLM calls, from each answer's usage at the price "
            "catalog's prices (docs/pricing.md); calls of a model without a price are not counted.",
            ["route", "provider", "model"], registry=self.registry,
        )
        self.ratelimit_decisions = Counter(
            "trioproxy_ratelimit_decisions", "Rate-limit decisions, by policy kind, where it is attached and result.",
            ["policy", "key", "result"], registry=self.registry,
        )
        self.build_info = Gauge(
            "trioproxy_build_info", "Always 1; the labels say which build runs.", ["version", "python"],
            registry=self.registry,
        )
        self.build_info.labels(__version__, platform.python_version()).set(1)
        self.config_synchronized = Gauge(
            "trioproxy_config_synchronized", "1 when the config file on disk is the one serving; 0 after a "
            "rejected reload (the previous config keeps serving).", registry=self.registry,
        )
        self.config_synchronized.set(1)
        self.config_last_reload = Gauge(
            "trioproxy_config_last_reload_success_timestamp_seconds", "When the config was last loaded successfully.",
            registry=self.registry,
        )
        self.config_last_reload.set_to_current_time()
        self.in_flight = Gauge(
            "trioproxy_requests_in_flight", "Requests being handled now.", registry=self.registry,
        )
        #: what ``in_flight`` reports, counted by the gateway: a plain int, not a locked gauge
        #: update twice per request
        self.requests_active = 0
        self.in_flight.set_function(lambda: self.requests_active)
        self.upstream_connections = Gauge(
            "trioproxy_upstream_connections_open", "Open connections to backends (pooled and busy).",
            registry=self.registry,
        )
        self.upstream_connections.set_function(open_upstream_connections)
        self.config_reloads = Counter(
            "trioproxy_config_reloads", "Config file reloads, applied or rejected (the old config kept serving).",
            ["result"], registry=self.registry,
        )
        self.otlp_export_failures = Counter(
            "trioproxy_otlp_export_failures", "Spans the OTLP exporter could not deliver (requests are never slowed).",
            registry=self.registry,
        )
        self.trace_events_dropped = Counter(
            "trioproxy_trace_events_dropped", "Trace events dropped because a trace reader was too slow "
            "(its queue full or past its memory budget); the request is never slowed.",
            registry=self.registry,
        )
        self.connections_open = Gauge(
            "trioproxy_connections_open", "Client connections open now, by server (bind port, admin, stats, readiness).",
            ["server"], registry=self.registry,
        )
        self.connection_events = Counter(
            "trioproxy_connection_events", "Accept-loop events: over_cap (answered 503 overloaded and closed), "
            "accept_error (EMFILE and kin: the loop paused and retried).", ["server", "event"], registry=self.registry,
        )
        self.front_door_rejects = Counter(
            "trioproxy_front_door_rejects", "Requests answered before routing: cl_te (400), path (400, cannot be "
            "normalised), overloaded (503, past the requests-in-flight cap).", ["bind", "reason"], registry=self.registry,
        )
        self._requests: dict[tuple[str, ...], tuple[Callable[[float], None], Callable[[float], None]]] = {}
        self._decisions: dict[tuple[str, str, str], Callable[[float], None]] = {}
        #: gen-ai labels -> token type or histogram -> the child's ``observe`` (``gen_ai``)
        self._gen_ai: dict[tuple[str, ...], dict[object, Callable[[float], None]]] = {}
        self._costs: dict[tuple[str, str, str], Callable[[float], None]] = {}

    def observe(self, bind: str, gateway: str, listener: str, route: str, backend: str, method: str, status: int,
                reason: str, seconds: float) -> None:
        """Count a finished request; labelled children are cached per label tuple (a dict lookup)."""
        key = (bind, gateway, listener, route, backend, method, str(status), reason)
        found = self._requests.get(key)
        if found is None:
            found = self._requests[key] = (_unlocked(self.requests.labels(*key))._value.inc,
                                           _unlocked(self.duration.labels(*key[:7])).observe)
        found[0](1)
        found[1](seconds)

    def upstream_error(self, bind: str, route: str, reason: str) -> None:
        self.upstream_errors.labels(bind, route, reason).inc()

    def ratelimit_decision(self, policy: str, key: str, result: str) -> None:
        labels = (policy, key, result)
        inc = self._decisions.get(labels)
        if inc is None:
            inc = self._decisions[labels] = _unlocked(self.ratelimit_decisions.labels(*labels))._value.inc
        inc(1)

    def gen_ai(self, labels: tuple[str, ...], tokens: tuple[tuple[str, int | None], ...], seconds: float,
               first_token: float | None, output_tokens: int | None) -> None:
        """One LLM call: its tokens by type, its duration and, when streamed, the time to its first
        token and per output token after it (``labels``: ``GEN_AI_LABELS`` in order). The children's
        ``observe`` are cached per ``labels`` (one lookup), then by token type or histogram, each
        made on its first use (a child shows in ``/metrics`` from when it is made)."""
        observers = self._gen_ai.get(labels)
        if observers is None:
            observers = self._gen_ai[labels] = {}
        for kind, count in tokens:
            if count is not None:
                observe = observers.get(kind)
                if observe is None:
                    observe = observers[kind] = _unlocked(self.token_usage.labels(kind, *labels)).observe
                observe(count)
        observe = observers.get(self.gen_ai_duration)
        if observe is None:
            observe = observers[self.gen_ai_duration] = _unlocked(self.gen_ai_duration.labels(*labels)).observe
        observe(seconds)
        if first_token is not None:
            self._observer(observers, self.time_to_first_token, labels)(first_token)
            if output_tokens is not None and output_tokens > 1:
                self._observer(observers, self.time_per_output_token, labels)(
                    (seconds - first_token) / (output_tokens - 1))

    def cost(self, route: str, provider: str, model: str, usd: float) -> None:
        """``trioproxy_gen_ai_cost_usd_total``: one LLM call's cost (the child cached per labels)."""
        labels = (route, provider, model)
        inc = self._costs.get(labels)
        if inc is None:
            inc = self._costs[labels] = _unlocked(self.gen_ai_cost.labels(*labels))._value.inc
        inc(usd)

    @staticmethod
    def _observer(observers: dict[object, Callable[[float], None]], histogram: Histogram,
                  labels: tuple[str, ...]) -> Callable[[float], None]:
        """``histogram``'s child for ``labels``, its ``observe`` cached in ``observers`` (those labels')."""
        observe = observers.get(histogram)
        if observe is None:
            observe = observers[histogram] = _unlocked(histogram.labels(*labels)).observe
        return observe

    def requests_in_flight(self) -> int:
        return self.requests_active

    def reload(self, applied: bool) -> None:
        self.config_reloads.labels("applied" if applied else "rejected").inc()
        self.config_synchronized.set(1 if applied else 0)
        if applied:
            self.config_last_reload.set_to_current_time()

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
