"""The admin server: ``/ui``, ``/config_dump`` and (tracing) ``/debug/trace``.

Quart-Trio, because the admin is a small web application (pages, JSON, server-sent events)
where a framework's routing and response helpers pay off; the data plane stays raw ASGI.
It binds to loopback by default (``config.adminAddr``); bound anywhere else, every data
endpoint needs the admin bearer token (``auth.py``). The web UI is the packaged files under
``static/`` (plain HTML/JS/CSS, no build step) reading the JSON API of ``api.py``.
"""

from __future__ import annotations

import logging
from importlib import resources
from typing import Any

from quart import Response, abort, redirect, request
from quart.typing import ResponseReturnValue
from quart_trio import QuartTrio

from ..asgi import ASGIApp
from ..config.dump import config_dump
from ..proxy.runtime import Runtime
from ..telemetry.access_log import level_name, parse_level
from .api import register_api
from .auth import require_token
from .export_api import register_export_api
from .keys_api import register_keys_api
from .requests_api import serve_requests
from .trace_stream import serve_trace

UI_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self';"
          " base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
STATIC_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}


def _static(name: str) -> bytes:
    return resources.files("trioproxy.admin").joinpath("static", name).read_bytes()


def _static_names() -> frozenset[str]:
    """The packaged UI files; only these names are served (no path joins from the URL)."""
    folder = resources.files("trioproxy.admin").joinpath("static")
    return frozenset(entry.name for entry in folder.iterdir() if entry.is_file())


def create_admin_app(runtime: Runtime, *, token: str | None = None) -> ASGIApp:
    """The admin ASGI app: ``/debug/trace`` handled raw, everything else by Quart.

    ``token`` (off loopback) puts every data endpoint behind ``auth.require_token``; it is
    also scrubbed from trace events, so a traced request carrying it never shows it.
    """
    quart = _quart_app(runtime, secrets=(token,) if token else ())

    async def app(scope: Any, receive: Any, send: Any) -> None:  # Quart types its own ASGI messages
        if scope["type"] == "http" and scope["path"] == "/debug/trace":
            await serve_trace(scope, receive, send, runtime.trace, runtime.metrics, secrets=(token,) if token else ())
        elif scope["type"] == "http" and scope["path"] == "/api/requests":
            await serve_requests(scope, receive, send, runtime.history)
        else:
            await quart(scope, receive, send)

    wrapped: ASGIApp = require_token(app, token)
    return wrapped


def _quart_app(runtime: Runtime, *, secrets: tuple[str, ...] = ()) -> QuartTrio:
    app = QuartTrio("trioproxy.admin")
    app.config["JSON_SORT_KEYS"] = False
    app.json.sort_keys = False  # type: ignore[attr-defined]  # keep config order (binds, listeners, routes as written)

    @app.get("/")
    async def index() -> ResponseReturnValue:
        return redirect("/ui")

    @app.get("/ui")
    @app.get("/ui/")
    async def ui() -> Response:
        return Response(_static("ui.html"), content_type="text/html; charset=utf-8")

    @app.route("/logging", methods=["GET", "POST"])
    async def logging_level() -> Any:  # app.json.response is typed as werkzeug's sansio Response
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

    @app.after_request
    async def ui_headers(response: Response) -> Response:
        # The UI only loads its own files and talks to this server; no framing (clickjacking).
        if request.path.startswith("/ui"):
            response.headers["content-security-policy"] = UI_CSP
            response.headers["x-content-type-options"] = "nosniff"
            response.headers["referrer-policy"] = "no-referrer"
        return response

    names = _static_names()

    @app.get("/ui/static/<name>")
    async def ui_static(name: str) -> Response:
        suffix = name[name.rfind("."):] if "." in name else ""
        if name not in names or suffix not in STATIC_TYPES:
            abort(404)
        response = Response(_static(name), content_type=STATIC_TYPES[suffix])
        response.headers["cache-control"] = "no-cache"
        return response

    register_api(app, runtime)
    register_keys_api(app, runtime)  # /api/keys, /api/teams, /api/spend, /api/logs
    register_export_api(app, runtime, secrets=secrets)  # /api/export, /api/replay

    @app.get("/config_dump")
    async def dump() -> Any:
        return app.json.response(config_dump(runtime.state.config))

    return app
