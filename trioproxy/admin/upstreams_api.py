"""``GET /api/upstreams``: every target of the config with its outlier-detection state, requests in
flight and latency average (docs/resilience.md); the web UI's Upstreams page reads it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from quart import Quart

from ..config.model import Backend
from ..proxy.runtime import Runtime


def _backends(runtime: Runtime) -> Iterator[tuple[str, Backend]]:
    for bind in runtime.state.config.binds:
        for listener in bind.listeners:
            for route in listener.routes:
                for backend in route.backends:
                    yield route.key, backend


def upstreams(runtime: Runtime) -> dict[str, Any]:
    return {"upstreams": runtime.resilience.snapshot(_backends(runtime))}


def register_upstreams(app: Quart, runtime: Runtime) -> None:
    @app.get("/api/upstreams")
    async def api_upstreams() -> Any:
        return upstreams(runtime)
