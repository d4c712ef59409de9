"""``trace --follow`` keeps every request: 20 sent back to back show as 20 in the text UI (tmux)
and in the raw output, against a real gateway process. The web UI's twin is in
``test_webui_follow_burst.py``."""

from __future__ import annotations

import json
import queue
import shlex
import shutil
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.conftest import ROOT
from tests.e2e.test_trace_cli_gateway import real_gateway  # noqa: F401  (fixture)
from tests.e2e.test_tui_app import Tmux

N = 20


class Lines:
    """The stdout lines of ``proc`` read by a thread: select() on a buffered pipe misses lines that
    Python already read ahead into its buffer."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self._queue: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [self._queue.put(line) for line in proc.stdout], daemon=True).start()

    def next(self, timeout: float = 0.2) -> str | None:
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None


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
        # the last row appears with its request's first event and shows its path from the next one
        tmux.wait_for(lambda s: f"in {N} requests" in s and f"/burst/{N - 1}" in s,
                      f"{N} requests in the status line, the last one's path shown", timeout=30)
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
    lines = Lines(proc)
    try:
        deadline = time.monotonic() + 15
        while lines.next() is None:  # until a first request is traced: the stream is open
            httpx.get(f"{real_gateway.url}/warmup", timeout=5)
            assert time.monotonic() < deadline, "the trace never started"
        _send_concurrently(real_gateway.port)
        paths: set[str] = set()
        deadline = time.monotonic() + 40
        while len(paths) < N and time.monotonic() < deadline:
            line = lines.next()
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


def test_follow_after_an_injected_request_traces_every_later_request(real_gateway):  # noqa: F811
    """``--follow --port``: the injected request on its own stream, then every request of any client."""
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "trace", "--local", "--proxy-admin-port",
                             str(real_gateway.admin_port), "--follow", "--raw", "--port", str(real_gateway.port),
                             "--", "http://api.example.com/injected"], cwd=ROOT, env=real_gateway.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    paths: list[str] = []
    lines = Lines(proc)

    def read_for(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            line = lines.next()
            if line is None:
                return
            message = json.loads(line)["message"]
            if message["type"] == "requestSnapshot" and message["stage"] == "initial request":
                paths.append(message["requestState"]["request"]["path"])

    try:
        deadline = time.monotonic() + 30
        n = 0
        while not any(p.startswith("/probe/") for p in paths):  # the follow stream is open once one shows
            httpx.get(f"{real_gateway.url}/probe/{n}", timeout=10)
            n += 1
            read_for(1)
            assert time.monotonic() < deadline, paths
        assert paths[0] == "/injected"
        _send_back_to_back(real_gateway.port, 5, "/after")
        deadline = time.monotonic() + 30
        while sum(p.startswith("/after/") for p in paths) < 5 and time.monotonic() < deadline:
            read_for(1)
        assert [p for p in paths if p.startswith("/after/")] == [f"/after/{i}" for i in range(5)]
    finally:
        proc.terminate()
        proc.wait(10)
