"""The Keys, Spend and Logs pages in real headless Chromium against a real gateway process on a real
SQLite store: a key created in the page shows its secret once; revoke and rotate; spend charts
from settled requests (written into the gateway's store by a KeyService in this process); the CSV
download; the request log's filters; user input shown as text, never run."""

from __future__ import annotations

import csv
import io
import os

import httpx
import pytest
import trio
from playwright.sync_api import expect

from tests.admin_helpers import GatewayProcess
from tests.e2e.test_webui_browser import CHROMIUM, CHROMIUM_ARGS, Page, browser  # noqa: F401  (the module's Chromium, a fixture)
from trioproxy.config.model import KeysSettings
from trioproxy.keys import KeyService

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed")

CONFIG = """\
config:
  store: keys.db
  keys: {{flushInterval: 50ms, refreshInterval: 100ms, requestLog: {{enabled: true}}}}
binds:
- port: {port}
  listeners:
  - routes:
    - name: echo
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""
XSS = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = GatewayProcess(tmp_path_factory.mktemp("webui-keys"), config_text=CONFIG)
    yield gateway
    gateway.close()


@pytest.fixture
def page(browser, gw):  # noqa: F811
    p = Page(browser, gw)
    p.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=gw.admin)
    yield p
    p.close()


def settle_spend(gw: GatewayProcess, secret: str, requests: list[tuple[str, float, int]]) -> None:
    """Settled requests of key ``secret`` (model, cost, status) written into the gateway's store."""
    async def main() -> None:
        service = KeyService.open(str(gw.config.parent / "keys.db"), KeysSettings(request_log_enabled=True))
        try:
            principal = await service.authenticate(secret)
            for model, cost, status in requests:
                reservation = await service.reserve(principal, tokens=100, cost=1.0)
                service.settle(reservation, tokens=30, cost=cost, model=model, provider="openai", status=status,
                               input_tokens=20, output_tokens=10, log={"latency_ms": 7.0})
        finally:
            await service.aclose()

    trio.run(main)


def test_create_a_key_see_the_secret_once_then_revoke_it(page, gw):
    page.open("keys")
    ui = page.page
    assert ui.locator("nav a").all_inner_texts() == ["Overview", "Requests", "Trace", "Rate limits", "Traffic", "Upstreams", "Keys",
                                                     "Spend", "Logs"]

    ui.get_by_role("button", name="New team").click()
    ui.locator("#team-name").fill("research")
    ui.get_by_label("cost per month").last.fill("500")
    ui.get_by_role("button", name="Create team").click()
    ui.wait_for_selector("#team-rows tr[data-name='research']")

    ui.get_by_role("button", name="New key").click()
    ui.locator("#key-name").fill(XSS)
    ui.locator("#key-team").select_option(label="research")
    ui.locator("#key-models").fill("gpt-4o-mini, openai/*")
    ui.locator("#key-metadata").fill("owner=alice, note=<b>bold</b>")
    ui.locator("table[data-limits='key']").get_by_label("tokens per day").fill("100000")
    ui.locator("table[data-limits='key']").get_by_label("requests per minute").fill("1.5")
    ui.get_by_role("button", name="Create key").click()
    ui.wait_for_selector("#key-form-error:has-text('limits.requests.minute: expected a whole number')")
    assert httpx.get(f"{gw.admin}/api/keys").json() == {"keys": []}  # nothing was sent
    ui.locator("table[data-limits='key']").get_by_label("requests per minute").fill("60")
    ui.get_by_role("button", name="Create key").click()

    ui.wait_for_selector("#key-secret:not([hidden])")
    secret = ui.locator("#key-secret-value").input_value()
    assert secret.startswith("sk-tp-") and len(secret) == 49
    ui.get_by_role("button", name="Copy").click()
    ui.wait_for_selector("#key-secret-state:has-text('copied')")
    assert ui.evaluate("navigator.clipboard.readText()") == secret
    page.shot("keys-secret")

    keys = httpx.get(f"{gw.admin}/api/keys").json()["keys"]
    assert [k["name"] for k in keys] == [XSS] and secret not in str(keys)
    key = keys[0]
    row = ui.locator(f"#key-rows tr[data-key='{key['id']}']")
    assert row.locator(".key-name").inner_text() == XSS  # shown as text
    assert row.locator("img").count() == 0 and ui.evaluate("window.__xss") is None
    assert "note=<b>bold</b>" in row.inner_text() and row.locator("b").count() == 0
    assert row.locator("[data-status]").get_attribute("data-status") == "active"
    assert row.locator("td").nth(2).inner_text() == "research"
    usage = row.locator("[data-usage='tokens/day']")
    assert "0 / 100k" in usage.inner_text() and usage.locator(".meter").count() == 1

    ui.get_by_role("button", name="Done").click()
    assert ui.locator("#key-secret").is_hidden() and ui.locator("#key-secret-value").input_value() == ""
    assert secret not in ui.content()
    ui.reload()
    ui.wait_for_selector("body[data-loaded='keys']")
    ui.wait_for_selector(f"#key-rows tr[data-key='{key['id']}']")
    assert secret not in ui.content()  # never fetched again

    # Usage from a settled request shows in the bar.
    settle_spend(gw, secret, [("gpt-4o-mini", 0.01, 200)])
    ui.reload()
    ui.wait_for_selector(f"#key-rows tr[data-key='{key['id']}'] [data-usage='tokens/day'][data-used='30']")

    row.get_by_role("button", name="Revoke").click()
    ui.wait_for_selector("#confirm-dialog[open]")
    assert "cannot be undone" in ui.locator("#confirm-text").inner_text()
    ui.locator("#confirm-ok").click()
    ui.wait_for_selector(f"#key-rows tr[data-key='{key['id']}'] [data-status='revoked']")
    assert row.get_by_role("button", name="Revoke").is_disabled()
    assert httpx.get(f"{gw.admin}/api/keys/{key['id']}").json()["status"] == "revoked"
    page.shot("keys-revoked")

    ui.locator("#keys-show-revoked").uncheck()
    ui.wait_for_selector(f"#key-rows tr[data-key='{key['id']}']", state="detached")


