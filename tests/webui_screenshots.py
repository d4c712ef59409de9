"""Regenerate the README's web UI screenshots (docs/images/webui-*.png) with the real browser.

Run from the repo root: ``python -m tests.webui_screenshots``. It starts the same gateway as the
browser tests, sends some traffic (a few 429s included), and shoots each page at 1280×800.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import httpx
from playwright.sync_api import expect, sync_playwright

from tests.e2e.test_webui_browser import CHROMIUM, CHROMIUM_ARGS, ROOT, Page

from .admin_helpers import GatewayProcess

OUT = ROOT / "docs" / "images"
# The tests' gateway plus a listener-wide budget and a two-entry route limit, to show more rows.
CONFIG = """\
binds:
- port: {port}
  listeners:
  - name: main
    policies:
      localRateLimit: [{{maxTokens: 100, tokensPerFill: 100, fillInterval: 60s}}]
    routes:
    - name: limited
      matches: [{{path: {{pathPrefix: /limited}}}}]
      policies:
        localRateLimit:
        - {{maxTokens: 5, tokensPerFill: 5, fillInterval: 60s}}
        - {{maxTokens: 3, tokensPerFill: 1, fillInterval: 1s}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: api
      matches: [{{path: {{pathPrefix: /api}}}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: echo
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        gw = GatewayProcess(Path(tmp), config_text=CONFIG)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for path in ("/", "/api/users", "/api/users/7", "/static/app.js", "/missing-page"):
                httpx.get(gw.url + path)
            for _ in range(7):
                httpx.get(gw.url + "/limited/orders")
            page = Page(browser, gw)
            ui = page.page
            page.open("overview")
            ui.screenshot(path=str(OUT / "webui-overview.png"))
            page.nav("Trace", "trace")
            ui.locator("#trace-follow").check()
            ui.locator("#trace-expression").fill('request.path.startsWith("/api")')
            ui.wait_for_selector("#trace-expression-state[data-valid='true']")
            ui.get_by_role("button", name="Start trace").click()
            for n in (1, 2):
                ui.wait_for_selector("#trace-status[data-state='waiting']")
                httpx.post(f"{gw.url}/api/orders/{n}", json={"item": "book", "quantity": n},
                           headers={"authorization": "Bearer not-shown"})
                ui.wait_for_selector(f"#request-rows tr:nth-child({n})")
                expect(ui.locator(f"#request-rows tr:nth-child({n}) td:nth-child(4)")).to_have_text("200")
            ui.get_by_role("button", name="Stop").click()
            ui.locator("#event-rows tr[data-kind='Snapshot']", has_text="raw response").click()
            ui.keyboard.press("d")
            ui.screenshot(path=str(OUT / "webui-trace.png"))
            page.nav("Rate limits", "ratelimits")
            ui.screenshot(path=str(OUT / "webui-ratelimits.png"))
            page.nav("Traffic", "traffic")
            ui.screenshot(path=str(OUT / "webui-traffic.png"))
            page.close()
        finally:
            browser.close()
            gw.close()
    print(f"screenshots written to {OUT}")


if __name__ == "__main__":
    main()
