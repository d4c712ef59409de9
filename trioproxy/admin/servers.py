"""Stats (``/metrics``) and readiness (``/healthz/ready``): raw ASGI, they answer probes only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..metrics import Metrics


async def _lifespan_or_reject(scope: dict[str, Any], receive: Any, send: Any) -> bool:
    """Handle non-HTTP scopes; True when the caller should go on with an HTTP request."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return False
    return scope["type"] == "http"


async def _answer(send: Any, status: int, body: bytes, content_type: bytes = b"text/plain") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def stats_app(metrics: Metrics):
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not await _lifespan_or_reject(scope, receive, send):
            return
        if scope["path"] != "/metrics":
            await _answer(send, 404, b"not found: try /metrics")
            return
        body, content_type = metrics.exposition()
        await _answer(send, 200, body, content_type.encode())

    return app


def readiness_app(is_ready: Callable[[], bool]):
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if not await _lifespan_or_reject(scope, receive, send):
            return
        if scope["path"] != "/healthz/ready":
            await _answer(send, 404, b"not found: try /healthz/ready")
        elif is_ready():
            await _answer(send, 200, b"ready")
        else:
            await _answer(send, 503, b"not ready")

    return app
