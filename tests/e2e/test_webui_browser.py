"""The admin web UI in real headless Chromium (Debian ``chromium``, driven by playwright-python).

One gateway process (and echo backend) and one browser serve the whole module; each test opens
its own page and fails on any JavaScript console error or uncaught exception. Screenshots go to
``test-artifacts/webui/`` (git-ignored).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import expect

from tests.admin_helpers import GatewayProcess
from tests.conftest import LIMITED, ROOT
from trioproxy.tui.state import TraceView

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "webui"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed")

@pytest.fixture(scope="module")
def ui_gateway(tmp_path_factory):
    gw = GatewayProcess(tmp_path_factory.mktemp("webui"), config_text=LIMITED, max_tokens=5)
    yield gw
    gw.close()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


class Page:
    """A playwright page that records console errors and page errors."""

    def __init__(self, browser, gw: GatewayProcess, width: int = 1280, height: int = 800) -> None:
        self.context = browser.new_context(viewport={"width": width, "height": height}, accept_downloads=True)
        self.page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.gw = gw

    def open(self, page: str) -> None:
        self.page.goto(f"{self.gw.admin}/ui#/{page}")
        self.page.wait_for_selector(f"body[data-loaded='{page}']")

    def nav(self, name: str, page: str) -> None:
        self.page.get_by_role("link", name=name, exact=True).click()
        self.page.wait_for_selector(f"body[data-loaded='{page}']")

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def close(self) -> None:
        self.context.close()
        assert self.errors == [], self.errors


@pytest.fixture
def page(browser, ui_gateway):
    p = Page(browser, ui_gateway)
    yield p
    p.close()


def test_each_page_loads_and_shows_the_running_config(page, ui_gateway):
    httpx.get(f"{ui_gateway.url}/hello")
    httpx.get(f"{ui_gateway.url}/limited/a")
    page.open("overview")
    ui = page.page
    assert ui.locator("nav a").all_inner_texts() == ["Overview", "Requests", "Trace", "Rate limits", "Traffic", "Upstreams",
                                                     "Keys", "Spend", "Logs"]
    bind = ui.locator(f"[data-bind='{ui_gateway.port}']")
    assert f"Bind {ui_gateway.port}" in bind.inner_text()
    assert "pathPrefix /limited" in bind.locator("tr[data-route='limited']").inner_text()
    assert "localRateLimit" in bind.locator("tr[data-route='limited']").inner_text()
    assert f"127.0.0.1:{ui_gateway.backend_port}" in bind.locator("tr[data-route='echo']").inner_text()
    assert ui.locator("[data-statuses='none']").inner_text() == "none"
    assert ui.locator("[data-reload='ok']").is_visible()
    assert f"127.0.0.1:{ui_gateway.admin_port}" in ui.locator("#servers").inner_text()
    page.shot("overview")

    page.nav("Trace", "trace")
    assert ui.get_by_role("button", name="Start trace").is_visible()
    page.shot("trace-empty")

    page.nav("Rate limits", "ratelimits")
    row = ui.locator("tr[data-limiter$='/limited']")
    assert "route limited" in row.inner_text() and "+5 every 1m" in row.inner_text()
    page.shot("ratelimits")

    page.nav("Traffic", "traffic")
    ui.wait_for_selector("#traffic-rows tr[data-route='echo'] td[data-count]")
    assert int(ui.locator("#traffic-rows tr[data-route='echo'] td[data-count]").inner_text()) >= 1
    assert ui.locator("#chart-requests svg rect").count() >= 2
    assert ui.locator("#chart-latency svg rect").count() >= 6
    page.shot("traffic")

    # A narrow window: the same pages, nothing wider than the screen but the scrolling tables.
    ui.set_viewport_size({"width": 420, "height": 800})
    for name, slug in (("Overview", "overview"), ("Trace", "trace"), ("Rate limits", "ratelimits"), ("Traffic", "traffic")):
        page.nav(name, slug)
        assert ui.evaluate("document.documentElement.scrollWidth") <= 420
        page.shot(f"{slug}-narrow")


def test_live_trace_shows_a_request_and_its_snapshot_diff(page, ui_gateway, tmp_path):
    page.open("trace")
    ui = page.page
    expression = ui.locator("#trace-expression")
    expression.fill("request.path ==")
    ui.wait_for_selector("#trace-expression-state[data-valid='false']")
    assert "invalid expression" in ui.locator("#trace-expression-state").inner_text()
    expression.fill('request.path == "/traced"')
    ui.wait_for_selector("#trace-expression-state[data-valid='true']")

    ui.get_by_role("button", name="Start trace").click()
    ui.wait_for_selector("#trace-status[data-state='waiting']")
    httpx.get(f"{ui_gateway.url}/untraced")  # does not match the expression
    httpx.post(f"{ui_gateway.url}/traced", content=b"hello body", headers={"authorization": "Bearer secret-value"})
    ui.wait_for_selector("#event-rows tr[data-kind='Request Done']")
    kinds = ui.locator("#event-rows tr").evaluate_all("rows => rows.map(r => r.dataset.kind)")
    assert kinds[0] == "Request Start" and kinds[-1] == "Request Done"
    for kind in ("Snapshot", "Route", "Policies", "Backend Start", "Backend Result", "Body Snapshot"):
        assert kind in kinds
    assert "/echo\" (" in ui.locator("#event-rows").inner_text()  # selected route

    # Keyboard as in the text UI: Home, arrows, e/s/d.
    ui.locator("body").click(position={"x": 5, "y": 5})
    ui.keyboard.press("Home")
    assert ui.locator("#event-rows tr.selected").get_attribute("data-index") == "0"
    ui.keyboard.press("ArrowDown")
    assert ui.locator("#event-rows tr.selected").get_attribute("data-index") == "1"
    ui.keyboard.press("s")
    assert ui.locator("#details").get_attribute("data-mode") == "snapshot"
    assert "/traced" in ui.locator("#details").inner_text()
    assert "secret-value" not in ui.locator("#details").inner_text()

    # The first response snapshot against the final request: the response appears.
    response_row = ui.locator("#event-rows tr[data-kind='Snapshot']", has_text="raw response")
    response_row.click()
    ui.keyboard.press("d")
    details = ui.locator("#details")
    assert details.get_attribute("data-mode") == "diff"
    assert "→" in details.locator(".diff-caption").inner_text()
    assert details.locator(".diff-add").count() > 0
    assert any(line.startswith("+") and "code: 200" in line for line in details.locator(".diff-add").all_inner_texts())
    page.shot("trace-diff")
    ui.keyboard.press("e")
    assert "responseSnapshot" in ui.locator("#details").inner_text()

    # The same rows and details as the text UI computes from the same events (tui/state.py).
    view = TraceView()
    events = ui.evaluate("trace.view.allEvents()")
    for event in events:
        view.add_event(event)
    assert [r.kind for r in view.trace.rows] == kinds
    assert [r.summary for r in view.trace.rows] == ui.locator("#event-rows td:nth-child(3)").all_inner_texts()
    for index in (1, len(kinds) - 3, len(kinds) - 2):
        ui.locator(f"#event-rows tr[data-index='{index}']").click()
        view.selected_row = index
        for key, mode in (("e", "event"), ("s", "snapshot"), ("d", "diff")):
            for fmt in ("yaml", "json"):
                if ui.evaluate("trace.view.fmt") != fmt:
                    ui.keyboard.press("f")
                ui.keyboard.press(key)
                view.set_mode(mode)
                view.fmt = fmt
                shown = ui.locator("#details .line").all_inner_texts()
                expected = [line for _, line in view.details_lines()]
                # under a body snapshot's raw event the text UI also prints its body decoded; the web UI
                # shows bodies in its Bodies view (b), so the raw event is what both must agree on
                cut = next((i for i, line in enumerate(expected) if line.startswith("# body, decoded (")), None)
                if mode == "event" and cut is not None:
                    expected = expected[:cut]
                assert [line.rstrip("\n") for line in shown] == expected, (index, mode, fmt)

    # Download as JSON lines, and open it with `trioproxy trace --file --raw`.
    with ui.expect_download() as download:
        ui.get_by_role("button", name="Download").click()
    saved = tmp_path / "trace.jsonl"
    download.value.save_as(saved)
    shown = subprocess.run([sys.executable, "-m", "trioproxy", "trace", "--file", str(saved), "--raw"], cwd=ROOT,
                           capture_output=True, text=True, timeout=30, check=False)
    assert shown.returncode == 0, shown.stderr
    events = [json.loads(line) for line in shown.stdout.splitlines()]
    assert events[0]["message"]["type"] == "requestStarted"
    assert len(events) == len(kinds)


def test_follow_mode_lists_request_after_request(page, ui_gateway):
    page.open("trace")
    ui = page.page
    ui.locator("#trace-follow").check()
    ui.get_by_role("button", name="Start trace").click()
    for n in (1, 2):
        ui.wait_for_selector("#trace-status[data-state='waiting']")
        httpx.get(f"{ui_gateway.url}/follow/{n}")
        ui.wait_for_selector(f"#request-rows tr:nth-child({n})")
        expect(ui.locator(f"#request-rows tr:nth-child({n}) td:nth-child(4)")).to_have_text("200")
    rows = ui.locator("#request-rows tr").all_inner_texts()
    assert "/follow/1" in rows[0] and "/follow/2" in rows[1]
    page.shot("trace-follow")
    ui.get_by_role("button", name="Stop").click()
    ui.wait_for_selector("#trace-status[data-state='done']")


def test_rate_limit_page_shows_the_budget_going_down(page, ui_gateway):
    page.open("ratelimits")
    ui = page.page
    remaining = ui.locator("tr[data-limiter$='/limited'] [data-remaining]")
    before = int(remaining.get_attribute("data-remaining"))
    assert before >= 2
    for _ in range(2):
        assert httpx.get(f"{ui_gateway.url}/limited/x").status_code == 200
    ui.wait_for_selector(f"tr[data-limiter$='/limited'] [data-remaining='{before - 2}']")
    page.shot("ratelimits-after")


def _wait_reload(gw: GatewayProcess, ok: bool) -> dict:
    deadline = time.monotonic() + 20
    while True:
        state = httpx.get(f"{gw.admin}/api/statuses").json()["reload"]
        if state["ok"] is ok and (state["rejected"] if not ok else state["applied"]):
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.1)


def test_overview_shows_a_rejected_reload_and_its_problems(page, ui_gateway):
    good = ui_gateway.config.read_text()
    try:
        ui_gateway.config.write_text(good.replace("fillInterval: 60s", "fillInterval: soon"))
        _wait_reload(ui_gateway, ok=False)
        page.open("overview")
        ui = page.page
        assert ui.locator("#reload-badge").inner_text() == "reload rejected"
        problems = ui.locator("#reload .problems").inner_text()
        assert "fillInterval" in problems and "soon" in problems
        assert ui.locator("[data-reload='rejected']").is_visible()
        page.shot("overview-reload-rejected")
    finally:
        ui_gateway.config.write_text(good + "\n")
    _wait_reload(ui_gateway, ok=True)
    page.page.reload()
    page.page.wait_for_selector("[data-reload='ok']")
    assert page.page.locator("#reload-badge").inner_text() == "config ok"


def test_overview_renders_resource_statuses(page):
    page.open("overview")
    statuses = [
        {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": {"name": "echo", "namespace": "default"},
         "status": {"parents": [{"conditions": [{"type": "Accepted", "status": "True"},
                                                {"type": "ResolvedRefs", "status": "True"}]}]}},
        {"apiVersion": "agentgateway.dev/v1alpha1", "kind": "AgentgatewayPolicy", "metadata": {"name": "limits", "namespace": "default"},
         "status": {"ancestors": [{"conditions": [{"type": "Accepted", "status": "False", "reason": "Invalid",
                                                   "message": "rateLimit.global: not supported"}]}]}},
    ]
    ui = page.page
    ui.evaluate("(s) => document.getElementById('statuses').replaceChildren(renderStatuses(s))", statuses)
    route = ui.locator("[data-status='HTTPRoute/echo']").inner_text()
    assert "default/echo" in route and "Accepted" in route and "ResolvedRefs" in route
    policy = ui.locator("[data-status='AgentgatewayPolicy/limits']")
    assert "Accepted False (Invalid)" in policy.inner_text()
    assert policy.locator(".cond-bad").get_attribute("title") == "Invalid: rateLimit.global: not supported"


def test_off_loopback_ui_asks_for_the_admin_token(browser, tmp_path):
    gw = GatewayProcess(tmp_path, admin_host="0.0.0.0", token="t0ken-for-ui", config_text=LIMITED, max_tokens=5)
    try:
        page = Page(browser, gw)
        ui = page.page
        ui.goto(f"{gw.admin}/ui#/overview")
        dialog = ui.locator("#token-dialog")
        dialog.wait_for(state="visible")
        page.shot("token-dialog")
        ui.locator("#token-input").fill("wrong")
        ui.get_by_role("button", name="Use token").click()
        dialog.wait_for(state="visible")  # asked again
        ui.locator("#token-input").fill("t0ken-for-ui")
        ui.get_by_role("button", name="Use token").click()
        ui.wait_for_selector("body[data-loaded='overview']")
        assert f"Bind {gw.port}" in ui.locator("#binds").inner_text()
        assert ui.evaluate("sessionStorage.getItem('trioproxy.adminToken')") == "t0ken-for-ui"
        # The trace stream carries the token in a header (fetch), and traces work through it.
        page.nav("Trace", "trace")
        ui.get_by_role("button", name="Start trace").click()
        ui.wait_for_selector("#trace-status[data-state='waiting']")
        httpx.get(f"{gw.url}/with-token", headers={"x-api-key": "t0ken-for-ui"})
        ui.wait_for_selector("#event-rows tr[data-kind='Request Done']")
        events = ui.evaluate("trace.view.allEvents()")
        bodies = [base64.b64decode(e["message"]["body"]) for e in events if e["message"]["type"] == "bodySnapshot"]
        assert any(b"x-api-key" in body for body in bodies)  # the echo backend's answer lists the headers
        assert "t0ken-for-ui" not in json.dumps(events) and not any(b"t0ken-for-ui" in body for body in bodies)
        page.close()
    finally:
        gw.close()


TRICKY = [
    {"empty": "", "space": " lead", "colon": "a: b", "hash": "x #y", "num": "12", "float": "1.5e3", "bool": "yes",
     "null": None, "t": True, "n": 3, "f": 1.25, "quote": "it's", "star": "*/*", "dash": "-x", "list": [], "map": {}},
    {"multi": "line one\nline two\n", "multi_no_end": "a\nb", "nested": {"deep": [{"a": 1, "b": [1, 2]}, "x", []]}},
    {"long": "word " * 40 + "end", "longq": "it's " * 40, "longplain": "plain " * 30 + "end",
     "items": ["item " * 30 + "end"]},
    {"ctrl": "bell\x07", "unicode": "héllo ✓", "path": "/a/b?c=d&e", "at": "@x", "pct": "%x", "tilde": "~"},
]


@pytest.mark.parametrize("doc", TRICKY)
def test_yaml_rendering_matches_the_text_ui(page, doc):
    from trioproxy.tui.state import render

    page.open("trace")
    for fmt in ("yaml", "json"):
        shown = page.page.evaluate("([doc, fmt]) => TraceModel.render(doc, fmt)", [doc, fmt])
        assert shown == render(doc, fmt), fmt


def test_follow_keeps_the_newest_requests_only(page):
    page.open("trace")
    kept = page.page.evaluate("""() => {
        const view = new TraceModel.TraceView();
        for (let i = 0; i < TraceModel.MAX_REQUESTS + 5; i++) {
            view.addEvent({eventEnd: 1, message: {type: "requestStarted"}});
            view.addEvent({eventEnd: 2, message: {type: "requestFinished", status: 200 + (i % 2)}});
        }
        return [view.requests.length, view.selectedRequest, TraceModel.MAX_REQUESTS];
    }""")
    assert kept[0] == kept[2] and kept[1] == kept[2] - 1
