"""Regenerate the README's web UI screenshots (docs/images/webui-*.png) with the real browser.

Run from the repo root: ``python -m tests.webui_screenshots``. It starts the same gateway as the
browser tests, sends some traffic (a few 429s included), and shoots each page at 1280×800; then a
gateway with runtime keys for the Keys and Spend pages (``keys_pages``, which runs on its own too).
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
    keys_pages()
    llm_pages()
    print(f"screenshots written to {OUT}")


KEYS_CONFIG = """\
config:
  store: keys.db
  keys: {{flushInterval: 50ms, requestLog: {{enabled: true}}}}
binds:
- port: {port}
  listeners:
  - routes:
    - policies: {{apiKey: {{runtimeKeys: true, mode: strict}}}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


def keys_pages() -> None:
    """The Keys and Spend pages (docs/images/webui-keys.png, webui-spend.png): two teams' keys and
    two weeks of spend on three models, settled into the gateway's store by a KeyService here."""
    import random
    import time

    import trio

    from trioproxy.config.model import KeysSettings
    from trioproxy.keys import KeyService

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        gw = GatewayProcess(Path(tmp), config_text=KEYS_CONFIG)
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            admin = httpx.Client(base_url=gw.admin)
            research = admin.post("/api/teams", json={"name": "research", "limits": {"cost": {"month": 500}}}).json()
            support = admin.post("/api/teams", json={"name": "support", "limits": {"tokens": {"day": 2_000_000}}}).json()
            keys = [admin.post("/api/keys", json=body).json() for body in (
                {"name": "alice-laptop", "team": research["id"], "models": ["gpt-4o", "anthropic/*"],
                 "limits": {"tokens": {"day": 200_000}, "cost": {"month": 50}}, "metadata": {"owner": "alice"}},
                {"name": "support-bot", "team": support["id"], "models": ["gpt-4o-mini"],
                 "limits": {"requests": {"minute": 60}, "tokens": {"day": 500_000}}, "metadata": {"owner": "ops"}},
                {"name": "ci-evals", "limits": {"cost": {"total": 20}}, "expiresAt": "2027-01-31T00:00:00Z"})]
            admin.delete(f"/api/keys/{admin.post('/api/keys', json={'name': 'old-intern'}).json()['id']}")
            rng = random.Random(30)
            now = time.time()

            async def settle() -> None:
                for day in range(13, -1, -1):
                    service = KeyService.open(str(Path(tmp) / "keys.db"), KeysSettings(request_log_enabled=True),
                                              clock=lambda day=day: now - day * 86400)
                    try:
                        for key, model, price in ((keys[0], "gpt-4o", 0.012), (keys[0], "claude-3-5-sonnet", 0.018),
                                                  (keys[1], "gpt-4o-mini", 0.0009), (keys[2], "gpt-4o", 0.012)):
                            principal = await service.authenticate(key["key"])
                            for _ in range(rng.randrange(1, 6)):
                                tokens = rng.randrange(800, 4000)
                                reservation = await service.reserve(principal, tokens=tokens, cost=None)
                                service.settle(reservation, tokens=tokens, cost=price * tokens / 1000 * rng.uniform(3, 9),
                                               model=model, provider=model.split("-")[0], status=200,
                                               input_tokens=tokens * 3 // 4, output_tokens=tokens // 4,
                                               log={"latency_ms": rng.uniform(300, 2500)})
                    finally:
                        await service.aclose()

            trio.run(settle)
            page = Page(browser, gw)
            ui = page.page
            page.open("keys")
            ui.screenshot(path=str(OUT / "webui-keys.png"))
            page.open("spend")
            ui.locator("#spend-from").fill(time.strftime("%Y-%m-%d", time.gmtime(now - 13 * 86400)))
            ui.locator("#spend-from").dispatch_event("change")
            ui.locator("#spend-group").select_option("model")
            ui.wait_for_selector("#spend-rows tr[data-group='claude-3-5-sonnet']")
            ui.screenshot(path=str(OUT / "webui-spend.png"))
            page.close()
        finally:
            browser.close()
            gw.close()


def llm_pages() -> None:
    """The Requests page and a streamed answer reassembled in the trace's Bodies view
    (docs/images/webui-requests.png, webui-trace-stream.png), against the mock LLM providers:
    some twenty seconds of mixed traffic first, so the charts have a few buckets."""
    import itertools
    import random
    import time

    from .webui_llm_helpers import LlmGateway

    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        gw = LlmGateway(Path(tmp))
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            rng = random.Random(34)
            calls = [(gw.chat_stream, "gpt-4o-mini"), (gw.chat_stream, "gpt-4o"), (gw.messages_stream, "claude-sonnet-4-5"),
                     (gw.gemini_stream, "gemini-2.5-flash")]
            words = "the quick brown fox jumps over a lazy dog while the gateway counts every token".split()
            end = time.monotonic() + 20
            for n in itertools.count():
                if time.monotonic() > end:
                    break
                call, model = rng.choice(calls)
                call(" ".join(rng.sample(words, rng.randrange(3, 12))), model=model)
                httpx.get(gw.url + rng.choice(["/api/users", "/api/orders/7", "/echo/health"]))
                if n % 3 == 0:
                    httpx.get(gw.url + "/limited/report")  # three per minute pass
                if rng.random() < 0.1:
                    httpx.get(gw.url + "/missing-page")
                time.sleep(rng.uniform(0.05, 0.5))
            page = Page(browser, gw, height=900)
            ui = page.page
            page.open("requests")
            ui.wait_for_selector("#chart-history-tokens svg")
            ui.wait_for_selector("#history-rows tr[data-status='429']")
            ui.screenshot(path=str(OUT / "webui-requests.png"))
            page.nav("Trace", "trace")
            ui.get_by_role("button", name="Start trace").click()
            ui.wait_for_selector("#trace-status[data-state='waiting']")
            gw.messages_stream("Summarise the gateway's request history in one sentence, please")
            ui.wait_for_selector("#event-rows tr[data-kind='Request Done']")
            ui.get_by_role("button", name="Bodies").click()
            ui.locator("#trace-search").fill("history")
            ui.wait_for_selector("#bodies .stream pre.generated")
            ui.screenshot(path=str(OUT / "webui-trace-stream.png"))
            page.close()
        finally:
            browser.close()
            gw.close()


if __name__ == "__main__":
    import sys

    {"llm": llm_pages, "keys": keys_pages}.get(sys.argv[1] if len(sys.argv) > 1 else "", main)()
