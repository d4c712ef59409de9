"""Host-header check for an admin server bound to loopback (DNS-rebinding defence).

A web page on ``evil.example`` can re-point its own name at 127.0.0.1 and then read the admin
server from the victim's browser (``/config_dump``, ``/debug/trace``): the browser sends
``Host: evil.example``. A loopback-bound admin server therefore answers only requests whose Host
is a loopback name (``localhost``, ``*.localhost``, ``127.0.0.0/8``, ``[::1]``) and 421
("Misdirected Request") otherwise. Off loopback the admin bearer token (``auth.py``) protects it.
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


def require_loopback_host(app: Any) -> Any:
    """Wrap an ASGI app: HTTP requests without a loopback Host get 421 and never reach ``app``."""

    async def checked(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            hosts = [v.decode("latin-1") for k, v in scope.get("headers") or () if k == b"host"]
            if len(hosts) != 1 or not is_loopback_host(hosts[0]):
                await send_text(send, 421, "misdirected request: the admin server answers only loopback host names")
                return
        await app(scope, receive, send)

    return checked
