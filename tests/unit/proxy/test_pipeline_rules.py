"""The request pipeline's steps (proxy/pipeline.py) over the in-memory harness: an ``llm:`` port's
model choice (the model list, the body's model or the path's, a target's own quota, a virtual
model), and the WebSocket upgrade's steps 4-5 (``route_and_backend_stages``) called on the harness's
runtime with an exchange of its own (the harness serves no upgrades)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest
import trio
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from tests.memory_harness import Backend, answer, memory_gateway
from trioproxy.config.model import TracingSpec
from trioproxy.errors import BackendUnreachable, RouteNotFound
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.pipeline import Pipeline
from trioproxy.telemetry.otel import OtelTracing

JSON = [(b"content-type", b"application/json")]


def completion(text: str) -> bytes:
    return json.dumps({"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}).encode()


def provider(text: str) -> Backend:
    return Backend(answer(200, completion(text), JSON))


LLM = """
llm:
  port: 4000
  models:
  - {name: a, provider: openAI, params: {model: gpt-a, apiKey: key-a, hostOverride: "a.test:80"}}
  - {name: b, provider: openAI, params: {model: gpt-b, apiKey: key-b, hostOverride: "b.test:80"},
     localRateLimit: [{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s}]}
  - {name: g, provider: gemini, params: {model: gemini-x, apiKey: key-g, hostOverride: "g.test:80"}}
  virtualModels:
  - name: smart
    routing:
      failover:
        targets: [{model: b}]
"""


def chat(model: str) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]}).encode()


def backends() -> dict[str, Backend]:
    return {"a.test:80": provider("from a"), "b.test:80": provider("from b"), "g.test:80": provider("from g")}


async def test_the_model_list_is_answered_by_the_gateway_for_get_and_head(autojump_clock):
    called = backends()
    async with memory_gateway(LLM, called) as gw:
        listed = await gw.request("GET", "/v1/models")
        head = await gw.request("HEAD", "/v1/models")
    assert listed.status == 200 and head.status == 200
    # the route's backends, then its virtual models (docs/resilience.md, "Virtual models")
    assert [(m["id"], m["owned_by"]) for m in json.loads(listed.body)["data"]] == [
        ("a", "openAI"), ("b", "openAI"), ("g", "gemini"), ("smart", "trioproxy")]
    assert all(not b.received for b in called.values())


async def test_a_post_to_the_models_path_is_not_the_list(autojump_clock):
    async with memory_gateway(LLM, backends()) as gw:
        response = await gw.request("POST", "/v1/models", headers=JSON, body=chat("a"))
    assert response.status == 200 and "data" not in json.loads(response.body)


async def test_the_bodys_model_picks_the_target_and_its_model_is_sent(autojump_clock):
    called = backends()
    async with memory_gateway(LLM, called) as gw:
        response = await gw.request("POST", "/v1/chat/completions", headers=JSON, body=chat("a"))
    assert response.status == 200 and json.loads(response.body)["choices"][0]["message"]["content"] == "from a"
    (sent,) = called["a.test:80"].received
    assert json.loads(sent.body)["model"] == "gpt-a" and sent.header("authorization") == "Bearer key-a"
    assert not called["b.test:80"].received


async def test_a_targets_own_quota_applies_to_a_request_for_it(autojump_clock):
    called = backends()
    async with memory_gateway(LLM, called) as gw:
        first = await gw.request("POST", "/v1/chat/completions", headers=JSON, body=chat("b"))
        second = await gw.request("POST", "/v1/chat/completions", headers=JSON, body=chat("b"))
    assert (first.status, second.status) == (200, 429)
    assert len(called["b.test:80"].received) == 1


async def test_a_virtual_model_goes_to_its_targets(autojump_clock):
    called = backends()
    async with memory_gateway(LLM, called) as gw:
        response = await gw.request("POST", "/v1/chat/completions", headers=JSON, body=chat("smart"))
        again = await gw.request("POST", "/v1/chat/completions", headers=JSON, body=chat("smart"))
    assert json.loads(response.body)["choices"][0]["message"]["content"] == "from b"
    assert json.loads(called["b.test:80"].received[0].body)["model"] == "gpt-b"
    assert again.status == 429  # its one target is over its own quota (1 a minute)
    assert len(called["b.test:80"].received) == 1


async def test_a_native_gemini_path_names_its_model_in_the_path(autojump_clock):
    called = backends()
    body = json.dumps({"contents": [{"parts": [{"text": "hi"}]}]}).encode()
    async with memory_gateway(LLM, called) as gw:
        response = await gw.request("POST", "/v1beta/models/g:generateContent", headers=JSON, body=body)
    assert response.status == 200
    (sent,) = called["g.test:80"].received
    assert sent.target == "/v1beta/models/gemini-x:generateContent"
    assert sent.header("x-goog-api-key") == "key-g"


# --- the WebSocket upgrade's steps 4-5 --------------------------------------------------------------

ROUTES = """
binds:
- port: 3000
  listeners:
  - routes:
    - name: empty
      matches: [{path: {pathPrefix: /empty}}]
      backends: []
    - name: one
      policies: {requestHeaderModifier: {set: [{name: x-route, value: r}]}}
      backends:
      - host: "b.test:80"
        policies: {requestHeaderModifier: {set: [{name: x-backend, value: b}]}}
