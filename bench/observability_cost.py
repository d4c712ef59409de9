#!/usr/bin/env python3
"""In-process CPU cost of the access log and of OpenTelemetry spans, per request.

    python -m bench.observability_cost [--requests 50000]

Whole-gateway runs (``bench/policy_overhead.py``: log-off, otel-1pct, otel-100pct variants) are the
end-to-end check; on a loaded machine their deltas drown in noise, so this measures the two
additions alone with ``time.process_time`` (all threads, so the exporter's batch thread counts):

* one JSON access-log line (the fields a plain request logs) written to a file;
* the OTLP sampling decision and, when sampled, a server and a client span created, ended and
  queued for export (to an exporter that accepts everything), at 1 % and 100 % sampling.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from trioproxy.config.model import TracingSpec
from trioproxy.telemetry.access_log import AccessLog, configure_logging
from trioproxy.telemetry.otel import OtelTracing

FIELDS = {"bind": "bind/3000", "gateway": "default/default", "listener": "default/default/bind/3000/listener0",
          "route": "default/default/bind/3000/listener0/default/echo", "endpoint": "127.0.0.1:8080",
          "src.addr": "127.0.0.1:5555", "http.method": "GET", "http.host": "localhost", "http.path": "/x",
          "http.version": "1.1", "http.status": 200, "duration": "1.2ms"}
HEADERS = [(b"host", b"localhost"), (b"user-agent", b"wrk"), (b"accept", b"*/*")]


class _Accept(SpanExporter):
    def export(self, spans: object) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def access_log_ms(n: int) -> float:
    with tempfile.TemporaryFile("w") as sink:
        configure_logging("info", "json", stream=sink, env={})
        log = AccessLog()
        start = time.process_time()
        for _ in range(n):
            log.record(dict(FIELDS), 200, False)
        return (time.process_time() - start) / n * 1e3


def spans_ms(n: int, ratio: float) -> float:
    otel = OtelTracing(TracingSpec("http://127.0.0.1:1", "http", random_sampling=ratio), exporter=_Accept())
    start = time.process_time()
    for _ in range(n):
        span = otel.start("GET", "/x", HEADERS, time.time_ns())
        if span is not None:
            with otel.client_span(span, "GET backend", {"server.port": 8080}) as client:
                client.traceparent()
                client.status = 200
            OtelTracing.finish(span, 200, {"http.route": "r"}, None)
    otel.processor.force_flush()
    elapsed = time.process_time() - start
    otel.shutdown()
    return elapsed / n * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50_000)
    n = parser.parse_args().requests
    print("| addition | CPU ms/request | target |\n|---|---:|---:|")
    print(f"| JSON access-log line | {access_log_ms(n):.4f} | 0.05 |")
    print(f"| OTLP spans, 1% sampled | {spans_ms(n, 0.01):.4f} | 0.02 |")
    print(f"| OTLP spans, 100% sampled | {spans_ms(n, 1.0):.4f} | - |")


if __name__ == "__main__":
    main()
