"""``POST /api/export`` (a trace as HAR 1.2 or curl lines) and ``POST /api/replay`` (docs/export.md).

Replay sends a traced request again through the gateway's own listener and returns the answer
with a fresh trace of it. How exactly that request is traced, and no other:

1. a random token (128 bits) is made, and a one-shot trace watcher registered on the runtime's
   hub (``TraceHub.watch``) whose CEL expression is
   ``request.headers["x-trioproxy-replay"] == "<token>"``, ahead of the watchers already waiting
   (``first``: a ``/debug/trace`` reader of every request, such as the web UI following, would
   otherwise take it). It counts among ``TRIOPROXY_TRACE_MAX_WATCHERS`` (429 past it) and, under
   ``--workers``, is published to the workers like any other (the expression travels as text);
2. the request goes to ``127.0.0.1:<bind port>`` (the bind named by the trace's listener key,
   ``https`` with the traced ``Host`` as SNI when the trace says so), with the traced ``Host`` and
   headers plus ``x-trioproxy-replay: <token>``;
3. the gateway's ``open_exchange`` lets the hub claim the request (the watcher matches), then
   removes ``x-trioproxy-replay`` from it whenever a watcher waits — so the fresh trace and the
   backend see the request as the client first sent it, and a client that sends the header
   itself gains nothing (it would have to guess the token of a replay under way);
4. the watcher's events are read until ``requestFinished`` (bounded by ``REPLAY_TIMEOUT``).

Headers whose value the trace hid (``<redacted>``) are not sent unless the caller gives them in
``headers``; query parameters it hid are left out. A body the trace truncated is refused (400).
"""

from __future__ import annotations

import json
import secrets as random_tokens
from collections.abc import Mapping
from typing import Any

import httpx
import trio
from quart import Quart, Response, request

from ..cel import compile_expression
from ..proxy.runtime import Runtime
from ..telemetry.export import Exchange, ExportError, curl, exchange_from_trace, har, replay_target, request_headers
from ..telemetry.trace import REPLAY_HEADER, TooManyWatchers, Watcher
from .trace_stream import scrub, scrub_body

REPLAY_TIMEOUT = 30.0  # seconds for the replayed request and its trace
#: not sent again: they describe the traced connection, and httpx writes its own framing
_HOP_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive", "te", "upgrade",
                          "proxy-connection", "trailer", "expect", REPLAY_HEADER.decode()})


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _error(status: int, message: str) -> Response:
    return Response(json.dumps({"error": message}), status=status, content_type="application/json")


def _credentials(value: Any, where: str = "headers") -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ExportError(f"{where}: expected an object of header names to string values")
    return value


