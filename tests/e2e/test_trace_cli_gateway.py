"""The trace command against a real gateway process: --raw in both modes, curl handling, the text UI."""

from __future__ import annotations

import base64
import json
import select
import shlex
import shutil
import subprocess
import sys
import threading
import time

import httpx
import pytest

from tests.admin_helpers import GatewayProcess
from tests.conftest import ROOT, free_port
from tests.e2e.test_trace import GET_SEQUENCE, shape
from tests.e2e.test_tui_app import Tmux, _details


class RealGateway(GatewayProcess):
    """A gateway process with one route to the echo backend, and the trace command run against it."""

    def trace(self, *args: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trioproxy", *args], cwd=ROOT, capture_output=True, text=True,
                              env={**self.env, **(extra_env or {})}, timeout=30)


@pytest.fixture
def real_gateway(tmp_path):
    gw = RealGateway(tmp_path)
    yield gw
    gw.close()


def events_of(result: subprocess.CompletedProcess) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def final_request(events: list[dict]) -> dict:
    return next(e["message"]["requestState"]["request"] for e in events
                if e["message"].get("stage") == "final request" and e["message"]["type"] == "requestSnapshot")


@pytest.mark.parametrize("use_curl", [
    pytest.param(True, marks=pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")),
    False,
])
def test_raw_inject_sends_the_curl_request_and_traces_exactly_it(real_gateway, use_curl):
    result = real_gateway.trace(
        "proxy", "trace", "--local", "--proxy-admin-port", str(real_gateway.admin_port), "--raw",
        "--port", str(real_gateway.port), "--", "http://api.example.com/v1/items?q=1",
        "-X", "PUT", "-H", "x-tenant: acme", "-d", "payload=1",
        extra_env={} if use_curl else {"TRIOPROXY_NO_CURL": "1"})
    events = events_of(result)
    types = shape(events)
    assert types[0] == ("requestStarted", None) and types[-1] == ("requestFinished", None)
    assert ("bodySnapshot", "final request") in types
    request = final_request(events)
    assert request["method"] == "PUT"
    assert request["host"] == "api.example.com"  # the URL's host, sent only as Host
    assert request["uri"] == "/v1/items?q=1"
    assert request["headers"]["x-tenant"] == "acme"
    body = next(e["message"]["body"] for e in events if e["message"].get("stage") == "final request"
                and e["message"]["type"] == "bodySnapshot")
    assert base64.b64decode(body) == b"payload=1"
    assert events[-1]["message"] == {"type": "requestFinished", "status": 200, "error": None}


def test_raw_watch_mode_traces_the_next_request_from_any_client(real_gateway):
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "trace", "--local", "--proxy-admin-port",
                             str(real_gateway.admin_port), "--raw"], cwd=ROOT, env=real_gateway.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 15
        # Until the watcher is registered requests go untraced; the first one after it is traced.
        while proc.poll() is None:
            httpx.get(f"http://127.0.0.1:{real_gateway.port}/watched", timeout=5)
            assert time.monotonic() < deadline, "the trace never ended"
            time.sleep(0.05)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert shape(events) == GET_SEQUENCE
    assert final_request(events)["path"] == "/watched"


def test_gateway_name_is_found_through_the_registry(real_gateway):
    result = real_gateway.trace("proxy", "trace", "gateway/default", "--raw", "--port", str(real_gateway.port),
                                "--", "http://svc.local/by-name")
    assert final_request(events_of(result))["path"] == "/by-name"
    unknown = real_gateway.trace("proxy", "trace", "gateway/nope", "--raw")
    assert unknown.returncode == 1
    assert "nope" in unknown.stderr and len(unknown.stderr.strip().splitlines()) == 1
    assert "Traceback" not in unknown.stderr


def _hammer(port: int, stop: threading.Event, seen: list[str]) -> None:
    """Another client keeping the gateway busy while a trace runs."""
    with httpx.Client(timeout=5) as client:
        n = 0
        while not stop.is_set():
            client.get(f"http://127.0.0.1:{port}/other/{n}")
            seen.append(f"/other/{n}")
            n += 1


