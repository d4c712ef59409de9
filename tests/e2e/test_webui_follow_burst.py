"""The web UI's Follow keeps every request: 20 sent back to back, then 20 at once, are 20 and 40
rows of the Requests pane in headless Chromium (the text UI's twin: ``test_trace_follow_burst.py``)."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.e2e.test_trace_follow_burst import N, _send_back_to_back, _send_concurrently
from tests.e2e.test_webui_browser import browser, page, pytestmark, ui_gateway  # noqa: F401  (fixtures)


def test_follow_shows_every_request_of_a_burst(page, ui_gateway):  # noqa: F811
    page.open("trace")
    ui = page.page
    ui.locator("#trace-follow").check()
    ui.get_by_role("button", name="Start trace").click()
    ui.wait_for_selector("#trace-status[data-state='waiting']")
    _send_back_to_back(ui_gateway.port)
    expect(ui.locator("#request-rows tr")).to_have_count(N)
    # the last row appears with its request's first event and shows its path from the next one
    expect(ui.locator("#request-rows td:nth-child(3)").nth(N - 1)).to_have_text(re.compile("^/burst/"))
    paths = ui.locator("#request-rows td:nth-child(3)").all_inner_texts()
    assert paths == [f"/burst/{i}" for i in range(N)]
    _send_concurrently(ui_gateway.port)
    expect(ui.locator("#request-rows tr")).to_have_count(2 * N)
    expect(ui.locator("#trace-status")).to_contain_text(f"in {2 * N} requests")
    expect(ui.locator("#request-rows td:nth-child(3)").nth(2 * N - 1)).to_have_text(re.compile("^/together/"))
    assert sorted(ui.locator("#request-rows td:nth-child(3)").all_inner_texts()[N:]) == sorted(
        f"/together/{i}" for i in range(N))
    ui.get_by_role("button", name="Stop").click()
    ui.wait_for_selector("#trace-status[data-state='done']")