def test_rotate_shows_the_new_secret_once(page, gw):
    created = httpx.post(f"{gw.admin}/api/keys", json={"name": "to-rotate"}).json()
    page.open("keys")
    ui = page.page
    row = ui.locator(f"#key-rows tr[data-key='{created['id']}']")
    row.get_by_role("button", name="Rotate").click()
    ui.wait_for_selector("#confirm-dialog[open]")
    ui.locator("#confirm-grace").fill("2h")
    ui.locator("#confirm-ok").click()
    ui.wait_for_selector("#key-secret:not([hidden])")
    rotated = ui.locator("#key-secret-value").input_value()
    assert rotated.startswith("sk-tp-") and rotated != created["key"]
    ui.wait_for_selector(f"#key-rows tr[data-key='{created['id']}'] :text('old secret valid until')")
    shown = httpx.get(f"{gw.admin}/api/keys/{created['id']}").json()
    assert shown["prefix"] == rotated[:10] and shown["previousValidUntil"]

    # Cancel leaves the key alone.
    ui.get_by_role("button", name="Done").click()
    row.get_by_role("button", name="Rotate").click()
    ui.get_by_role("button", name="Cancel").click()
    assert ui.locator("#key-secret").is_hidden()
    assert httpx.get(f"{gw.admin}/api/keys/{created['id']}").json()["prefix"] == rotated[:10]


