"""``GET /api/upstreams`` and the web UI's Upstreams page against a real gateway process whose route
has a dead backend: outlier detection ejects it after its first refused connection, a retry takes
the live one, and the page (headless Chromium) shows it ejected."""

from __future__ import annotations

import os
import shutil

import httpx
import pytest

from tests.admin_helpers import GatewayProcess
from tests.conftest import free_port

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: echo
      policies:
        retry: {{attempts: 1, codes: [503]}}
        health: {{eviction: {{consecutiveFailures: 1, duration: 10m}}}}
      backends: [{{host: "127.0.0.1:{backend}"}}, {{host: "127.0.0.1:{dead}"}}]
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    dead = free_port()  # nothing listens there: connections are refused
    gw = GatewayProcess(tmp_path_factory.mktemp("upstreams"), config_text=CONFIG, dead=dead)
    gw.dead = dead  # type: ignore[attr-defined]
    yield gw
    gw.close()


def test_api_upstreams_shows_the_dead_backend_ejected_and_every_request_served(gateway):
    statuses = [httpx.get(f"{gateway.url}/x").status_code for _ in range(20)]
    assert statuses == [200] * 20  # a refused connect is retried on the other backend
    rows = {u["address"]: u for u in httpx.get(f"{gateway.admin}/api/upstreams").json()["upstreams"]}
    dead = rows[f"127.0.0.1:{gateway.dead}"]
    live = rows[f"127.0.0.1:{gateway.backend_port}"]
    assert (dead["state"], dead["ejections"], dead["reason"]) == ("ejected", 1, "consecutiveFailures")
    assert 500 < dead["ejectedFor"] <= 600
    assert live["state"] == "healthy" and live["outlierDetection"] is True


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed")
def test_upstreams_page_shows_the_ejected_target(gateway):
    from playwright.sync_api import sync_playwright

    httpx.get(f"{gateway.url}/x")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.goto(f"{gateway.admin}/ui#/upstreams")
            page.wait_for_selector("body[data-loaded='upstreams']")
            row = page.locator(f"tr[data-target='127.0.0.1:{gateway.dead}']")
            row.wait_for()
            assert "ejected" in row.locator("td.state").inner_text()
            assert "consecutiveFailures" in row.inner_text()
            live = page.locator(f"tr[data-target='127.0.0.1:{gateway.backend_port}'] td.state")
            assert live.inner_text() == "healthy"
            assert errors == []
        finally:
            browser.close()
