"""Export and replay from the web UI (docs/export.md), in headless Chromium against a real gateway
process: the trace's HAR, curl and Replay buttons on the selected request, and the Requests page's
Export HAR. The HAR files are validated against the HAR 1.2 schema; the curl line is run by the real
``curl``; a replay reaches the echo backend again and its fresh trace joins the list."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess

import httpx
import pytest
from playwright.sync_api import expect

from tests.admin_helpers import GatewayProcess
from tests.conftest import LIMITED
from tests.e2e.test_webui_browser import CHROMIUM, CHROMIUM_ARGS, Page, browser  # noqa: F401  (the module's Chromium, a fixture)
from tests.har_helpers import assert_har

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed")

ORDER = {"item": "book", "quantity": 2}
BODY = json.dumps(ORDER).encode()
BODY_SHA256 = hashlib.sha256(BODY).hexdigest()


def headers_of(echoed: dict) -> dict[str, str]:
    """The echo backend's ``headers`` (pairs) as a dict."""
    return dict(echoed["headers"])


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = GatewayProcess(tmp_path_factory.mktemp("webui-export"), config_text=LIMITED, max_tokens=100)
    yield gateway
    gateway.close()


@pytest.fixture
def page(browser, gw):  # noqa: F811
    p = Page(browser, gw)
    yield p
    p.close()


def traced_order(page: Page, path: str, opened: bool = False) -> None:
    """Trace one POST with a JSON body and a credential the trace redacts."""
    if not opened:
        page.open("trace")
    ui = page.page
    ui.get_by_role("button", name="Start trace").click()
    ui.wait_for_selector("#trace-status[data-state='waiting']")
    answer = httpx.post(f"{page.gw.url}{path}?page=1", content=BODY,
                        headers={"authorization": "Bearer secret-1", "content-type": "application/json"})
    assert answer.status_code == 200
    expect(ui.locator("#trace-status")).to_contain_text("stream complete")
    expect(ui.get_by_role("button", name="HAR")).to_be_enabled()


def test_har_of_the_selected_request(page):
    traced_order(page, "/orders/har")
    ui = page.page
    with ui.expect_download() as download:
        ui.get_by_role("button", name="HAR").click()
    assert download.value.suggested_filename.endswith(".har")
    har = json.loads(open(download.value.path()).read())
    assert_har(har)
    [entry] = har["log"]["entries"]
    assert entry["request"]["method"] == "POST" and entry["request"]["url"].endswith("/orders/har?page=1")
    assert json.loads(entry["request"]["postData"]["text"]) == ORDER
    assert entry["response"]["status"] == 200
    headers = {h["name"].lower(): h["value"] for h in entry["request"]["headers"]}
    assert headers["authorization"] == "<redacted>"  # never the secret


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_curl_line_of_the_selected_request_runs(page):
    traced_order(page, "/orders/curl")
    ui = page.page
    ui.get_by_role("button", name="curl").click()
    expect(ui.locator("#trace-export-title")).to_have_text("curl: POST /orders/curl")
    line = ui.locator("#trace-export-text").inner_text()
    assert line.startswith("curl ") and "/orders/curl?page=1" in line and "authorization" not in line.lower()
    echoed = json.loads(subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=20, check=True).stdout)
    assert echoed["method"] == "POST" and echoed["path"] == "/orders/curl" and echoed["query"] == "page=1"
    assert echoed["body_sha256"] == BODY_SHA256 and "authorization" not in headers_of(echoed)

    ui.locator("#trace-credentials").fill("authorization: Bearer given-again")
    ui.get_by_role("button", name="curl").click()
    expect(ui.locator("#trace-export-text")).to_contain_text("Bearer given-again")
    line = ui.locator("#trace-export-text").inner_text()
    echoed = json.loads(subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=20, check=True).stdout)
    assert headers_of(echoed)["authorization"] == "Bearer given-again" and echoed["body_sha256"] == BODY_SHA256


def test_replay_sends_it_again_with_a_fresh_trace(page):
    page.open("trace")
    ui = page.page
    ui.locator("#trace-follow").check()
    ui.get_by_role("button", name="Start trace").click()
    httpx.get(f"{page.gw.url}/while-following")
    expect(ui.locator("#request-rows tr:nth-child(1) td:nth-child(4)")).to_have_text("200")
    # the fresh trace joins the list: not while the page's own stream adds to it
    expect(ui.get_by_role("button", name="Replay")).to_be_disabled()
    ui.get_by_role("button", name="Stop").click()
    expect(ui.get_by_role("button", name="Replay")).to_be_enabled()
    ui.get_by_role("button", name="Clear").click()
    ui.locator("#trace-follow").uncheck()

    traced_order(page, "/orders/replay", opened=True)
    ui.locator("#trace-credentials").fill("authorization: Bearer replayed")
    ui.get_by_role("button", name="Replay").click()
    expect(ui.locator("#trace-export-title")).to_have_text("Replayed POST /orders/replay: HTTP 200")
    echoed = json.loads(ui.locator("#trace-export-text").inner_text().split("\n\n", 1)[1])
    assert echoed["path"] == "/orders/replay" and echoed["body_sha256"] == BODY_SHA256
    assert headers_of(echoed)["authorization"] == "Bearer replayed"
    assert "x-trioproxy-replay" not in headers_of(echoed)
    # the fresh trace is the second request of the list, selected, finished
    expect(ui.locator("#request-rows tr")).to_have_count(2)
    expect(ui.locator("#request-rows tr:nth-child(2)")).to_have_class("selected")
    assert ui.locator("#request-rows tr:nth-child(2) td:nth-child(3)").inner_text() == "/orders/replay"
    assert ui.locator("#event-rows tr[data-kind='Request Done']").count() == 1

    ui.locator("#trace-credentials").fill("")
    ui.locator("#request-rows tr:nth-child(1)").click()
    ui.get_by_role("button", name="Replay").click()
    expect(ui.locator("#request-rows tr")).to_have_count(3)
    echoed = json.loads(ui.locator("#trace-export-text").inner_text().split("\n\n", 1)[1])
    assert "authorization" not in headers_of(echoed)  # a redacted credential is not replayed


def test_requests_page_exports_what_it_shows_as_har(page, gw):
    httpx.get(f"{gw.url}/export-history/ok")
    for _ in range(2):
        httpx.get(f"{gw.url}/limited/export-history")
    page.open("requests")
    ui = page.page
    ui.wait_for_selector("#history-rows tr[data-path='/limited/export-history']")
    ui.locator("#requests-expression").fill('request.path.contains("export-history")')
    ui.locator("#requests-expression").press("Enter")
    expect(ui.locator("#history-rows tr[data-path]")).to_have_count(3)
    with ui.expect_download() as download:
        ui.get_by_role("button", name="Export HAR").click()
    har = json.loads(open(download.value.path()).read())
    assert_har(har)
    urls = [e["request"]["url"] for e in har["log"]["entries"]]
    assert len(urls) == 3 and all("export-history" in u for u in urls)
    assert sorted(e["response"]["status"] for e in har["log"]["entries"]) == [200, 200, 200]
