"""Stats (``/metrics``, also ``/stats/prometheus`` as Envoy and agentgateway name it) and readiness (``/healthz/ready``): raw ASGI, they answer probes only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..asgi import ASGIApp, Receive, Scope, Send, send_text, serve_lifespan
from ..telemetry.metrics import Metrics


def stats_app(metrics: Metrics, add: Callable[[bytes], Awaitable[bytes]] | None = None) -> ASGIApp:
    """``add``: what else ``/metrics`` carries beside this process's families (a supervisor's: its
    workers', summed in)."""
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await serve_lifespan(receive, send)
        elif scope["type"] != "http":
            return
        elif scope["path"] not in ("/metrics", "/stats/prometheus"):
            await send_text(send, 404, "not found: try /metrics")
        else:
            body, content_type = metrics.exposition()
            await send_text(send, 200, body if add is None else await add(body), content_type.encode())

    return app


def readiness_app(is_ready: Callable[[], bool]) -> ASGIApp:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
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
