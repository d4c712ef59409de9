"""Access logs, the log level at runtime, and /metrics as a dashboard reads them (docs/observability.md)."""

from __future__ import annotations

import io
import json
import logging

import httpx
import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port, start_gateway, start_routes
from tests.e2e.test_ratelimit_e2e import CHAT, TOKEN_LIMIT, start_mock
from trioproxy.telemetry.access_log import (
    JsonFormatter,
    TextFormatter,
    configure_logging,
    parse_level,
)


def requests_of(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["message"] == "request"]


async def test_plain_request_line_has_the_agentgateway_fields(nursery, gateway, log_lines):
    async with gateway.client() as client:
        assert (await client.get("/some/path?q=1", headers={"host": "api.example.com"})).status_code == 200
    [line] = requests_of(await log_lines())
    listener = f"default/default/bind/{gateway.port}/listener0"
    assert line["level"] == "info" and line["scope"] == "trioproxy.access"
    assert line["http.method"] == "GET" and line["http.path"] == "/some/path" and line["http.status"] == 200
    assert line["http.host"] == "api.example.com"
    assert line["bind"] == f"bind/{gateway.port}" and line["gateway"] == "default/default"
    assert line["listener"] == listener and line["route"] == f"{listener}/default/echo"
    assert line["endpoint"].startswith("127.0.0.1:") and line["src.addr"].startswith("127.0.0.1:")
    assert line["duration"].endswith("ms") and float(line["duration"][:-2]) >= 0
    assert "error" not in line


async def test_llm_stream_line_has_model_and_token_counts(nursery, mock_clock, log_lines):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKEN_LIMIT, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        response = await client.post("/chat", json={**CHAT, "stream": True}, headers={"x-mock-total-tokens": "40"})
    assert response.status_code == 200
    [line] = requests_of(await log_lines())
    assert line["gen_ai.request.model"] == "forced-model" and line["gen_ai.provider.name"] == "openai"
    assert (line["gen_ai.usage.input_tokens"], line["gen_ai.usage.output_tokens"]) == (20, 20)
    assert line["ratelimit"] == "100/100"


async def test_429_and_503_are_logged_with_their_reason(nursery, backend, mock_clock, log_lines):
    gw = await start_routes(nursery, """
        - name: limited
          matches: [{{path: {{pathPrefix: /limited}}}}]
          policies: {{localRateLimit: [{{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s}}]}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
        - name: dead
          backends: [{{host: "127.0.0.1:{dead}"}}]
        """, port=free_port(), backend=backend.port, dead=free_port())
    async with gw.client() as client:
        assert (await client.get("/limited")).status_code == 200
        assert (await client.get("/limited")).status_code == 429
        assert (await client.get("/dead")).status_code == 503
    ok, limited, dead = requests_of(await log_lines())
    assert ok["ratelimit"] == "0/1"
    assert (limited["http.status"], limited["level"], limited["error"]) == (429, "info", "rate limit exceeded")
    assert limited["ratelimit"] == "rejected"
    assert (dead["http.status"], dead["level"]) == (503, "warn")
    assert dead["error"].startswith("upstream connect error") or "refused" in dead["error"], dead["error"]


async def test_log_level_changes_at_runtime_through_admin_logging(nursery, gateway, log_lines):
    async with httpx.AsyncClient(base_url=gateway.admin_url, timeout=5) as admin, gateway.client() as client:
        assert (await admin.get("/logging")).json() == {"level": "info"}
        assert (await admin.post("/logging", params={"level": "warn"})).json() == {"level": "warn"}
        await client.get("/quiet")  # a 200 at info: not logged at warn
        bad = await admin.post("/logging", params={"level": "loud"})
        assert bad.status_code == 400 and "unknown log level 'loud'" in bad.text
        assert (await admin.post("/logging", params={"level": "info"})).json() == {"level": "info"}
        await client.get("/loud")
    assert [line["http.path"] for line in requests_of(await log_lines())] == ["/loud"]


