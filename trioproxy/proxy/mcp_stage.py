"""MCP on the request path: the ``mcpAuthentication`` stage, and an ``mcp`` backend's answer.

``McpAuthenticationStage`` (route phase, after ``jwtAuth``'s place) serves the route's Protected
Resource Metadata at ``/.well-known/oauth-protected-resource<path>`` and checks the bearer token
(``policies/mcp_auth.py``). ``McpHub.respond`` hands a request for an ``mcp`` backend to its relay
(``trioproxy/mcp/relay.py``) and wraps the relay's answer as an ``UpstreamResponse``, so the rest
of the HTTP path (response hooks, CORS headers, the trace's body copy, the deadline) is the one
every backend gets. Each JSON-RPC call becomes a trace event ``mcp``, access-log fields
``mcp.method``, ``mcp.name``, ``mcp.target``, ``mcp.result`` and a count in
``trioproxy_mcp_calls_total`` (docs/mcp.md).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Sequence
from types import TracebackType
from typing import Any

import trio
from prometheus_client import CollectorRegistry, Counter

from ..config.model import Backend, Config, McpBackend
from ..errors import AuthenticationFailed, DirectResponse
from ..mcp.connections import ConnectionPool
from ..mcp.relay import McpAnswer, McpCall, McpRelay, McpRequest
from ..mcp.session import SessionCodec, inherited_key
from ..mcp.upstream import HttpTargets
from ..policies.jwt import JwtFailure, JwtVerifier, UnknownKey, bearer_token
from ..policies.mcp_auth import (
    METADATA_PREFIX,
    McpAuthenticationSpec,
    audience_matches,
    challenge,
    metadata_document,
    resource_for,
)
from ..telemetry.trace import activation, duration_string
from ..upstream.pool import UpstreamResponse
from .exchange import Exchange
from .stage import Stage

__all__ = ["McpAuthenticationStage", "McpHub", "McpResponse"]


def _origin(x: Exchange) -> str:
    host = next((v.decode("latin-1") for k, v in x.headers if k == b"host"), x.host)
    return f"{x.scope.get('scheme', 'http')}://{host}"


class McpAuthenticationStage(Stage):
    """``mcpAuthentication``: the resource metadata document, then the token (``x.jwt``)."""

    kind = "mcpAuthentication"

    def __init__(self, spec: McpAuthenticationSpec, verifier: JwtVerifier, remotes: Sequence[Any] = ()) -> None:
        self.spec = spec
        self.verifier = verifier
        self.remotes = tuple(remotes)

    async def request(self, x: Exchange) -> None:
        tr = x.tracer
        path = x.scope["path"]
        origin = _origin(x)
        if path.startswith(METADATA_PREFIX) and x.scope["method"] in ("GET", "HEAD"):
            resource = resource_for(self.spec, origin, path[len(METADATA_PREFIX):] or "/")
            answer = DirectResponse(200, metadata_document(self.spec, resource).decode(),
                                    headers=[(b"cache-control", b"max-age=300")])
            answer.content_type = b"application/json"
            raise answer
        mode = self.spec.mode
        token = bearer_token(x.headers)
        if token is None:
            if mode == "strict":
                tr.event("policy", severity="warn", kind="mcpAuthentication", result="rejected",
                         reason="no bearer token found")
                raise AuthenticationFailed("no bearer token found", headers=[(b"www-authenticate",
                                                                                challenge(origin, path))],
                                           why={"policy": "mcpAuthentication", "check": "missing",
                                                "detail": "no bearer token found"})
            return
        try:
            try:
                claims = self.verifier.verify(token, time.time())
            except UnknownKey:
                refreshed = False
                for remote in self.remotes:
                    refreshed = await remote.refetch_for_unknown_kid() or refreshed
                if not refreshed:
                    raise
                claims = self.verifier.verify(token, time.time())
            accepted = self.spec.audiences or (resource_for(self.spec, origin, path),)
            if not audience_matches(claims, accepted):
                raise JwtFailure(f"token audience is not this resource ({', '.join(accepted)})", "aud",
                                 audience=claims.get("aud"), expected=list(accepted))
        except JwtFailure as failure:
            if mode == "permissive":
                tr.event("policy", severity="warn", kind="mcpAuthentication", result="skipped", reason=failure.reason)
                return
            tr.event("policy", severity="warn", kind="mcpAuthentication", result="rejected", reason=failure.reason)
            raise AuthenticationFailed(failure.reason, headers=[
                (b"www-authenticate", challenge(origin, path, "invalid_token"))],
                why=failure.why("mcpAuthentication")) from None
        x.jwt = claims
        x.headers = [h for h in x.headers if h[0] != b"authorization"]
        tr.event("policy", severity="success", kind="mcpAuthentication", result="authenticated",
                 issuer=claims.get("iss"), subject=claims.get("sub"))


class McpResponse(UpstreamResponse):
    """A relay's answer where the HTTP path expects an upstream's: the body whole, or streamed."""

    __slots__ = ("_answer",)

    def __init__(self, answer: McpAnswer) -> None:  # no connection: nothing of the pool is used
        self._answer = answer
        self.status = answer.status
        self.headers = list(answer.headers)
        if answer.stream is None:
            self.headers.append((b"content-length", str(len(answer.body)).encode()))
        self.reason = b""
        self._conn = None
        self._upload = None
        self._error = None

    def ready(self) -> tuple[list[bytes], bool]:
        if self._answer.stream is None:
            return ([self._answer.body] if self._answer.body else []), True
        return [], False

    async def body(self) -> AsyncGenerator[bytes, None]:
        stream = self._answer.stream
        assert stream is not None
        async for chunk in stream:
            yield chunk

    async def aclose(self) -> None:
        stream = self._answer.stream
        if stream is not None and hasattr(stream, "aclose"):
            await stream.aclose()

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


class McpHub:
    """The MCP relays of one gateway process (one per ``mcp`` backend), their HTTP client, the
    session key and the calls counter."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.http: HttpTargets | None = None
        self.codec: SessionCodec | None = None
        self.relays: dict[McpBackend, McpRelay] = {}
        #: stdio targets' processes and sse targets' event streams; ``run`` (in the root nursery) owns them
        self.connections = ConnectionPool()
        self.calls = Counter("trioproxy_mcp_calls", "MCP JSON-RPC calls through mcp backends, by result "
                             "(ok, error, denied)", ("route", "method", "target", "name", "result"),
                             registry=registry)

    def relay(self, spec: McpBackend, key: bytes | None) -> McpRelay:
        key = key if key is not None else inherited_key()
        if self.codec is None or (key is not None and self.codec.key != key):
            self.codec = SessionCodec(key)
            self.relays.clear()
        if self.http is None:
            self.http = HttpTargets()
        relay = self.relays.get(spec)
        if relay is None:
            relay = self.relays[spec] = McpRelay(spec, self.codec, self.http, self.connections)
        return relay

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the per-session connections (stdio processes, sse streams) until cancelled (then they end)."""
        await self.connections.run(task_status=task_status)

    async def peek(self, x: Exchange, spec: McpBackend, config: Config) -> None:
        """Before the route phase: read the POST's JSON-RPC message, so CEL sees ``mcp.method`` and
        ``mcp.tool.name``/``target`` (``prompt``, ``resource``) and ``mcp.arguments`` in the route's
        authorization rules and remoteRateLimit descriptors; the relay reuses the body."""
        if x.scope["method"] != "POST":
            return
        x.mcp_body = body = await x.read_body(config.frontend.max_buffer_size)
        x.mcp_call = self.relay(spec, config.session_key).describe(body)

    async def respond(self, x: Exchange, backend: Backend, key: bytes | None, max_body: int) -> McpResponse:
        """The answer of ``backend``'s relay to the request (steps 6 for an ``mcp`` backend)."""
        assert backend.mcp is not None
        relay = self.relay(backend.mcp, key)
        body = x.mcp_body
        if body is None:
            body = await x.read_body(max_body) if x.scope["method"] == "POST" else b""
        tr = x.tracer
        tr.snapshot("final request", x)
        x.upstream_started = now = _now()
        tr.event("backendCallStart", target=backend.name)
        # CEL's view only where mcpAuthorization will read it
        request = McpRequest(x.scope["method"], x.headers, body, activation(x) if relay.policy is not None else {})
        route = x.route.key if x.route is not None else ""

        def observe(call: McpCall) -> None:
            x.mcp = {"mcp.method": call.method, "mcp.name": call.name, "mcp.target": call.target,
                     "mcp.result": call.result}
            self.calls.labels(route, call.method, call.target or "", call.name or "", call.result).inc()
            if tr.active:
                tr.event("mcp", start=call.start, severity="success" if call.result == "ok" else "warn",
                         method=call.method, tool=call.name, target=call.target, result=call.result,
                         error=call.error, duration=duration_string(call.end - call.start))

        answer = await relay.handle(request, observe, x.nursery)
        tr.event("backendCallResult", start=now, severity="success" if answer.status < 400 else "warn",
                 status=answer.status, error=None)
        return McpResponse(answer)


def _now() -> float:
    return trio.current_time()
