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
each stage (docs/trace-events.md); otherwise it is the ``NullTracer``, whose calls do nothing and
build no snapshot.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import aclosing
from math import inf
from typing import Any

import trio

from . import llm_gemini
from .asgi import Header, Receive, Scope, Send, serve_lifespan
from .config.model import Backend, Route
from .errors import (
    BackendUnreachable,
    HeaderTooLarge,
    ModelList,
    ProxyError,
    RequestTimeout,
    RouteNotFound,
    UpstreamError,
    UpstreamTimeout,
)
from .exchange import ClientDisconnected, Exchange
from .history import Summary, subject_of
from .llm import UsageReader, UsageStripper, prepare_request_body, usage_fields
from .llm_models import model_list, select_model, transformed_model
from .llm_providers import (
    COMPLETIONS,
    GEMINI_KINDS,
    MODELS,
    PASSTHROUGH,
    UNREAD_KINDS,
    endpoint_kind,
    error_dialect,
    fill_model,
    operation_name,
    provider_headers,
    resolve_route,
    semconv_provider,
)
from .llm_translate import stage as translate
from .otel import OtelTracing
from .policies.headers import (
    forwarded_request_headers,
    header_value,
    request_framing,
    without_hop_by_hop,
)
from .policies.ratelimit_local import LocalRateLimiter, most_constrained
from .policies.retry import MAX_RETRY_BODY, retryable_error, retryable_status
from .policies.stage import Phase
from .routing import Request
from .runtime import CompiledRoute, GatewayState, Runtime
from .trace import NULL_TRACER, BodyCapture, activation, duration_string
from .upstream import UpstreamResponse
from .websocket import WebSocketProxy

__all__ = ["Gateway", "GatewayState", "Runtime"]


