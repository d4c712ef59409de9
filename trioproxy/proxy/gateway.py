"""The data plane: a plain ASGI app per bind, independent of Quart and of the server hosting it.

An HTTP request walks the shared pipeline (pipeline.py: admission, the listener's stages,
routing, the route's and the backend's stages), then the steps that are HTTP's own:

 5. backend        ``ai`` backends get their JSON body rewritten (model override,
                   ``stream_options.include_usage``) or translated to the provider's dialect
 6. upstream       h11 pool, under backendRequestTimeout and requestTimeout; body streamed;
                   ``retry`` repeats the call; the client span around each call
 7. response       response header modifiers and ``x-ratelimit-*``; the body streamed back
                   chunk by chunk through the response tap (usage read, trace copy, stream
                   usage taken out); token limits charged at the end

Any stage may raise ``ProxyError``; ``handle`` hands it to ``Exchange.respond_error``, the one
place errors become responses, and ends the request through ``Pipeline.finish`` (metrics, span,
access log, trace). Once the request body is read, the disconnect monitor (the server's
``CLIENT_FD``), or else a watcher task waiting for ``http.disconnect``, cancels the request's
scope, so an abandoned request stops its upstream call at once. That scope is a nursery only when
the request may need a task (``_serve``). WebSocket upgrades go to websocket.py, over the same
pipeline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from math import inf
from typing import Any, TypeVar

import trio

from ..asgi import CONNECTION_SCOPE, Header, Receive, Scope, Send, serve_lifespan
from ..config.model import Backend, Route
from ..errors import ProxyError, RequestTimeout, UpstreamError, UpstreamTimeout
from ..llm.pricing import PriceCatalog
from ..llm.providers import COMPLETIONS, GEMINI_KINDS, PASSTHROUGH, UNREAD_KINDS, fill_model, provider_headers
from ..llm.usage import Usage, UsageReader, UsageStripper, prepare_request_body, usage_fields
from ..policies.headers import (
    forwarded_request_headers,
    header_value,
    request_framing,
    without_hop_by_hop,
)
from ..policies.ratelimit_local import LocalRateLimiter, most_constrained
from ..policies.retry import MAX_RETRY_BODY
from ..telemetry.otel import NO_CLIENT_SPAN
from ..telemetry.trace import BodyCapture, duration_string
from ..upstream.pool import UpstreamResponse
from . import keys_stage, llm_gemini
from . import llm_stage as translate
from .attempts import Candidate, Replay, run_attempts
from .exchange import ClientDisconnected, Exchange
from .pipeline import Pipeline
from .ratelimit_local_stage import TargetTokens
from .runtime import CompiledRoute, GatewayState, Runtime
from .stage import Phase
from .websocket import WebSocketProxy

__all__ = ["Gateway", "GatewayState", "Runtime"]

_T = TypeVar("_T")


def _request_timeout_why(x: Exchange, limit: float | None) -> dict[str, Any]:
    """The ``why`` of a 504 ``request timeout``: the route's ``requestTimeout`` and where the request was."""
    where = "the backend call was under way" if x.upstream_started is not None else \
        "the backend was not called yet (route stages, the body read)"
    return {"policy": "timeout", "check": "requestTimeout", "limit": limit,
            "detail": f"no response headers within {limit or 0:g}s of the request's arrival; {where}"}


