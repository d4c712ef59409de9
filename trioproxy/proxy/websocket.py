"""WebSocket upgrades on every HTTP route (as agentgateway): policies at the upgrade, then a relay.

hypercorn owns the client's socket and turns an upgrade request into an ASGI ``websocket``
scope: the gateway sees messages, never the raw bytes after the ``101``. So the relay is
message-level on both hops, and the backend hop is **trio-websocket** (its client on a plain TCP
stream, or wss to a backend with ``backendTLS``: the pool's connector, verified as for HTTP)
rather than a raw byte relay: a raw relay would need hypercorn's protocol internals on the
client side, while two message-level ends give, for free, what the gateway must enforce anyway —
close codes it can read and forward, a per-message size limit, and ping/pong answered on each hop.

One upgrade walks the request-time part of the pipeline (pipeline.py, docs/pipeline.md): admission, the
listener's stages, routing, the route's and the backend's stages (CORS, JWT, authorization, local
and remote rate limits, header modifiers, backendAuth, directResponse), under ``requestTimeout``
up to the backend's handshake answer. A stage's answer (401, 403, 429, a direct response) and a
backend that refuses the upgrade reach the client as a plain HTTP answer (ASGI's
``websocket.http.response``), the backend's one unchanged. Once both handshakes are done:

- either side closing closes the other with the same code and reason (a code that may not be
  sent on the wire — 1005 none, 1006 abnormal — becomes 1000 from a clean close, 1001 when the
  client vanished, 1011 when the backend did);
- ``WEBSOCKET_IDLE_TIMEOUT`` without a message either way closes both with 1001 ``idle timeout``
  (Envoy's default stream idle timeout, which also covers upgraded streams);
- a message over ``frontendPolicies.http.websocketMaxMessageSize`` (1 MiB by default, read at
  start) closes both sides with 1009: from the backend, trio-websocket closes it and the client
  gets 1009; from the client, hypercorn closes it with 1009 (its ``websocket_max_message_size``,
  set to the same value) and the client's answering close frame reaches the backend
  (``hypercorn_websocket``). Both ends buffer a message whole before it is relayed, and stop
  buffering once it passes the cap: the cap is what one message can cost (it was 16 MiB, and ten
  15 MiB messages at once took the process 470 MB up).

Traces show ``websocketUpgrade`` (the backend accepted; subprotocol) and ``websocketClosed``
(which side closed, code, reason, messages each way); metrics and the access log record the
session once it ends, with status 101.
"""

from __future__ import annotations

from typing import Any, cast

import trio
from trio_websocket import ConnectionClosed, ConnectionRejected, WebSocketConnection, wrap_client_stream

from ..asgi import Header, Receive, Scope, Send
from ..errors import (
    BackendUnreachable,
    BadRequest,
    BadUpstreamResponse,
    ProxyError,
    RequestTimeout,
    UpstreamTimeout,
    error_response,
)
from ..policies.headers import forwarded_request_headers, header_value, without_hop_by_hop
from ..policies.ratelimit_local import LocalRateLimiter, most_constrained
from .exchange import Exchange
from .pipeline import Pipeline

#: Seconds without a message either way before both sides are closed (1001 ``idle timeout``).
WEBSOCKET_IDLE_TIMEOUT = 300.0

#: Set by the WebSocket handshake itself on each hop; never forwarded.
HANDSHAKE_HEADERS = frozenset({b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions",
                               b"sec-websocket-protocol", b"sec-websocket-accept", b"host"})
MAX_REJECTION_BODY = 64 * 1024

NORMAL, GOING_AWAY, INTERNAL_ERROR = 1000, 1001, 1011
NO_STATUS, ABNORMAL = 1005, 1006


def forwardable_close(code: int | None, *, vanished: int) -> int:
    """A close code that may be sent on the wire for one received (or ``None``) from the other side."""
    if code is None or code == NO_STATUS:
        return NORMAL
    if code == ABNORMAL or code == 1015 or not 1000 <= code <= 4999:
        return vanished
    return code


