"""Stats (``/metrics``, also ``/stats/prometheus`` as Envoy and agentgateway name it) and readiness (``/healthz/ready``): raw ASGI, they answer probes only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..asgi import send_text, serve_lifespan
from ..metrics import Metrics


def stats_app(metrics: Metrics):
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
        elif scope["type"] != "http":
            return
        elif scope["path"] not in ("/metrics", "/stats/prometheus"):
            await send_text(send, 404, "not found: try /metrics")
        else:
            body, content_type = metrics.exposition()
            await send_text(send, 200, body, content_type.encode())

    return app


def readiness_app(is_ready: Callable[[], bool]):
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
        elif scope["type"] != "http":
            return
        elif scope["path"] != "/healthz/ready":
            await send_text(send, 404, "not found: try /healthz/ready")
        elif is_ready():
            await send_text(send, 200, "ready")
        else:
            await send_text(send, 503, "not ready")

    return app
