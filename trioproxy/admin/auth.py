"""Admin bearer token: required on every admin data endpoint when the admin server is off loopback.

On loopback (the default) only local processes can reach the admin server, so nothing is asked.
Bound anywhere else, traces would hand request bodies and headers to anyone on the network, so
the gateway refuses to start without a token (``ADMIN_TOKEN`` or ``config.adminToken``) and this
middleware answers 401 to any request that does not present it.

Where the token may be presented:
- ``Authorization: Bearer <token>`` — the UI and scripts;
- ``?token=<token>`` on ``/debug/trace`` only — for an ``EventSource`` (it cannot set headers);
- the ``trioproxy_admin_token`` cookie — the same reason, for clients that prefer a cookie.

The UI shell (``/``, ``/ui``, ``/ui/static/*``) is served without a token: it is the packaged
HTML/JS/CSS, holds no gateway data, and must load to ask the user for the token. So is
``/api/auth``, which only says whether a token is required and whether the one presented is
right, so the UI asks before its first data request instead of collecting 401s.
"""

from __future__ import annotations

import hmac
import ipaddress
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs

COOKIE = "trioproxy_admin_token"
AUTH_PATH = "/api/auth"
PUBLIC_PATHS = frozenset({"/", "/ui", "/ui/"})
PUBLIC_PREFIX = "/ui/static/"
QUERY_TOKEN_PATHS = frozenset({"/debug/trace"})


def admin_token(config: Any) -> str | None:
    """The admin token: ``config.adminToken``, or env ``ADMIN_TOKEN`` (read by the config loader)."""
    return config.servers.admin_token or None


def is_loopback(host: str) -> bool:
    """Whether an admin bind address only accepts local connections."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def presented_tokens(scope: dict[str, Any]) -> list[str]:
    """Every token the request carries (header, cookie, and the query on ``/debug/trace``)."""
    found: list[str] = []
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            scheme, _, credential = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and credential.strip():
                found.append(credential.strip())
        elif name == b"cookie":
            cookie: SimpleCookie = SimpleCookie()
            try:
                cookie.load(value.decode("latin-1"))
            except CookieError:  # a malformed cookie header is simply not a token
                continue
            if COOKIE in cookie:
                found.append(cookie[COOKIE].value)
    if scope.get("path") in QUERY_TOKEN_PATHS:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        found.extend(query.get("token", []))
    return found


def token_matches(expected: str, scope: dict[str, Any]) -> bool:
    wanted = expected.encode()
    return any(hmac.compare_digest(wanted, given.encode()) for given in presented_tokens(scope))


def require_token(app: Any, token: str | None) -> Any:
    """``app`` behind a bearer-token check; ``app`` itself when ``token`` is None (loopback)."""
    if not token:
        return app

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        path = scope.get("path", "")
        if path == AUTH_PATH:
            body = b'{"required":true,"accepted":%s}' % (b"true" if token_matches(token, scope) else b"false")
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"application/json"), (b"cache-control", b"no-store")]})
            await send({"type": "http.response.body", "body": body})
            return
        if path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIX) or token_matches(token, scope):
            await app(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"www-authenticate", b'Bearer realm="trioproxy admin"'),
            (b"cache-control", b"no-store"),
        ]})
        await send({"type": "http.response.body",
                    "body": b"unauthorized: this admin server needs a bearer token (ADMIN_TOKEN)\n"})

    return guarded
