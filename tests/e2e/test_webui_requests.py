"""The web UI's Requests page (requests_ui.js) in headless Chromium against a real gateway process in
front of the mock LLM providers: the history entries of requests made before the page was opened, new
ones live, the CEL filter, the charts over time, and a row's details (the entry and its ``why``)."""

from __future__ import annotations

import json
import os
import re

import httpx
import pytest
import trio
from playwright.sync_api import expect

from tests.e2e.test_webui_browser import CHROMIUM, CHROMIUM_ARGS, Page, browser  # noqa: F401  (the module's Chromium, a fixture)
from tests.webui_llm_helpers import LlmGateway

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = LlmGateway(tmp_path_factory.mktemp("webui-requests"))
    yield gateway
    gateway.close()


@pytest.fixture
def page(browser, gw):  # noqa: F811
    p = Page(browser, gw)
    yield p
    p.close()


def paths(ui) -> list[str]:
    return ui.locator("#history-rows tr[data-path]").evaluate_all("rows => rows.map(r => r.dataset.path)")


def test_history_from_before_the_page_then_live(page, gw):
    httpx.get(f"{gw.url}/api/before-1")
    httpx.post(f"{gw.url}/api/before-2", json={"a": 1})
    httpx.get(f"{gw.url}/nowhere-before")
    assert gw.chat_stream("counted tokens").status_code == 200
    page.open("requests")
    ui = page.page
    ui.wait_for_selector("#history-rows tr[data-path='/api/before-1']")
    shown = paths(ui)
    # newest first, and everything sent before the page was opened is there
    assert shown.index("/v1/chat/completions") < shown.index("/nowhere-before") < shown.index("/api/before-2") \
        < shown.index("/api/before-1")
    row = ui.locator("#history-rows tr[data-path='/nowhere-before']").first
    cells = row.locator("td").all_inner_texts()
    # the reason, then the gateway's own why (the routes this path missed) as a chip
    assert cells[1] == "GET" and cells[5] == "404" and cells[3] == "" and cells[10] == "route not found" + "why"
    expect(row.locator("td.reason .chip.why")).to_have_count(1)
    llm = ui.locator("#history-rows tr[data-path='/v1/chat/completions']").first.locator("td").all_inner_texts()
    assert llm[3] == "openai" and llm[4] == "openai" and llm[5] == "200"
    assert re.fullmatch(r"\d+ / \d+", llm[7]) and llm[8].startswith("$")
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}", cells[0]) and cells[6].endswith("ms")

    # live: a request made now appears on top without reloading
    httpx.get(f"{gw.url}/api/live-1")
    expect(ui.locator("#history-rows tr[data-path]").first).to_have_attribute("data-path", "/api/live-1")
    httpx.delete(f"{gw.url}/api/live-2")
    expect(ui.locator("#history-rows tr[data-path]").first).to_have_attribute("data-path", "/api/live-2")
    assert ui.locator("#history-rows tr[data-path]").first.locator("td").nth(1).inner_text() == "DELETE"
    expect(ui.locator("#requests-status")).to_contain_text("live")

    # a row opens its details: the whole entry as JSON
    ui.locator("#history-rows tr[data-path='/nowhere-before']").first.click()
    entry = json.loads(ui.locator("#history-rows tr.detail pre.entry-json").inner_text())
    assert entry["status"] == 404 and entry["errorKind"] == "RouteNotFound" and entry["path"] == "/nowhere-before"
    page.shot("requests")


def test_the_cel_filter_applies_to_the_backlog_and_the_live_entries(page, gw):
    for _ in range(5):
        httpx.get(f"{gw.url}/limited/filter")  # three pass, two are refused
    httpx.get(f"{gw.url}/api/filter-ok")
    page.open("requests")
    ui = page.page
    ui.wait_for_selector("#history-rows tr[data-path='/api/filter-ok']")
    ui.locator("#requests-expression").fill('response.code == 429 && request.path == "/limited/filter"')
    ui.locator("#requests-expression").press("Enter")
    expect(ui.locator("#history-rows tr[data-path]")).to_have_count(2)
    assert ui.locator("#history-rows tr[data-path] td:nth-child(6)").all_inner_texts() == ["429", "429"]
    assert ui.locator("#history-rows tr[data-path] td:nth-child(11)").all_inner_texts() == [
        "rate limit exceeded" + "why"] * 2  # each with its why chip (the limit entry that refused)
    httpx.get(f"{gw.url}/api/filter-ok")  # does not match: stays out
    httpx.get(f"{gw.url}/limited/filter")  # matches: comes in live
    expect(ui.locator("#history-rows tr[data-path]")).to_have_count(3)
    assert set(paths(ui)) == {"/limited/filter"}

    ui.locator("#requests-expression").fill("response.code >=")
    ui.locator("#requests-expression").press("Enter")
    expect(ui.locator("#requests-expression-state")).to_contain_text("invalid expression")
    expect(ui.locator("#requests-expression")).to_have_class(re.compile("invalid"))
    ui.get_by_role("button", name="Clear filter").click()
    ui.wait_for_selector("#history-rows tr[data-path='/api/filter-ok']")
    assert ui.locator("#requests-expression-state").inner_text() == ""


