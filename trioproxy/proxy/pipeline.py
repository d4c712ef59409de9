"""The request pipeline of one bind, shared by HTTP requests (gateway.py) and WebSocket upgrades
(websocket.py): a request's steps up to its backend, and its end.

One request walks these stages, in this fixed order (agentgateway's order; docs/pipeline.md):

 1. admission      header count limit; the listener by Host
 2. gateway phase  listener policies: localRateLimit (one budget shared by the listener's routes)
 3. routing        the listener's route table → 404 ``route not found``
 4. route phase    localRateLimit; requestHeaderModifier; directResponse answers here
 5. backend        weighted choice (by the body's model on an ``llm:`` route); the backend's stages
 6. upstream       the HTTP path (gateway.py): h11 pool, under backendRequestTimeout and
                   requestTimeout; or the WebSocket path's handshake with the backend
 7. response       response header modifiers and ``x-ratelimit-*``; the body or the messages relayed

Steps 1-5 are here (``admit_and_route``, ``route_and_backend_stages``); 6 and 7 differ by protocol.
Any stage may raise ``ProxyError``; the caller turns it into the client's answer. ``open_exchange``
starts a request (its trace claimed, its span started) and ``finish`` ends it: metrics, span and
access log (request_telemetry.py), then the trace.

Tracing: when a ``/debug/trace`` watcher claims the request, ``x.tracer`` records the events of
each stage (docs/trace-events.md); otherwise it is the ``NullTracer``, whose calls do nothing and
build no snapshot.
"""

from __future__ import annotations

import time

import trio

from ..asgi import Receive, Scope, Send
from ..config.model import Backend
from ..errors import BackendUnreachable, HeaderTooLarge, ModelList, ProxyError, RouteNotFound, UpstreamError
from ..llm.models import model_list, select_model, transformed_model
from ..llm.providers import GEMINI_KINDS, MODELS, endpoint_kind, error_dialect, resolve_route
from ..telemetry.trace import NULL_TRACER, REPLAY_HEADER, activation
from . import keys_stage, llm_gemini
from .attempts import Candidate, Plan
from .exchange import Exchange
from .request_telemetry import end_server_span, log_request, observe_request
from .routing import Request, explain_misses
from .runtime import CompiledRoute, Runtime
from .stage import Phase
from .virtual_models import route_plan, virtual_plan
from .why import with_attempts

__all__ = ["Pipeline"]


