"""OpenTelemetry spans over OTLP (``config.tracing``): the always-on, sampled view of traffic.

A request gets a server span when it is sampled: a client's ``traceparent`` with the sampled
flag is honoured (``clientSampling``, default all of them), and a request without one starts a
trace with probability ``randomSampling`` (default none). The decision is made here, before the
SDK is touched, so an unsampled request costs a random draw and a header lookup. The upstream
call gets a client span, and ``traceparent`` goes to the backend.

Export is the SDK's: a ``BatchSpanProcessor`` thread hands spans to the OTLP exporter (gRPC or
HTTP/protobuf), so a slow or dead collector never slows or fails a request; spans it could not
send are counted by ``trioproxy_otlp_export_failures_total``. The debug ``/debug/trace`` stream
is separate and unchanged.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import trio
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..asgi import Header
from ..config.model import TracingSpec
from ..errors import ProxyError
from ..version import __version__

PROPAGATOR = TraceContextTextMapPropagator()

__all__ = ["NO_CLIENT_SPAN", "ClientSpan", "OtelTracing"]


class _CountingExporter(SpanExporter):
    """Wraps the OTLP exporter: export failures become a metric, never an exception."""

    def __init__(self, inner: SpanExporter, on_failure: Callable[[int], None]) -> None:
        self.inner = inner
        self.on_failure = on_failure

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        try:
            result = self.inner.export(spans)
        except Exception:  # noqa: BLE001 - the collector's problem must not reach the data plane
            result = SpanExportResult.FAILURE
        if result is not SpanExportResult.SUCCESS:
            self.on_failure(len(spans))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _exporter(spec: TracingSpec) -> SpanExporter:
    headers = dict(spec.headers)
    if spec.protocol == "http":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        endpoint = spec.endpoint.rstrip("/") + (spec.path or "/v1/traces")
        return HttpExporter(endpoint=endpoint, headers=headers, timeout=5)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcExporter,
    )

    return GrpcExporter(endpoint=spec.endpoint, headers=headers or None, timeout=5,
                        insecure=spec.endpoint.startswith("http://"))


class OtelTracing:
    """Sampling decision, span creation and propagation for one tracing config."""

    def __init__(self, spec: TracingSpec, *, on_export_failure: Callable[[int], None] = lambda n: None,
                 exporter: SpanExporter | None = None) -> None:
        self.spec = spec
        self.provider = TracerProvider(resource=Resource.create({"service.name": "trioproxy",
                                                                 "service.version": __version__}))
        self.processor = BatchSpanProcessor(_CountingExporter(exporter or _exporter(spec), on_export_failure),
                                            schedule_delay_millis=500)
        self.provider.add_span_processor(self.processor)
        self.tracer = self.provider.get_tracer("trioproxy", __version__)
        self._random = random.random
        from ..cel import compile_expression

        # ``fields`` (config.tracing.fields, frontendPolicies.tracing's attributes and remove): the
        # server span's attributes removed first, then those added, as agentgateway applies them.
        self.add = tuple((name, compile_expression(source)) for name, source in spec.fields.add)
        self.remove = frozenset(spec.fields.remove)

    def start(self, method: str, path: str, headers: Sequence[Header], start_ns: int) -> Any | None:
        """A server span for a sampled request, else ``None`` (the common, cheap case)."""
        traceparent = None
        for name, value in headers:
            if name == b"traceparent":
                traceparent = value.decode("latin-1")
                break
        if traceparent is None:
            if self.spec.random_sampling <= 0.0 or self._random() >= self.spec.random_sampling:
                return None
            context = None
        else:
            context = PROPAGATOR.extract({"traceparent": traceparent})
            parent = otel_trace.get_current_span(context).get_span_context()
            sampled = parent.is_valid and parent.trace_flags.sampled
            if not sampled or self.spec.client_sampling <= 0.0 or self._random() >= self.spec.client_sampling:
                return None
        attributes = {"http.request.method": method, "url.path": path}
        if self.remove:
            attributes = {k: v for k, v in attributes.items() if k not in self.remove}
        return self.tracer.start_span(f"{method} {path}", context=context, kind=SpanKind.SERVER,
                                      start_time=start_ns, attributes=attributes)

    def client_span(self, server_span: Any, name: str, attributes: Mapping[str, Any]) -> ClientSpan:
        """The upstream call's span, a child of the request's: ``with`` it around the call."""
        context = otel_trace.set_span_in_context(server_span)
        return ClientSpan(self.tracer.start_span(name, context=context, kind=SpanKind.CLIENT,
                                                 attributes=dict(attributes)))

    @staticmethod
    def traceparent(span: Any) -> Header:
        carrier: dict[str, str] = {}
        PROPAGATOR.inject(carrier, context=otel_trace.set_span_in_context(span))
        return (b"traceparent", carrier["traceparent"].encode())

    @staticmethod
    def trace_id(span: Any) -> str:
        return format(span.get_span_context().trace_id, "032x")

    def finish_request(self, span: Any, status: int, attributes: Mapping[str, Any], error: str | None,
                       activation: Callable[[], Mapping[str, Any]]) -> None:
        """End the server span: ``attributes`` less the removed ones, then the added ones, CEL over
        the finished request (``activation``); one that does not evaluate is left out."""
        if self.remove:
            attributes = {k: v for k, v in attributes.items() if k not in self.remove}
        if self.add:
            values = activation()
            attributes = dict(attributes)
            for name, expression in self.add:
                value = expression.evaluate(values)
                attributes[name] = value if value is None or isinstance(value, (str, bool, int, float)) else str(value)
        self.finish(span, status, attributes, error, status_attribute="http.response.status_code" not in self.remove)

    @staticmethod
    def finish(span: Any, status: int, attributes: Mapping[str, Any], error: str | None, *,
               status_attribute: bool = True) -> None:
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
        if status_attribute:
            span.set_attribute("http.response.status_code", status)
        if status >= 500 or error is not None and status >= 400:
            span.set_status(Status(StatusCode.ERROR, error or str(status)))
        span.end()

    def shutdown(self) -> None:
        self.provider.shutdown()


class ClientSpan:
    """The client span of one upstream call, ended when the ``with`` block around the call exits:
    with ``status`` (the response's, set in the block once there is one), 502 and the message of
    the ``ProxyError`` that failed the call, or 504 when the request's deadline cancelled it. A
    client that left (any other exception) leaves it unended, so unexported, like its call.

    ``NO_CLIENT_SPAN``, for the unsampled request, does nothing: one shared instance, no span."""

    __slots__ = ("span", "status")

    def __init__(self, span: Any) -> None:
        self.span = span
        self.status = 0

    def traceparent(self) -> Header:
        """The header that makes the backend's spans children of this one."""
        return OtelTracing.traceparent(self.span)

    def __enter__(self) -> ClientSpan:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        span = self.span
        if span is None:
            return
        if error is None:
            OtelTracing.finish(span, self.status, {}, None)
        elif isinstance(error, ProxyError):
            OtelTracing.finish(span, 502, {}, error.message)
        elif isinstance(error, trio.Cancelled):
            OtelTracing.finish(span, 504, {}, "request timeout")


NO_CLIENT_SPAN = ClientSpan(None)
