"""The demo's web UI Overview says what it serves: a built-in config, not "the current file"
(issue 27: the demo has no file, yet its Overview said it served one)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import httpx
import pytest

from tests.conftest import LOOPBACK_SERVERS, ROOT, free_port
from tests.e2e.test_webui_browser import CHROMIUM, CHROMIUM_ARGS

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed")


def _admin_url(proc: subprocess.Popen[str]) -> str:
    lines: list[str] = []
    while not any("readiness listening" in line for line in lines):
        line = proc.stderr.readline() if proc.stderr else ""
        assert line, "".join(lines)
        lines.append(line)
    found = re.search(r"admin listening on (http://127.0.0.1:\d+)", "".join(lines))
    assert found, "".join(lines)
    return found.group(1)


def test_demo_overview_says_its_config_is_built_in(tmp_path):
    from playwright.sync_api import sync_playwright

    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "demo", "--port", str(free_port())], cwd=ROOT,
                            text=True, stderr=subprocess.PIPE, env={**os.environ, **LOOPBACK_SERVERS})
    try:
        admin = _admin_url(proc)
        assert httpx.get(f"{admin}/api/statuses").json()["reload"]["file"] is None
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.goto(f"{admin}/ui#/overview")
            page.wait_for_selector("body[data-loaded='overview']")
            text = page.locator("[data-reload='ok']").inner_text()
            browser.close()
        assert text == "serving a built-in config (no file is watched)"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        finally:
            proc.kill()


def test_a_gateway_overview_names_its_file(tmp_path):
    from tests.admin_helpers import GatewayProcess
    from tests.conftest import LIMITED

    gw = GatewayProcess(tmp_path, config_text=LIMITED, max_tokens=5)
    try:
        reload = httpx.get(f"{gw.admin}/api/statuses").json()["reload"]
        assert reload["ok"] and reload["file"].endswith(".yaml")
    finally:
        gw.close()
