"""Routine lifecycle lines are ``info`` and OpenTelemetry SDK errors are gateway log lines.

"config reloaded" and "drained" were logged at ``warn`` (an alert for nothing wrong); the OTLP
exporter's failures were printed as the SDK's raw text, tracebacks included, between JSON lines.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import ROOT, free_port
from trioproxy.telemetry.access_log import configure_logging


@pytest.fixture
def restore_logging():
    loggers = [logging.getLogger(n) for n in ("trioproxy", "opentelemetry")]
    saved = [(lg, list(lg.handlers), lg.level, lg.propagate) for lg in loggers]
    yield
    for logger, handlers, level, propagate in saved:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        for handler in handlers:
            logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def test_otlp_exporter_errors_are_one_json_line_each(restore_logging):
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream, env={})
    exporter = logging.getLogger("opentelemetry.exporter.otlp.proto.grpc.exporter")
    exporter.warning("Transient error %s encountered while exporting traces to %s, retrying in %.2fs.",
                     "StatusCode.UNAVAILABLE", "127.0.0.1:4317", 0.84)
    try:
        raise ConnectionRefusedError(111, "Connection refused")
    except ConnectionRefusedError:
        logging.getLogger("opentelemetry.sdk.trace.export").exception("Exception while exporting Span batch.")
    lines = stream.getvalue().splitlines()
    entries = [json.loads(line) for line in lines]
    assert [(e["level"], e["scope"], e["message"]) for e in entries] == [
        ("warn", "trioproxy.telemetry.otel", "otlp exporter: Transient error StatusCode.UNAVAILABLE encountered while "
                                   "exporting traces to 127.0.0.1:4317, retrying in 0.84s."),
        ("error", "trioproxy.telemetry.otel", "otlp exporter: Exception while exporting Span batch.: "
                                    "[Errno 111] Connection refused"),
    ]
    assert "exception" not in entries[1]


def _wait_listening(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)


def test_reload_and_drain_are_info(tmp_path):
    port = free_port()
    path = tmp_path / "gw.yaml"
    route = "binds:\n- port: {port}\n  listeners:\n  - routes:\n    - policies: {{directResponse: {{status: 200, body: {body}}}}}\n"
    path.write_text(route.format(port=port, body="one"))
    env = {**os.environ, "ADMIN_ADDR": "off", "STATS_ADDR": "off", "READINESS_ADDR": "off", "LOG_FORMAT": "json"}
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "--config", str(path)], cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        _wait_listening(port, proc)
        path.write_text(route.format(port=port, body="two"))  # applied once it has settled (settle.py)
        deadline = time.monotonic() + 30
        while httpx.get(f"http://127.0.0.1:{port}/", timeout=10).text == "one":
            assert time.monotonic() < deadline, "the changed config was never applied"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    entries = [json.loads(line) for line in proc.stderr.read().splitlines() if line.startswith("{")]
    levels = {e["message"].split(" from ")[0]: e["level"] for e in entries if e["message"] != "request"}
    assert entries and all(e["level"] == "info" for e in entries), entries
    assert levels == {"config reloaded": "info", "draining 0 requests": "info", "drained": "info"}, entries