async def test_metrics_names_labels_and_counts_match_the_requests(nursery, mock_clock):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKEN_LIMIT, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        for _ in range(2):
            assert (await client.post("/chat", json=CHAT, headers={"x-mock-total-tokens": "60"})).status_code == 200
        assert (await client.post("/chat", json=CHAT)).status_code == 429
        metrics = await client.get(f"http://{gw.info.stats}/metrics")
        same = await client.get(f"http://{gw.info.stats}/stats/prometheus")
    families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
    assert not any(s.name.endswith("_created") for f in families.values() for s in f.samples)
    requests = {(s.labels["status"], s.labels["reason"]): s.value for s in families["trioproxy_requests"].samples}
    assert requests == {("200", ""): 2.0, ("429", "RateLimited"): 1.0}
    sample = families["trioproxy_requests"].samples[0]
    assert sample.labels["backend"] == "mock" and sample.labels["method"] == "POST"
    assert sample.labels["route"].endswith("/default/llm")
    tokens = {(s.labels["gen_ai_token_type"], s.labels["gen_ai_request_model"]): s.value
              for s in families["trioproxy_gen_ai_client_token_usage"].samples if s.name.endswith("_sum")}
    assert tokens == {("input", "forced-model"): 60.0, ("output", "forced-model"): 60.0}
    decisions = {s.labels["result"]: s.value for s in families["trioproxy_ratelimit_decisions"].samples}
    assert decisions == {"allowed": 2.0, "rejected": 1.0}
    assert [s.value for s in families["trioproxy_build_info"].samples] == [1.0]
    assert [s.value for s in families["trioproxy_config_synchronized"].samples] == [1.0]
    assert same.status_code == 200 and "trioproxy_requests_total" in same.text


def test_formats_and_levels():
    record = logging.LogRecord("trioproxy.access", logging.INFO, __file__, 1, "request", None, None)
    record.fields = {"http.method": "GET", "http.path": "/a b", "http.status": 200}
    assert TextFormatter().format(record).endswith(' info request http.method=GET http.path="/a b" http.status=200')
    entry = json.loads(JsonFormatter().format(record))
    assert entry["message"] == "request" and entry["http.path"] == "/a b" and entry["level"] == "info"
    assert parse_level("WARN") == logging.WARNING and parse_level("trace") == logging.DEBUG
    with pytest.raises(ValueError, match="LOG_LEVEL: unknown log level 'x'"):
        configure_logging(env={"LOG_LEVEL": "x"}, stream=io.StringIO())
    with pytest.raises(ValueError, match="LOG_FORMAT: unknown log format 'xml'"):
        configure_logging(env={"LOG_FORMAT": "xml"}, stream=io.StringIO())


# --- OpenTelemetry export to a real OTLP/HTTP receiver -------------------------------------------

class OtlpReceiver:
    """An OTLP/HTTP collector stand-in: decodes each export with opentelemetry-proto."""

    def __init__(self) -> None:
        self.spans: list = []
        self.got = trio.Event()

    async def app(self, scope, receive, send) -> None:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        from trioproxy.asgi import read_body, serve_lifespan

        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
            return
        request = ExportTraceServiceRequest.FromString(await read_body(receive))
        for resource in request.resource_spans:
            for scope_spans in resource.scope_spans:
                self.spans.extend(scope_spans.spans)
        self.got.set()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/x-protobuf")]})
        await send({"type": "http.response.body", "body": b""})


def _attributes(span) -> dict:
    out = {}
    for kv in span.attributes:
        value = kv.value
        out[kv.key] = value.string_value or value.int_value or value.double_value or value.bool_value
    return out


async def test_spans_reach_a_real_otlp_receiver_with_gen_ai_attributes_and_traceparent(nursery):
    from trioproxy.config.model import Address
    from trioproxy.frontend.server import listen_socket, serve_app

    receiver = OtlpReceiver()
    sock = listen_socket(Address("127.0.0.1", 0), "receiver")
    await nursery.start(serve_app, receiver.app, sock, 1.0, trio.Event())
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, """
        config:
          tracing:
            otlpEndpoint: http://127.0.0.1:{otlp}
            otlpProtocol: http
            randomSampling: true
            fields: {{add: {{team: '"ml"'}}}}
        binds:
        - port: {port}
          listeners:
          - routes:
            - name: llm
              backends:
              - ai:
                  name: mock
                  provider: {{openAI: {{model: forced-model}}}}
                  hostOverride: "127.0.0.1:{mock}"
                  pathOverride: /v1/chat/completions
        """, port=free_port(), mock=mock.port, otlp=sock.getsockname()[1])
    client_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    async with gw.client() as client:
        answer = await client.post("/chat", json=CHAT, headers={
            "x-mock-total-tokens": "30", "traceparent": f"00-{client_trace}-00f067aa0ba902b7-01"})
        fresh = await client.post("/chat", json=CHAT, headers={"x-mock-total-tokens": "10"})
    assert answer.status_code == fresh.status_code == 200
    upstream = mock.chat_requests[0].header("traceparent")
    assert upstream.split("-")[1] == client_trace  # propagated to the backend, same trace
    await trio.testing.wait_all_tasks_blocked()
    assert await trio.to_thread.run_sync(gw.info.runtime.otel.processor.force_flush, 10000)
    with trio.fail_after(10):
        while len(receiver.spans) < 4:
            await receiver.got.wait()
            receiver.got = trio.Event()
    servers = [s for s in receiver.spans if s.kind == s.SPAN_KIND_SERVER]
    clients = [s for s in receiver.spans if s.kind == s.SPAN_KIND_CLIENT]
    assert len(servers) == 2 and len(clients) == 2
    continued = next(s for s in servers if s.trace_id.hex() == client_trace)
    assert continued.parent_span_id.hex() == "00f067aa0ba902b7"  # honoured the client's traceparent
    attributes = _attributes(continued)
    assert attributes["gen_ai.request.model"] == "forced-model"
    assert (attributes["gen_ai.usage.input_tokens"], attributes["gen_ai.usage.output_tokens"]) == (15, 15)
    assert attributes["http.response.status_code"] == 200 and attributes["team"] == "ml"  # config.tracing.fields
    child = next(s for s in clients if s.trace_id.hex() == client_trace)
    assert child.parent_span_id == continued.span_id and upstream.split("-")[2] == child.span_id.hex()
    other = next(s for s in servers if s is not continued)
    assert other.trace_id.hex() != client_trace and not other.parent_span_id  # randomSampling started it


