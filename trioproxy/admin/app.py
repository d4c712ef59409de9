"""The admin server: ``/ui``, ``/config_dump`` and (tracing) ``/debug/trace``.

Quart-Trio, because the admin is a small web application (pages, JSON, server-sent events)
where a framework's routing and response helpers pay off; the data plane stays raw ASGI.
It binds to loopback by default (``config.adminAddr``): nothing here is authenticated.
"""

from __future__ import annotations

import logging
from importlib import resources

from quart import Response, redirect, request
from quart_trio import QuartTrio

from ..access_log import level_name, parse_level
from ..config.dump import config_dump
from ..runtime import Runtime
from .trace_stream import serve_trace


def _static(name: str) -> bytes:
    return resources.files("trioproxy.admin").joinpath("static", name).read_bytes()


def create_admin_app(runtime: Runtime):
    """The admin ASGI app: ``/debug/trace`` handled raw, everything else by Quart."""
    quart = _quart_app(runtime)

    async def app(scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] == "/debug/trace":
            await serve_trace(scope, receive, send, runtime.trace, runtime.metrics)
        else:
            await quart(scope, receive, send)

    return app


def _quart_app(runtime: Runtime) -> QuartTrio:
    app = QuartTrio("trioproxy.admin")
    app.config["JSON_SORT_KEYS"] = False
    app.json.sort_keys = False  # keep config order (binds, listeners, routes as written)

    @app.get("/")
    async def index() -> Response:
        return redirect("/ui")

    @app.get("/ui")
    @app.get("/ui/")
    async def ui() -> Response:
        return Response(_static("ui.html"), content_type="text/html; charset=utf-8")

    @app.route("/logging", methods=["GET", "POST"])
    async def logging_level() -> Response:
        """Read (GET) or change (POST ``?level=debug``) the log level at runtime, as agentgateway's admin does."""
        logger = logging.getLogger("trioproxy")
        if request.method == "POST":
            wanted = request.args.get("level", "")
            try:
                logger.setLevel(parse_level(wanted, "level"))
            except ValueError as error:
                return Response(f"{error}\n", status=400, content_type="text/plain")
            logger.warning("log level set to %s", level_name(logger.level))
        return app.json.response({"level": level_name(logger.getEffectiveLevel())})

    @app.get("/config_dump")
    async def dump() -> Response:
        return app.json.response(config_dump(runtime.state.config))

    return app
