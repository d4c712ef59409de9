"""The upstream call's client span as a context manager (otel.ClientSpan), and the pipeline's
module boundaries: websocket.py and pipeline.py reach the shared steps without gateway.py."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest
import trio
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from trioproxy.config.model import TracingSpec
from trioproxy.errors import BackendUnreachable
from trioproxy.telemetry.otel import NO_CLIENT_SPAN, OtelTracing

ROOT = Path(__file__).resolve().parents[3]


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list = []

    def export(self, spans: object) -> SpanExportResult:
        self.spans.extend(spans)  # type: ignore[call-overload]
        return SpanExportResult.SUCCESS


class _Tracing:
    """A sampled server span and the client span of its upstream call, exported in memory."""

    def __init__(self) -> None:
        self.exporter = _Keep()
        self.otel = OtelTracing(TracingSpec("http://127.0.0.1:1", "http", random_sampling=1.0),
                                exporter=self.exporter)
        server = self.otel.start("GET", "/x", [], time.time_ns())
        assert server is not None
        self.call = self.otel.client_span(server, "GET backend", {"server.port": 8080})

    def ended(self) -> list:
        self.otel.processor.force_flush()
        self.otel.shutdown()
        return [s for s in self.exporter.spans if s.name == "GET backend"]


def test_the_client_span_ends_with_the_response_status():
    tracing = _Tracing()
    with tracing.call as span:
        span.status = 201
    [span] = tracing.ended()
    assert span.attributes["http.response.status_code"] == 201
    assert span.status.status_code is not StatusCode.ERROR


def test_a_failed_call_ends_its_client_span_502_with_the_error():
    tracing = _Tracing()
    with pytest.raises(BackendUnreachable), tracing.call:
        raise BackendUnreachable("upstream connect error: refused")
    [span] = tracing.ended()
    assert span.attributes["http.response.status_code"] == 502
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "upstream connect error: refused"


async def test_a_call_cancelled_by_the_deadline_ends_its_client_span_504():
    tracing = _Tracing()
    with trio.CancelScope() as scope, tracing.call:
        scope.cancel()
        await trio.sleep(0)
    [span] = tracing.ended()
    assert span.attributes["http.response.status_code"] == 504
    assert span.status.description == "request timeout"


def test_the_unsampled_request_shares_one_client_span_that_does_nothing():
    with NO_CLIENT_SPAN as span:
        span.status = 200
    assert NO_CLIENT_SPAN.span is None
    with pytest.raises(BackendUnreachable), NO_CLIENT_SPAN:
        raise BackendUnreachable("x")


def _imports(module: str) -> set[str]:
    tree = ast.parse((ROOT / "trioproxy" / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("module", ["proxy/websocket", "proxy/pipeline", "proxy/request_telemetry"])
def test_the_shared_pipeline_and_the_websocket_path_do_not_import_the_http_path(module):
    assert "gateway" not in _imports(module)
    assert "websocket" not in _imports("proxy/pipeline")


@pytest.mark.parametrize("module", ["telemetry/metrics", "telemetry/otel"])
def test_telemetry_reads_the_version_without_importing_the_package(module):
    """Not ``from .. import __version__``: the package's __init__ imports the gateway."""
    tree = ast.parse((ROOT / "trioproxy" / f"{module}.py").read_text())
    depth = module.count("/") + 1  # the relative level that names the trioproxy package itself
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module is None and n.level == depth]
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 0
                and n.module == "trioproxy"]
    assert "version" in {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == depth}