"""


async def _never(*_: Any) -> Any:
    raise AssertionError("not called")


def upgrade(path: str) -> Exchange:
    return Exchange({"type": "websocket", "method": "GET", "path": path, "headers": [(b"host", b"gw.test")],
                     "query_string": b""}, _never, _never, arrival=0.0)


async def test_an_upgrade_runs_the_routes_and_the_chosen_backends_stages(autojump_clock):
    async with memory_gateway(ROUTES, {}) as gw:
        pipeline = Pipeline(gw.runtime, 3000)
        x = upgrade("/ws")
        _, compiled = await pipeline.admit_and_route(x, "GET")
        backend = await pipeline.route_and_backend_stages(x, compiled)
    assert str(backend.target) == "b.test:80" and x.backend is backend and x.backend_phase is not None
    assert (b"x-route", b"r") in x.headers and (b"x-backend", b"b") in x.headers


async def test_an_upgrade_to_a_route_without_backends_is_unreachable(autojump_clock):
    async with memory_gateway(ROUTES, {}) as gw:
        pipeline = Pipeline(gw.runtime, 3000)
        x = upgrade("/empty")
        _, compiled = await pipeline.admit_and_route(x, "GET")
        with pytest.raises(BackendUnreachable, match="^no backend available for route empty$"):
            await pipeline.route_and_backend_stages(x, compiled)
    assert x.backend is None


# --- the start and the end of a request: trace, span, metrics, history, access log ----------------

PLAIN = """
binds:
- port: 3000
  listeners:
  - routes:
    - name: web
      backends: [{host: "b.test:80"}]