class WebSocketProxy:
    """The ``websocket`` scopes of one bind: the upgrade through the stages, then the relay."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline
        # read at start, as hypercorn's limit for the client's messages is (server.hypercorn_config)
        self.max_message_size = pipeline.runtime.state.config.frontend.websocket_max_message_size

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        first = await receive()
        if first["type"] != "websocket.connect":  # the client left before the app started
            return
        # Stages, routing and the access log read an HTTP request: the upgrade is a GET.
        pipeline = self.pipeline
        x = pipeline.open_exchange({**scope, "method": "GET"}, receive, send)
        metrics = pipeline.runtime.metrics
        metrics.requests_active += 1
        try:
            async with trio.open_nursery() as nursery:
                x.nursery, x.cancel_scope = nursery, nursery.cancel_scope
                try:
                    await self._upgrade(x)
                except ProxyError as error:
                    pipeline.count_failure(x, error)
                    await self._deny(x, error)
                # The session (started in this nursery by the upgrade) ends on a close or idleness.
        finally:
            metrics.requests_active -= 1
            pipeline.finish(x, x.status)

    # --- the upgrade ------------------------------------------------------------------------

    async def _upgrade(self, x: Exchange) -> None:
        pipeline = self.pipeline
        _, compiled = await pipeline.admit_and_route(x, "GET")  # an upgrade is a GET
        with trio.CancelScope(deadline=compiled.request_deadline(x.arrival)) as request_scope:
            # No body to read: an llm: route's backend is chosen by weight, not by model.
            backend = await pipeline.route_and_backend_stages(x, compiled)
            if backend.ai is not None:
                raise BadRequest("bad request: WebSocket upgrade to an ai backend")
            assert x.nursery is not None
            # The session runs in the request's nursery: the deadline covers only its handshake.
            await x.nursery.start(self._session, x)
        if request_scope.cancelled_caught:
            raise RequestTimeout()

    def _upstream_headers(self, x: Exchange) -> tuple[str, list[Header]]:
        """(Host, extra headers) for the backend's handshake: the client's minus hop-by-hop and
        handshake fields, plus ``x-forwarded-*``."""
        scope = x.scope
        client = scope.get("client")
        scheme = "https" if scope.get("scheme") in ("wss", "https") else "http"
        headers = forwarded_request_headers(x.headers, client=client[0] if client else None, scheme=scheme,
                                            framing=None)
        assert x.backend is not None
        host = header_value(x.headers, b"host")
        host_text = host.decode("latin-1") if host else str(x.backend.target)
        return host_text, [h for h in headers if h[0] not in HANDSHAKE_HEADERS]

    async def _session(self, x: Exchange, task_status: trio.TaskStatus[bool] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect and handshake with the backend (``started`` once the client is answered),
        then relay. Runs in the request's nursery so the relay outlives the request deadline."""
        backend = x.backend
        assert backend is not None
        tr = x.tracer
        pool = self.pipeline.runtime.pool
        host, headers = self._upstream_headers(x)
        tr.snapshot("final request", x, headers=headers)
        scope = x.scope
        query = scope.get("query_string", b"")
        resource = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        if query:
            resource += "?" + query.decode("latin-1")
        started = x.upstream_started = trio.current_time()
        tr.event("backendCallStart", target=str(backend.target))
        try:
            with trio.fail_after(pool.connect_timeout):
                # The pool's connector: TCP, or TLS (wss) for a backend with backendTLS.
                stream = await pool.connect(backend.target)
        except ProxyError as error:  # the TLS handshake failed (BackendTlsFailed, 503)
            raise self._failed(x, error) from None
        except trio.TooSlowError:
            raise self._failed(x, BackendUnreachable(f"upstream connect timeout ({backend.target})")) from None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise self._failed(x, BackendUnreachable(f"upstream connect error: {reason} ({backend.target})")) from None
        rejected: ConnectionRejected | None = None
        try:
            async with trio.open_nursery() as ws_nursery:
                ws = await self._handshake(ws_nursery, stream, host, resource, headers, scope)
                if tr.active:
                    tr.event("backendCallResult", start=started, severity="success", status=101, error=None)
                await self._accept(x, ws)
                task_status.started(True)
                await self._relay(x, ws)
                ws_nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            found, _ = group.split(ConnectionRejected)
            if found is not None:
                rejected = _first(found)
            else:
                failed, rest = group.split(ProxyError)
                if failed is None or rest is not None:
                    raise
                raise self._failed(x, _first(failed)) from None
        finally:
            await trio.aclose_forcefully(stream)
        if rejected is not None:
            await self._forward_rejection(x, rejected)
            task_status.started(False)

    async def _handshake(self, nursery: trio.Nursery, stream: trio.abc.Stream, host: str, resource: str,
                         headers: list[Header], scope: Scope) -> WebSocketConnection:
        """The backend's opening handshake (a refusal is raised by the reader task in ``nursery``)."""
        timeout = self.pipeline.runtime.pool.connect_timeout
        try:
            with trio.fail_after(timeout):
                # trio-websocket reads and writes only the Stream interface: TCP or TLS alike.
                tcp_or_tls = cast("trio.SocketStream | trio.SSLStream[trio.SocketStream]", stream)
                return await wrap_client_stream(
                    nursery, tcp_or_tls, host, resource, subprotocols=scope.get("subprotocols") or None,
                    extra_headers=headers, max_message_size=self.max_message_size)
        except trio.TooSlowError:
            raise UpstreamTimeout(f"upstream WebSocket handshake timeout ({timeout:g}s)") from None
        except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise BadUpstreamResponse(f"upstream closed during the WebSocket handshake ({exc})") from None

    def _failed(self, x: Exchange, error: ProxyError) -> ProxyError:
        x.tracer.event("backendCallResult", start=x.upstream_started, severity="error", status=None,
                       error=error.message)
        return error

    async def _accept(self, x: Exchange, ws: WebSocketConnection) -> None:
        """Answer the client's handshake: the backend's headers after the response stages."""
        headers = [h for h in without_hop_by_hop(list(ws.handshake_headers)) if h[0] not in HANDSHAKE_HEADERS]
        headers = self._response_headers(x, headers)
        x.tracer.response_snapshot("final response", x, 101, headers)
        x.status = 101
        x.started = True
        await x.send({"type": "websocket.accept", "subprotocol": ws.subprotocol, "headers": headers})
        x.tracer.event("websocketUpgrade", subprotocol=ws.subprotocol)

    def _response_headers(self, x: Exchange, headers: list[Header]) -> list[Header]:
        """Response hooks backend → route → listener, then ``x-ratelimit-*`` and stage extras."""
        state = self.pipeline.runtime.state
        assert x.listener is not None and x.route is not None and x.backend_phase is not None
        for phase in (x.backend_phase, state.routes[x.route.key].phase, state.listeners[x.listener.key]):
            for stage in phase.response:
                headers = stage.response_headers(x, headers)
        if x.limits:
            headers += LocalRateLimiter.headers(most_constrained([d for _, d in x.limits]))
        return headers + x.extra_response_headers

    async def _forward_rejection(self, x: Exchange, rejected: ConnectionRejected) -> None:
        """The backend refused the upgrade: the client gets its HTTP answer."""
        body = (rejected.body or b"")[:MAX_REJECTION_BODY]
        headers = [h for h in without_hop_by_hop(list(rejected.headers))
                   if h[0] not in HANDSHAKE_HEADERS and h[0] != b"content-length"]
        headers = self._response_headers(x, headers) + [(b"content-length", str(len(body)).encode())]
        x.tracer.event("backendCallResult", start=x.upstream_started, severity="warn",
                       status=rejected.status_code, error=None)
        x.tracer.response_snapshot("final response", x, rejected.status_code, headers, severity="warn")
        await self._http_answer(x, rejected.status_code, headers, body)

    async def _deny(self, x: Exchange, error: ProxyError) -> None:
        """A stage's or the gateway's own answer instead of the upgrade."""
        x.error = error.message
        x.error_kind = type(error).__name__
        x.why = error.why
        if x.started:
            return
        status, headers, body = error_response(error)
        headers += x.extra_response_headers
        x.tracer.response_snapshot("final response", x, status, headers, severity="warn" if status < 500 else "error")
        await self._http_answer(x, status, headers, body)

    async def _http_answer(self, x: Exchange, status: int, headers: list[Header], body: bytes) -> None:
        x.status = status
        x.started = x.finished = True
        await x.send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await x.send({"type": "websocket.http.response.body", "body": body})

    # --- the relay --------------------------------------------------------------------------

    async def _relay(self, x: Exchange, ws: WebSocketConnection) -> None:
        """Messages both ways until one side closes or the idle timeout; then close the other."""
        session = _Session(x, ws)
        idle = trio.CancelScope(deadline=trio.current_time() + WEBSOCKET_IDLE_TIMEOUT)
        session.idle = idle
        with idle:
            async with trio.open_nursery() as nursery:
                session.nursery = nursery
                nursery.start_soon(session.client_to_backend)
                nursery.start_soon(session.backend_to_client)
        if session.closed_by is None:  # the idle deadline
            session.closed_by, session.code, session.reason = "idle", GOING_AWAY, "idle timeout"
            await session.close_client(GOING_AWAY, "idle timeout")
            with trio.move_on_after(1.0):
                await ws.aclose(GOING_AWAY, "idle timeout")
        x.finished = True
        x.tracer.event("websocketClosed", closedBy=session.closed_by, code=session.code, reason=session.reason,
                       messagesFromClient=session.from_client, messagesFromBackend=session.from_backend)


