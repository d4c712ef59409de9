"""What a finished request leaves behind (proxy/request_telemetry.py), one sink at a time: the
metrics' label values and token usage, the server span's name and gen-ai attributes, the history
summary and the access-log line's fields. The metrics and the access log are recording doubles of
their three methods (what the sink is called with is the behaviour under test); the history and the
span are the real ones (an in-memory span exporter)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from trioproxy.config.model import LogFieldsSpec, TracingSpec
from trioproxy.policies.ratelimit_local import Decision
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.request_telemetry import end_server_span, log_request, observe_request
from trioproxy.telemetry.history import History
from trioproxy.telemetry.otel import OtelTracing


async def _never(*_: Any) -> Any:
    raise AssertionError("not called")


def exchange(**scope: Any) -> Exchange:
    full = {"type": "http", "method": "POST", "path": "/v1/chat", "headers": [(b"host", b"api.example:8080")],
            "http_version": "2", "client": ("10.0.0.7", 5151), **scope}
    x = Exchange(full, _never, _never, arrival=100.0)
    return x


def routed(x: Exchange, *, llm: dict[str, Any] | None = None) -> Exchange:
    x.listener = SimpleNamespace(key="ns/gw/bind/main")  # type: ignore[assignment]
    x.route = SimpleNamespace(key="ns/route")  # type: ignore[assignment]
    x.backend = SimpleNamespace(name="svc", target="svc.ns:80")  # type: ignore[assignment]
    x.llm = llm
    return x


LLM = {"provider": "gemini", "model": "gemini-2.5", "responseModel": "gemini-2.5-001", "inputTokens": 11,
       "outputTokens": 7, "cachedInputTokens": 3, "reasoningTokens": 2, "cacheCreationInputTokens": 5,
       "cost": 0.25, "streaming": True}


class Metrics:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def observe(self, *args: Any) -> None:
        self.calls.append(("observe", args))

    def cost(self, *args: Any) -> None:
        self.calls.append(("cost", args))

    def gen_ai(self, *args: Any) -> None:
        self.calls.append(("gen_ai", args))


class AccessLog:
    def __init__(self, threshold: int = 0) -> None:
        self.threshold = threshold  # enabled for statuses >= threshold
        self.asked: list[int] = []
        self.lines: list[tuple[dict[str, Any], int, bool, Any]] = []

    def enabled(self, status: int) -> bool:
        self.asked.append(status)
        return status >= self.threshold

    def record(self, fields: dict[str, Any], status: int, own_error: bool, activation: Any) -> None:
        self.lines.append((fields, status, own_error, activation))


# --- metrics ---------------------------------------------------------------------------------------


def test_a_request_is_counted_with_its_gateway_listener_route_backend_and_reason():
    metrics = Metrics()
    x = routed(exchange())
    x.error_kind = "RateLimited"
    observe_request(metrics, "0.0.0.0:3000", x, 429, 0.5)  # type: ignore[arg-type]
    assert metrics.calls == [("observe", ("0.0.0.0:3000", "ns/gw", "ns/gw/bind/main", "ns/route", "svc", "POST", 429,
                                          "RateLimited", 0.5))]


def test_a_request_that_got_nowhere_is_counted_with_empty_names():
    metrics = Metrics()
    observe_request(metrics, "b", exchange(method="GET"), 404, 0.1)  # type: ignore[arg-type]
    assert metrics.calls == [("observe", ("b", "", "", "", "", "GET", 404, "", 0.1))]


def test_a_listener_key_without_a_bind_part_is_its_own_gateway():
    metrics = Metrics()
    x = routed(exchange())
    x.listener = SimpleNamespace(key="ns/gw/bind/a/bind/b")  # type: ignore[assignment]
    observe_request(metrics, "b", x, 200, 0.1)  # type: ignore[arg-type]
    assert metrics.calls[0][1][1:3] == ("ns/gw", "ns/gw/bind/a/bind/b")  # split once, at the first
    x.listener = SimpleNamespace(key="plain")  # type: ignore[assignment]
    observe_request(metrics, "b", x, 200, 0.1)  # type: ignore[arg-type]
    assert metrics.calls[1][1][1:3] == ("plain", "plain")


def test_an_llm_call_adds_its_cost_tokens_duration_and_time_to_first_token():
    metrics = Metrics()
    x = routed(exchange(), llm=dict(LLM))
    x.llm_kind = "generate_content"
    x.first_chunk = 100.75
    observe_request(metrics, "b", x, 200, 2.0)  # type: ignore[arg-type]
    assert metrics.calls[1:] == [
        ("cost", ("ns/route", "gcp.gemini", "gemini-2.5-001", 0.25)),
        ("gen_ai", (("generate_content", "gcp.gemini", "gemini-2.5", "gemini-2.5-001", "ns/gw", "ns/gw/bind/main",
                     "ns/route"),
                    (("input", 11), ("output", 7), ("cached_input", 3), ("reasoning", 2)), 2.0, 0.75, 7)),
    ]


def test_an_llm_call_without_a_kind_is_a_passthrough_and_without_models_has_empty_labels():
    metrics = Metrics()
    x = routed(exchange(), llm={"provider": "openAI", "cost": 0.5})
    observe_request(metrics, "b", x, 200, 1.0)  # type: ignore[arg-type]
    assert metrics.calls[1:] == [
        ("cost", ("ns/route", "openai", "", 0.5)),
        ("gen_ai", (("passthrough", "openai", "", "", "ns/gw", "ns/gw/bind/main", "ns/route"),
                    (("input", None), ("output", None), ("cached_input", None), ("reasoning", None)), 1.0, None,
                    None)),
    ]


def test_the_cost_is_labelled_with_the_request_model_when_the_answer_names_none():
    metrics = Metrics()
    observe_request(metrics, "b", routed(exchange(), llm={"provider": "x", "model": "m1", "cost": 0.0}),  # type: ignore[arg-type]
                    200, 1.0)
    assert metrics.calls[1] == ("cost", ("ns/route", "x", "m1", 0.0))  # a zero cost is still counted


def test_no_time_to_first_token_when_not_streamed_or_no_chunk_came():
    for streaming, chunk in ((False, 101.0), (True, None)):
        metrics = Metrics()
        x = routed(exchange(), llm={"provider": "p", "streaming": streaming})
        x.first_chunk = chunk
        observe_request(metrics, "b", x, 200, 1.0)  # type: ignore[arg-type]
        assert metrics.calls[-1][0] == "gen_ai" and metrics.calls[-1][1][3] is None


def test_a_failed_llm_call_counts_its_cost_but_no_usage():
    for status, expected in ((399, ["observe", "cost", "gen_ai"]), (400, ["observe", "cost"]),
                             (499, ["observe", "cost"])):
        metrics = Metrics()
        observe_request(metrics, "b", routed(exchange(), llm=dict(LLM)), status, 1.0)  # type: ignore[arg-type]
        assert [name for name, _ in metrics.calls] == expected
    metrics = Metrics()
    observe_request(metrics, "b", routed(exchange(), llm={"provider": "p"}), 200, 1.0)  # type: ignore[arg-type]
    assert [name for name, _ in metrics.calls] == ["observe", "gen_ai"]  # no cost: nothing counted


# --- the server span --------------------------------------------------------------------------------


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[Any] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


def _span(x: Exchange) -> tuple[OtelTracing, _Keep]:
    keep = _Keep()
    otel = OtelTracing(TracingSpec("http://127.0.0.1:1", "http", random_sampling=1.0), exporter=keep)
    x.span = otel.start("POST", "/v1/chat", [], time.time_ns())
    assert x.span is not None
    return otel, keep


def _ended(otel: OtelTracing, keep: _Keep) -> Any:
    otel.processor.force_flush()
    otel.shutdown()
    [span] = keep.spans
    return span


def test_an_llm_span_is_named_after_its_operation_and_model_with_the_gen_ai_values():
    x = routed(exchange(), llm=dict(LLM))
    x.llm_kind = "completions"
    otel, keep = _span(x)
    end_server_span(otel, x, 200)
    span = _ended(otel, keep)
    assert span.name == "chat gemini-2.5"
    expected = {
        "http.route": "ns/route", "gen_ai.request.model": "gemini-2.5", "gen_ai.response.model": "gemini-2.5-001",
        "gen_ai.provider.name": "gcp.gemini", "gen_ai.usage.input_tokens": 11, "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 3, "gen_ai.operation.name": "chat", "gen_ai.usage.cost": 0.25,
        "http.response.status_code": 200,
    }
    assert {k: span.attributes.get(k) for k in expected} == expected
    assert "error.type" not in span.attributes


def test_an_llm_span_without_a_model_is_named_after_its_operation():
    x = routed(exchange(), llm={"provider": "p"})
    otel, keep = _span(x)
    end_server_span(otel, x, 200)
    span = _ended(otel, keep)
    assert span.name == "passthrough"
    assert span.attributes["gen_ai.operation.name"] == "passthrough"
    assert "gen_ai.request.model" not in span.attributes


def test_a_span_without_a_route_has_no_route_and_carries_the_error_type():
    x = exchange()
    x.error_kind = "NoRoute"
    x.error = "no route"
    otel, keep = _span(x)
    end_server_span(otel, x, 404)
    span = _ended(otel, keep)
    assert span.name != "passthrough"
    assert "http.route" not in span.attributes
    assert span.attributes["error.type"] == "NoRoute"
    assert span.status.status_code is StatusCode.ERROR


def test_with_tracing_turned_off_meanwhile_the_span_still_ends_with_its_status():
    x = routed(exchange(), llm=dict(LLM))
    x.error = "upstream reset"
    otel, keep = _span(x)
    end_server_span(None, x, 502)
    span = _ended(otel, keep)
    assert span.attributes["http.response.status_code"] == 502
    assert "http.route" not in span.attributes and "gen_ai.request.model" not in span.attributes
    assert span.status.status_code is StatusCode.ERROR and span.status.description == "upstream reset"


def test_the_span_attributes_cel_sees_the_finished_status():
    x = routed(exchange())
    keep = _Keep()
    otel = OtelTracing(TracingSpec("http://127.0.0.1:1", "http", random_sampling=1.0,
                                   fields=LogFieldsSpec(add=(("code", "response.code"), ("m", "request.method")))), exporter=keep)
    x.span = otel.start("POST", "/v1/chat", [], time.time_ns())
    end_server_span(otel, x, 418)
    span = _ended(otel, keep)
    assert span.attributes["code"] == 418 and span.attributes["m"] == "POST"


# --- history and access log ---------------------------------------------------------------------------


def test_the_history_keeps_a_summary_of_the_request():
    history, access = History(10), AccessLog()
    x = routed(exchange(path="/v1/chat?x=1"), llm=dict(LLM))
    x.jwt = {"sub": "alice"}
    before = time.time()
    log_request(access, history, "b", x, 200, 0.25)  # type: ignore[arg-type]
    [entry] = history.entries
    assert before <= entry.time <= time.time()
    expected = {"method": "POST", "path": "/v1/chat?x=1", "host": "api.example", "route": "ns/route", "backend": "svc",
                "status": 200, "duration_ms": 250.0, "input_tokens": 11, "output_tokens": 7, "subject": "alice",
                "reason": None, "error_kind": None, "model": "gemini-2.5", "cost": 0.25}
    assert {k: v for k, v in entry._asdict().items() if k in expected} == expected


@pytest.mark.parametrize("who", [{"api_key": {"name": "k1"}}, {"basic_auth": {"username": "k1"}}])
def test_the_subject_is_the_api_key_or_basic_user(who):
    history = History(10)
    x = exchange()
    for name, value in who.items():
        setattr(x, name, value)
    log_request(AccessLog(), history, "b", x, 200, 0.0)  # type: ignore[arg-type]
    assert history.entries[0].subject == "k1"


def test_the_gateways_own_error_is_the_summarys_reason_and_an_upstream_one_is_not():
    history = History(10)
    x = exchange()
    x.error, x.error_kind = "rate limited", "RateLimited"
    log_request(AccessLog(), history, "b", x, 429, 0.0)  # type: ignore[arg-type]
    x2 = exchange()
    x2.error = "upstream said no"
    log_request(AccessLog(), history, "b", x2, 503, 0.0)  # type: ignore[arg-type]
    first, second = history.entries
    assert (first.reason, first.error_kind, first.subject, first.route, first.backend) == (
        "rate limited", "RateLimited", None, "", "")
    assert (first.input_tokens, first.model, first.cost) == (None, None, None)
    assert (second.reason, second.error_kind) == (None, None)


def test_a_history_of_size_zero_records_nothing():
    history = History(0)
    log_request(AccessLog(), history, "b", exchange(), 200, 0.0)  # type: ignore[arg-type]
    assert list(history.entries) == []


def test_the_access_log_asks_its_level_for_the_gateways_own_errors_only():
    access = AccessLog(threshold=500)
    x = exchange()
    log_request(access, History(0), "b", x, 503, 0.0)  # an upstream 503: logged at the 200 level
    x.error_kind = "Timeout"
    log_request(access, History(0), "b", x, 504, 0.0)
    assert access.asked == [200, 504]
    assert [(status, own) for _, status, own, _ in access.lines] == [(504, True)]


def test_the_access_line_has_agentgateways_fields_and_cel_sees_the_status():
    access = AccessLog()
    x = routed(exchange(), llm=dict(LLM))
    x.llm_kind = "completions"
    x.jwt = {"sub": "alice"}
    x.attempts = ["a", "b"]
    x.skipped = ["c", "d"]
    x.mcp = {"mcp.method": "tools/call"}
    x.limits = [(None, Decision(True, 10, 3, 1)), (None, Decision(True, 5, 0, 1))]  # type: ignore[list-item]
    log_request(access, History(0), "0.0.0.0:3000", x, 200, 0.01234)  # type: ignore[arg-type]
    [(fields, status, own, activation)] = access.lines
    assert (status, own) == (200, False)
    assert fields == {
        "bind": "0.0.0.0:3000", "gateway": "ns/gw", "listener": "ns/gw/bind/main", "route": "ns/route",
        "endpoint": "svc.ns:80", "src.addr": "10.0.0.7:5151", "http.method": "POST", "http.host": "api.example",
        "http.path": "/v1/chat", "http.version": "2", "http.status": 200, "duration": "12.3ms", "jwt.sub": "alice",
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "gcp.gemini", "gen_ai.request.model": "gemini-2.5",
        "gen_ai.response.model": "gemini-2.5-001", "gen_ai.usage.input_tokens": 11, "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 3, "gen_ai.usage.cache_creation.input_tokens": 5,
        "gen_ai.usage.reasoning.output_tokens": 2, "gen_ai.usage.cost": 0.25, "llm.attempts": "a,b",
        "llm.skipped": "c,d", "mcp.method": "tools/call", "ratelimit": f"{3}/{10},{0}/{5}",
    }
    values = activation()
    assert values["response"] == {"code": 200} and values["request"]["method"] == "POST"


def test_the_access_line_leaves_out_what_the_request_did_not_have():
    access = AccessLog()
    x = exchange(headers=[], client=None)
    del x.scope["http_version"]
    x.jwt = {"sub": 7}
    x.attempts = ["only"]
    log_request(access, History(0), "b", x, 200, 0.0)  # type: ignore[arg-type]
    [(fields, *_)] = access.lines
    assert fields == {"bind": "b", "http.method": "POST", "http.path": "/v1/chat", "http.version": "1.1",
                      "http.status": 200, "duration": "0.0ms"}


def test_the_access_line_names_plain_attempts_a_rejection_and_the_trace():
    access = AccessLog()
    x = routed(exchange())
    x.attempts = ["a", "b"]
    x.error, x.error_kind = "too many", "RateLimited"
    otel, keep = _span(x)
    log_request(access, History(0), "b", x, 429, 0.0)  # type: ignore[arg-type]
    [(fields, status, own, _)] = access.lines
    assert (fields["attempts"], fields["ratelimit"], fields["error"]) == ("a,b", "rejected", "too many")
    assert "llm.attempts" not in fields
    assert fields["trace.id"] == format(x.span.get_span_context().trace_id, "032x")
    assert own is True
    x.span.end()
    otel.shutdown()


def test_one_limiter_is_its_remaining_over_its_limit():
    access = AccessLog()
    x = routed(exchange())
    x.limits = [(None, Decision(True, 1000, 970, 1))]  # type: ignore[list-item]
    log_request(access, History(0), "b", x, 200, 0.0)  # type: ignore[arg-type]
    [(fields, *_)] = access.lines
    assert fields["ratelimit"] == "970/1000"
