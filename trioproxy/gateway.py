"""The data plane: a plain ASGI app per bind, independent of Quart and of the server hosting it.

One request walks these stages, in this order (agentgateway's order):

 1. admission      header count limit, listener by Host
 2. gateway phase  listener policies
 3. routing        route table of the listener → 404 ``route not found``
 4. route phase    route policies; ``directResponse`` answers here
 5. backend        weighted choice; backend policies (backendAuth, header modifiers)
 6. upstream       h11 pool, under the backend and request timeouts; request body streamed
 7. response       response header modifiers, body streamed back chunk by chunk

Any stage may raise ``ProxyError``; ``handle`` turns it into a response in one place
(``errors.error_response``). Once the request body is read, a watcher task waits for
``http.disconnect`` and cancels the request's scope, so an abandoned request stops its
upstream call at once (hypercorn only tells a raw ASGI app through ``receive``).
"""

from __future__ import annotations

import bisect
import random
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from itertools import accumulate
from typing import Any

import trio

from .config.model import Backend, Config, HeaderModifier, Route
from .errors import (
    BackendUnreachable,
    BadRequest,
    DirectResponse,
    HeaderTooLarge,
    ProxyError,
    RequestTimeout,
    RouteNotFound,
    UpstreamError,
    UpstreamTimeout,
    error_response,
)
from .metrics import Metrics
from .routing import BindTable, Request, host_without_port
from .upstream import UpstreamPool

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Header = tuple[bytes, bytes]

MAX_REQUEST_HEADERS = 100
DRAIN_LIMIT = 64 * 1024
# RFC 9110 §7.6.1 hop-by-hop fields, plus framing that the next hop recomputes.
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"te", b"trailer", b"upgrade",
     b"proxy-authenticate", b"proxy-authorization"}
)


class ClientDisconnected(Exception):
    """The client went away; nobody is left to answer."""


class CompiledRoute:
    """A route plus what choosing among its backends needs, computed once."""

    __slots__ = ("route", "backends", "cumulative")

    def __init__(self, route: Route) -> None:
        self.route = route
        self.backends = tuple(b for b in route.backends if b.weight > 0)
        self.cumulative = list(accumulate(b.weight for b in self.backends))

    def choose_backend(self) -> Backend | None:
        if not self.backends:
            return None
        if len(self.backends) == 1:
            return self.backends[0]
        return self.backends[bisect.bisect_right(self.cumulative, random.randrange(self.cumulative[-1]))]


class GatewayState:
    """Everything compiled from one ``Config``; replaced whole on reload."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.binds = {bind.port: BindTable(bind) for bind in config.binds}
        self.routes = {
            route.key: CompiledRoute(route)
            for bind in config.binds
            for listener in bind.listeners
            for route in listener.routes
        }


class Runtime:
    """Shared by every bind of one gateway process: current state, upstream pool, metrics."""

    def __init__(self, config: Config, *, pool: UpstreamPool | None = None, metrics: Metrics | None = None) -> None:
        self.state = GatewayState(config)
        self.pool = pool or UpstreamPool()
        self.metrics = metrics or Metrics(open_upstream_connections=lambda: self.pool.open_connections)
        self.reload_errors: list[str] = []  # problems of the last rejected reload, [] after a good one

    def apply(self, config: Config) -> None:
        """Swap in a new config; requests in flight finish on the state they started with."""
        self.state = GatewayState(config)
        self.reload_errors = []


def _header_value(headers: list[Header], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def _apply_modifier(headers: list[Header], modifier: HeaderModifier | None) -> list[Header]:
    if modifier is None:
        return headers
    drop = {name for name, _ in modifier.set} | set(modifier.remove)
    if drop:
        headers = [h for h in headers if h[0] not in drop]
    return headers + list(modifier.set) + list(modifier.add)


def upstream_request_headers(scope: Scope, backend: Backend, route: Route) -> list[Header]:
    """The client's headers minus hop-by-hop ones, plus forwarding headers and policies."""
    connection_tokens: set[bytes] = set()
    out: list[Header] = []
    forwarded_for = None
    framing: Header | None = None
    for name, value in scope["headers"]:
        if name in HOP_BY_HOP:
            if name == b"connection":
                connection_tokens.update(t.strip().lower() for t in value.split(b","))
            elif name == b"transfer-encoding":
                framing = (b"transfer-encoding", b"chunked")
            continue
        if name == b"x-forwarded-for":
            forwarded_for = value
            continue
        if name == b"content-length":
            framing = (name, value)
            continue
        out.append((name, value))
    if connection_tokens:
        out = [h for h in out if h[0] not in connection_tokens]
    client = scope.get("client")
    if client:
        address = client[0].encode()
        out.append((b"x-forwarded-for", forwarded_for + b", " + address if forwarded_for else address))
    elif forwarded_for:
        out.append((b"x-forwarded-for", forwarded_for))
    out.append((b"x-forwarded-proto", scope.get("scheme", "http").encode()))
    if framing is not None:
        out.append(framing)
    out = _apply_modifier(out, route.policies.request_header_modifier)
    out = _apply_modifier(out, backend.policies.request_header_modifier)
    if backend.policies.backend_auth is not None:
        out = [h for h in out if h[0] != b"authorization"]
        out.append((b"authorization", b"Bearer " + backend.policies.backend_auth.key.encode()))
    if _header_value(out, b"host") is None:
        out.append((b"host", str(backend.target).encode()))
    return out