class Gateway:
    """The ASGI app serving one bind (port) of the runtime."""

    def __init__(self, runtime: Runtime, port: int) -> None:
        self.runtime = runtime
        self.port = port
        self.bind = next(b for b in runtime.state.config.binds if b.port == port)  # its ``key`` labels metrics
        self.access_log = runtime.access_log
        self.websocket = WebSocketProxy(self)  # upgrades: docs/protocols.md

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.handle(scope, receive, send)
        elif kind == "lifespan":
            await serve_lifespan(receive, send)
        elif kind == "websocket":
            await self.websocket(scope, receive, send)

    def open_exchange(self, scope: Scope, receive: Receive, send: Send) -> Exchange:
        """An exchange with its trace claimed (when someone watches) and its span started: the
        first step of a request, and of a WebSocket upgrade (whose scope then reads as a GET)."""
        runtime = self.runtime
        x = Exchange(scope, receive, send, trio.current_time())
        if runtime.trace.watchers:
            x.tracer = runtime.trace.claim(x.arrival, lambda: activation(x)) or NULL_TRACER
        if runtime.otel is not None:
            x.span = runtime.otel.start(scope["method"], scope["path"], scope["headers"], time.time_ns())
        return x

    def count_failure(self, x: Exchange, error: ProxyError) -> None:
        """A request's or an upgrade's failure, counted when the backend side caused it."""
        if isinstance(error, UpstreamError):
            self.runtime.metrics.upstream_error(self.bind.key, x.route.key if x.route else "", type(error).__name__)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        runtime = self.runtime
        x = self.open_exchange(scope, receive, send)
        x.body_idle_timeout = runtime.state.config.frontend.body_idle_timeout
        x.disconnect_monitor = runtime.disconnects
        metrics = runtime.metrics
        metrics.requests_active += 1
        try:
            async with trio.open_nursery() as nursery:
                x.nursery = nursery
                try:
                    await self._proxy(x)
                except ProxyError as error:
                    self.count_failure(x, error)
                    await x.respond_error(error)
                except ClientDisconnected:
                    pass
                if nursery.child_tasks:  # a disconnect watcher or an unfinished upload: stop it
                    nursery.cancel_scope.cancel()
        finally:
            x.stop_watching()
            metrics.requests_active -= 1
            status = 499 if x.disconnected else x.status
            if x.disconnected:
                x.error = x.error or "client disconnected"
                x.error_kind = x.error_kind or "ClientDisconnected"
            self._finished(x, status, trio.current_time() - x.arrival)
            x.tracer.finish(status, x.error)

    def _finished(self, x: Exchange, status: int, seconds: float) -> None:
        """Metrics and the access-log line of a finished request (names: docs/observability.md)."""
        listener = x.listener.key if x.listener else ""
        gateway = listener.split("/bind/", 1)[0] if listener else ""
        route = x.route.key if x.route else ""
        backend = x.backend.name if x.backend else ""
        method = x.scope["method"]
        self.runtime.metrics.observe(self.bind.key, gateway, listener, route, backend, method, status,
                                     x.error_kind or "", seconds)
        llm = x.llm
        operation = provider = None
        if llm is not None:  # gen-ai semantic-convention values, agentgateway's metric labels
            operation = operation_name(x.llm_kind or PASSTHROUGH)
            provider = semconv_provider(llm["provider"])
            if status < 400:
                self.runtime.metrics.gen_ai(
                    (operation, provider, llm.get("model") or "", llm.get("responseModel") or "", gateway, listener,
                     route),
                    (("input", llm.get("inputTokens")), ("output", llm.get("outputTokens")),
                     ("cached_input", llm.get("cachedInputTokens")), ("reasoning", llm.get("reasoningTokens"))),
                    seconds, x.first_chunk - x.arrival if x.first_chunk is not None and llm.get("streaming") else None,
                    llm.get("outputTokens"))

        def finished() -> dict[str, Any]:  # CEL's view of the finished request (span fields, access log)
            return {**activation(x), "response": {"code": status}}

        otel = self.runtime.otel
        if x.span is not None and otel is None:  # tracing turned off by a reload meanwhile
            OtelTracing.finish(x.span, status, {}, x.error)
        elif x.span is not None and otel is not None:
            if llm is not None:  # the semantic conventions' span name: {operation} {model}
                x.span.update_name(f"{operation} {llm.get('model')}" if llm.get("model") else str(operation))
            otel.finish_request(x.span, status, {
                "http.route": route or None, "gen_ai.request.model": llm.get("model") if llm else None,
                "gen_ai.response.model": llm.get("responseModel") if llm else None,
                "gen_ai.provider.name": provider,
                "gen_ai.usage.input_tokens": llm.get("inputTokens") if llm else None,
                "gen_ai.usage.output_tokens": llm.get("outputTokens") if llm else None,
                "gen_ai.usage.cache_read.input_tokens": llm.get("cachedInputTokens") if llm else None,
                "gen_ai.operation.name": operation, "error.type": x.error_kind}, x.error, finished)
        access = self.access_log
        own_error = x.error_kind is not None
        history = self.runtime.history
        if history.size:  # always on: one tuple per request (history.py)
            history.record(Summary(
                time.time(), method, x.scope["path"], x.host, route, backend, status, seconds * 1000.0,
                llm.get("inputTokens") if llm else None, llm.get("outputTokens") if llm else None,
                subject_of(x.jwt, x.api_key, x.basic_auth) if x.jwt or x.api_key or x.basic_auth else None,
                x.error if own_error else None, x.error_kind, llm.get("model") if llm else None))
        if not access.enabled(status if own_error else 200):
            return
        client = x.scope.get("client")
        fields: dict[str, Any] = {
            "bind": self.bind.key, "gateway": gateway or None, "listener": listener or None, "route": route or None,
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
            fields["gen_ai.operation.name"] = operation
            fields["gen_ai.provider.name"] = provider
            fields["gen_ai.request.model"] = llm.get("model")
            fields["gen_ai.response.model"] = llm.get("responseModel")
            fields["gen_ai.usage.input_tokens"] = llm.get("inputTokens")
            fields["gen_ai.usage.output_tokens"] = llm.get("outputTokens")
            fields["gen_ai.usage.cache_read.input_tokens"] = llm.get("cachedInputTokens")
            fields["gen_ai.usage.cache_creation.input_tokens"] = llm.get("cacheCreationInputTokens")
            fields["gen_ai.usage.reasoning.output_tokens"] = llm.get("reasoningTokens")
        if x.limits:
            fields["ratelimit"] = ",".join(f"{d.remaining}/{d.limit}" for _, d in x.limits)
        elif x.error_kind == "RateLimited":
            fields["ratelimit"] = "rejected"
        if x.span is not None:
            fields["trace.id"] = OtelTracing.trace_id(x.span)
        access.record({k: v for k, v in fields.items() if v is not None}, status, own_error, finished)

    async def admit_and_route(self, x: Exchange, method: str) -> tuple[Phase, CompiledRoute]:
        """Steps 1-3, shared by HTTP requests and WebSocket upgrades (websocket.py): admission,
        the listener's stages, and route selection (``x.listener``, ``x.route``, ``x.route_match``).
        Both phases come from the one state read at entry: a reload meanwhile does not mix them."""
        tr = x.tracer
        scope = x.scope
        state = self.runtime.state

        # 1. admission
        tr.event("requestStarted")
        tr.snapshot("initial request", x)
        max_headers = state.config.frontend.max_headers  # frontendPolicies.http.http1MaxHeaders
        if len(x.headers) > max_headers:
            raise HeaderTooLarge(f"too many request headers (limit {max_headers})")
        bind = state.binds.get(self.port)
        found = bind.listener_for(x.host) if bind is not None else None
        if found is None:
            tr.event("routeSelection", severity="warn", selectedRoute=None, evaluatedRoutes=[])
            raise RouteNotFound()
        listener, table = found
        x.listener = listener

        # 2. gateway phase (the listener's stages, in runtime.STAGE_ORDER)
        gateway = state.listeners[listener.key]
        tr.policy_selection("gateway", listener.policies)
        for stage in gateway.request:
            await stage.request(x)
        tr.snapshot("gateway policies", x)

        # 3. routing
        selection = table.select(Request(method, scope["path"], x.host, x.headers, scope.get("query_string", b"")))
        if tr.active:
            tr.event("routeSelection", severity="info" if selection.route else "warn",
                     selectedRoute=selection.route.key if selection.route else None,
                     evaluatedRoutes=list(selection.evaluated))
        if selection.route is None:
            raise RouteNotFound()
        x.route = selection.route
        x.route_match = selection.match
        compiled = state.routes[selection.route.key]
        if compiled.llm:  # the endpoint asked for, and so the dialect of the gateway's own errors
            x.llm_kind = kind = endpoint_kind(scope["path"])
            x.error_dialect = error_dialect(kind)
        return gateway, compiled

    async def route_and_backend_stages(self, x: Exchange, compiled: CompiledRoute, *,
                                       by_model: bool = True) -> Backend:
        """Steps 4-5, shared by HTTP requests and WebSocket upgrades: the route's stages, the
        backend chosen (by the body's model on an ``llm:`` route, when ``by_model``), and its
        stages; the backend and its phase are left in ``x.backend`` and ``x.backend_phase``."""
        tr = x.tracer
        route = compiled.route

        # 4. route phase
        tr.policy_selection("route", route.policies)
        for stage in compiled.phase.request:
            await stage.request(x)
        tr.snapshot("route policies", x)

        # 5. backend phase (the llm: format chooses by the body's model)
        chosen = await self._choose_model(x, compiled) if by_model and route.models else compiled.choose_backend()
        if chosen is None:
            raise BackendUnreachable(f"no backend available for route {route.name}")
        backend, phase = chosen
        x.backend = backend
        if backend.ai is not None and backend.ai.routes:  # an ai policy's routes map picks the endpoint kind
            x.llm_kind = kind = resolve_route(backend.ai.routes, x.scope["path"])
            x.error_dialect = error_dialect(kind)
        tr.policy_selection("backend", backend.policies)
        for stage in phase.request:
            await stage.request(x)
        x.backend_phase = phase
        return backend

    async def _proxy(self, x: Exchange) -> None:
        tr = x.tracer
        gateway, compiled = await self.admit_and_route(x, x.scope["method"])

        # requestTimeout: from arrival, over everything from here to the upstream's response
        # headers (route and backend stages, the LLM body read, the upstream call); not over the
        # streamed response body (docs/configuration.md, "timeout").
        deadline = compiled.request_deadline(x.arrival)
        response = None
        if deadline == inf:  # no requestTimeout: no cancel scope to enter and leave (~4-8 us)
            response = await self._route_to_upstream(x, compiled)
        else:
            with trio.CancelScope(deadline=deadline) as request_scope:
                response = await self._route_to_upstream(x, compiled)
        if response is None:
            if x.disconnected:
                raise ClientDisconnected()
            assert request_scope.cancelled_caught
            error = RequestTimeout()
            if x.upstream_started is not None:
                tr.body("final request", x.request_capture)
                tr.event("backendCallResult", start=x.upstream_started, severity="error", status=None,
                         error=error.message)
            raise error

        # 7. response (closed, not pooled, if anything below fails before its body is read)
        async with response:
            await self._respond(x, gateway, compiled.phase, response)

    async def _route_to_upstream(self, x: Exchange, compiled: CompiledRoute) -> UpstreamResponse:
        """Steps 4-6, under the request's deadline."""
        tr = x.tracer
        scope = x.scope
        route = compiled.route
        backend = await self.route_and_backend_stages(x, compiled)
        if tr.active:
            x.request_capture = BodyCapture(tr.body_limit)
        if backend.ai is not None and (x.llm_request is not None or x.llm_kind not in UNREAD_KINDS):
            llm_body = await self._prepare_llm_request(x, backend)
            body: bytes | AsyncIterator[bytes] = llm_body
            framing: Header | None = (b"content-length", str(len(llm_body)).encode()) if llm_body or x.has_body() else None
        else:
            if backend.ai is not None:  # models list, files, batches...: the body is not read, only forwarded
                self._llm_passthrough(x, backend)
            await x.peek_body()  # HTTP/2: is there a body without content-length?
            framing = request_framing(scope["headers"])
            if framing is None and x.has_body():
                framing = (b"transfer-encoding", b"chunked")  # an HTTP/2 body of unknown length
            body = await self._retryable_body(x) if x.retry is not None else x.request_body()
        client = scope.get("client")
        upstream_headers = forwarded_request_headers(
            x.headers, client=client[0] if client else None, scheme=scope.get("scheme", "http"), framing=framing)
        if backend.ai is not None or header_value(upstream_headers, b"host") is None:
            # A provider wants its own host; an HTTP/1.0 client may have sent none (1.1 requires one).
            address = backend.target
            host = address.host if address.port == (443 if backend.tls is not None else 80) else str(address)
            upstream_headers = [h for h in upstream_headers if h[0] != b"host"] + [(b"host", host.encode())]

        # 6. upstream
        query = scope.get("query_string", b"")
        path = x.upstream_path.encode() if x.upstream_path else (scope.get("raw_path") or scope["path"].encode())
        target = path + (b"&" if b"?" in path else b"?") + query if query else path  # Azure's api-version
        if x.translation is not None and isinstance(body, bytes):  # Bedrock: SigV4 over the final request
            upstream_headers = translate.sign(x.translation, backend, scope["method"], target.decode("latin-1"),
                                              upstream_headers, body)
        tr.snapshot("final request", x, headers=upstream_headers)
        for mirror in x.mirrors:  # copies run in the root nursery: never in this request's way
            self.runtime.mirrors.send(mirror, scope["method"].encode(), target, upstream_headers,
                                      body if isinstance(body, bytes) else b"")
        if x.retry is not None and isinstance(body, bytes):
            return await self._call_with_retries(x, route, backend, target, upstream_headers, body)
        return await self._call_backend(x, route, backend, target, upstream_headers, body)

    async def _retryable_body(self, x: Exchange) -> bytes | AsyncIterator[bytes]:
        """The body buffered for replay when it is small and declared by content-length; else
        streamed, and the request is not retried (policies/retry.py)."""
        length = header_value(x.scope["headers"], b"content-length")
        if not x.has_body() or (length is not None and length.isdigit() and int(length) <= MAX_RETRY_BODY):
            return await x.read_body(MAX_RETRY_BODY)
        x.tracer.event("retry", severity="warn", attempt=0, result="disabled: the request body is streamed")
        x.retry = None
        return x.request_body()

    async def _call_with_retries(self, x: Exchange, route: Route, backend: Backend, target: bytes,
                                 headers: list[Header], body: bytes) -> UpstreamResponse:
        """``retry``: the call again on a listed status or a failed call, all under requestTimeout."""
        spec = x.retry
        assert spec is not None
        attempt = 0
        while True:
            sent = headers if attempt == 0 else headers + [(b"x-retry-attempt", str(attempt).encode())]
            last = attempt >= spec.attempts
            try:
                response = await self._call_backend(x, route, backend, target, sent, body)
            except ProxyError as error:
                if last or not retryable_error(error):
                    raise
                reason = error.message
            else:
                if last or not retryable_status(spec, response.status):
                    return response
                await response.aclose()  # the client never sees a retried response
                reason = f"status {response.status}"
            attempt += 1
            x.tracer.event("retry", severity="warn", attempt=attempt, reason=reason)
            if spec.backoff:
                await trio.sleep(spec.backoff)

    async def _prepare_llm_request(self, x: Exchange, backend: Backend) -> bytes:
        """Buffer and rewrite the JSON body; the provider's path for the endpoint and its credential
        header apply. Stream usage is asked for only from chat completions (the one endpoint that
        takes ``stream_options``), and what the client did not ask for is stripped from the answer."""
        ai = backend.ai
        assert ai is not None
        if x.llm_request is not None:  # read already to choose the model (llm: format)
            original, override = x.llm_request
        else:
            original, override = await x.read_body(self.runtime.state.config.frontend.max_buffer_size), None
        kind = x.llm_kind or COMPLETIONS
        if kind in GEMINI_KINDS and ai.provider in llm_gemini.NATIVE_PROVIDERS:  # llm: format, google-genai
            llm_gemini.prepare(x, ai, kind, override)
            return original
        translated = translate.prepare(x, ai, original, override or ai.model, kind)
        if translated is not None:  # the client speaks another dialect than the provider (llm_translate)
            # the translation asks for and reports usage itself (a translated stream carries the
            # client's usage chunk only when asked): nothing for llm_strip to take out
            x.translation, body = translated
            return body
        body, info = prepare_request_body(original, model_override=override or ai.model,
                                          stream_usage_option=ai.stream_usage_option and kind == COMPLETIONS)
        x.llm = {"provider": ai.provider, "model": info.model if info else None,
                 "streaming": info.streaming if info else False}
        x.llm_strip = info is not None and info.usage_added
        path = ai.upstream_path(kind)
        if path is not None:
            x.upstream_path = fill_model(path, info.model if info else None)
        if ai.key_header != b"authorization" or ai.provider == "anthropic":
            x.headers = provider_headers(x.headers, ai.provider, ai.key_header)
        if x.request_capture is not None and body is not original:
            x.request_capture = BodyCapture(x.request_capture.limit)
            x.request_capture.feed(body)
        return body

    @staticmethod
    def _llm_passthrough(x: Exchange, backend: Backend) -> None:
        """A models list or another endpoint (files, batches...): the provider's path and credential
        header, the body forwarded as it comes."""
        ai = backend.ai
        assert ai is not None
        kind = x.llm_kind or PASSTHROUGH
        translate.refuse_untranslatable(ai, x.scope["path"], kind)  # bedrock, native gemini: no passthrough
        if kind in GEMINI_KINDS and ai.provider in llm_gemini.NATIVE_PROVIDERS:  # google-genai's own API
            llm_gemini.prepare(x, ai, kind)
            return
        x.llm = {"provider": ai.provider, "model": ai.model, "streaming": False}
        path = ai.upstream_path(kind)
        if path is not None:
            x.upstream_path = fill_model(path, ai.model)
        if ai.key_header != b"authorization" or ai.provider == "anthropic":
            x.headers = provider_headers(x.headers, ai.provider, ai.key_header)

    async def _choose_model(self, x: Exchange, compiled: CompiledRoute) -> tuple[Backend, Phase]:
        """The ``llm.models`` entry for the request body's model (llm_models.py); 404/400 JSON otherwise.
        ``GET .../models`` is answered here: the models this port serves."""
        if x.llm_kind == MODELS and x.scope["method"] in ("GET", "HEAD"):
            raise ModelList(200, model_list(compiled.route.backends))
        body = await x.read_body(self.runtime.state.config.frontend.max_buffer_size)
        path_model = llm_gemini.model_and_method(x.scope["path"], x.llm_kind)[0] if x.llm_kind in GEMINI_KINDS \
            else None  # google-genai: the model is in the path
        entry, request = select_model(compiled.route.models, body, path_model)
        x.llm_request = (body, transformed_model(entry, request))
        return compiled.route.backends[entry.backend], compiled.phases_by_index[entry.backend]

    async def _call_backend(self, x: Exchange, route: Route, backend: Backend, target: bytes,
                            headers: list[Header], body: bytes | AsyncIterator[bytes]) -> UpstreamResponse:
        """The upstream call up to its response headers, under ``backendRequestTimeout``; a route
        with no time limit at all gets ``config.backend.responseHeaderTimeout``, counted once the
        request body is sent (a long upload is not a hung backend)."""
        tr = x.tracer
        timeout = route.policies.timeout
        now = x.upstream_started = trio.current_time()
        backend_scope = trio.CancelScope()
        if timeout and timeout.backend_request_timeout:
            backend_scope.deadline = now + timeout.backend_request_timeout
        elif not (timeout and timeout.request_timeout):
            default = self.runtime.state.config.backend.response_header_timeout
            if isinstance(body, bytes):
                backend_scope.deadline = now + default
            else:
                body = _then(body, lambda: setattr(backend_scope, "deadline", trio.current_time() + default))
        tr.event("backendCallStart", target=str(backend.target))
        response = None
        client_span = None
        otel = self.runtime.otel
        if x.span is not None and otel is not None:
            client_span = otel.client_span(x.span, f"{x.scope['method']} {backend.name}", {
                "http.request.method": x.scope["method"], "server.address": backend.target.host,
                "server.port": backend.target.port})
            headers = [h for h in headers if h[0] != b"traceparent"] + [otel.traceparent(client_span)]
        try:
            with backend_scope:
                response = await self.runtime.pool.request(
                    backend.target, x.scope["method"].encode(), target, headers, body, nursery=x.nursery)
            if x.disconnected:
                if response is not None:
                    await response.aclose()
                raise ClientDisconnected()
            if response is None and backend_scope.cancelled_caught:
                raise UpstreamTimeout()
        except ProxyError as error:
            if client_span is not None:
                OtelTracing.finish(client_span, 502, {}, error.message)
            tr.body("final request", x.request_capture)
            tr.event("backendCallResult", start=now, severity="error", status=None, error=error.message)
            raise
        except trio.Cancelled:
            if client_span is not None:
                OtelTracing.finish(client_span, 504, {}, "request timeout")
            raise
        if client_span is not None:
            OtelTracing.finish(client_span, response.status if response else 0, {}, None)
        assert response is not None
        tr.body("final request", x.request_capture)
        if tr.active:
            tr.event("backendCallResult", start=now, severity="success" if response.status < 400 else "warn",
                     status=response.status, error=None)
        return response

    async def _respond(self, x: Exchange, gateway: Phase, route: Phase, response: UpstreamResponse) -> None:
        """Response hooks backend → route → listener, then the body streamed back; ``finish``
        hooks (token charges) run after the client has its whole response."""
        tr = x.tracer
        backend = x.backend
        assert backend is not None and x.backend_phase is not None
        if tr.active:
            now = trio.current_time()
            assert x.upstream_started is not None
            tr.response_snapshot("raw response", x, response.status, response.headers, proxy={
                "requestProcessingDuration": duration_string(now - x.arrival),
                "upstreamDuration": duration_string(now - x.upstream_started)})
        headers = without_hop_by_hop(response.headers)
        translated_body = stream = None
        if x.translation is not None:  # the provider's answer in the client's dialect (llm_translate)
            headers, translated_body, stream = await translate.respond(
                x, x.translation, response, headers, self.runtime.state.config.frontend.max_buffer_size)
        for stage in x.backend_phase.response:
            headers = stage.response_headers(x, headers)
        tr.response_snapshot("backend response ready", x, response.status, headers)
        for stage in route.response:
            headers = stage.response_headers(x, headers)
        for stage in gateway.response:
            headers = stage.response_headers(x, headers)
        if x.limits:
            headers += LocalRateLimiter.headers(most_constrained(decision for _, decision in x.limits))
        if x.extra_response_headers:
            headers += x.extra_response_headers
        tr.response_snapshot("final response", x, response.status, headers)

        finishers = gateway.finish + route.finish
        usage_reader = None
        if x.translation is not None:
            await self._send_translated(x, translated_body, stream, response, response.status, headers, finishers)
            return
        if finishers or backend.ai is not None:
            usage_reader = UsageReader(header_value(response.headers, b"content-type"),
                                       content_encoding=header_value(response.headers, b"content-encoding"))
            if not usage_reader.active:
                usage_reader = None
        capture = BodyCapture(tr.body_limit) if tr.active else None
        stripper = None
        if (x.llm_strip and response.status < 300 and header_value(response.headers, b"content-encoding") is None
                and (header_value(response.headers, b"content-type") or b"").startswith(b"text/event-stream")):
            # The gateway asked for stream usage; the client did not: what it brings is taken out.
            stripper = UsageStripper()
            headers = [h for h in headers if h[0] != b"content-length"]

        # What came with the headers (often the whole body) leaves in one write with them.
        ready, complete = response.ready()
        timed = backend.ai is not None  # time to first token (gen_ai_server_* metrics)
        if timed and any(ready):
            x.first_chunk = trio.current_time()
        async with x.corked():
            await x.start_response(response.status, headers)
            for chunk in ready:
                if usage_reader is not None:
                    usage_reader.feed(chunk)
                if capture is not None:
                    capture.feed(chunk)
                if stripper is not None:
                    chunk = stripper.feed(chunk)
                    if not chunk:
                        continue
                await x.send_body(chunk)
            if complete:
                await x.end_body(stripper.finish() if stripper is not None else b"")
        if not complete:
            async with aclosing(response.body()) as chunks:
                async for chunk in chunks:
                    if timed and x.first_chunk is None:
                        x.first_chunk = trio.current_time()
                    if usage_reader is not None:
                        usage_reader.feed(chunk)
                    if capture is not None:
                        capture.feed(chunk)
                    if stripper is not None:
                        chunk = stripper.feed(chunk)
                        if not chunk:
                            continue
                    await x.send_body(chunk)
            await x.end_body(stripper.finish() if stripper is not None else b"")

        if usage_reader is not None:
            usage = usage_reader.finish()
            if usage is not None:
                x.usage = usage
                llm = x.llm
                if llm is not None:
                    llm.update(inputTokens=usage.prompt_tokens, outputTokens=usage.completion_tokens,
                               totalTokens=usage.total_tokens)
                    if usage.model:
                        llm["responseModel"] = usage.model
                    if usage.cached_input_tokens:
                        llm["cachedInputTokens"] = usage.cached_input_tokens
                    if usage.cache_creation_input_tokens:
                        llm["cacheCreationInputTokens"] = usage.cache_creation_input_tokens
                    if usage.reasoning_tokens:
                        llm["reasoningTokens"] = usage.reasoning_tokens
                for stage in finishers:
                    await stage.finish(x)
        tr.body("response", capture)

    async def _send_translated(self, x: Exchange, body: bytes | None, stream: Any, response: UpstreamResponse,
                               status: int, headers: list[Header], finishers: Sequence[Any]) -> None:
        """A translated answer: the whole body, or the provider's stream translated piece by piece;
        then the usage the translation counted (a translated stream may not carry it)."""
        capture = BodyCapture(x.tracer.body_limit) if x.tracer.active else None
        async with x.corked():
            await x.start_response(status, headers)
            if body is not None:
                x.first_chunk = trio.current_time()
                if capture is not None:
                    capture.feed(body)
                await x.send_body(body)
                await x.end_body()
        if stream is not None:
            async with aclosing(translate.translated_chunks(x, response, stream)) as chunks:
                async for chunk in chunks:
                    if x.first_chunk is None:  # time to first token (gen_ai_server_* metrics)
                        x.first_chunk = trio.current_time()
                    if capture is not None:
                        capture.feed(chunk)
                    await x.send_body(chunk)
            await x.end_body()
        usage = translate.usage(x.translation)
        if usage is not None:
            x.usage = usage
            if x.llm is not None:  # cached, cache-write and reasoning tokens too, as for passthrough
                x.llm.update(usage_fields(usage))
            for stage in finishers:
                await stage.finish(x)
        x.tracer.body("response", capture)


async def _then(body: AsyncIterator[bytes], done: Callable[[], None]) -> AsyncIterator[bytes]:
    """``body``, then ``done()`` once its last piece was taken."""
    async for chunk in body:
        yield chunk
    done()
