"""The data plane: a plain ASGI app per bind, independent of Quart and of the server hosting it.

One request walks these stages, in this fixed order (agentgateway's order):

 1. admission      header count limit; the listener by Host
 2. gateway phase  listener policies: localRateLimit (one budget shared by the listener's routes)
 3. routing        the listener's route table → 404 ``route not found``
 4. route phase    localRateLimit; requestHeaderModifier; directResponse answers here
 5. backend        weighted choice; backendAuth, requestHeaderModifier; ``ai`` backends get
                   their JSON body rewritten (model override, ``stream_options.include_usage``)
 6. upstream       h11 pool, under backendRequestTimeout and requestTimeout; body streamed
 7. response       response header modifiers and ``x-ratelimit-*``; the body streamed back
                   chunk by chunk while its ``usage`` is read; token limits charged at the end

Any stage may raise ``ProxyError``; ``handle`` hands it to ``Exchange.respond_error``, the one
place errors become responses. Once the request body is read, a watcher task waits for
``http.disconnect`` and cancels the request's scope, so an abandoned request stops its upstream
call at once (hypercorn tells a raw ASGI app only through ``receive``).

Tracing: when a ``/debug/trace`` watcher claims the request, ``x.tracer`` records the events of
each stage (CONTRACT §5); otherwise every ``if tr`` below is the whole cost.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from typing import Any

import time

import trio

from .asgi import serve_lifespan
from .config.dump import policies_by_kind
from .config.model import Backend, Route
from .errors import (
    BackendUnreachable,
    DirectResponse,
    HeaderTooLarge,
    ProxyError,
    RateLimited,
    RequestTimeout,
    RouteNotFound,
    UpstreamError,
    UpstreamTimeout,
)
from .exchange import ClientDisconnected, Exchange, Receive, Send
from .llm import UsageReader, prepare_request_body
from .otel import OtelTracing
from .policies.headers import (
    apply_modifier,
    forwarded_request_headers,
    header_value,
    request_framing,
    without_hop_by_hop,
)
from .policies.ratelimit_local import LocalRateLimiter
from .routing import Request
from .runtime import GatewayState, Runtime
from .trace import BodyCapture, duration_string, headers_map
from .upstream import UpstreamResponse

Scope = MutableMapping[str, Any]
Header = tuple[bytes, bytes]

MAX_REQUEST_HEADERS = 100
MAX_LLM_REQUEST_BODY = 16 * 1024 * 1024

__all__ = ["Gateway", "GatewayState", "Runtime"]


class Gateway:
    """The ASGI app serving one bind (port) of the runtime."""

    def __init__(self, runtime: Runtime, port: int) -> None:
        self.runtime = runtime
        self.port = port
        self.bind_key = f"bind/{port}"
        self.access_log = runtime.access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.handle(scope, receive, send)
        elif kind == "lifespan":
            await serve_lifespan(receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1003})

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        runtime = self.runtime
        x = Exchange(scope, receive, send, trio.current_time())
        if runtime.trace.watchers:
            x.tracer = runtime.trace.claim(x.arrival, x.activation)
        if runtime.otel is not None:
            x.span = runtime.otel.start(scope["method"], scope["path"], scope["headers"], time.time_ns())
        metrics = runtime.metrics
        metrics.in_flight.inc()
        try:
            async with trio.open_nursery() as nursery:
                x.nursery = nursery
                try:
                    await self._proxy(x)
                except ProxyError as error:
                    if isinstance(error, UpstreamError):
                        metrics.upstream_error(self.bind_key, x.route.key if x.route else "", type(error).__name__)
                    await x.respond_error(error)
                except ClientDisconnected:
                    pass
                nursery.cancel_scope.cancel()
        finally:
            metrics.in_flight.dec()
            status = 499 if x.disconnected else x.status
            if x.disconnected:
                x.error = x.error or "client disconnected"
                x.error_kind = x.error_kind or "ClientDisconnected"
            self._finished(x, status, trio.current_time() - x.arrival)
            if x.tracer is not None:
                x.tracer.finish(status, x.error)

    def _finished(self, x: Exchange, status: int, seconds: float) -> None:
        """Metrics and the access-log line of a finished request (names: docs/observability.md)."""
        listener = x.listener.key if x.listener else ""
        gateway = listener.split("/bind/", 1)[0] if listener else ""
        route = x.route.key if x.route else ""
        backend = x.backend.name if x.backend else ""
        method = x.scope["method"]
        self.runtime.metrics.observe(self.bind_key, gateway, listener, route, backend, method, status,
                                     x.error_kind or "", seconds)
        llm = x.llm
        if llm is not None and ("inputTokens" in llm or "outputTokens" in llm):
            self.runtime.metrics.tokens(llm.get("model") or "", route, llm.get("inputTokens"), llm.get("outputTokens"))
        if x.span is not None:
            OtelTracing.finish(x.span, status, {
                "http.route": route or None, "gen_ai.request.model": llm.get("model") if llm else None,
                "gen_ai.provider.name": llm.get("provider") if llm else None,
                "gen_ai.usage.input_tokens": llm.get("inputTokens") if llm else None,
                "gen_ai.usage.output_tokens": llm.get("outputTokens") if llm else None,
                "gen_ai.operation.name": "chat" if llm else None, "error.type": x.error_kind}, x.error)
        access = self.access_log
        own_error = x.error_kind is not None
        if not access.enabled(status if own_error else 200):
            return
        client = x.scope.get("client")
        fields: dict[str, Any] = {
            "bind": self.bind_key, "gateway": gateway or None, "listener": listener or None, "route": route or None,
            "endpoint": str(x.backend.target) if x.backend else None,
            "src.addr": f"{client[0]}:{client[1]}" if client else None,
            "http.method": method, "http.host": x.host or None, "http.path": x.scope["path"],
            "http.version": x.scope.get("http_version", "1.1"), "http.status": status,
            "duration": f"{seconds * 1000:.1f}ms",
        }
        if x.error:
            fields["error"] = x.error
        if x.jwt is not None and isinstance(x.jwt.get("sub"), str):
            fields["jwt.sub"] = x.jwt["sub"]  # as agentgateway; never the token
        if llm is not None:
            fields["gen_ai.provider.name"] = llm.get("provider")
            fields["gen_ai.request.model"] = llm.get("model")
            fields["gen_ai.usage.input_tokens"] = llm.get("inputTokens")
            fields["gen_ai.usage.output_tokens"] = llm.get("outputTokens")
        if x.limits:
            fields["ratelimit"] = ",".join(f"{d.remaining}/{d.limit}" for _, d in x.limits)
        elif x.error_kind == "RateLimited":
            fields["ratelimit"] = "rejected"
        if x.span is not None:
            fields["trace.id"] = OtelTracing.trace_id(x.span)
        access.record({k: v for k, v in fields.items() if v is not None}, status, own_error,
                      lambda: {**x.activation(), "response": {"code": status}})

    async def _proxy(self, x: Exchange) -> None:
        tr = x.tracer
        scope = x.scope
        state = self.runtime.state

        # 1. admission
        if tr:
            tr.event("requestStarted")
            tr.event("requestSnapshot", stage="initial request", requestState=x.state())
        if len(x.headers) > MAX_REQUEST_HEADERS:
            raise HeaderTooLarge(f"too many request headers (limit {MAX_REQUEST_HEADERS})")
        bind = state.binds.get(self.port)
        found = bind.listener_for(x.host) if bind is not None else None
        if found is None:
            if tr:
                tr.event("routeSelection", severity="warn", selectedRoute=None, evaluatedRoutes=[])
            raise RouteNotFound()
        listener, table = found
        x.listener = listener

        # 2. gateway phase
        if tr:
            tr.event("policySelection", phase="gateway", effectivePolicy=policies_by_kind(listener.policies, "gateway"))
        for stage in state.listener_stages[listener.key]:  # cors → jwtAuth → authorization
            await stage.request(x)
        self._local_limit(x, state.listener_limiter(listener), listener.key)
        if tr:
            tr.event("requestSnapshot", stage="gateway policies", requestState=x.state())

        # 3. routing
        selection = table.select(Request(scope["method"], scope["path"], x.host, x.headers,
                                         scope.get("query_string", b"")))
        if tr:
            tr.event("routeSelection", severity="info" if selection.route else "warn",
                     selectedRoute=selection.route.key if selection.route else None,
                     evaluatedRoutes=list(selection.evaluated))
        if selection.route is None:
            raise RouteNotFound()
        route = x.route = selection.route
        compiled = state.routes[route.key]

        # 4. route phase
        policies = route.policies
        if tr:
            tr.event("policySelection", phase="route", effectivePolicy=policies_by_kind(policies, "route"))
        for stage in compiled.stages:  # cors → jwtAuth → authorization
            await stage.request(x)
        self._local_limit(x, compiled.limiter, route.key)
        if policies.request_header_modifier is not None:
            x.headers = apply_modifier(x.headers, policies.request_header_modifier)
            if tr:
                tr.event("requestSnapshot", stage="requestHeaderModifier", requestState=x.state())
        if policies.direct_response is not None:
            if tr:
                tr.event("policy", kind="directResponse", result="responded", status=policies.direct_response.status)
            raise DirectResponse(policies.direct_response.status, policies.direct_response.body)
        if tr:
            tr.event("requestSnapshot", stage="route policies", requestState=x.state())

        # 5. backend
        backend = x.backend = compiled.choose_backend()
        if backend is None:
            raise BackendUnreachable(f"no backend available for route {route.name}")
        if tr:
            tr.event("policySelection", phase="backend", effectivePolicy=policies_by_kind(backend.policies, "backend"))
        if backend.policies.request_header_modifier is not None:
            x.headers = apply_modifier(x.headers, backend.policies.request_header_modifier)
            if tr:
                tr.event("requestSnapshot", stage="requestHeaderModifier", requestState=x.state())
        if backend.policies.backend_auth is not None:
            x.headers = [h for h in x.headers if h[0] != b"authorization"]
            x.headers.append((b"authorization", b"Bearer " + backend.policies.backend_auth.key.encode()))
            if tr:
                tr.event("requestSnapshot", stage="backendAuth", requestState=x.state())
        if tr:
            x.request_capture = BodyCapture(tr.body_limit)
        if backend.ai is not None:
            body: bytes | AsyncIterator[bytes] = await self._prepare_llm_request(x, backend)
            framing: Header | None = (b"content-length", str(len(body)).encode()) if body or x.has_body() else None
        else:
            body = x.request_body()
            framing = request_framing(scope["headers"])
        client = scope.get("client")
        upstream_headers = forwarded_request_headers(
            x.headers, client=client[0] if client else None, scheme=scope.get("scheme", "http"), framing=framing)
        if backend.ai is not None or header_value(upstream_headers, b"host") is None:
            # A provider wants its own host; an HTTP/1.0 client may have sent none (1.1 requires one).
            upstream_headers = [h for h in upstream_headers if h[0] != b"host"] + [(b"host", str(backend.target).encode())]
        if tr:
            tr.event("requestSnapshot", stage="final request", requestState=x.state(headers=upstream_headers))

        # 6. upstream
        query = scope.get("query_string", b"")
        path = x.upstream_path.encode() if x.upstream_path else (scope.get("raw_path") or scope["path"].encode())
        response = await self._call_backend(x, route, backend, path + b"?" + query if query else path,
                                            upstream_headers, body)

        # 7. response
        await self._respond(x, route, backend, response)

    # --- stages ---------------------------------------------------------------------------------

    def _local_limit(self, x: Exchange, limiter: LocalRateLimiter | None, key: str) -> None:
        """Admit against one limiter (all its entries), or reject with 429 before any upstream call."""
        if limiter is None:
            return
        decision = limiter.admit(trio.current_time())
        if x.tracer:
            x.tracer.event("policy", severity="info" if decision.allowed else "warn", kind="localRateLimit",
                           result="allowed" if decision.allowed else "rejected",
                           limit=decision.limit, remaining=decision.remaining, reset=decision.reset_seconds)
        self.runtime.metrics.ratelimit_decision("localRateLimit", key,
                                                "allowed" if decision.allowed else "rejected")
        if not decision.allowed:
            raise RateLimited(headers=LocalRateLimiter.headers(decision))
        x.limits.append((limiter, decision))
        if x.tracer:
            x.tracer.event("requestSnapshot", stage="localRateLimit", requestState=x.state())

    async def _prepare_llm_request(self, x: Exchange, backend: Backend) -> bytes:
        """Buffer and rewrite an OpenAI-style JSON body; the path may be overridden."""
        assert backend.ai is not None
        original = await x.read_body(MAX_LLM_REQUEST_BODY)
        body, info = prepare_request_body(original, model_override=backend.ai.model)
        x.llm = {"provider": backend.ai.provider, "model": info.model if info else None,
                 "streaming": info.streaming if info else False}
        if backend.ai.path_override:
            x.upstream_path = backend.ai.path_override
        if x.request_capture is not None and body is not original:
            x.request_capture = BodyCapture(x.request_capture.limit)
            x.request_capture.feed(body)
        return body

    async def _call_backend(self, x: Exchange, route: Route, backend: Backend, target: bytes,
                            headers: list[Header], body: bytes | AsyncIterator[bytes]) -> UpstreamResponse:
        tr = x.tracer
        timeout = route.policies.timeout
        now = trio.current_time()
        deadline = x.arrival + timeout.request_timeout if timeout and timeout.request_timeout else float("inf")
        backend_deadline = min(deadline, now + timeout.backend_request_timeout) \
            if timeout and timeout.backend_request_timeout else deadline
        if tr:
            tr.event("backendCallStart", target=str(backend.target))
        response = None
        client_span = None
        if x.span is not None and self.runtime.otel is not None:
            client_span = self.runtime.otel.client_span(x.span, f"{x.scope['method']} {backend.name}", {
                "http.request.method": x.scope["method"], "server.address": backend.target.host,
                "server.port": backend.target.port})
            headers = [h for h in headers if h[0] != b"traceparent"] + [self.runtime.otel.traceparent(client_span)]
        try:
            with trio.CancelScope(deadline=deadline) as request_scope:
                with trio.CancelScope(deadline=backend_deadline) as backend_scope:
                    response = await self.runtime.pool.request(
                        backend.target, x.scope["method"].encode(), target, headers, body, nursery=x.nursery)
            if x.disconnected:
                raise ClientDisconnected()
            if response is None and request_scope.cancelled_caught:
                raise RequestTimeout()
            if response is None and backend_scope.cancelled_caught:
                raise UpstreamTimeout()
        except ProxyError as error:
            if client_span is not None:
                OtelTracing.finish(client_span, 502, {}, error.message)
            if tr:
                tr.body("final request", x.request_capture)
                tr.event("backendCallResult", start=now, severity="error", status=None, error=error.message)
            raise
        if client_span is not None:
            OtelTracing.finish(client_span, response.status if response else 0, {}, None)
        assert response is not None
        x.upstream_started = now
        if tr:
            tr.body("final request", x.request_capture)
            tr.event("backendCallResult", start=now, severity="success" if response.status < 400 else "warn",
                     status=response.status, error=None)
        return response

    async def _respond(self, x: Exchange, route: Route, backend: Backend, response: UpstreamResponse) -> None:
        tr = x.tracer
        if tr:
            now = trio.current_time()
            tr.event("responseSnapshot", stage="raw response", requestState=x.state(
                response={"code": response.status, "headers": headers_map(response.headers)},
                proxy={"requestProcessingDuration": duration_string(now - x.arrival),
                       "upstreamDuration": duration_string(now - x.upstream_started)}))
        headers = apply_modifier(without_hop_by_hop(response.headers), backend.policies.response_header_modifier)
        if tr:
            tr.event("responseSnapshot", stage="backend response ready", requestState=x.state(
                response={"code": response.status, "headers": headers_map(headers)}))
        headers = apply_modifier(headers, route.policies.response_header_modifier)
        if x.limits:
            headers += LocalRateLimiter.headers(_most_constrained(x.limits))
        if x.extra_response_headers:
            headers += x.extra_response_headers
        if tr:
            tr.event("responseSnapshot", stage="final response", requestState=x.state(
                response={"code": response.status, "headers": headers_map(headers)}))

        token_limiters = [limiter for limiter, _ in x.limits if limiter.counts_tokens] if x.limits else []
        usage_reader = None
        if token_limiters or backend.ai is not None:
            usage_reader = UsageReader(header_value(response.headers, b"content-type"),
                                       content_encoding=header_value(response.headers, b"content-encoding"))
            if not usage_reader.active:
                usage_reader = None
        capture = BodyCapture(tr.body_limit) if tr else None

        await x.start_response(response.status, headers)
        async for chunk in response.body():
            if usage_reader is not None:
                usage_reader.feed(chunk)
            if capture is not None:
                capture.feed(chunk)
            await x.send_body(chunk)
        await x.end_body()

        if usage_reader is not None:
            usage = usage_reader.finish()
            if usage is not None:
                self._charge_tokens(x, token_limiters, usage)
        if tr and capture is not None:
            tr.body("response", capture)

    def _charge_tokens(self, x: Exchange, limiters: list[LocalRateLimiter], usage: Any) -> None:
        """After the response: token budgets pay for what the response used (may overshoot)."""
        if x.llm is not None:
            x.llm.update(inputTokens=usage.prompt_tokens, outputTokens=usage.completion_tokens,
                         totalTokens=usage.total_tokens)
        now = trio.current_time()
        for limiter in limiters:
            decision = limiter.charge_tokens(now, usage.total_tokens)
            if x.tracer and decision is not None:
                x.tracer.event("policy", kind="localRateLimit", result="charged", tokens=usage.total_tokens,
                               limit=decision.limit, remaining=decision.remaining, reset=decision.reset_seconds)


def _most_constrained(limits: list[tuple[LocalRateLimiter, Any]]) -> Any:
    """The decision to report in ``x-ratelimit-*`` when several limiters applied."""
    if len(limits) == 1:
        return limits[0][1]
    return min((decision for _, decision in limits), key=lambda d: (d.remaining, -d.reset_seconds))