"""


def slow(seconds: float) -> Backend:
    async def handler(conn: Any) -> None:
        while await conn.request() is not None:
            await trio.sleep(seconds)
            await conn.respond(200, b"ok")
    return Backend(handler)


class _Keep(SpanExporter):
    def __init__(self) -> None:
        self.spans: list[Any] = []

    def export(self, spans: Any) -> SpanExportResult:
        self.spans.extend(spans)
        return SpanExportResult.SUCCESS


async def test_a_watched_request_is_traced_from_its_start_to_its_status(autojump_clock):
    async with memory_gateway(PLAIN, {"b.test:80": answer()}) as gw:
        watcher = gw.runtime.trace.watch(lambda values: values["request"]["path"] == "/watched")
        await gw.request("GET", "/not-watched")
        response = await gw.request("GET", "/watched")
        events = []
        with trio.move_on_after(5):
            while True:
                event = (await watcher.next_event())["message"]
                events.append(event)
                if event["type"] == "requestFinished":
                    break
    assert response.status == 200
    assert events[0]["type"] == "requestStarted"
    snapshots = [e["stage"] for e in events if e["type"] == "requestSnapshot"]
    assert snapshots[:3] == ["initial request", "gateway policies", "route policies"]
    assert [e["phase"] for e in events if e["type"] == "policySelection"] == ["gateway", "route", "backend"]
    (selection,) = [e for e in events if e["type"] == "routeSelection"]
    assert selection["selectedRoute"].endswith("/web")
    assert events[-1]["type"] == "requestFinished" and events[-1]["status"] == 200
    assert all(e.get("status") != 404 for e in events)  # the first request was never claimed


async def test_the_server_span_continues_the_clients_trace_and_ends_with_the_status(autojump_clock):
    keep = _Keep()
    async with memory_gateway(PLAIN, {"b.test:80": answer(201)}) as gw:
        gw.runtime.otel = OtelTracing(TracingSpec("http://127.0.0.1:1", "http", random_sampling=1.0), exporter=keep)
        parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        response = await gw.request("GET", "/x", headers=[(b"traceparent", parent.encode())])
        await finished(gw)
        gw.runtime.otel.processor.force_flush()
        gw.runtime.otel.shutdown()
    assert response.status == 201
    (server,) = [s for s in keep.spans if s.kind.name == "SERVER"]
    assert format(server.context.trace_id, "032x") == "0af7651916cd43dd8448eb211c80319c"
    assert server.attributes["http.response.status_code"] == 201
    assert (server.attributes["http.request.method"], server.attributes["url.path"]) == ("GET", "/x")
    assert server.attributes["http.route"].endswith("/web")


async def finished(gw: Any, count: int = 1) -> None:
    """Until the gateway ended ``count`` requests (``finish`` runs after the client has the answer)."""
    with trio.fail_after(10):  # virtual time: autojump_clock
        while len(gw.runtime.history.entries) < count:
            await trio.sleep(0.01)


def _sample(gw: Any, name: str, **labels: str) -> float | None:
    return gw.runtime.metrics.registry.get_sample_value(name, labels)


async def test_the_end_counts_the_request_with_its_duration_and_records_it(autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="trioproxy.access")
    async with memory_gateway(PLAIN, {"b.test:80": slow(2.0)}) as gw:
        await trio.sleep(100)  # virtual: the request arrives at 100, not at 0
        response = await gw.request("GET", "/x")
        await finished(gw)
        bind = gw.runtime.state.config.binds[0].key
        route = next(iter(gw.runtime.state.routes))
        requests = _sample(gw, "trioproxy_requests_total", bind=bind, route=route, status="200", method="GET",
                           backend="b.test:80", reason="", gateway="default/default",
                           listener="default/default/bind/3000/listener0")
        duration = _sample(gw, "trioproxy_request_duration_seconds_sum", bind=bind, route=route, status="200",
                           method="GET", backend="b.test:80", gateway="default/default",
                           listener="default/default/bind/3000/listener0")
        (entry,) = gw.runtime.history.entries
    assert response.status == 200
    assert requests == 1.0 and duration == pytest.approx(2.0)
    assert entry.duration_ms == pytest.approx(2000.0) and entry.route == route
    (line,) = [r for r in caplog.records if r.name == "trioproxy.access"]
    assert line.fields["bind"] == bind and line.fields["duration"] == "2000.0ms"  # type: ignore[attr-defined]


async def test_a_backend_failure_is_counted_as_an_upstream_error_of_its_route(autojump_clock):
    async with memory_gateway(PLAIN, {}) as gw:  # b.test refuses
        response = await gw.request("GET", "/x")
        await finished(gw)
        bind = gw.runtime.state.config.binds[0].key
        route = next(iter(gw.runtime.state.routes))
        errors = _sample(gw, "trioproxy_upstream_errors_total", bind=bind, route=route, reason="BackendUnreachable")
    assert response.status == 503 and errors == 1.0


async def test_a_request_refused_before_routing_is_no_upstream_error(autojump_clock):
    async with memory_gateway(PLAIN.replace("- routes:", "- hostname: only.test\n    routes:"), {}) as gw:
        response = await gw.request("GET", "/x")
        await finished(gw)
        samples = [s for m in gw.runtime.metrics.registry.collect() if m.name == "trioproxy_upstream_errors"
                   for s in m.samples]
    assert response.status == 404 and samples == []


async def test_an_http_request_to_a_route_without_backends_is_unreachable(autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="trioproxy.access")
    async with memory_gateway(ROUTES, {}) as gw:
        response = await gw.request("GET", "/empty")
        await finished(gw)
    assert response.status == 503
    (line,) = [r for r in caplog.records if r.name == "trioproxy.access"]
    assert line.fields["error"] == "no backend available for route empty"  # type: ignore[attr-defined]


MAPPED = """
binds:
- port: 3000
  listeners:
  - routes:
    - backends:
      - ai: {name: m, provider: {openAI: {model: gpt-x}}, hostOverride: "a.test:80"}
        policies:
          ai: {routes: {/v1/messages: messages, "*": passthrough}}