class _Session:
    """The two relay tasks of one WebSocket and what they record for the trace."""

    def __init__(self, x: Exchange, ws: WebSocketConnection) -> None:
        self.x = x
        self.ws = ws
        self.idle: trio.CancelScope | None = None
        self.nursery: trio.Nursery | None = None
        self.closed_by: str | None = None
        self.code: int | None = None
        self.reason: str | None = None
        self.from_client = 0
        self.from_backend = 0

    def _active(self) -> None:
        assert self.idle is not None
        self.idle.deadline = trio.current_time() + WEBSOCKET_IDLE_TIMEOUT

    def _done(self, by: str, code: int | None, reason: str | None) -> None:
        self.closed_by, self.code, self.reason = by, code, reason
        assert self.nursery is not None
        self.nursery.cancel_scope.cancel()

    async def client_to_backend(self) -> None:
        receive, ws = self.x.receive, self.ws
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                code = message.get("code")
                reason = message.get("reason") or None
                self.closed_by = "client"  # before the close: the backend's echo of it must not win
                with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                    await ws.aclose(forwardable_close(code, vanished=GOING_AWAY), reason)
                self._done("client", code, reason)
                return
            if message["type"] != "websocket.receive":
                continue
            self._active()
            data = message.get("text")
            try:
                await ws.send_message(data if data is not None else message.get("bytes") or b"")
            except ConnectionClosed:
                return  # the backend is closing: its side reports it
            self.from_client += 1

    async def backend_to_client(self) -> None:
        ws = self.ws
        while True:
            try:
                data = await ws.get_message()
            except ConnectionClosed as closed:
                if self.closed_by is not None:
                    return
                reason = closed.reason
                code = reason.code if reason is not None else None
                text = reason.reason if reason is not None else None
                self.closed_by = "backend"
                with trio.CancelScope(shield=True):
                    await self.close_client(forwardable_close(code, vanished=INTERNAL_ERROR), text)
                self._done("backend", code, text)
                return
            self._active()
            key = "text" if isinstance(data, str) else "bytes"
            await self.x.send({"type": "websocket.send", key: data})
            self.from_backend += 1

    async def close_client(self, code: int, reason: str | None) -> None:
        message: dict[str, Any] = {"type": "websocket.close", "code": code}
        if reason:
            message["reason"] = reason
        await self.x.send(message)


def _first(group: BaseExceptionGroup[Any]) -> Any:
    """The first leaf of an exception group."""
    first = group.exceptions[0]
    return _first(first) if isinstance(first, BaseExceptionGroup) else first
