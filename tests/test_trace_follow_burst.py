"""``trace --follow`` keeps every request: 20 sent back to back show as 20 in the text UI (tmux)
and in the raw output, against a real gateway process. The web UI's twin is in
``test_webui_follow_burst.py``."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import threading
import time

import httpx
import pytest

from .conftest import ROOT
from .test_trace_cli_gateway import _readline_nowait, real_gateway  # noqa: F401  (fixture)
from .test_tui_app import Tmux

N = 20


def _send_back_to_back(port: int, n: int = N, prefix: str = "/burst") -> None:
    with httpx.Client(timeout=10) as client:
        for i in range(n):
            assert client.get(f"http://127.0.0.1:{port}{prefix}/{i}").status_code == 200


def _send_concurrently(port: int, n: int = N, prefix: str = "/together") -> None:
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda i=i: statuses.append(
        httpx.get(f"http://127.0.0.1:{port}{prefix}/{i}", timeout=30).status_code)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(40)
    assert statuses == [200] * n  # every request reached the gateway (the box may be slow)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_text_ui_follow_shows_every_request_of_a_burst(real_gateway):  # noqa: F811
    cmd = [sys.executable, "-m", "trioproxy", "trace", "--local", "--proxy-admin-port",
           str(real_gateway.admin_port), "--follow"]
    script = f"cd {shlex.quote(str(ROOT))} && TERM=xterm-256color {shlex.join(cmd)}; echo TRACE-EXIT=$?; exec sleep 60"
    env_prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in real_gateway.env.items()
                          if k in ("PYTHONPATH", "TRIOPROXY_RUNTIME_DIR"))
    tmux = Tmux(f"env {env_prefix} sh -c {shlex.quote(script)}")
    try:
        tmux.wait_for(lambda s: "waiting for trace data" in s, "the trace to open")
        _send_back_to_back(real_gateway.port)
        screen = tmux.wait_for(lambda s: f"in {N} requests" in s, f"{N} requests in the status line", timeout=30)
        assert f"/burst/{N - 1}" in screen
        _send_concurrently(real_gateway.port)
        tmux.wait_for(lambda s: f"in {2 * N} requests" in s, f"{2 * N} requests after a concurrent burst", timeout=30)
        tmux.keys("q")
        screen = tmux.wait_for(lambda s: "TRACE-EXIT=" in s, "exit")
        assert "TRACE-EXIT=0" in screen and "Traceback" not in screen
    finally:
        tmux.close()


def test_raw_follow_keeps_every_request_of_a_concurrent_burst(real_gateway):  # noqa: F811
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "trace", "--local", "--proxy-admin-port",
                             str(real_gateway.admin_port), "--follow", "--raw"], cwd=ROOT, env=real_gateway.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 15
        while _readline_nowait(proc) is None:  # until a first request is traced: the stream is open
            httpx.get(f"{real_gateway.url}/warmup", timeout=5)
            assert time.monotonic() < deadline, "the trace never started"
        _send_concurrently(real_gateway.port)
        paths: set[str] = set()
        deadline = time.monotonic() + 40
        while len(paths) < N and time.monotonic() < deadline:
            line = _readline_nowait(proc)
            if line is None:
                continue
            message = json.loads(line)["message"]
            if message["type"] == "requestSnapshot" and message["stage"] == "initial request":
                path = message["requestState"]["request"]["path"]
                if path.startswith("/together/"):
                    paths.add(path)
        assert paths == {f"/together/{i}" for i in range(N)}
    finally:
        proc.terminate()
        proc.wait(10)