def test_charts_over_time(page, gw):
    assert gw.chat_stream("one two three four").status_code == 200
    assert gw.messages_stream("five six").status_code == 200
    httpx.get(f"{gw.url}/nowhere-chart")
    page.open("requests")
    ui = page.page
    ui.wait_for_selector("#history-rows tr[data-path='/nowhere-chart']")
    rate = ui.locator("#chart-history-rate svg rect")
    expect(rate.first).to_be_attached()
    # every request is in one of the rate columns: their values sum to the entries over the bucket width
    entries = len(paths(ui))
    width = float(ui.locator("#requests-bucket").inner_text().strip("() buckets").rstrip("smin") or 1)
    total = sum(float(v) for v in rate.evaluate_all("rs => rs.map(r => r.dataset.value)"))
    assert total * width == pytest.approx(entries)
    assert ui.locator("#chart-history-errors svg rect.s4").count() >= 1  # the 404
    for series in ("p50", "p90", "p99"):
        assert ui.locator(f"#chart-history-latency svg circle[data-series='{series}']").count() >= 1
    tokens = ui.locator("#chart-history-tokens")
    legend_text = tokens.locator(".legend").inner_text()
    assert "gpt-4o-mini" in legend_text and "claude-sonnet-4-5" in legend_text
    shown_tokens = sum(int(t.split(" / ")[0]) + int(t.split(" / ")[1])
                       for t in ui.locator("#history-rows tr[data-path] td:nth-child(8)").all_inner_texts() if t)
    drawn = sum(float(v) for v in tokens.locator("svg rect").evaluate_all("rs => rs.map(r => r.dataset.value)"))
    assert drawn == shown_tokens > 0


def test_a_rows_why_is_shown_as_json(page, gw):
    """Entries gain a ``why`` (docs/history.md); served here by the browser itself, the rest is the page."""
    why = {"policy": "localRateLimit", "limit": {"maxTokens": 3, "tokensPerFill": 3, "fillInterval": "60s",
                                                 "type": "requests"}, "index": 0, "remaining": 0, "resetSeconds": 41}
    entry = {"time": 1795888495.5, "method": "GET", "path": "/limited/why", "host": "127.0.0.1", "route": None,
             "backend": None, "status": 429, "durationMs": 0.4, "inputTokens": None, "outputTokens": None,
             "model": None, "cost": None, "subject": "alice", "reason": "rate limit exceeded",
             "errorKind": "RateLimited", "why": why}
    page.page.route("**/api/requests?*", lambda route: route.fulfill(
        status=200, headers={"content-type": "text/event-stream"}, body=f": ready\n\ndata: {json.dumps(entry)}\n\n"))
    page.open("requests")
    ui = page.page
    row = ui.locator("#history-rows tr[data-path='/limited/why']").first
    expect(row.locator(".chip.why")).to_be_visible()
    assert row.locator("td").nth(9).inner_text() == "alice"
    row.click()
    assert json.loads(ui.locator("#history-rows tr.detail pre.why-json").inner_text()) == why


def test_a_burst_arrives_whole(page, gw):
    """Live entries are drawn once per frame, never thinned out: 200 requests sent at once are 200 rows."""
    page.open("requests")
    ui = page.page
    ui.locator("#requests-expression").fill('request.path.startsWith("/api/burst/")')
    ui.locator("#requests-expression").press("Enter")
    expect(ui.locator("#requests-expression-state")).to_contain_text("filter:")

    async def burst() -> None:
        async with httpx.AsyncClient(base_url=gw.url) as client:
            async with trio.open_nursery() as nursery:
                for i in range(200):
                    nursery.start_soon(client.get, f"/api/burst/{i}")

    trio.run(burst)
    expect(ui.locator("#history-rows tr[data-path]")).to_have_count(200)
    assert sorted(paths(ui)) == sorted(f"/api/burst/{i}" for i in range(200))
    expect(ui.locator("#requests-status")).to_contain_text("200 requests")