class Gateway:
    """The ASGI app serving one bind (port) of the runtime: HTTP requests through its pipeline to
    the upstream and back; WebSocket upgrades handed to ``websocket.py``, over the same pipeline."""

    def __init__(self, runtime: Runtime, port: int) -> None:
        self.runtime = runtime
        self.port = port
        self.pipeline = Pipeline(runtime, port)
        self.websocket = WebSocketProxy(self.pipeline)  # upgrades: docs/protocols.md

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.handle(scope, receive, send)
        elif kind == "lifespan":
            await serve_lifespan(receive, send)
        elif kind == "websocket":
            await self.websocket(scope, receive, send)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        runtime = self.runtime
        pipeline = self.pipeline
        x = pipeline.open_exchange(scope, receive, send)
        x.body_idle_timeout = runtime.state.config.frontend.body_idle_timeout
        x.disconnect_monitor = runtime.disconnects
        metrics = runtime.metrics
        metrics.requests_active += 1
        try:
            # Admission and routing read no body, so no disconnect is watched yet: nothing to cancel.
            routed = await self._guarded(x, pipeline.admit_and_route(x, x.scope["method"]))
            if routed is not None:
                await self._serve(x, *routed)
        finally:
            x.stop_watching()
            metrics.requests_active -= 1
            if x.disconnected:
                x.error = x.error or "client disconnected"
                x.error_kind = x.error_kind or "ClientDisconnected"
            pipeline.finish(x, 499 if x.disconnected else x.status)

    async def _serve(self, x: Exchange, gateway: Phase, compiled: CompiledRoute) -> None:
        """The routed request under what a client's disconnect cancels: a nursery when it may need a
        task beside it (a disconnect watcher without the server's ``CLIENT_FD``; an upload streamed
        while the answer is read, an MCP listening stream: ``CompiledRoute.needs_tasks``), else the
        server's scope around the connection (``asgi.CONNECTION_SCOPE``: a client gone ends both),
        else a plain cancel scope: a nursery's exit is one more scheduling round per request, a
        scope's entry and exit 3-5 us (``python -m bench.trio_costs``)."""
        if x.watched_without_task() and not compiled.needs_tasks(x):
            connection_scope = x.scope["extensions"].get(CONNECTION_SCOPE)
            if connection_scope is not None:
                x.cancel_scope = connection_scope
                await self._guarded(x, self._proxy(x, gateway, compiled))
                return
            with trio.CancelScope() as x.cancel_scope:
                await self._guarded(x, self._proxy(x, gateway, compiled))
            return
        async with trio.open_nursery() as nursery:
            x.nursery, x.cancel_scope = nursery, nursery.cancel_scope
            await self._guarded(x, self._proxy(x, gateway, compiled))
            if nursery.child_tasks:  # a disconnect watcher or an unfinished upload: stop it
                nursery.cancel_scope.cancel()

    async def _guarded(self, x: Exchange, step: Awaitable[_T]) -> _T | None:
        """``step``'s result; a ``ProxyError`` answered to the client (the one place errors become
        responses is ``Exchange.respond_error``), a client gone ends it quietly: None."""
        try:
            return await step
        except ProxyError as error:
            self.pipeline.count_failure(x, error)
            await x.respond_error(error)
        except ClientDisconnected:
            pass
        return None

    async def _proxy(self, x: Exchange, gateway: Phase, compiled: CompiledRoute) -> None:
        tr = x.tracer
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
            error = RequestTimeout(why=_request_timeout_why(x, compiled.request_timeout))
            if x.upstream_started is not None:
                tr.body("final request", x.request_capture)
                tr.event("backendCallResult", start=x.upstream_started, severity="error", status=None,
                         error=error.message)
            raise error

        # 7. response (closed, not pooled, if anything below fails before its body is read); closed
        # without ``aclose``'s checkpoint, a whole scheduling round per request for nothing
        try:
            await self._respond(x, gateway, compiled.phase, response)
        finally:
            response.close()

    async def _route_to_upstream(self, x: Exchange, compiled: CompiledRoute) -> UpstreamResponse:
        """Steps 4-6, under the request's deadline: the route's stages, then the attempts at its
        targets (proxy/attempts.py: health, balancing, failover, retries)."""
        plan = await self.pipeline.route_stages_and_plan(x, compiled)
        headers = x.headers  # as the route's stages left them: each attempt starts from here

        def reset() -> None:
            x.headers = headers
            x.translation = x.llm = x.upstream_path = None
            x.llm_strip = False
            x.mirrors = ()  # the copies went with the first attempt

        async def attempt(candidate: Candidate, n: int, replay: Replay) -> UpstreamResponse:
            if plan.body is not None:
                x.llm_request = (plan.body, candidate.override)
            return await self.attempt(x, compiled, candidate, n, replay)

        return await run_attempts(self.runtime.resilience, x, compiled.route, plan, attempt, reset)

    async def attempt(self, x: Exchange, compiled: CompiledRoute, candidate: Candidate, n: int,
                      replay: Replay) -> UpstreamResponse:
        """One call to ``candidate``: its backend stages, the body prepared for it (in its dialect),
        the call; ``replay`` keeps the client's body for a next attempt (None: it was streamed)."""
        tr = x.tracer
        scope = x.scope
        route = compiled.route
        backend = candidate.backend
        await self.pipeline.backend_stages(x, backend, candidate.phase)
        if backend.mcp is not None:  # MCP servers behind the route (mcp_stage.py, docs/mcp.md)
            config = self.runtime.state.config
            return await self.runtime.mcp.respond(x, backend, config.session_key, config.frontend.max_buffer_size)
        if tr.active:
            x.request_capture = BodyCapture(tr.body_limit)
        body: bytes | AsyncIterator[bytes]
        if backend.ai is not None and (x.llm_request is not None or x.llm_kind not in UNREAD_KINDS):
            llm_body = await self._prepare_llm_request(x, backend)
            if x.llm_request is not None:
                replay.body = x.llm_request[0]
            body = llm_body
            framing: Header | None = (b"content-length", str(len(llm_body)).encode()) if llm_body or x.has_body() else None
        else:
            if x.principal is not None:  # a runtime key: the request counts against its limits
                await self._admit(x, None, None, None, None)
            if backend.ai is not None:  # models list, files, batches...: the body is not read, only forwarded
                self._llm_passthrough(x, backend)
            if replay.body is None:
                await x.peek_body()  # HTTP/2: is there a body without content-length?
            framing = request_framing(scope["headers"])
            if framing is None and x.has_body():
                framing = (b"transfer-encoding", b"chunked")  # an HTTP/2 body of unknown length
            if replay.body is not None:
                body = replay.body
            else:
                body = await self._retryable_body(x) if x.retry is not None else x.request_body()
                replay.body = body if isinstance(body, bytes) else None
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
        if n:
            upstream_headers = upstream_headers + [(b"x-retry-attempt", str(n).encode())]
        if tr.active:
            tr.snapshot("final request", x, headers=upstream_headers)
        for mirror in x.mirrors:  # copies run in the root nursery: never in this request's way
            self.runtime.mirrors.send(mirror, scope["method"].encode(), target, upstream_headers,
                                      body if isinstance(body, bytes) else b"")
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
            x.llm_request = (original, None)  # kept for another attempt (proxy/attempts.py)
        kind = x.llm_kind or COMPLETIONS
        if x.principal is not None:  # a runtime key: its models and budgets (keys_stage.py)
            path_model = llm_gemini.model_and_method(x.scope["path"], kind)[0] if kind in GEMINI_KINDS else None
            await self._admit(x, original, ai.provider, override or ai.model or path_model, path_model)
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

    async def _admit(self, x: Exchange, body: bytes | None, provider: str | None, provider_model: str | None,
                     path_model: str | None) -> None:
        """A keyed request's model check and budget reservation, once its body is known."""
        runtime = self.runtime
        settings = runtime.state.config.keys
        await keys_stage.admit(x, runtime.keys, body, provider=provider, provider_model=provider_model,
                               path_model=path_model, prices=runtime.state.prices,
                               default_max_tokens=settings.default_max_tokens,
                               fail_open=settings.failure_mode == "open")

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

    async def _call_backend(self, x: Exchange, route: Route, backend: Backend, target: bytes,
                            headers: list[Header], body: bytes | AsyncIterator[bytes]) -> UpstreamResponse:
        """The upstream call up to its response headers, under ``backendRequestTimeout``; a route
        with no time limit at all gets ``config.backend.responseHeaderTimeout``, counted once the
        request body is sent (a long upload is not a hung backend)."""
        tr = x.tracer
        now = x.upstream_started = trio.current_time()
        # The pool bounds the call by ``deadline`` (on a pooled connection without a cancel scope:
        # fd_deadlines.py); a streamed upload's responseHeaderTimeout starts when the upload ends,
        # under a scope of its own.
        bound = self._backend_bound(route)
        deadline = backend_scope = None
        if bound is not None and bound[0] == "responseHeaderTimeout" and not isinstance(body, bytes):
            backend_scope = trio.CancelScope()
            seconds = bound[1]
            body = _then(body, lambda: setattr(backend_scope, "deadline", trio.current_time() + seconds))
        elif bound is not None:
            deadline = now + bound[1]
        if tr.active:
            tr.event("backendCallStart", target=str(backend.target))
        response = None
        otel = self.runtime.otel
        span = NO_CLIENT_SPAN
        if x.span is not None and otel is not None:
            span = otel.client_span(x.span, f"{x.scope['method']} {backend.name}", {
                "http.request.method": x.scope["method"], "server.address": backend.target.host,
                "server.port": backend.target.port})
            headers = [h for h in headers if h[0] != b"traceparent"] + [span.traceparent()]
        try:
            with span:
                pool = self.runtime.pool
                try:
                    if backend_scope is None:
                        response = await pool.request(backend.target, x.scope["method"].encode(), target, headers,
                                                      body, nursery=x.nursery, deadline=deadline)
                    else:
                        with backend_scope:
                            response = await pool.request(backend.target, x.scope["method"].encode(), target,
                                                          headers, body, nursery=x.nursery)
                except trio.TooSlowError:
                    response = None
                if x.disconnected:
                    if response is not None:
                        await response.aclose()
                    raise ClientDisconnected()
                if response is None:  # the pool's deadline, or the upload's scope, passed
                    raise UpstreamTimeout(why=self._upstream_timeout_why(route, backend, body))
                span.status = response.status if response else 0
        except ProxyError as error:
            if error.why is None and isinstance(error, UpstreamError):  # which backend, at which address
                error.why = {"backend": backend.name, "target": str(backend.target), "detail": error.message}
            tr.body("final request", x.request_capture)
            tr.event("backendCallResult", start=now, severity="error", status=None, error=error.message)
            raise
        assert response is not None
        tr.body("final request", x.request_capture)
        if tr.active:
            tr.event("backendCallResult", start=now, severity="success" if response.status < 400 else "warn",
                     status=response.status, error=None)
        return response

    def _backend_bound(self, route: Route) -> tuple[str, float] | None:
        """The setting that bounds a backend call and its seconds: the route's
        ``backendRequestTimeout``; none when only its ``requestTimeout`` does (``_proxy``); else
        ``config.backend.responseHeaderTimeout`` (counted from the end of a streamed upload)."""
        timeout = route.policies.timeout
        if timeout and timeout.backend_request_timeout:
            return "backendRequestTimeout", timeout.backend_request_timeout
        if timeout and timeout.request_timeout:
            return None
        return "responseHeaderTimeout", self.runtime.state.config.backend.response_header_timeout

    def _upstream_timeout_why(self, route: Route, backend: Backend, body: bytes | AsyncIterator[bytes]) -> dict[str, Any]:
        """The ``why`` of a 504 ``upstream call timeout``: the setting ``_backend_bound`` chose."""
        bound = self._backend_bound(route)
        assert bound is not None  # the call timed out: something bounded it
        check, limit = bound
        since = "the end of the request body" if check == "responseHeaderTimeout" and not isinstance(body, bytes) \
            else "the call's start"
        return {"policy": "timeout", "check": check, "limit": limit, "backend": backend.name,
                "detail": f"backend {backend.name} sent no response headers within {limit:g}s of {since}"}

    async def _respond(self, x: Exchange, gateway: Phase, route: Phase, response: UpstreamResponse) -> None:
        """Response hooks backend → route → listener, then the body streamed back through the
        response tap; ``finish`` hooks (token charges) run after the client has its whole response."""
        tr = x.tracer
        backend = x.backend
        assert backend is not None
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
        headers = _response_headers(x, gateway, route, response.status, headers)
        finishers: Sequence[Any] = gateway.finish + route.finish
        target = x.target_limiter
        if target is not None and target.counts_tokens:  # the quota of the target that answered
            finishers = (*finishers, TargetTokens(target))
        if x.translation is not None:
            await self._send_translated(x, translated_body, stream, response, response.status, headers, finishers)
            return
        tap = ResponseTap.of(x, response, bool(finishers))
        if tap is not None and tap.stripper is not None:
            headers = [h for h in headers if h[0] != b"content-length"]

        # What came with the headers (often the whole body) leaves in one write with them.
        ready, complete = response.ready()
        timed = backend.ai is not None  # time to first token (gen_ai_server_* metrics)
        if timed and any(ready):
            x.first_chunk = trio.current_time()
        try:
            if complete:  # the whole answer: one body message after the start, so one write
                pieces = ready if tap is None else [*(tap.feed(chunk) for chunk in ready), tap.end()]
                await x.start_response(response.status, headers)
                await x.end_body(pieces[0] if len(pieces) == 1 else b"".join(pieces))
            else:
                async with x.corked():
                    await x.start_response(response.status, headers)
                    for chunk in ready:
                        if tap is not None and not (chunk := tap.feed(chunk)):
                            continue
                        await x.send_body(chunk)
                if tap is not None and tap.ended:
                    x.answered()
                async with aclosing(response.body()) as chunks:
                    async for chunk in chunks:
                        if timed and x.first_chunk is None:
                            x.first_chunk = trio.current_time()
                        if tap is None:
                            await x.send_body(chunk)
                        elif chunk := tap.feed(chunk):
                            await x.send_body(chunk)
                            if tap.ended:
                                x.answered()
                await x.end_body(tap.end() if tap is not None else b"")
        finally:
            if tap is not None:
                _charge(x, tap.usage(), finishers, self.runtime.state.prices)
                tr.body("response", tap.capture)

    async def _send_translated(self, x: Exchange, body: bytes | None, stream: Any, response: UpstreamResponse,
                               status: int, headers: list[Header], finishers: Sequence[Any]) -> None:
        """A translated answer: the whole body, or the provider's stream translated piece by piece;
        then the usage the translation counted (a translated stream may not carry it)."""
        capture = BodyCapture(x.tracer.body_limit) if x.tracer.active else None
        if x.payloads is not None:  # the request log keeps the answer (keys_stage.py)
            capture = x.payloads["response"] = capture or BodyCapture(keys_stage.PAYLOAD_LIMIT)
        async with x.corked():
            await x.start_response(status, headers)
            if body is not None:
                x.first_chunk = trio.current_time()
                if capture is not None:
                    capture.feed(body)
                await x.send_body(body)
                await x.end_body()
        if stream is not None:
            try:
                async with aclosing(translate.translated_chunks(x, response, stream)) as chunks:
                    async for chunk in chunks:
                        if x.first_chunk is None:  # time to first token (gen_ai_server_* metrics)
                            x.first_chunk = trio.current_time()
                        if capture is not None:
                            capture.feed(chunk)
                        await x.send_body(chunk)
                        if stream.done:  # the client's terminator went out (message_stop, [DONE])
                            x.answered()
                await x.end_body()
            finally:
                _charge_translated(x, finishers, capture, self.runtime.state.prices)
            return
        _charge_translated(x, finishers, capture, self.runtime.state.prices)


