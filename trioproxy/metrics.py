"""Prometheus metrics of the data plane, served by the stats server at ``/metrics``.

Each gateway process owns one ``Metrics`` (its own ``CollectorRegistry``), so in-process tests
can run several gateways without their counters mixing. Labelled children are cached per
(route, status) so a request pays a dict lookup, not prometheus-client's label resolution.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class Metrics:
    def __init__(self, *, open_upstream_connections: Callable[[], int] = lambda: 0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "trioproxy_requests", "Requests handled, by route and response status.",
            ["bind", "route", "status"], registry=self.registry,
        )
        self.duration = Histogram(
            "trioproxy_request_duration_seconds", "Time from request arrival to the end of the response.",
            ["bind", "route"], buckets=DURATION_BUCKETS, registry=self.registry,
        )
        self.upstream_errors = Counter(
            "trioproxy_upstream_errors", "Backend calls that failed, by route and kind.",
            ["bind", "route", "kind"], registry=self.registry,
        )
        self.in_flight = Gauge(
            "trioproxy_requests_in_flight", "Requests being handled now.", registry=self.registry,
        )
        self.upstream_connections = Gauge(
            "trioproxy_upstream_connections_open", "Open connections to backends (pooled and busy).",
            registry=self.registry,
        )
        self.upstream_connections.set_function(open_upstream_connections)
        self.config_reloads = Counter(
            "trioproxy_config_reloads", "Config file reloads, applied or rejected (the old config kept serving).",
            ["result"], registry=self.registry,
        )
        self.trace_events_dropped = Counter(
            "trioproxy_trace_events_dropped", "Trace events dropped because a trace reader was too slow.",
            registry=self.registry,
        )
        self._requests: dict[tuple[str, str, int], Callable[[], None]] = {}
        self._durations: dict[tuple[str, str], Callable[[float], None]] = {}

    def observe(self, bind: str, route: str, status: int, seconds: float) -> None:
        key = (bind, route, status)
        inc = self._requests.get(key)
        if inc is None:
            inc = self._requests[key] = self.requests.labels(bind, route, str(status)).inc
        inc()
        observe = self._durations.get((bind, route))
        if observe is None:
            observe = self._durations[(bind, route)] = self.duration.labels(bind, route).observe
        observe(seconds)

    def upstream_error(self, bind: str, route: str, kind: str) -> None:
        self.upstream_errors.labels(bind, route, kind).inc()

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