class Pipeline:
    """Steps 1-5 and the end of the requests of one bind (port) of the runtime."""

    def __init__(self, runtime: Runtime, port: int) -> None:
        self.runtime = runtime
        self.port = port
        self.bind = next(b for b in runtime.state.config.binds if b.port == port)  # its ``key`` labels metrics
        self.access_log = runtime.access_log

    def open_exchange(self, scope: Scope, receive: Receive, send: Send) -> Exchange:
        """An exchange with its trace claimed (when someone watches) and its span started: the
        first step of a request, and of a WebSocket upgrade (whose scope then reads as a GET)."""
        runtime = self.runtime
        x = Exchange(scope, receive, send, trio.current_time())
        if runtime.trace.watchers:
            x.tracer = runtime.trace.claim(x.arrival, lambda: activation(x)) or NULL_TRACER
            if any(name == REPLAY_HEADER for name, _ in x.headers):  # /api/replay's marker, used up by the claim
                x.headers = [h for h in x.headers if h[0] != REPLAY_HEADER]
        if runtime.otel is not None:
            x.span = runtime.otel.start(scope["method"], scope["path"], scope["headers"], time.time_ns())
        return x

    def count_failure(self, x: Exchange, error: ProxyError) -> None:
        """A request's or an upgrade's failure, counted when the backend side caused it."""
        if isinstance(error, UpstreamError):
            self.runtime.metrics.upstream_error(self.bind.key, x.route.key if x.route else "", type(error).__name__)

    def finish(self, x: Exchange, status: int) -> None:
        """The end of a request or of a WebSocket session: its metrics, span and access-log line
        (names: docs/observability.md), then its trace."""
        seconds = trio.current_time() - x.arrival
        runtime = self.runtime
        if x.reservation is not None:  # a runtime key's budget: the real usage replaces the estimate
            keys_stage.settle(x, runtime.keys, status, seconds, runtime.keys_metrics)
        observe_request(runtime.metrics, self.bind.key, x, status, seconds)
        if x.span is not None:
            end_server_span(runtime.otel, x, status)
        if x.attempts is not None and len(x.attempts) > 1:  # failover or retries: each attempt's outcome
            x.why = with_attempts(x)
        log_request(self.access_log, runtime.history, self.bind.key, x, status, seconds)
        x.tracer.finish(status, x.error, x.why)

    async def admit_and_route(self, x: Exchange, method: str) -> tuple[Phase, CompiledRoute]:
        """Steps 1-3: admission, the listener's stages, and route selection (``x.listener``,
        ``x.route``, ``x.route_match``). Both phases come from the one state read at entry: a
        reload meanwhile does not mix them."""
        tr = x.tracer
        scope = x.scope
        state = self.runtime.state

        # 1. admission (an untraced request skips the tracer's calls, not only their work)
        if tr.active:
            tr.event("requestStarted")
            tr.snapshot("initial request", x)
        max_headers = state.config.frontend.max_headers  # frontendPolicies.http.http1MaxHeaders
        if len(x.headers) > max_headers:
            raise HeaderTooLarge(f"too many request headers (limit {max_headers})")
        bind = state.binds.get(self.port)
        found = bind.listener_for(x.host) if bind is not None else None
        if found is None:
            tr.event("routeSelection", severity="warn", selectedRoute=None, evaluatedRoutes=[])
            raise RouteNotFound(why={"routes": [], "evaluated": 0, "detail": f"no listener for host {x.host!r}"})
        listener, table = found
        x.listener = listener

        # 2. gateway phase (the listener's stages, in stages.STAGE_ORDER)
        gateway = state.listeners[listener.key]
        if tr.active:
            tr.policy_selection("gateway", listener.policies)
        for stage in gateway.request:
            await stage.request(x)
        if tr.active:
            tr.snapshot("gateway policies", x)

        # 3. routing
        request = Request(method, scope["path"], x.host, x.headers, scope.get("query_string", b""))
        selection = table.select(request)
        if tr.active:
            tr.event("routeSelection", severity="info" if selection.route else "warn",
                     selectedRoute=selection.route.key if selection.route else None,
                     evaluatedRoutes=list(selection.evaluated))
        if selection.route is None:
            raise RouteNotFound(why=explain_misses(listener.routes, request))
        x.route = selection.route
        x.route_match = selection.match
        compiled = state.routes[selection.route.key]
        if compiled.llm:  # the endpoint asked for, and so the dialect of the gateway's own errors
            x.llm_kind = kind = endpoint_kind(scope["path"])
            x.error_dialect = error_dialect(kind)
        return gateway, compiled

    async def route_and_backend_stages(self, x: Exchange, compiled: CompiledRoute) -> Backend:
        """Steps 4-5 of a WebSocket upgrade: the route's stages, the backend chosen by weight (an
        upgrade has no body to pick a model by, so an ``llm:`` route's ``models`` are not read), and
        its stages; the backend and its phase are left in ``x.backend`` and ``x.backend_phase``."""
        route = compiled.route
        await self.route_stages(x, compiled)
        # 5. backend phase
        chosen = compiled.choose_backend()
        if chosen is None:
            raise BackendUnreachable(f"no backend available for route {route.name}")
        backend, phase = chosen
        await self.backend_stages(x, backend, phase)
        return backend

    async def route_stages(self, x: Exchange, compiled: CompiledRoute) -> None:
        """Step 4: the route's stages."""
        tr = x.tracer
        if compiled.mcp_peek is not None:  # the JSON-RPC call, for CEL ``mcp`` in the route's stages (docs/mcp.md)
            await self.runtime.mcp.peek(x, compiled.mcp_peek, self.runtime.state.config)
        if tr.active:
            tr.policy_selection("route", compiled.route.policies)
        for stage in compiled.phase.request:
            await stage.request(x)
        if tr.active:
            tr.snapshot("route policies", x)

    async def route_stages_and_plan(self, x: Exchange, compiled: CompiledRoute) -> Plan:
        """Step 4 and the targets step 5 may go to (proxy/attempts.py): the route's backends, or
        on an ``llm:`` route the body's model's (a virtual model's targets)."""
        route = compiled.route
        await self.route_stages(x, compiled)
        if route.models:
            return await self._model_plan(x, compiled)
        plan = route_plan(compiled.route, compiled.backends, compiled.backend_phases)
        if plan is None:
            raise BackendUnreachable(f"no backend available for route {route.name}")
        return plan

    async def backend_stages(self, x: Exchange, backend: Backend, phase: Phase) -> None:
        """Step 5 for one backend: its stages (``x.backend``, ``x.backend_phase``)."""
        x.backend = backend
        if backend.ai is not None and backend.ai.routes:  # an ai policy's routes map picks the endpoint kind
            x.llm_kind = kind = resolve_route(backend.ai.routes, x.scope["path"])
            x.error_dialect = error_dialect(kind)
        if x.tracer.active:
            x.tracer.policy_selection("backend", backend.policies)
        for stage in phase.request:
            await stage.request(x)
        x.backend_phase = phase

    async def _model_plan(self, x: Exchange, compiled: CompiledRoute) -> Plan:
        """The ``llm.models`` entry for the body's model as a plan: its backend, or a virtual model's targets."""
        if x.llm_kind == MODELS and x.scope["method"] in ("GET", "HEAD"):
            raise ModelList(200, model_list(compiled.route.backends, compiled.route.models))
        body = await x.read_body(self.runtime.state.config.frontend.max_buffer_size)
        path_model = llm_gemini.model_and_method(x.scope["path"], x.llm_kind)[0] if x.llm_kind in GEMINI_KINDS \
            else None
        entry, request = select_model(compiled.route.models, body, path_model)
        if entry.virtual is not None:
            return virtual_plan(x, compiled.route, compiled.phases_by_index, entry.virtual, request, body,
                                compiled.target_limiters)
        override = transformed_model(entry, request)
        x.llm_request = (body, override)
        route = compiled.route
        limiters = compiled.target_limiters
        return Plan.single(Candidate(route.backends[entry.backend], compiled.phases_by_index[entry.backend],
                                     override=override, limiter=limiters[entry.backend] if limiters else None), body)