def downstream_response_headers(headers: list[Header], route: Route, backend: Backend) -> list[Header]:
    connection_tokens = {
        t.strip().lower() for name, value in headers if name == b"connection" for t in value.split(b",")
    }
    out = [h for h in headers if h[0] not in HOP_BY_HOP and h[0] not in connection_tokens]
    out = _apply_modifier(out, backend.policies.response_header_modifier)
    return _apply_modifier(out, route.policies.response_header_modifier)


class Gateway:
    """The ASGI app serving one bind (port) of the runtime."""

    def __init__(self, runtime: Runtime, port: int) -> None:
        self.runtime = runtime
        self.port = port
        self.bind_key = f"bind/{port}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.handle(scope, receive, send)
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1003})

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        started_at = trio.current_time()
        metrics = self.runtime.metrics
        metrics.in_flight.inc()
        exchange = _Exchange(scope, receive, send)
        route_key = ""
        try:
            async with trio.open_nursery() as nursery:
                exchange.nursery = nursery
                try:
                    route_key = await self._proxy(exchange)
                except ProxyError as error:
                    route_key = exchange.route_key
                    if isinstance(error, UpstreamError):
                        metrics.upstream_error(self.bind_key, route_key, type(error).__name__)
                    await exchange.respond_error(error)
                except ClientDisconnected:
                    route_key = exchange.route_key
                nursery.cancel_scope.cancel()
        finally:
            metrics.in_flight.dec()
            status = exchange.status if not exchange.disconnected else 499
            metrics.observe(self.bind_key, route_key or exchange.route_key, status, trio.current_time() - started_at)

    async def _proxy(self, x: "_Exchange") -> str:
        scope = x.scope
        state = self.runtime.state
        # 1. admission
        headers = scope["headers"]
        if len(headers) > MAX_REQUEST_HEADERS:
            raise HeaderTooLarge(f"too many request headers (limit {MAX_REQUEST_HEADERS})")
        raw_host = _header_value(headers, b"host")
        host = host_without_port(raw_host.decode("latin-1")) if raw_host else ""
        bind = state.binds.get(self.port)
        found = bind.listener_for(host) if bind is not None else None
        if found is None:
            raise RouteNotFound()
        listener, table = found
        # 2. gateway phase: listener policies (added by later stages: jwt, authorization, limits)
        # 3. routing
        selection = table.select(Request(scope["method"], scope["path"], host, headers, scope.get("query_string", b"")))
        if selection.route is None:
            raise RouteNotFound()
        route = selection.route
        x.route_key = route.key
        compiled = state.routes[route.key]
        # 4. route phase
        if route.policies.direct_response is not None:
            policy = route.policies.direct_response
            raise DirectResponse(policy.status, policy.body)
        # 5. backend
        backend = compiled.choose_backend()
        if backend is None:
            raise BackendUnreachable(f"no backend available for route {route.name}")
        timeout = route.policies.timeout
        request_timeout = timeout.request_timeout if timeout else None
        backend_timeout = timeout.backend_request_timeout if timeout else None
        # 6. upstream
        path = scope.get("raw_path") or scope["path"].encode()
        query = scope.get("query_string", b"")
        target = path + b"?" + query if query else path
        upstream_headers = upstream_request_headers(scope, backend, route)
        body = x.request_body()
        deadline = trio.current_time() + request_timeout if request_timeout else float("inf")
        with trio.CancelScope(deadline=deadline) as request_scope:
            with trio.CancelScope(
                deadline=min(deadline, trio.current_time() + backend_timeout) if backend_timeout else deadline
            ) as backend_scope:
                response = await self.runtime.pool.request(
                    backend.target, scope["method"].encode(), target, upstream_headers, body, nursery=x.nursery
                )
        if backend_scope.cancelled_caught and not request_scope.cancelled_caught and not x.disconnected:
            raise UpstreamTimeout()
        if request_scope.cancelled_caught and not x.disconnected:
            raise RequestTimeout()
        if x.disconnected:
            raise ClientDisconnected()
        # 7. response
        out_headers = downstream_response_headers(response.headers, route, backend)
        await x.start_response(response.status, out_headers)
        await x.stream_body(response.body())
        return route.key


