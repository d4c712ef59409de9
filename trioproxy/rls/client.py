"""The gateway's RLS client: ``client_for`` gives the one in use per service target
(``wire_client.WireRlsClient``, gRPC framed by hand on HTTP/2 over Trio). The alternatives it was
measured against (grpcio's future API, the ``h2`` library) live in bench/ (bench/global_ratelimit.py,
bench/README.md "Global rate limiting").
"""

from __future__ import annotations

from typing import Any

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"


class RlsCallFailed(Exception):
    """The service was unreachable, too slow or answered an error (the failure mode decides)."""


_clients: dict[str, Any] = {}


def client_for(target: str) -> Any:
    """The one client (one HTTP/2 connection) per service target in this process: the hand-framed
    one (``wire_client.WireRlsClient``), which measured cheapest (bench/README.md)."""
    from .wire_client import WireRlsClient

    client = _clients.get(target)
    if client is None:
        client = _clients[target] = WireRlsClient(target)
    return client