def _charge_translated(x: Exchange, finishers: Sequence[Any], capture: BodyCapture | None,
                       prices: PriceCatalog) -> None:
    """The usage the translation counted (a translated stream may not carry it), charged."""
    usage = translate.usage(x.translation)
    if usage is not None and x.llm is not None:  # cached, cache-write and reasoning tokens too, as for passthrough
        x.llm.update(usage_fields(usage))
    _charge(x, usage, finishers, prices, take=False)
    x.tracer.body("response", capture)


def _charge(x: Exchange, usage: Usage | None, finishers: Sequence[Any], prices: PriceCatalog, *,
            take: bool = True) -> None:
    """The answer's usage priced (``llm.cost``) and charged by the ``finish`` hooks (token rate
    limits), once per request, even when the client left mid-stream (499): the provider spent the
    tokens it reported. The hooks are plain functions (``Stage.finish``): a cancelled request still
    charges, and none can hold the request's end."""
    if usage is None:
        return
    if take:
        _take_usage(x, usage)
    else:
        x.usage = usage
    _price_usage(x, usage, prices)
    for stage in finishers:
        stage.finish(x)


async def _then(body: AsyncIterator[bytes], done: Callable[[], None]) -> AsyncIterator[bytes]:
    """``body``, then ``done()`` once its last piece was taken."""
    async for chunk in body:
        yield chunk
    done()