class _Exchange:
    """One request/response on the ASGI side: body reading, disconnect watch, sending."""

    __slots__ = ("scope", "receive", "send", "nursery", "status", "started", "finished", "disconnected", "route_key",
                 "_body_done", "_body_claimed")

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self.nursery: trio.Nursery | None = None
        self.status = 0
        self.started = False
        self.finished = False
        self.disconnected = False
        self.route_key = ""
        self._body_done = False
        self._body_claimed = False  # someone (the upload) reads the body; nobody else may

    def _watch_disconnect(self) -> None:
        """Called once the body is read: from now on ``receive`` only reports disconnects."""
        self._body_done = True
        assert self.nursery is not None
        self.nursery.start_soon(self._disconnect_watcher)

    async def _disconnect_watcher(self) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                if not self.finished:  # after a complete response a close is just the client leaving
                    self.disconnected = True
                    assert self.nursery is not None
                    self.nursery.cancel_scope.cancel()
                return

    def request_body(self) -> bytes | AsyncIterator[bytes]:
        """The body as an async iterator for the upstream call; ``b""`` when it has none."""
        has_body = any(name in (b"content-length", b"transfer-encoding") for name, _ in self.scope["headers"])
        if not has_body:
            self._watch_disconnect()
            return b""
        return self._stream_body()

    async def read_body(self, limit: int) -> bytes:
        """Buffer the whole body (for stages that must rewrite it); 413 above ``limit``."""
        chunks = []
        size = 0
        async for chunk in self._stream_body():
            size += len(chunk)
            if size > limit:
                raise BadRequest(f"request body larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _stream_body(self) -> AsyncIterator[bytes]:
        self._body_claimed = True
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                raise ClientDisconnected()
            chunk = message.get("body", b"")
            more = message.get("more_body", False)
            if not more:
                self._watch_disconnect()
            if chunk:
                yield chunk
            if not more:
                return

    async def start_response(self, status: int, headers: list[Header]) -> None:
        self.status = status
        self.started = True
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def stream_body(self, chunks: AsyncIterator[bytes]) -> None:
        send = self.send
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        self.finished = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def respond_error(self, error: ProxyError) -> None:
        if self.started:
            # Headers are gone already: ending here makes the server close the connection,
            # which the client sees as a truncated response rather than a wrong one.
            return
        if not self._body_claimed and self.scope.get("method") not in ("GET", "HEAD"):
            # Drain a small unread body so the connection stays usable; past the cap the server
            # closes the connection after the answer instead.
            drained = 0
            try:
                async for chunk in self._stream_body():
                    drained += len(chunk)
                    if drained > DRAIN_LIMIT:
                        break
            except ClientDisconnected:
                return
        status, headers, body = error_response(error)
        await self.start_response(status, headers)
        self.finished = True
        await self.send({"type": "http.response.body", "body": body, "more_body": False})
