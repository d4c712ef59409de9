"""A gateway run as a real process (``python -m trioproxy`` with the echo backend beside it), for the
tests that drive its admin server from outside as a user would: the web UI in a browser, the trace
command, the README screenshots."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .conftest import ROOT, SIMPLE, free_port


class GatewayProcess:
    """``python -m trioproxy`` and the echo backend as subprocesses on free loopback ports, ready when
    built (the admin API answers). ``config_text`` has ``{port}`` and ``{backend}`` (and any ``fmt``);
    the gateway's stderr goes to ``tmp/gateway.log``; ``close()`` stops both."""

    def __init__(self, tmp: Path, *, admin_host: str = "127.0.0.1", token: str | None = None,
                 config_text: str = SIMPLE, **fmt: object) -> None:
        self.backend_port, self.port, self.admin_port = free_port(), free_port(), free_port()
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "TRIOPROXY_RUNTIME_DIR": str(tmp / "runtime"),
                    "ADMIN_ADDR": f"{admin_host}:{self.admin_port}", "STATS_ADDR": "127.0.0.1:0",
                    "READINESS_ADDR": "127.0.0.1:0"}
        self.env.pop("ADMIN_TOKEN", None)
        if token:
            self.env["ADMIN_TOKEN"] = token
        config = self.config = tmp / "gw.yaml"
        config.write_text(config_text.format(port=self.port, backend=self.backend_port, **fmt))
        self.log = open(tmp / "gateway.log", "wb")
        self.procs = [
            subprocess.Popen([sys.executable, "-m", "fixtures.echo_backend", "--port", str(self.backend_port)],
                             cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL),
            subprocess.Popen([sys.executable, "-m", "trioproxy", "--config", str(config)], cwd=ROOT, env=self.env,
                             stderr=self.log),
        ]
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.get(f"{self.admin}/api/auth", timeout=1).raise_for_status()
                httpx.get(f"http://127.0.0.1:{self.backend_port}/", timeout=1)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    self.close()
                    raise
                time.sleep(0.05)

    def close(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.log.close()