def test_inject_on_a_busy_gateway_with_an_expression_traces_exactly_its_own_request(real_gateway):
    stop, seen = threading.Event(), []
    others = [threading.Thread(target=_hammer, args=(real_gateway.port, stop, seen)) for _ in range(3)]
    for thread in others:
        thread.start()
    try:
        result = real_gateway.trace(
            "trace", "--local", "--proxy-admin-port", str(real_gateway.admin_port), "--raw",
            "--expression", 'request.method == "POST"', "--port", str(real_gateway.port), "--",
            "http://api.example.com/mine", "-X", "POST", "-d", "x")
    finally:
        stop.set()
        for thread in others:
            thread.join(10)
    events = events_of(result)
    assert len(seen) > 10  # the gateway really was busy while the trace was open
    assert sum(e["message"]["type"] == "requestStarted" for e in events) == 1
    assert final_request(events)["path"] == "/mine" and final_request(events)["method"] == "POST"


def test_follow_traces_request_after_request_until_stopped(real_gateway):
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "trace", "--local", "--proxy-admin-port",
                             str(real_gateway.admin_port), "--follow"], cwd=ROOT, env=real_gateway.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    paths: list[str] = []
    try:
        deadline = time.monotonic() + 20
        n = 0
        while len(paths) < 3:
            httpx.get(f"http://127.0.0.1:{real_gateway.port}/follow/{n}", timeout=5)
            n += 1
            while True:  # read what has arrived; each finished request adds its path
                line = _readline_nowait(proc)
                if line is None:
                    break
                event = json.loads(line)
                if event["message"]["type"] == "requestSnapshot" and event["message"]["stage"] == "initial request":
                    paths.append(event["message"]["requestState"]["request"]["path"])
            assert time.monotonic() < deadline, paths
            time.sleep(0.05)
    finally:
        proc.terminate()
        proc.wait(10)
    assert len(set(paths)) == len(paths) >= 3 and all(p.startswith("/follow/") for p in paths)


def _readline_nowait(proc: subprocess.Popen) -> str | None:
    ready, _, _ = select.select([proc.stdout], [], [], 0.2)
    return proc.stdout.readline() if ready else None


def test_bad_expression_exit_code_against_a_real_gateway(real_gateway):
    result = real_gateway.trace("trace", "--local", "--proxy-admin-port", str(real_gateway.admin_port),
                                "--expression", "request.path ==", "--raw")
    assert result.returncode == 1
    assert result.stderr.startswith("trioproxy: error: ") and "invalid expression" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_unreachable_admin_is_one_line_error(real_gateway):
    result = real_gateway.trace("trace", "--local", "--proxy-admin-port", str(free_port()), "--raw")
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_text_ui_in_tmux_against_a_real_gateway(real_gateway):
    cmd = [sys.executable, "-m", "trioproxy", "proxy", "trace", "--local", "--proxy-admin-port",
           str(real_gateway.admin_port), "--port", str(real_gateway.port), "--",
           "http://api.example.com/tui", "-d", "hello tui"]
    script = (f"cd {shlex.quote(str(ROOT))} && TERM=xterm-256color {shlex.join(cmd)}; "
              "echo TRACE-EXIT=$?; exec sleep 60")
    env_prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in real_gateway.env.items()
                          if k in ("PYTHONPATH", "TRIOPROXY_RUNTIME_DIR"))
    tmux = Tmux(f"env {env_prefix} sh -c {shlex.quote(script)}")
    try:
        screen = tmux.wait_for(lambda s: "stream complete, press q to exit" in s, "the trace")
        for row in ("Request Start", "Snapshot", "Policies", "Route", "Backend Start", "Body Snapshot",
                    "Backend Result", "Request Done"):
            assert row in screen
        assert "request finished status=200" in screen
        assert f'selected "default/default/bind/{real_gateway.port}/listener0/default/echo"' in screen
        assert "Raw Event" in screen and "type: requestFinished" in screen

        tmux.keys("s")
        screen = tmux.wait_for(lambda s: "|  Snapshot  |" in s or " Snapshot " in s.splitlines()[0], "snapshot")
        tmux.wait_for(lambda s: "hello tui" in s, "decoded request body in the snapshot")
        tmux.keys("d")
        tmux.wait_for(lambda s: "Snapshot Diff" in s and "@@" in s, "diff")
        tmux.keys("e")
        tmux.wait_for(lambda s: "type: requestFinished" in s, "raw event")
        tmux.keys("Up")
        tmux.wait_for(lambda s: "stage: response" in "\n".join(_details(s)), "row above")
        before = _details(tmux.screen())
        tmux.keys("Tab", "Down", "Down")
        tmux.wait_for(lambda s: _details(s)[1:4] != before[1:4], "details pane scrolls after tab")
        tmux.keys("q")
        screen = tmux.wait_for(lambda s: "TRACE-EXIT=" in s, "exit")
        assert "TRACE-EXIT=0" in screen and "Traceback" not in screen
    finally:
        tmux.close()