def _response_headers(x: Exchange, gateway: Phase, route: Phase, status: int, headers: list[Header]) -> list[Header]:
    """Response hooks backend → route → listener, then ``x-ratelimit-*`` and the stages' extra headers."""
    tr = x.tracer
    assert x.backend_phase is not None
    for stage in x.backend_phase.response:
        headers = stage.response_headers(x, headers)
    if tr.active:
        tr.response_snapshot("backend response ready", x, status, headers)
    for stage in route.response:
        headers = stage.response_headers(x, headers)
    for stage in gateway.response:
        headers = stage.response_headers(x, headers)
    if x.limits:
        headers += LocalRateLimiter.headers(most_constrained([decision for _, decision in x.limits]))
    if x.extra_response_headers:
        headers += x.extra_response_headers
    if tr.active:
        tr.response_snapshot("final response", x, status, headers)
    return headers


def _take_usage(x: Exchange, usage: Usage) -> None:
    """The provider's reported usage: for the ``finish`` hooks (``x.usage``), and in ``x.llm`` for
    the request's metrics, span and access log."""
    x.usage = usage
    llm = x.llm
    if llm is None:
        return
    llm.update(inputTokens=usage.prompt_tokens, outputTokens=usage.completion_tokens, totalTokens=usage.total_tokens)
    if usage.model:
        llm["responseModel"] = usage.model
    if usage.cached_input_tokens:
        llm["cachedInputTokens"] = usage.cached_input_tokens
    if usage.cache_creation_input_tokens:
        llm["cacheCreationInputTokens"] = usage.cache_creation_input_tokens
    if usage.reasoning_tokens:
        llm["reasoningTokens"] = usage.reasoning_tokens


