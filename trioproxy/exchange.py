"""One request/response on the ASGI side: reading the body, watching for a disconnect, sending,
and describing the request as traces show it (``requestState``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import trio

from .cel import build_activation
from .config.model import Backend, Listener, Route
from .errors import BadRequest, ProxyError, error_response
from .policies.ratelimit_local import Decision, LocalRateLimiter
from .routing import host_without_port
from .trace import BodyCapture, Tracer, headers_map

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
Header = tuple[bytes, bytes]
DRAIN_LIMIT = 64 * 1024


class ClientDisconnected(Exception):
    """The client went away; nobody is left to answer."""


class Exchange:
    """Per-request state that the gateway's stages read and extend, in stage order."""

    __slots__ = (
        "scope", "receive", "send", "arrival", "nursery", "tracer", "host", "headers", "listener", "route",
        "backend", "limits", "llm", "jwt", "extra_response_headers", "upstream_path", "upstream_started", "request_capture", "status", "started", "finished",
        "disconnected", "error", "_body_done", "_body_claimed",
    )

    def __init__(self, scope: Scope, receive: Receive, send: Send, arrival: float) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send
        self.arrival = arrival
        self.nursery: trio.Nursery | None = None
        self.tracer: Tracer | None = None
        self.headers: list[Header] = scope["headers"]  # replaced (never mutated) by policies
        raw_host = next((v for k, v in self.headers if k == b"host"), b"")
        self.host = host_without_port(raw_host.decode("latin-1"))
        self.listener: Listener | None = None
        self.route: Route | None = None
        self.backend: Backend | None = None
        self.limits: list[tuple[LocalRateLimiter, Decision]] = []
        self.llm: dict[str, Any] | None = None
        self.jwt: dict[str, Any] | None = None  # claims of a validated token (CEL ``jwt``)
        self.extra_response_headers: list[Header] = []  # added by stages (cors), also to error answers
        self.upstream_path: str | None = None
        self.upstream_started = 0.0
        self.request_capture: BodyCapture | None = None
        self.status = 0
        self.started = False
        self.finished = False
        self.disconnected = False
        self.error: str | None = None
        self._body_done = False
        self._body_claimed = False  # someone (the upload) reads the body; nobody else may

    # --- what traces and CEL see --------------------------------------------------------------

    def activation(self) -> dict[str, Any]:
        scope = self.scope
        client = scope.get("client") or ("", 0)
        return build_activation(
            method=scope["method"], path=self.uri(), host=self.host, headers=self.headers,
            scheme=scope.get("scheme", "http"), version=f"HTTP/{scope.get('http_version', '1.1')}",
            source_address=client[0], source_port=client[1], llm=self.llm, jwt=self.jwt,
        )

    def uri(self) -> str:
        query = self.scope.get("query_string", b"")
        path = self.upstream_path or self.scope["path"]
        return f"{path}?{query.decode('latin-1')}" if query else path

    def state(self, *, headers: list[Header] | None = None, response: dict[str, Any] | None = None,
              proxy: dict[str, str] | None = None) -> dict[str, Any]:
        """``requestState`` of a snapshot: the request as the stages have shaped it so far."""
        scope = self.scope
        client = scope.get("client") or ("", 0)
        state: dict[str, Any] = {
            "request": {
                "method": scope["method"],
                "path": self.upstream_path or scope["path"],
                "uri": self.uri(),
                "host": self.host,
                "scheme": scope.get("scheme", "http"),
                "version": f"HTTP/{scope.get('http_version', '1.1')}",
                "headers": headers_map(self.headers if headers is None else headers),
            },
            "source": {"address": client[0], "port": client[1]},
            "env": {
                "gateway": "default/default",
                "listener": self.listener.key if self.listener else None,
                "route": self.route.key if self.route else None,
            },
        }
        if self.backend is not None:
            state["backend"] = {"name": self.backend.name, "type": self.backend.kind, "protocol": "http"}
        if self.llm is not None:
            state["llm"] = self.llm
        if self.jwt is not None:
            state["jwt"] = self.jwt
        if response is not None:
            state["response"] = response
        if proxy is not None:
            state["proxy"] = proxy
        return state

    # --- the request body ---------------------------------------------------------------------

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

    def has_body(self) -> bool:
        return any(name in (b"content-length", b"transfer-encoding") for name, _ in self.scope["headers"])

    def request_body(self) -> bytes | AsyncIterator[bytes]:
        """The body for the upstream call, streamed; ``b""`` when the request has none."""
        if not self.has_body():
            self._watch_disconnect()
            return b""
        return self._stream_body()

    async def read_body(self, limit: int) -> bytes:
        """Buffer the whole body (for stages that must rewrite it); 400 above ``limit``."""
        chunks = []
        size = 0
        if not self.has_body():
            self._watch_disconnect()
            return b""
        async for chunk in self._stream_body():
            size += len(chunk)
            if size > limit:
                raise BadRequest(f"request body larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _stream_body(self) -> AsyncIterator[bytes]:
        self._body_claimed = True
        capture = self.request_capture
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
                if capture is not None:
                    capture.feed(chunk)
                yield chunk
            if not more:
                return

    # --- the response -------------------------------------------------------------------------

    async def start_response(self, status: int, headers: list[Header]) -> None:
        self.status = status
        self.started = True
        await self.send({"type": "http.response.start", "status": status, "headers": headers})

    async def send_body(self, chunk: bytes) -> None:
        await self.send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def end_body(self, chunk: bytes = b"") -> None:
        self.finished = True
        await self.send({"type": "http.response.body", "body": chunk, "more_body": False})

    async def respond_error(self, error: ProxyError) -> None:
        """Answer with ``error`` (the only place errors become responses), or abort if too late."""
        self.error = error.message
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
        if self.extra_response_headers:
            headers += self.extra_response_headers
        if self.tracer is not None:
            self.tracer.event("responseSnapshot", stage="final response", severity="warn" if status < 500 else "error",
                              requestState=self.state(response={"code": status, "headers": headers_map(headers)}))
        await self.start_response(status, headers)
        await self.end_body(body)
