"""``trioproxy requests``: the request history of a real gateway process, as a table, as JSON lines,
followed, and its one-line errors."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time

import httpx
import pytest

from tests.admin_helpers import GatewayProcess
from tests.conftest import ROOT, free_port, run_cli

CONFIG = """\
binds:
- port: {port}
  listeners:
  - routes:
    - name: echo
      matches: [{{path: {{pathPrefix: /echo}}}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


@pytest.fixture
def gw(tmp_path):
    gateway = GatewayProcess(tmp_path, config_text=CONFIG)
    try:
        yield gateway
    finally:
        gateway.close()


def local(gw: GatewayProcess) -> list[str]:
    return ["--local", "--proxy-admin-port", str(gw.admin_port)]


def wait_for(gw: GatewayProcess, count: int) -> None:
    """A request is recorded just after its answer: wait until the history holds ``count``."""
    deadline = time.monotonic() + 10
    while len(httpx.get(f"{gw.admin}/api/requests").json()) < count:
        assert time.monotonic() < deadline, "the history never filled"
        time.sleep(0.02)


def test_table_oldest_first_with_reasons(gw):
    httpx.get(f"{gw.url}/echo/one")
    httpx.post(f"{gw.url}/echo/two", content=b"x")
    httpx.get(f"{gw.url}/missing")
    wait_for(gw, 3)
    result = run_cli("requests", *local(gw))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["TIME", "METHOD", "STATUS", "DURATION", "PATH", "ROUTE", "BACKEND", "SUBJECT",
                                "TOKENS", "REASON"]
    assert [line.split()[1:3] for line in lines[1:]] == [["GET", "200"], ["POST", "200"], ["GET", "404"]]
    assert "/echo/one" in lines[1] and " echo " in lines[1] and lines[1].split()[3].endswith("ms")
    assert lines[3].endswith("route not found") and "/missing" in lines[3]


def test_raw_with_expression_and_limit(gw):
    for i in range(4):
        httpx.get(f"{gw.url}/echo/{i}")
    httpx.get(f"{gw.url}/missing")
    wait_for(gw, 5)
    result = run_cli("requests", *local(gw), "--raw", 'request.path.startsWith("/echo")', "-n", "2")
    assert result.returncode == 0, result.stderr
    entries = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["path"] for e in entries] == ["/echo/2", "/echo/3"]
    assert entries[0]["status"] == 200 and entries[0]["method"] == "GET" and "durationMs" in entries[0]
    missing = run_cli("requests", *local(gw), "--raw", "response.code == 404")
    assert [json.loads(line)["reason"] for line in missing.stdout.splitlines()] == ["route not found"]


def _read_line(proc: subprocess.Popen, timeout: float = 10) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            raise AssertionError("no line within the timeout")
    return proc.stdout.readline()


@pytest.mark.parametrize("raw", [True, False], ids=["raw", "table"])
def test_follow_prints_new_requests(gw, raw):
    httpx.get(f"{gw.url}/echo/before")
    wait_for(gw, 1)
    argv = [sys.executable, "-m", "trioproxy", "requests", *local(gw), "--follow", "-n", "1",
            *(["--raw"] if raw else [])]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        if not raw:
            assert _read_line(proc).startswith("TIME")
        first = _read_line(proc)
        assert "/echo/before" in first
        httpx.get(f"{gw.url}/echo/after")
        second = _read_line(proc)
        if raw:
            assert json.loads(second)["path"] == "/echo/after"
        else:
            assert "/echo/after" in second and " 200 " in second
    finally:
        proc.terminate()
        proc.communicate(timeout=10)


def test_bad_expression_is_one_line(gw):
    result = run_cli("requests", *local(gw), "request.method ==")
    assert result.returncode == 1
    assert result.stderr.startswith(f"trioproxy: error: admin server localhost:{gw.admin_port} answered 400: "
                                    "invalid expression: ")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_bad_limit_and_unreachable_admin():
    result = run_cli("requests", "--local", "--proxy-admin-port", "1", "-n", "0")
    assert result.returncode == 2 and result.stderr.startswith("trioproxy: error: --limit")
    port = free_port()
    result = run_cli("requests", "--local", "--proxy-admin-port", str(port))
    assert result.returncode == 1
    assert result.stderr.startswith(f"trioproxy: error: cannot reach the admin server at localhost:{port}")
    result = run_cli("requests", "--local", "gateway/x")
    assert result.returncode == 2 and "--local and gateway/x" in result.stderr
