"""One request/response on the ASGI side: reading the body, watching for a disconnect, sending,
and the per-request results the stages leave for each other (what traces show of it is built in
``trace.request_state``, what CEL sees in ``trace.activation``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, nullcontext
from math import inf
from typing import Any, Protocol

import trio

from ..asgi import CLIENT_CONNECTION, CLIENT_FD, CORK, RECEIVE_WITHIN, Header, Receive, Scope, Send, expects_continue
from ..config.model import Address, Backend, Listener, Route, RouteMatch
from ..errors import PayloadTooLarge, ProxyError, RequestBodyTimeout, error_response
from ..http_date import with_date
from ..policies.ratelimit_local import Decision, LocalRateLimiter
from ..policies.retry import RetrySpec
from ..telemetry.trace import NULL_TRACER, BodyCapture, NullTracer, Tracer
from .disconnect_monitor import DisconnectMonitor
from .routing import host_without_port

DRAIN_LIMIT = 64 * 1024
_NOT_CORKED: AbstractAsyncContextManager[None] = nullcontext()


def _host_and_framing(headers: list[Header]) -> tuple[bytes, bool]:
    """The request's (first) ``host`` value, and whether its head declares a body
    (``content-length`` or ``transfer-encoding``): one pass over the headers."""
    host = None
    declares_body = False
    for name, value in headers:
        if name == b"host":
            if host is None:
                host = value
        elif name == b"content-length" or name == b"transfer-encoding":
            declares_body = True
    return host or b"", declares_body


class ClientDisconnected(Exception):
    """The client went away; nobody is left to answer."""


class ResponseHook(Protocol):
    def response_headers(self, x: Exchange, headers: list[Header], /) -> list[Header]: ...


class BackendPhase(Protocol):
    """What the exchange keeps of its backend's compiled ``policies.stage.Phase``, named by what is
    used: the stages run on the exchange, so they sit above it and it does not import them."""

    @property
    def response(self) -> tuple[ResponseHook, ...]: ...


class Exchange:
    """Per-request state that the gateway's stages read and extend, in stage order."""

    __slots__ = (
        "_body_claimed",
        "_body_done",
        "_declares_body",
        "_first_body",
        "_watched_fd",
        "answer_sent",
        "api_key",
        "attempts",
        "arrival",
        "backend",
        "backend_phase",
        "basic_auth",
        "body_idle_timeout",
        "disconnect_monitor",
        "disconnected",
        "error",
        "error_dialect",
        "error_kind",
        "extra_response_headers",
        "finished",
        "first_chunk",
        "headers",
        "host",
        "jwt",
        "key",
        "payloads",
        "principal",
        "reservation",
        "team",
        "limits",
        "target_limiter",
        "skipped",
        "listener",
        "llm",
        "llm_kind",
        "llm_request",
        "llm_strip",
        "mcp",
        "mcp_body",
        "mcp_call",
        "mirrors",
        "nursery",
        "cancel_scope",
        "receive",
        "remote_charges",
        "request_capture",
        "retry",
        "route",
        "route_match",
        "scope",
        "send",
        "span",
        "started",
        "status",
        "tracer",
        "translation",
        "upstream_path",
        "upstream_started",
        "usage",
        "why",
        "outcomes",
    )

    def __init__(self, scope: Scope, receive: Receive, send: Send, arrival: float) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self.arrival = arrival
        #: the request's tasks (a disconnect watcher, an upload): opened only when needed (gateway.py)
        self.nursery: trio.Nursery | None = None
        #: what a client's disconnect cancels: the request's whole work (gateway.py sets it)
        self.cancel_scope: trio.CancelScope | None = None
        self.tracer: Tracer | NullTracer = NULL_TRACER  # a Tracer when a /debug/trace watcher claimed it
        self.headers: list[Header] = scope["headers"]  # replaced (never mutated) by policies
        raw_host, self._declares_body = _host_and_framing(self.headers)
        self.host = host_without_port(raw_host.decode("latin-1"))
        self.listener: Listener | None = None
        self.route: Route | None = None
        self.backend: Backend | None = None
        self.limits: list[tuple[LocalRateLimiter, Decision]] = []
        #: the quota of the target called last (``llm.models[].localRateLimit``): its tokens charged at the end
        self.target_limiter: LocalRateLimiter | None = None
        self.llm: dict[str, Any] | None = None
        self.mcp: dict[str, Any] | None = None  # an mcp backend's last call: access-log fields (mcp_stage.py)
        self.mcp_call: dict[str, Any] | None = None  # CEL ``mcp`` of a route to MCP servers (mcp_stage.peek)
        self.mcp_body: bytes | None = None  # the JSON-RPC body read by mcp_stage.peek, for the relay
        self.jwt: dict[str, Any] | None = None  # claims of a validated token (CEL ``jwt``)
        self.api_key: dict[str, Any] | None = None  # an apiKey's metadata, key redacted (CEL ``apiKey``)
        self.basic_auth: dict[str, Any] | None = None  # {"username"} of verified Basic credentials (CEL ``basicAuth``)
        self.principal: Any = None  # the runtime key (and team) that authenticated the request (keys/)
        self.key: dict[str, Any] | None = None  # CEL ``key``: the runtime key's id, name, team, metadata
        self.team: dict[str, Any] | None = None  # CEL ``team``: its team's id, name, metadata
        self.reservation: Any = None  # the budget reserved before the upstream call, settled at the end
        self.payloads: dict[str, Any] | None = None  # apiKey logPayloads: the bodies for the request log
        self.usage: Any = None  # the LLM response's usage once its body was read (for finish hooks)
        self.remote_charges: list[Any] = []  # (remoteRateLimit stage, tokens descriptors) to charge after
        self.extra_response_headers: list[Header] = []  # added by stages (cors), also to error answers
        self.upstream_path: str | None = None
        self.route_match: RouteMatch | None = None  # the route's alternative that matched
        self.retry: RetrySpec | None = None  # set by the retry stage: the upstream call may be retried
        self.mirrors: tuple[Address, ...] = ()  # set by requestMirror stages: where copies go
        self.llm_request: tuple[bytes, str | None] | None = None  # llm: format: (body read, model to send)
        self.attempts: list[str] | None = None  # the backends tried, in order (proxy/attempts.py)
        self.skipped: list[str] | None = None  # the targets passed over for their quota (proxy/attempts.py)
        #: why the gateway answered so (``ProxyError.why``); with several attempts, their outcomes too
        self.why: dict[str, Any] | None = None
        self.outcomes: list[str] | None = None  # each attempt's outcome, beside ``attempts`` (proxy/why.py)
        self.llm_kind: str | None = None  # on a route to LLM providers: the endpoint kind of the path
        self.first_chunk: float | None = None  # when the first response body bytes arrived (LLM calls)
        self.llm_strip = False  # the gateway asked for stream usage the client did not: strip it
        self.error_dialect: str | None = None  # openai/anthropic: the gateway's errors as that API's JSON
        self.translation: Any = None  # an llm_translate Translation when the provider speaks another dialect
        self.backend_phase: BackendPhase | None = None  # the chosen backend's compiled stages
        self.upstream_started: float | None = None  # when the upstream call started
        self.request_capture: BodyCapture | None = None
        self.status = 0
        self.started = False
        self.finished = False
        self.answer_sent = False  # an LLM stream's last event went out (``answered``)
        self.disconnected = False
        self.error: str | None = None
        self.error_kind: str | None = None  # the ProxyError class of the gateway's own answer
        self.span: Any = None  # the OpenTelemetry server span, when this request is sampled
        self._body_done = False
        self._body_claimed = False  # someone (the upload) reads the body; nobody else may
        self._first_body: Any = None  # an HTTP/2 body's first message, read by ``peek_body``
        self.body_idle_timeout = inf  # the longest gap between two body pieces (frontendPolicies.http)
        self.disconnect_monitor: DisconnectMonitor | None = None  # the runtime's, for a request (not an upgrade)
        self._watched_fd: int | None = None  # the client socket the monitor watches for this request

    # --- what traces and CEL see (request_state / activation in trace.py) --------------------

    def authority(self) -> str:
        """The Host header as the request now has it: with its port, after any urlRewrite
        (``host`` is its name alone, read at arrival); ``""`` without one."""
        return next((v.decode("latin-1") for k, v in self.headers if k == b"host"), "")

    def uri(self) -> str:
        query = self.scope.get("query_string", b"")
        path = self.upstream_path or self.scope["path"]
        return f"{path}?{query.decode('latin-1')}" if query else path

    # --- the request body ---------------------------------------------------------------------

    def watched_without_task(self) -> bool:
        """True when the server gave its socket (``CLIENT_FD``) and a disconnect monitor will watch
        it: the request needs no watcher task, so no nursery before it is routed."""
        return self.disconnect_monitor is not None and CLIENT_FD in self.scope.get("extensions", ())

    def _watch_disconnect(self) -> None:
        """Called once the body is read: from now on ``receive`` only reports disconnects. With
        the server's ``CLIENT_FD`` the process's epoll set watches the socket (no task);
        otherwise a task waits in ``receive`` until the request ends."""
        self._body_done = True
        monitor = self.disconnect_monitor
        if monitor is not None:
            extensions = self.scope.get("extensions", {})
            fd = extensions.get(CLIENT_FD)
            if fd is not None and monitor.watch(fd, self._client_gone, extensions.get(CLIENT_CONNECTION)):
                self._watched_fd = fd
                return
        if self.nursery is not None:
            self.nursery.start_soon(self._disconnect_watcher)
        # else: the socket is watched already (one request at a time per connection: not expected);
        # a client gone is then found when its answer is written

    def stop_watching(self) -> None:
        """The request ends: the monitor lets go of the client's socket (the server reads it next)."""
        if self._watched_fd is not None and self.disconnect_monitor is not None:
            self.disconnect_monitor.unwatch(self._watched_fd)
            self._watched_fd = None

    async def _disconnect_watcher(self) -> None:
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self._client_gone()
                return

    def _client_gone(self) -> None:
        if self.finished:  # after a complete response a close is just the client leaving
            return
        # After an answer's last event too (its status stays), but the rest of the provider's message
        # is not worth waiting for: the request ends now, its usage charged (gateway.py, ``_charge``).
        if not self.answer_sent:
            self.disconnected = True
        assert self.cancel_scope is not None
        self.cancel_scope.cancel()

    def answered(self) -> None:
        """An LLM stream's last event (``[DONE]``, ``message_stop``...) reached the client: the answer
        is complete, and a close from now on is the client leaving with it (the OpenAI SDK closes on
        ``[DONE]``), not a disconnect (499)."""
        self.answer_sent = True

    def has_body(self) -> bool:
        return self._first_body is not None or self._declares_body

    async def peek_body(self) -> None:
        """HTTP/2 (and 3) may send a body without ``content-length``, and a request without one
        ends with its headers: read the first body message to learn which (``has_body`` then
        knows; the message is the body's first chunk). HTTP/1 declares its framing: no read."""
        if self.has_body() or self._body_claimed or self._body_done \
                or self.scope.get("http_version", "1.1").startswith("1"):
            return
        message = await self.receive()
        if message["type"] == "http.disconnect":
            self.disconnected = True
            raise ClientDisconnected()
        if message.get("body") or message.get("more_body"):
            self._first_body = message

    def request_body(self) -> bytes | AsyncIterator[bytes]:
        """The body for the upstream call, streamed; ``b""`` when the request has none."""
        if not self.has_body():
            self._watch_disconnect()
            return b""
        return self._stream_body()

    async def read_body(self, limit: int) -> bytes:
        """Buffer the whole body (for stages that must rewrite it); 400 above ``limit``. A loop of
        its own, not over ``_stream_body``: an async generator costs its creation and Trio's
        first-iteration hook on every request that reads its body."""
        await self.peek_body()
        if not self.has_body():
            self._watch_disconnect()
            return b""
        self._body_claimed = True
        within = self.scope.get("extensions", {}).get(RECEIVE_WITHIN)
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk, more = await self._body_piece(within)
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"request body larger than {limit} bytes", why={
                    "check": "maxBufferSize", "limit": limit,
                    "detail": f"the body must be buffered here and passed {limit} bytes"})
            if not more:
                if not chunks:
                    return bytes(chunk)  # (the same object when it is bytes)
                chunks.append(chunk)
                return b"".join(chunks)
            chunks.append(chunk)

    async def _stream_body(self) -> AsyncIterator[bytes]:
        self._body_claimed = True
        within = self.scope.get("extensions", {}).get(RECEIVE_WITHIN)
        while True:
            chunk, more = await self._body_piece(within)
            if chunk:
                yield chunk
            if not more:
                return

    async def _body_piece(self, within: Any) -> tuple[bytes, bool]:
        """The body's next piece (the request capture fed) and whether more follows; ``within``:
        the server's receive with a deadline (http1.py), which enters a cancel scope only when it
        must wait, so a body that came with its head costs none."""
        message, self._first_body = self._first_body, None
        if message is None:
            if within is not None:
                message = await within(self.body_idle_timeout)
            else:
                with trio.move_on_after(self.body_idle_timeout):
                    message = await self.receive()
        if message is None:  # a slow (or stalled) client must not hold a backend connection
            raise RequestBodyTimeout(why={"check": "requestBodyIdleTimeout", "limit": self.body_idle_timeout,
                                          "detail": f"no request body bytes for {self.body_idle_timeout:g}s"})
        if message["type"] == "http.disconnect":
            self.disconnected = True
            raise ClientDisconnected()
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        if not more:
            self._watch_disconnect()
        if chunk and self.request_capture is not None:
            self.request_capture.feed(chunk)
        return chunk, more

    # --- the response -------------------------------------------------------------------------

    def corked(self) -> AbstractAsyncContextManager[None]:
        """What is sent inside goes out in one write at the end (``asgi.CORK``; HTTP/1 only)."""
        cork = self.scope.get("extensions", {}).get(CORK)
        return cork() if cork is not None else _NOT_CORKED

    async def start_response(self, status: int, headers: list[Header]) -> None:
        self.status = status
        self.started = True
        await self.send({"type": "http.response.start", "status": status, "headers": with_date(headers)})

    async def send_body(self, chunk: bytes) -> None:
        await self.send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def end_body(self, chunk: bytes = b"") -> None:
        self.finished = True
        await self.send({"type": "http.response.body", "body": chunk, "more_body": False})

    async def respond_error(self, error: ProxyError) -> None:
        """Answer with ``error`` (the only place errors become responses), or abort if too late."""
        self.error = error.message
        self.error_kind = type(error).__name__
        self.why = error.why
        if self.started:
            # Headers are gone already: ending here makes the server close the connection,
            # which the client sees as a truncated response rather than a wrong one.
            return
        close = not self._body_claimed and expects_continue(self.scope)
        if close:
            # The client waits for 100 Continue and has not sent its body: answer without
            # asking for it, and close, since the body's framing is left open (RFC 9110 §10.1.1).
            pass
        elif not self._body_claimed and self.scope.get("method") not in ("GET", "HEAD"):
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
            except RequestBodyTimeout:
                pass  # answer anyway; the server closes the connection (its body never ended)
        status, headers, body = error_response(error, self.error_dialect)
        if self.extra_response_headers:
            headers += self.extra_response_headers
        if close:
            headers.append((b"connection", b"close"))
        self.tracer.response_snapshot("final response", self, status, headers,
                                      severity="warn" if status < 500 else "error")
        await self.start_response(status, headers)
        await self.end_body(body)
