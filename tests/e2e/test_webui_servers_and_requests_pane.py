"""Web UI in headless Chromium: the Overview's Servers card shows nested settings (``backend``) as
settings, not ``[object Object]``; at 1400 px the Requests pane shows every request's Status and
Time whole, a long path giving way instead."""

from __future__ import annotations

import re

import httpx
from playwright.sync_api import expect

from tests.e2e.test_webui_browser import Page, browser, pytestmark, ui_gateway  # noqa: F401  (fixtures)


def test_servers_card_lists_the_backend_settings(browser, ui_gateway):  # noqa: F811
    page = Page(browser, ui_gateway, width=1400, height=900)
    try:
        page.open("overview")
        servers = page.page.locator("#servers")
        assert "[object Object]" not in servers.inner_text()
        backend = servers.locator("dd[data-setting='backend']").inner_text()
        assert "connectTimeout" in backend and "poolMaxSize" in backend
        page.shot("overview-servers-1400")
    finally:
        page.close()


def test_requests_pane_at_1400px_shows_status_and_time(browser, ui_gateway):  # noqa: F811
    page = Page(browser, ui_gateway, width=1400, height=900)
    try:
        page.open("trace")
        ui = page.page
        ui.locator("#trace-follow").check()
        ui.get_by_role("button", name="Start trace").click()
        ui.wait_for_selector("#trace-status[data-state='waiting']")
        paths = [f"/v1/some/rather/long/path/segment/{i}?query=abcdef" for i in range(3)]
        for path in paths:
            assert httpx.get(f"{ui_gateway.url}{path}", timeout=10).status_code == 200
        expect(ui.locator("#request-rows tr")).to_have_count(3)
        expect(ui.locator("#request-rows tr:nth-child(3) td:nth-child(5)")).to_have_text(re.compile(r"ms$"))
        page.shot("trace-requests-1400")
        box = ui.evaluate("""() => {
            const scroll = document.querySelector('#pane-requests .scroll');
            const edge = scroll.getBoundingClientRect().left + scroll.clientWidth;
            const cells = [...document.querySelectorAll('#pane-requests tr')].flatMap((tr) =>
                [...tr.children].filter((c) => c.cellIndex === 3 || c.cellIndex === 4).map((c) => {
                    const r = c.getBoundingClientRect();
                    return {text: c.textContent, right: r.right, clipped: c.scrollWidth > c.clientWidth};
                }));
            return {edge, overflow: scroll.scrollWidth - scroll.clientWidth, cells};
        }""")
        assert box["overflow"] <= 0, box
        for cell in box["cells"]:
            assert cell["right"] <= box["edge"] + 0.5 and not cell["clipped"], (cell, box["edge"])
        # the path gives way, with the whole of it in the tooltip
        first = ui.locator("#request-rows tr:nth-child(1) td:nth-child(3)")
        assert first.get_attribute("title") == first.inner_text() == "/v1/some/rather/long/path/segment/0"
        ui.get_by_role("button", name="Stop").click()
        ui.wait_for_selector("#trace-status[data-state='done']")
    finally:
        page.close()
