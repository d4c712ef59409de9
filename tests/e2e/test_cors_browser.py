"""CORS from a real browser: headless Chromium on a page of another 127.0.0.1 origin fetches from the gateway.

The page servers are plain ``http.server`` threads on port 0 (two origins: one allowed, one not);
Chromium runs through Playwright's sync API in a worker thread while the gateway runs in trio.
"""

from __future__ import annotations

import http.server
import json
import shutil
import threading
from contextlib import contextmanager

import pytest
import trio

from tests.conftest import free_port, start_gateway
from tests.jwt_helpers import AUDIENCE, ISSUER, jwks, make_key

CHROMIUM = "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(shutil.which(CHROMIUM) is None and shutil.which("chromium") is None,
                                reason="chromium is not installed")


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<!doctype html><title>page</title><p>cross-origin page</p>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextmanager
def page_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


SCRIPT = """
async ({gateway, token}) => {
  const run = async (name, path, init) => {
    try {
      const r = await fetch(gateway + path, init);
      return {status: r.status, servedBy: r.headers.get("x-served-by"), text: await r.text()};
    } catch (e) { return {error: String(e)}; }
  };
  return {
    simple: await run("simple", "/open/simple"),
    preflighted: await run("preflighted", "/secure/put", {method: "PUT",
        headers: {"authorization": "Bearer " + token, "x-custom": "1", "content-type": "application/json"},
        body: "{}"}),
    unauthenticated: await run("unauthenticated", "/secure/get"),
  };
}
"""


def browse(pages: list[str], gateway: str, token: str) -> list[dict]:
    from playwright.sync_api import sync_playwright

    results = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page()
            for origin in pages:
                page.goto(origin + "/")
                results.append(page.evaluate(SCRIPT, {"gateway": gateway, "token": token}))
        finally:
            browser.close()
    return results


async def test_preflight_and_simple_requests_from_a_browser(nursery, backend):
    key = make_key("ES256", "browser-key")
    with page_server() as allowed, page_server() as other:
        cors = (f"cors: {{allowOrigins: ['{allowed}'], allowMethods: [GET, PUT], "
                f"allowHeaders: [authorization, content-type, x-custom], exposeHeaders: [x-served-by], maxAge: 10m}}")
        jwt = (f"jwtAuth: {{mode: strict, issuer: '{ISSUER}', audiences: [{AUDIENCE}], "
               f"jwks: {json.dumps(json.dumps(jwks(key)))}}}")
        served_by = "responseHeaderModifier: {add: {x-served-by: trioproxy}}"
        config = f"""
binds:
- port: PORT
  listeners:
  - routes:
    - name: open
      matches: [{{path: {{pathPrefix: /open}}}}]
      policies: {{{cors}, {served_by}}}
      backends: [{{host: "127.0.0.1:{backend.port}"}}]
    - name: secure
      matches: [{{path: {{pathPrefix: /secure}}}}]
      policies: {{{cors}, {jwt}, {served_by}}}
      backends: [{{host: "127.0.0.1:{backend.port}"}}]
"""
        escaped = config.replace("{", "{{").replace("}", "}}").replace("PORT", "{port}")
        gw = await start_gateway(nursery, escaped, port=free_port())
        from_allowed, from_other = await trio.to_thread.run_sync(browse, [allowed, other], gw.url, key.token())

    # the allowed origin reads everything, including an exposed header and the gateway's own 401
    assert from_allowed["simple"]["status"] == 200 and from_allowed["simple"]["servedBy"] == "trioproxy"
    assert json.loads(from_allowed["simple"]["text"])["method"] == "GET"
    assert from_allowed["preflighted"]["status"] == 200  # the preflight was answered, then the PUT passed
    echoed = json.loads(from_allowed["preflighted"]["text"])
    assert echoed["method"] == "PUT"
    assert not any(name.lower() == "authorization" for name, _ in echoed["headers"])  # token removed upstream
    assert from_allowed["unauthenticated"] == {"status": 401, "servedBy": None,
                                               "text": "authentication failure: no bearer token found"}
    # another origin: the browser withholds every answer from the page
    assert all("error" in result for result in from_other.values()), from_other
    # preflights never reached the backend: GET and PUT from the allowed page, and only the simple GET
    # from the other one (forwarded without CORS headers; its preflighted PUT was stopped at the preflight)
    assert backend.requests == 3