"""


async def test_an_ai_backends_routes_map_picks_the_endpoint_and_the_dialect_of_its_errors(autojump_clock):
    called = {"a.test:80": Backend(answer(200, b"{}", JSON))}
    async with memory_gateway(MAPPED, called) as gw:
        messages = await gw.request("POST", "/v1/messages", headers=JSON, body=b"not json")
        other = await gw.request("POST", "/other", headers=JSON, body=b"not json")
    assert messages.status == 400  # Anthropic's Messages API translated for openAI: its own error shape
    assert json.loads(messages.body) == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "body: a body that is not JSON cannot be translated to openAI"}}
    assert other.status == 200  # passthrough: the body is not read
    assert [r.target for r in called["a.test:80"].received] == ["/other"]


TRANSFORMED = """
llm:
  port: 4000
  models:
  - name: t/*
    provider: openAI
    params: {apiKey: key-t, hostOverride: "t.test:80"}
    transformation:
      model: llmRequest.model.stripPrefix("t/")
"""


async def test_a_models_transformation_names_the_model_sent(autojump_clock):
    called = {"t.test:80": provider("from t")}
    async with memory_gateway(TRANSFORMED, called) as gw:
        response = await gw.request("POST", "/v1/chat/completions", headers=JSON, body=chat("t/small"))
    assert response.status == 200
    assert json.loads(called["t.test:80"].received[0].body)["model"] == "small"


HOSTED = """
frontendPolicies: {http: {http1MaxHeaders: 3}}
binds:
- port: 3000
  listeners:
  - hostname: only.test
    routes:
    - backends: [{host: "b.test:80"}]
"""


async def test_the_header_count_limit_admits_exactly_its_number(autojump_clock):
    async with memory_gateway(HOSTED, {"b.test:80": answer()}) as gw:
        statuses = []
        for count in (3, 4):  # with Host
            response = await gw.request("GET", "/x", headers=[(b"x-%d" % i, b"v") for i in range(count - 1)],
                                        host="only.test")
            statuses.append((response.status, response.body))
    assert statuses == [(200, b"ok"), (431, b"too many request headers (limit 3)")]


async def test_the_listener_is_chosen_by_host_and_a_host_without_one_is_traced_as_unrouted(autojump_clock):
    async with memory_gateway(HOSTED, {"b.test:80": answer()}) as gw:
        hosted = await gw.request("GET", "/x", host="only.test")
        watcher = gw.runtime.trace.watch()
        missed = await gw.request("GET", "/x", host="other.test")
        events = []
        with trio.move_on_after(5):
            while True:
                event = await watcher.next_event()
                events.append(event)
                if event["message"]["type"] == "requestFinished":
                    break
    assert (hosted.status, missed.status) == (200, 404)
    (selection,) = [e for e in events if e["message"]["type"] == "routeSelection"]
    assert selection["severity"] == "warn"
    assert selection["message"] == {"type": "routeSelection", "selectedRoute": None, "evaluatedRoutes": []}
    finished_ = events[-1]["message"]
    assert (finished_["type"], finished_["status"], finished_["error"]) == ("requestFinished", 404, "route not found")


MATCHED = """
binds:
- port: 3000
  listeners:
  - routes:
    - name: method
      matches: [{method: POST, path: {pathPrefix: /m}}]
      backends: [{host: "b.test:80"}]
    - name: header
      matches: [{headers: [{name: x-a, value: {exact: "1"}}], path: {pathPrefix: /h}}]
      backends: [{host: "b.test:80"}]
    - name: query
      matches: [{query: [{name: v, value: {exact: "1"}}], path: {pathPrefix: /q}}]
      backends: [{host: "b.test:80"}]
    - name: host
      hostnames: [named.test]
      matches: [{path: {pathPrefix: /n}}]
      backends: [{host: "b.test:80"}]
    - name: rewrite
      matches: [{path: {pathPrefix: /api}}]
      policies: {urlRewrite: {path: {prefix: /v2}}}
      backends: [{host: "b.test:80"}]
"""


async def test_routing_sees_the_method_headers_query_and_host_and_the_matched_prefix(autojump_clock):
    backend = Backend(answer())
    async with memory_gateway(MATCHED, {"b.test:80": backend}) as gw:
        statuses = [
            (await gw.request("POST", "/m")).status, (await gw.request("GET", "/m")).status,
            (await gw.request("GET", "/h", headers=[(b"x-a", b"1")])).status, (await gw.request("GET", "/h")).status,
            (await gw.request("GET", "/q?v=1")).status, (await gw.request("GET", "/q?v=2")).status,
            (await gw.request("GET", "/n", host="named.test")).status, (await gw.request("GET", "/n")).status,
            (await gw.request("GET", "/api/x")).status,
        ]
    assert statuses == [200, 404, 200, 404, 200, 404, 200, 404, 200]
    assert backend.received[-1].target == "/v2/x"


async def test_the_route_selection_is_traced_with_the_routes_evaluated(autojump_clock):
    async with memory_gateway(MATCHED, {"b.test:80": answer()}) as gw:
        selections = []
        for path in ("/m", "/h"):
            watcher = gw.runtime.trace.watch()
            await gw.request("GET" if path == "/h" else "POST", path, headers=[(b"x-a", b"1")] if path == "/h" else [])
            with trio.move_on_after(5):
                while True:
                    event = await watcher.next_event()
                    if event["message"]["type"] == "routeSelection":
                        selections.append(event)
                        break
        watcher = gw.runtime.trace.watch()
        await gw.request("GET", "/nothing")
        with trio.move_on_after(5):
            while True:
                event = await watcher.next_event()
                if event["message"]["type"] == "routeSelection":
                    selections.append(event)
                    break
    hit, second, miss = selections
    assert hit["severity"] == "info" and hit["message"]["selectedRoute"].endswith("/method")
    assert isinstance(hit["message"]["evaluatedRoutes"], list) and hit["message"]["evaluatedRoutes"]
    assert second["message"]["selectedRoute"].endswith("/header")
    assert miss["severity"] == "warn" and miss["message"]["selectedRoute"] is None
    assert len(miss["message"]["evaluatedRoutes"]) >= 4


CONDITIONAL = LLM.replace("""      failover:
        targets: [{model: b}]""", """      conditional:
        targets: [{when: 'request.headers["x-tier"] == "gold" && llm.requestModel == "smart"', model: a},
                  {model: g}]""")


async def test_a_conditional_virtual_model_reads_the_request_and_its_body(autojump_clock):
    called = backends()
    async with memory_gateway(CONDITIONAL, called) as gw:
        gold = await gw.request("POST", "/v1/chat/completions", headers=[*JSON, (b"x-tier", b"gold")],
                                body=chat("smart"))
    assert json.loads(gold.body)["choices"][0]["message"]["content"] == "from a"


async def test_the_gateways_own_error_on_a_mapped_path_is_in_that_apis_dialect(autojump_clock):
    async with memory_gateway(MAPPED, {}) as gw:  # a.test refuses
        messages = await gw.request("POST", "/v1/messages", headers=JSON,
                                    body=json.dumps({"model": "x", "max_tokens": 5, "messages": [
                                        {"role": "user", "content": "hi"}]}).encode())
    assert messages.status == 503
    assert json.loads(messages.body)["type"] == "error"  # Anthropic's shape, not OpenAI's {"error": {...}}


async def test_an_llm_ports_own_errors_speak_the_dialect_of_the_endpoint_asked(autojump_clock):
    body = json.dumps({"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}).encode()
    async with memory_gateway(LLM, backends()) as gw:
        messages = await gw.request("POST", "/v1/messages", headers=JSON, body=body)
        chat_ = await gw.request("POST", "/v1/chat/completions", headers=JSON, body=body)
    assert messages.status == chat_.status == 404
    assert json.loads(messages.body)["type"] == "error"  # Anthropic's shape
    assert "type" not in json.loads(chat_.body) and "error" in json.loads(chat_.body)  # OpenAI's


async def test_a_bind_gone_in_a_reload_answers_route_not_found(autojump_clock):
    async with memory_gateway(PLAIN, {"b.test:80": answer()}) as gw:
        pipeline = Pipeline(gw.runtime, 3000)
        pipeline.port = 3999  # the state read at entry has no such bind any more
        with pytest.raises(RouteNotFound):
            await pipeline.admit_and_route(upgrade("/x"), "GET")


MCP = """
binds:
- port: 3000
  listeners:
  - routes:
    - policies:
        authorization:
          rules:
          - {deny: 'has(mcp.tool) && mcp.arguments.text == "stop"'}
      backends:
      - mcp:
          targets:
          - {name: text, mcp: {host: "m.test:80"}}
"""


def tool_call(text: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "text_echo", "arguments": {"text": text}}}).encode()


async def test_a_route_to_mcp_servers_reads_the_call_before_its_authorization(autojump_clock):
    headers = [*JSON, (b"accept", b"application/json, text/event-stream")]
    async with memory_gateway(MCP, {}) as gw:  # m.test refuses: an allowed call fails upstream
        denied = await gw.request("POST", "/mcp", headers=headers, body=tool_call("stop"))
        allowed = await gw.request("POST", "/mcp", headers=headers, body=tool_call("go"))
    assert (denied.status, denied.body) == (403, b"authorization failed")
    assert allowed.status != 403


async def test_the_end_settles_a_runtime_keys_reservation_once_with_its_latency(autojump_clock, monkeypatch):
    calls: list[tuple[Any, dict[str, Any]]] = []
    service = SimpleNamespace(settle=lambda reservation, **fields: calls.append((reservation, fields)))
    async with memory_gateway(PLAIN, {}) as gw:
        monkeypatch.setattr(gw.runtime.keys_host, "get", lambda: service)  # the key store's settle, recorded
        pipeline = Pipeline(gw.runtime, 3000)
        await trio.sleep(10)
        plain = pipeline.open_exchange(dict(upgrade("/x").scope, type="http"), _never, _never)
        pipeline.finish(plain, 200)  # no reservation: nothing to settle
        x = pipeline.open_exchange(dict(upgrade("/x").scope, type="http"), _never, _never)
        await trio.sleep(1.5)
        reservation = SimpleNamespace(principal=SimpleNamespace(key=SimpleNamespace(name="k1"), team=None))
        x.reservation = reservation
        pipeline.finish(x, 201)
        settled = gw.runtime.metrics.registry.get_sample_value("trioproxy_key_requests_total",
                                                               {"key": "k1", "team": ""})
    assert calls == [(reservation, {"tokens": 0, "cost": 0.0, "model": None, "provider": None, "status": 201,
                                    "input_tokens": None, "output_tokens": None, "log": {"latency_ms": 1500.0}})]
    assert x.reservation is None and settled == 1.0