async def test_unsampled_and_dead_collector_never_fail_requests(nursery, backend):
    gw = await start_gateway(nursery, """
        config:
          tracing: {{otlpEndpoint: "http://127.0.0.1:{dead}", otlpProtocol: http, randomSampling: 1.0}}
        binds:
        - port: {port}
          listeners:
          - routes:
            - backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port, dead=free_port())
    async with gw.client() as client:
        for _ in range(3):
            assert (await client.get("/x")).status_code == 200
    await trio.testing.wait_all_tasks_blocked()
    runtime = gw.info.runtime
    await trio.to_thread.run_sync(runtime.otel.processor.force_flush, 10000)
    failures = runtime.metrics.otlp_export_failures.collect()[0].samples[0].value
    assert failures == 6  # 3 server spans and 3 client spans, all counted, no request slowed


@pytest.mark.parametrize("where", [
    # config.logging alone
    "config:\n  logging:\n    filter: {filter}\n    fields: {{add: {add}, remove: {remove}}}\n",
    # agentgateway's frontendPolicies.accessLog (and its other name, logging): each of its settings
    # replaces config.logging's (which would log nothing, with a field of its own)
    "config:\n  logging: {{filter: 'false', fields: {{add: {{old: '\"x\"'}}}}}}\n"
    "frontendPolicies:\n  accessLog: {{filter: {filter}, add: {add}, remove: {remove}}}\n",
    "config:\n  logging: {{filter: 'false', fields: {{add: {{old: '\"x\"'}}}}}}\n"
    "frontendPolicies:\n  logging: {{filter: {filter}, add: {add}, remove: {remove}}}\n",
    # config.logging's remove still applies where accessLog sets none
    "config:\n  logging: {{fields: {{remove: {remove}}}}}\n"
    "frontendPolicies:\n  accessLog: {{filter: {filter}, add: {add}}}\n",
], ids=["config.logging", "accessLog", "logging", "accessLog+config.logging.remove"])
async def test_access_log_filter_and_fields(nursery, backend, log_lines, where):
    """The same filter (CEL), added field and removed field, from each place a config may set them:
    only the matching requests are logged, with the field added and without the one removed."""
    settings = {"filter": "'response.code >= 400 || request.path == \"/keep\"'",
                "add": "{tenant: 'request.headers[\"x-tenant\"]'}", "remove": "[src.addr]"}
    config = where.format(**settings) + f"""
binds:
- port: {free_port()}
  listeners:
  - routes:
    - name: ok
      matches: [{{path: {{pathPrefix: /ok}}}}, {{path: {{exact: /keep}}}}]
      backends: [{{host: "127.0.0.1:{backend.port}"}}]
"""
    gw = await start_gateway(nursery, config.replace("{", "{{").replace("}", "}}"))  # nothing left to format
    async with gw.client() as client:
        await client.get("/ok")  # 200, filtered out
        await client.get("/keep", headers={"x-tenant": "acme"})
        await client.get("/missing")  # 404
    kept = requests_of(await log_lines())
    assert [(line["http.path"], line["http.status"]) for line in kept] == [("/keep", 200), ("/missing", 404)]
    assert kept[0]["tenant"] == "acme"
    assert all("src.addr" not in line and "old" not in line for line in kept)


async def test_frontend_tracing_replaces_config_tracing_and_adds_and_removes_attributes(nursery, backend):
    """``frontendPolicies.tracing`` (agentgateway's newer spelling): a bare HOST:PORT collector, its
    sampling, attributes (CEL) added and removed; config.tracing's dead collector is not used."""
    from trioproxy.config.model import Address
    from trioproxy.frontend.server import listen_socket, serve_app

    receiver = OtlpReceiver()
    sock = listen_socket(Address("127.0.0.1", 0), "receiver")
    await nursery.start(serve_app, receiver.app, sock, 1.0, trio.Event())
    gw = await start_gateway(nursery, """
        config:
          tracing: {{otlpEndpoint: "http://127.0.0.1:{dead}", randomSampling: false}}
        frontendPolicies:
          tracing:
            host: 127.0.0.1:{otlp}
            protocol: http
            randomSampling: true
            attributes: {{tenant: 'request.headers["x-tenant"]'}}
            remove: [url.path]
        binds:
        - port: {port}
          listeners:
          - routes:
            - backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port, otlp=sock.getsockname()[1], dead=free_port())
    async with gw.client() as client:
        assert (await client.get("/x", headers={"x-tenant": "acme"})).status_code == 200
    await trio.testing.wait_all_tasks_blocked()
    runtime = gw.info.runtime
    assert await trio.to_thread.run_sync(runtime.otel.processor.force_flush, 10000)
    with trio.fail_after(10):
        while not any(s.kind == s.SPAN_KIND_SERVER for s in receiver.spans):
            await receiver.got.wait()
            receiver.got = trio.Event()
    server = next(s for s in receiver.spans if s.kind == s.SPAN_KIND_SERVER)
    attributes = _attributes(server)
    assert attributes["tenant"] == "acme" and attributes["http.response.status_code"] == 200
    assert "url.path" not in attributes
    assert runtime.metrics.otlp_export_failures.collect()[0].samples[0].value == 0


def test_bad_logging_and_tracing_config_are_positioned_errors():
    from trioproxy.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as caught:
        parse_config("config:\n  logging:\n    filter: 'nope('\n  tracing:\n    otlpEndpoint: localhost:4317\n"
                     "binds: []\n")
    problems = "\n".join(caught.value.problems)
    assert "<config>:3:13: config.logging.filter: invalid CEL expression" in problems
    assert "config.tracing.otlpEndpoint: expected an http:// or https:// URL" in problems
    with pytest.raises(ConfigError) as caught:
        parse_config("config:\n  tracing:\n    otlpEndpoint: http://c:4317\n    randomSampling: 2\nbinds: []\n")
    assert caught.value.problems == [
        "<config>:4:21: config.tracing.randomSampling: expected a ratio from 0.0 to 1.0, got 2"]
    with pytest.raises(ConfigError) as caught:
        parse_config("frontendPolicies:\n  accessLog: {filter: 'nope(', add: {a: 'b +'}}\n  logging: {}\n"
                     "  tracing: {host: 'ftp://c:4317', attributes: {t: ')'}}\nbinds: []\n")
    problems = "\n".join(caught.value.problems)
    assert "<config>:2:23: frontendPolicies.accessLog.filter: invalid CEL expression" in problems
    assert "frontendPolicies.accessLog.add: a: invalid CEL expression" in problems
    assert "<config>:3:12: frontendPolicies.logging: accessLog and logging are the same setting" in problems
    assert "frontendPolicies.tracing.host: expected HOST:PORT or an http:// or https:// URL, got 'ftp://c:4317'" \
        in problems
    assert "frontendPolicies.tracing.attributes: t: invalid CEL expression" in problems
    with pytest.raises(ConfigError) as caught:
        parse_config("frontendPolicies:\n  tracing: {host: 'c:4317', filter: 'true'}\nbinds: []\n")
    assert caught.value.problems == ["<config>:2:29: frontendPolicies.tracing.filter: 'filter' is an agentgateway "
                                     "feature that trioproxy does not implement"]


def test_grafana_dashboard_uses_only_metrics_the_gateway_exports():
    import re

    from tests.conftest import ROOT
    from trioproxy.telemetry.metrics import Metrics

    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    used = set(re.findall(r"trioproxy_[a-z_]+", json.dumps(dashboard)))
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    exported = {f.name + suffix for f in Metrics().registry.collect() for suffix in suffixes[f.type]}
    assert used and used <= exported, used - exported