def _trace(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise ExportError(f"{where}: expected a list of trace events (objects)")
    return value


async def _json_body() -> dict[str, Any]:
    body = await request.get_json(force=True, silent=True)
    if not isinstance(body, dict):
        raise ExportError("body: expected a JSON object")
    return body


def register_export_api(app: Quart, runtime: Runtime, *, secrets: tuple[str, ...] = ()) -> None:
    """``/api/export`` and ``/api/replay``; ``secrets`` (the admin token) are scrubbed from the
    replay's trace as ``/debug/trace`` does."""

    @app.post("/api/export")
    async def api_export() -> Response:
        fmt = request.args.get("format", "har")
        if fmt not in ("har", "curl"):
            return _error(400, f"format: expected har or curl, got {fmt!r}")
        try:
            body = await _json_body()
            traces = body.get("traces")
            if not isinstance(traces, list):
                raise ExportError("traces: expected a list of traces (each a list of events)")
            exchanges = [exchange_from_trace(_trace(t, f"traces[{i}]")) for i, t in enumerate(traces)]
            if fmt == "har":
                return Response(json.dumps(har(exchanges), ensure_ascii=False), content_type="application/json")
            credentials = _credentials(body.get("headers"))
            base_url = body.get("baseUrl")
            if base_url is not None and not isinstance(base_url, str):
                raise ExportError("baseUrl: expected a string (http://host:port)")
            lines = [curl(x, base_url=base_url, credentials=credentials) for x in exchanges]
        except ExportError as error:
            return _error(400, str(error))
        return Response("".join(line + "\n" for line in lines), content_type="text/plain; charset=utf-8")

    @app.post("/api/replay")
    async def api_replay() -> Response:
        try:
            body = await _json_body()
            exchange = exchange_from_trace(_trace(body.get("trace"), "trace"))
            credentials = _credentials(body.get("headers"))
            return Response(json.dumps(await replay(runtime, exchange, credentials, secrets=secrets),
                                       ensure_ascii=False), content_type="application/json")
        except ExportError as error:
            return _error(400, str(error))
        except ApiError as error:
            return _error(error.status, error.message)


def _bind_port(runtime: Runtime, x: Exchange) -> int:
    ports = [bind.port for bind in runtime.state.config.binds]
    port = x.bind_port
    if port is None and len(ports) == 1:
        port = ports[0]
    if port is None:
        raise ExportError("the trace does not name its listener (env.listener): which bind to replay it on is unknown")
    if port not in ports:
        raise ExportError(f"the trace's bind port {port} is not one of this gateway's ({', '.join(map(str, ports))})")
    return port


async def _collect(watcher: Watcher, events: list[dict[str, Any]], secrets: tuple[str, ...]) -> None:
    while True:
        try:
            event = await watcher.next_event()
        except trio.EndOfChannel:
            return
        if secrets:
            event = json.loads(scrub(json.dumps(scrub_body(event, secrets), default=str).encode(), secrets))
        events.append(event)


async def replay(runtime: Runtime, x: Exchange, credentials: Mapping[str, str], *,
                 secrets: tuple[str, ...] = (), timeout: float = REPLAY_TIMEOUT) -> dict[str, Any]:
    """Send ``x``'s request again through the gateway's listener (module docstring) and return
    ``{"status", "headers", "body", "trace"}``. ``ExportError`` for a trace that cannot be replayed,
    ``ApiError`` (429, 502, 504) when it could not be sent or traced."""
    if x.request_truncated:
        raise ExportError("the trace cut the request body at its limit (TRIOPROXY_TRACE_BODY_LIMIT):"
                          " replaying it would send another request")
    if any(k.lower() == "upgrade" for k, _ in x.request_headers):
        raise ExportError("a WebSocket (upgrade) request cannot be replayed: only plain HTTP requests")
    port = _bind_port(runtime, x)
    token = random_tokens.token_hex(16)
    name = REPLAY_HEADER.decode()
    expression = compile_expression(f'"{name}" in request.headers && request.headers["{name}"] == "{token}"')
    headers = [(k, v) for k, v in request_headers(x, credentials) if k.lower() not in _HOP_HEADERS]
    if not any(k.lower() == "host" for k, _ in headers):
        headers.append(("host", x.host))
    headers.append((name, token))
    host_name = x.host.rsplit(":", 1)[0] if not x.host.endswith("]") else x.host
    request = _request(x, port, headers, host_name)
    try:
        watcher = runtime.trace.watch(expression.matches, first=True)
    except TooManyWatchers as error:
        raise ApiError(429, str(error)) from None
    events: list[dict[str, Any]] = []
    sent: list[httpx.Response | ApiError] = []
    try:
        with trio.move_on_after(timeout) as waited:
            async with trio.open_nursery() as nursery:
                async def send() -> None:
                    try:
                        sent.append(await _send(request, timeout))
                    except ApiError as error:  # not sent: no trace will come
                        sent.append(error)
                        nursery.cancel_scope.cancel()

                nursery.start_soon(_collect, watcher, events, secrets)
                nursery.start_soon(send)
                # both end with the trace's requestFinished, just after the answer
    finally:
        runtime.trace.forget(watcher)
    if sent and isinstance(sent[0], ApiError):
        raise sent[0]
    response = sent[0] if sent else None
    if waited.cancelled_caught or not isinstance(response, httpx.Response):
        raise ApiError(504, f"replay: no answer and trace within {timeout:g}s")
    return {"status": response.status_code,
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in response.headers.raw],
            "body": response.content.decode("utf-8", errors="replace"), "trace": events}


def _request(x: Exchange, port: int, headers: list[tuple[str, str]], sni: str) -> httpx.Request:
    """The request to send: only the traced headers (no client defaults), encoded as the trace
    decoded them (latin-1, ``trace.headers_map``); ``ExportError`` for a value that is not."""
    https = x.scheme == "https"
    request = httpx.Request(x.method, f"{'https' if https else 'http'}://127.0.0.1:{port}{replay_target(x)}",
                            content=x.request_body or None, extensions={"sni_hostname": sni} if https else None)
    request.headers.encoding = "latin-1"
    for key, value in headers:  # names are unique: a trace joins repeated headers with ", "
        try:
            request.headers[key] = value
        except UnicodeEncodeError:
            raise ExportError(f"headers: {key}: a header value must be latin-1 text") from None
    return request


async def _send(request: httpx.Request, timeout: float) -> httpx.Response:
    # the gateway's own listener on loopback: its certificate names the public host, not 127.0.0.1
    async with httpx.AsyncClient(verify=request.url.scheme != "https", timeout=timeout, trust_env=False) as client:
        try:
            response = await client.send(request)
        except httpx.HTTPError as error:
            raise ApiError(502, f"replay: could not send the request to {request.url.netloc.decode()}: {error}") from None
        await response.aread()
        return response
