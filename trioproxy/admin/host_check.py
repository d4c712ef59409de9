"""Browser attacks on the admin, stats and readiness servers: DNS rebinding and cross-site writes.

A web page on ``evil.example`` can re-point its own name at 127.0.0.1 and then read the admin
server from the victim's browser (``/config_dump``, ``/debug/trace``) or the stats server's
``/metrics`` (route, backend and policy names): the browser sends ``Host: evil.example``. A
server bound to loopback therefore answers only requests whose Host is a loopback name
(``localhost``, ``*.localhost``, ``127.0.0.0/8``, ``[::1]``) and 421 ("Misdirected Request")
otherwise. Off loopback the admin bearer token (``auth.py``) protects the admin server, and the
stats and readiness servers are meant for scrapers and probes that name it however they like.

A page needs no rebinding to *write*: a cross-origin ``POST`` (a form, or a ``fetch`` in
``no-cors`` mode) reaches ``http://127.0.0.1:15000/logging?level=debug`` with a loopback Host; the
page cannot read the answer, but the change is made. So the admin server refuses (403) a request
with a method other than GET, HEAD or OPTIONS that a browser marks as coming from elsewhere: an
``Origin`` whose host and port are not the request's Host, or ``Sec-Fetch-Site`` other than
``same-origin`` / ``none``. The web UI (same origin) and the CLIs and curl (no ``Origin``) pass.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from ..asgi import send_text


def is_loopback_host(host_header: str) -> bool:
    """Whether a Host header value (with an optional port) names this machine's loopback."""
    host = host_header.strip().lower()
    if host.startswith("["):
        host = host[1:host.find("]")] if "]" in host else host[1:]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    host = host.rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_loopback_host(app: Any, server: str = "admin") -> Any:
    """Wrap an ASGI app: HTTP requests without a loopback Host get 421 and never reach ``app``."""
    message = f"misdirected request: the {server} server answers only loopback host names"

    async def checked(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            hosts = [v.decode("latin-1") for k, v in scope.get("headers") or () if k == b"host"]
            if len(hosts) != 1 or not is_loopback_host(hosts[0]):
                await send_text(send, 421, message)
                return
        await app(scope, receive, send)

    return checked


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def is_cross_site_write(method: str, headers: Any) -> bool:
    """Whether a request that changes state comes, by its browser's word, from another origin."""
    if method in SAFE_METHODS:
        return False
    fields: dict[bytes, list[str]] = {}
    for name, value in headers:
        fields.setdefault(name, []).append(value.decode("latin-1").strip().lower())
    if any(site not in ("same-origin", "none") for site in fields.get(b"sec-fetch-site", ())):
        return True
    origins, hosts = fields.get(b"origin", []), fields.get(b"host", [])
    if not origins:
        return False  # not a browser's cross-origin request (CLIs, curl; browsers always send Origin then)
    _, sep, authority = origins[0].partition("://")
    return len(origins) != 1 or len(hosts) != 1 or not sep or authority != hosts[0]


def refuse_cross_site_writes(app: Any) -> Any:
    """Wrap the admin ASGI app: a cross-site state-changing request gets 403 and never reaches it."""

    async def checked(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and is_cross_site_write(scope["method"], scope.get("headers") or ()):
            await send_text(send, 403, "forbidden: the admin server refuses changes requested by another site's page")
            return
        await app(scope, receive, send)

    return checked
