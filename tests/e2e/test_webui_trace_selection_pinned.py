"""Web UI, Follow: a request the user clicked (or clicked an event of) stays selected when the
next request arrives, so the next click on an event row shows that request's diff, not a later
one's. End in the Requests pane follows the newest again (headless Chromium, real gateway)."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

from tests.e2e.test_webui_browser import browser, page, pytestmark, ui_gateway  # noqa: F401  (fixtures)


def _diff_of_model(ui, request: int, row: int) -> list[str]:
    return ui.evaluate("([r, i]) => { const [caption, lines] = trace.view.requests[r].diffAt(i, trace.view.fmt);"
                       " return [caption, ...lines.map(([, l]) => l)]; }", [request, row])


def test_clicked_request_stays_selected_when_the_next_arrives(page, ui_gateway):  # noqa: F811
    page.open("trace")
    ui = page.page
    ui.locator("#trace-follow").check()
    ui.get_by_role("button", name="Start trace").click()
    ui.wait_for_selector("#trace-status[data-state='waiting']")
    for path in ("/first", "/second"):
        assert httpx.get(f"{ui_gateway.url}{path}", timeout=10).status_code == 200
    expect(ui.locator("#request-rows tr")).to_have_count(2)
    expect(ui.locator("#request-rows tr:nth-child(2) td:nth-child(4)")).to_have_text("200")

    # The user clicks the newest request, one of its snapshot rows, and the diff view.
    ui.locator("#request-rows tr[data-index='1']").click()
    snapshot = ui.locator("#event-rows tr[data-kind='Snapshot']", has_text="final request")
    row = int(snapshot.get_attribute("data-index"))
    snapshot.click()
    ui.locator(".modes [data-mode='diff']").click()
    assert ui.locator("#details .line").all_inner_texts() == _diff_of_model(ui, 1, row)

    # Another request arrives: the selection stays on /second ...
    assert httpx.get(f"{ui_gateway.url}/third", timeout=10).status_code == 200
    expect(ui.locator("#request-rows tr")).to_have_count(3)
    expect(ui.locator("#request-rows tr:nth-child(3) td:nth-child(4)")).to_have_text("200")
    assert ui.evaluate("trace.view.selectedRequest") == 1
    expect(ui.locator("#request-rows tr.selected td:nth-child(3)")).to_have_text("/second")
    # ... so clicking an event row shows /second's diff, not /third's.
    ui.locator(f"#event-rows tr[data-index='{row + 1}']").click()
    shown = ui.locator("#details .line").all_inner_texts()
    assert shown == _diff_of_model(ui, 1, row + 1) and shown != _diff_of_model(ui, 2, row + 1)
    assert "/second" in ui.evaluate("trace.view.trace.path")

    # End in the Requests pane follows the newest again.
    ui.locator("#request-rows tr[data-index='0']").click()
    ui.keyboard.press("End")
    assert ui.evaluate("[trace.view.selectedRequest, trace.view.followRequests]") == [2, True]
    ui.get_by_role("button", name="Stop").click()
    ui.wait_for_selector("#trace-status[data-state='done']")