def _price_usage(x: Exchange, usage: Usage, prices: PriceCatalog) -> None:
    """``llm.cost``: the answer's cost in USD at the price of the model the provider answered with
    (else the one asked for), ``None`` when the catalog has no price for either (docs/pricing.md);
    the trace's ``llmUsage`` event reports it with the tokens."""
    llm = x.llm
    if llm is None:
        return
    provider = llm.get("provider")
    cost = None
    priced = usage.model or llm.get("model")
    for model in (usage.model, llm.get("model")):
        if model:
            cost = prices.cost(provider, model, usage)
            if cost is not None:
                priced = model
                break
    llm["cost"] = cost
    if x.tracer.active:
        x.tracer.event("llmUsage", provider=provider, model=priced, cost=cost, **usage_fields(usage))


class ResponseTap:
    """What reads a response body on its way to the client, chunk by chunk, in one place: the LLM
    usage (``reader``: for token charges and the request's telemetry), the trace's copy
    (``capture``), and the usage chunk the gateway asked for and the client did not, taken out
    (``stripper``). ``of`` gives none when nothing reads the body: the chunks go straight out."""

    __slots__ = ("capture", "reader", "stripper")

    def __init__(self, reader: UsageReader | None, capture: BodyCapture | None, stripper: UsageStripper | None) -> None:
        self.reader = reader
        self.capture = capture
        self.stripper = stripper

    @classmethod
    def of(cls, x: Exchange, response: UpstreamResponse, finishers: bool) -> ResponseTap | None:
        """The tap for ``response``: usage read for an ``ai`` backend or a ``finish`` hook, a copy
        for a trace, stream usage taken out of a successful, unencoded event stream (``x.llm_strip``)."""
        reader = stripper = None
        if finishers or (x.backend is not None and x.backend.ai is not None):
            reader = UsageReader(header_value(response.headers, b"content-type"),
                                 content_encoding=header_value(response.headers, b"content-encoding"))
            if not reader.active:
                reader = None
        capture = BodyCapture(x.tracer.body_limit) if x.tracer.active else None
        if x.payloads is not None:  # the request log keeps the answer (keys_stage.py)
            capture = x.payloads["response"] = capture or BodyCapture(keys_stage.PAYLOAD_LIMIT)
        if (x.llm_strip and response.status < 300 and header_value(response.headers, b"content-encoding") is None
                and (header_value(response.headers, b"content-type") or b"").startswith(b"text/event-stream")):
            stripper = UsageStripper()
        if reader is None and capture is None and stripper is None:
            return None
        return cls(reader, capture, stripper)

    def feed(self, chunk: bytes) -> bytes:
        """Read ``chunk``; what of it goes to the client (empty: nothing)."""
        if self.reader is not None:
            self.reader.feed(chunk)
        if self.capture is not None:
            self.capture.feed(chunk)
        return self.stripper.feed(chunk) if self.stripper is not None else chunk

    def end(self) -> bytes:
        """The body's last bytes for the client (what the stripper held back)."""
        return self.stripper.finish() if self.stripper is not None else b""

    @property
    def ended(self) -> bool:
        """The answer's last event went through (``UsageReader.ended``)."""
        reader = self.reader
        return reader is not None and reader.ended

    def usage(self) -> Usage | None:
        return self.reader.finish() if self.reader is not None else None
