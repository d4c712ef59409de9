"""Shared fixtures: real servers on 127.0.0.1, port 0, inside the test's own nursery."""

from __future__ import annotations

import io
import json
import logging
import os
import socket
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from fixtures.echo_backend import EchoBackend
from trioproxy.config import parse_config
from trioproxy.frontend.server import ServerInfo, serve_gateway
from trioproxy.telemetry.access_log import configure_logging

ROOT = Path(__file__).resolve().parent.parent
LOOPBACK_SERVERS = {"ADMIN_ADDR": "127.0.0.1:0", "STATS_ADDR": "127.0.0.1:0", "READINESS_ADDR": "127.0.0.1:0"}


def free_port() -> int:
    """A port that was free a moment ago (for configs whose keys must show a real port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def private_runtime_dir(tmp_path, monkeypatch):
    """Gateways started by a test register themselves here, not in the user's runtime dir."""
    monkeypatch.setenv("TRIOPROXY_RUNTIME_DIR", str(tmp_path / "runtime"))


@pytest.fixture
async def backend(nursery: trio.Nursery) -> EchoBackend:
    return await nursery.start(EchoBackend().serve)


class Gateway:
    """An in-process gateway and a client pointed at one of its binds."""

    def __init__(self, info: ServerInfo, port: int) -> None:
        self.info = info
        self.port = port
        self.url = f"http://127.0.0.1:{info.ports[port]}"
        self.admin_url = f"http://{info.admin}"

    def client(self, **kwargs) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=10, **kwargs)


async def start_gateway(nursery: trio.Nursery, config_yaml: str, *, drain_timeout: float = 5.0,
                        config_path: str | None = None, **fmt) -> Gateway:
    """Start a gateway from YAML text (``{name}`` placeholders filled from ``fmt``)."""
    text = textwrap.dedent(config_yaml).format(**fmt)
    config = parse_config(text, env={**os.environ, **LOOPBACK_SERVERS})
    info = await nursery.start(partial(serve_gateway, config, bind_host="127.0.0.1",
                                       drain_timeout=drain_timeout, config_path=config_path))
    return Gateway(info, config.binds[0].port)


async def start_routes(nursery: trio.Nursery, routes_yaml: str, **fmt) -> Gateway:
    """A gateway with one bind (``{port}``) and one listener holding ``routes_yaml``."""
    routes = textwrap.indent(textwrap.dedent(routes_yaml).strip("\n"), "    ")
    return await start_gateway(nursery, "binds:\n- port: {port}\n  listeners:\n  - routes:\n" + routes + "\n", **fmt)


SIMPLE = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: echo
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""

# SIMPLE plus a route under /limited with a local budget of {max_tokens} requests a minute.
LIMITED = """\
binds:
- port: {port}
  listeners:
  - name: main
    routes:
    - name: limited
      matches: [{{path: {{pathPrefix: /limited}}}}]
      policies:
        localRateLimit: [{{maxTokens: {max_tokens}, tokensPerFill: {max_tokens}, fillInterval: 60s}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: echo
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


@pytest.fixture
async def gateway(nursery: trio.Nursery, backend: EchoBackend) -> Gateway:
    return await start_gateway(nursery, SIMPLE, port=free_port(), backend=backend.port)


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trioproxy", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.fixture
def log_lines():
    """The gateway's log as parsed JSON lines (restores the logger afterwards)."""
    root = logging.getLogger("trioproxy")
    saved = (list(root.handlers), root.level, root.propagate)
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream, env={})

    async def lines() -> list[dict]:
        # A request is logged after its last byte went out: let the gateway's task get there.
        await trio.testing.wait_all_tasks_blocked()
        return [json.loads(line) for line in stream.getvalue().splitlines()]

    yield lines
    root.handlers[:] = saved[0]
    root.setLevel(saved[1])
    root.propagate = saved[2]