def test_spend_charts_table_and_csv(page, gw, tmp_path):
    formula = httpx.post(f"{gw.admin}/api/keys", json={"name": "=HYPERLINK(\"http://evil.example\")"}).json()
    other = httpx.post(f"{gw.admin}/api/keys", json={"name": "bob"}).json()
    settle_spend(gw, formula["key"], [("gpt-4o", 2.0, 200), ("claude-3-5-sonnet", 1.0, 200)])
    settle_spend(gw, other["key"], [("gpt-4o", 0.5, 429)])

    page.open("spend")
    ui = page.page
    ui.wait_for_selector("#chart-spend-days rect[data-model='claude-3-5-sonnet']")
    day_rects = ui.locator("#chart-spend-days rect[data-model]")
    assert {"claude-3-5-sonnet", "gpt-4o"} <= set(day_rects.evaluate_all("rs => rs.map(r => r.dataset.model)"))
    heights = dict(day_rects.evaluate_all("rs => rs.map(r => [r.dataset.model, +r.getAttribute('height')])"))
    assert heights["gpt-4o"] > heights["claude-3-5-sonnet"] > 0  # stacked by cost
    legend = ui.locator("#chart-spend-days .legend").inner_text()
    assert "gpt-4o" in legend and "claude-3-5-sonnet" in legend
    models = ui.locator("#chart-spend-models")
    assert models.locator("rect").count() >= 2 and "$2.50" in models.inner_text() and "$1.00" in models.inner_text()

    row = ui.locator(f"#spend-rows tr[data-group='{formula['id']}']")
    assert row.locator("td").first.inner_text().startswith("=HYPERLINK")
    ui.locator("#spend-group").select_option("model")
    ui.wait_for_selector("#spend-rows tr[data-group='claude-3-5-sonnet']")
    page.shot("spend")

    ui.locator("#spend-group").select_option("key")
    ui.wait_for_selector(f"#spend-rows tr[data-group='{formula['id']}']")
    with ui.expect_download() as download:
        ui.get_by_role("link", name="Download CSV").click()
    saved = tmp_path / "spend.csv"
    download.value.save_as(saved)
    cells = list(csv.reader(io.StringIO(saved.read_text())))
    assert cells[0][:2] == ["key", "name"]
    names = {r[0]: r[1] for r in cells[1:]}
    assert names[formula["id"]] == "'=HYPERLINK(\"http://evil.example\")" and names[other["id"]] == "bob"

    # A period without spend: the charts say so.
    ui.locator("#spend-from").fill("2000-01-01")
    ui.locator("#spend-to").fill("2000-01-31")
    ui.locator("#spend-to").dispatch_event("change")
    ui.wait_for_selector("#chart-spend-days:has-text('no spend in this period')")


def test_logs_page_filters(page, gw):
    created = httpx.post(f"{gw.admin}/api/keys", json={"name": "logged"}).json()
    settle_spend(gw, created["key"], [("gpt-4o", 0.1, 200), ("gpt-4o-mini", 0.2, 429), ("gpt-4o", 0.3, 503)])
    page.open("logs")
    ui = page.page
    ui.locator("#logs-key").select_option(label="logged")
    rows = ui.locator("#log-rows tr[data-status]")
    expect(rows).to_have_count(3)
    assert ui.locator("#log-rows tr").first.locator("td").nth(1).inner_text() == "logged"
    ui.locator("#logs-status").fill("429")
    expect(rows).to_have_count(1)
    assert ui.locator("#log-rows tr[data-status='429'] td").nth(3).inner_text() == "gpt-4o-mini"
    ui.locator("#logs-status").fill("5xx")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-status", "503")
    page.shot("logs")
    ui.locator("#logs-status").fill("teapot")
    ui.wait_for_selector("#error-banner:has-text('status: expected a status')")
    ui.locator("#logs-status").fill("")
    expect(rows).to_have_count(3)
    page.errors[:] = [e for e in page.errors if "status of 400" not in e]  # the refused filter, on purpose


def test_narrow_window(page, gw):
    ui = page.page
    ui.set_viewport_size({"width": 420, "height": 800})
    for slug in ("keys", "spend", "logs"):
        page.open(slug)
        assert ui.evaluate("document.documentElement.scrollWidth") <= 420, slug


def test_off_loopback_the_pages_send_the_admin_token(browser, tmp_path):  # noqa: F811
    gw = GatewayProcess(tmp_path, admin_host="0.0.0.0", token="t0ken-for-keys", config_text=CONFIG)
    try:
        page = Page(browser, gw)
        ui = page.page
        ui.goto(f"{gw.admin}/ui#/keys")
        ui.locator("#token-dialog").wait_for(state="visible")
        ui.locator("#token-input").fill("t0ken-for-keys")
        ui.get_by_role("button", name="Use token").click()
        ui.wait_for_selector("body[data-loaded='keys']")
        ui.get_by_role("button", name="New key").click()
        ui.locator("#key-name").fill("through-the-token")
        ui.get_by_role("button", name="Create key").click()
        ui.wait_for_selector("#key-secret:not([hidden])")
        auth = {"authorization": "Bearer t0ken-for-keys"}
        assert [k["name"] for k in httpx.get(f"{gw.admin}/api/keys", headers=auth).json()["keys"]] == ["through-the-token"]
        # The CSV is fetched with the token (a plain link could not send it) and saved.
        page.open("spend")
        with ui.expect_download() as download:
            ui.get_by_role("link", name="Download CSV").click()
        saved = tmp_path / "spend.csv"
        download.value.save_as(saved)
        assert saved.read_text().startswith("key,name,requests,")
        page.close()
    finally:
        gw.close()
