"""Checks every data-plane request passes before the gateway routes it (ASGI middleware).

What arrives here has been parsed by h11; what it lets through may still be ambiguous:

- **framing**: ``Content-Length`` together with ``Transfer-Encoding`` is the request-smuggling
  shape (RFC 9112 §6.1 lets a server reject it; a proxy must not forward it) → 400, and the
  connection is closed because its framing cannot be trusted.
- **path**: routing, policies and the backend must see one path, so the normalised one
  (``paths.py``) replaces ``path`` and ``raw_path``; a path that cannot be normalised → 400.
- **overload**: past ``max_in_flight`` requests (``frontendPolicies.http.maxRequestsInFlight``) being handled the gateway answers
  ``503 overloaded`` with ``connection: close`` at once instead of queueing without bound.

Answers are plain text with a reason phrase, as docs/reliability.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from ..http_date import with_date
from .paths import FRAGMENT, PathError, normalize_path

DEFAULT_MAX_IN_FLIGHT = 10_000  # per bind; frontendPolicies.http.maxRequestsInFlight (docs/reliability.md)


async def _answer(send: Any, status: int, text: str, *, close: bool) -> None:
    body = (text + "\n").encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": with_date(headers)})
    await send({"type": "http.response.body", "body": body})


def _normalised(scope: dict[str, Any]) -> dict[str, Any]:
    """``scope`` with its path normalised (``PathError`` when it cannot be, or the query holds a ``#``)."""
    if b"#" in scope.get("query_string", b""):
        raise PathError(FRAGMENT)
    raw = (scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
    normal = normalize_path(raw)
    if normal != raw:
        scope = {**scope, "raw_path": normal.encode("latin-1"), "path": unquote(normal)}
    return scope


class FrontDoor:
    """Wraps the data-plane app of one bind; counters are read by tests and metrics."""

    #: every answer carries exactly one ``date`` (``http_date.py``): hypercorn must not add its own
    sets_date_header = True

    def __init__(self, app: Any, *, max_in_flight: Callable[[], int] = lambda: DEFAULT_MAX_IN_FLIGHT,
                 on_reject: Any = lambda reason: None) -> None:
        self.app = app
        self.max_in_flight = max_in_flight  # read per request: a reload changes it
        self.in_flight = 0
        self.rejected: dict[str, int] = {}
        self._on_reject = on_reject

    def _reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self._on_reject(reason)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        has_length = has_encoding = False
        for name, _ in scope["headers"]:
            if name == b"content-length":
                has_length = True
            elif name == b"transfer-encoding":
                has_encoding = True
        # ``connection: close`` is HTTP/1 only (an HTTP/2 answer with it is a protocol error).
        http1 = scope.get("http_version", "1.1").startswith("1")
        if has_length and has_encoding:
            self._reject("cl_te")
            await _answer(send, 400, "bad request: both content-length and transfer-encoding", close=http1)
            return
        try:
            scope = _normalised(scope)
        except PathError as error:
            self._reject("path")
            await _answer(send, 400, f"bad request: {error}", close=False)
            return
        if self.in_flight >= self.max_in_flight():
            self._reject("overloaded")
            await _answer(send, 503, "overloaded", close=http1)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _websocket(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """An upgrade request: the same path normalisation (a refusal is a plain HTTP 400)."""
        try:
            scope = _normalised(scope)
        except PathError as error:
            self._reject("path")
            body = f"bad request: {error}\n".encode()
            await send({"type": "websocket.http.response.start", "status": 400, "headers": [
                (b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]})
            await send({"type": "websocket.http.response.body", "body": body})
            return
        await self.app(scope, receive, send)
