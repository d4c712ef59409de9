"""urlRewrite, requestRedirect, csrf, delay, conditional directResponse, retry, requestMirror and servers set to off:
agentgateway's route policies against real servers on 127.0.0.1."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from functools import partial

import httpx
import pytest
import trio
import trio.testing

from fixtures.echo_backend import EchoBackend
from tests.conftest import LOOPBACK_SERVERS, free_port, start_routes
from tests.e2e.test_trace import shape, watch
from trioproxy.config import ConfigError, parse_config
from trioproxy.frontend.server import serve_gateway
from trioproxy.policies.csrf import CsrfSpec, csrf_refusal
from trioproxy.policies.delay import delay_seconds
from trioproxy.policies.url_rewrite import (
    RedirectSpec,
    UrlRewriteSpec,
    redirect_location,
    rewrite_authority,
    rewrite_prefix,
)


def headers_of(response: httpx.Response) -> dict[str, str]:
    return {k: v for k, v in response.json()["headers"]}


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, env=LOOPBACK_SERVERS)
    return [str(p) for p in info.value.problems] if hasattr(info.value, "problems") else [str(info.value)]


# --- urlRewrite ------------------------------------------------------------------------------------


def test_prefix_rewrite_is_element_wise_like_agentgateway():
    assert rewrite_prefix("/api/users", "/api", "/v2") == "/v2/users"
    assert rewrite_prefix("/api", "/api", "/v2") == "/v2"
    assert rewrite_prefix("/api/users", "/api/", "/") == "/users"
    assert rewrite_prefix("/api", "/api", "") == "/"
    assert rewrite_prefix("/api/users", "/api", "/v2/") == "/v2/users"


def test_authority_rewrite_host_drops_the_port_and_port_80_is_left_out():
    assert rewrite_authority(UrlRewriteSpec(authority_kind="full", authority="a.example:81"), "x:1") == "a.example:81"
    assert rewrite_authority(UrlRewriteSpec(authority_kind="host", authority="b.example"), "x:1") == "b.example"
    assert rewrite_authority(UrlRewriteSpec(authority_kind="port", authority="8443"), "x.example:1") == "x.example:8443"
    assert rewrite_authority(UrlRewriteSpec(authority_kind="port", authority="80"), "x.example:1") == "x.example"


async def test_url_rewrite_full_path_keeps_the_query_and_sets_the_host(nursery, backend):
    gw = await start_routes(nursery, """
        - policies:
            urlRewrite:
              path: {{full: /new-path}}
              authority: {{full: custom-host-header}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        echoed = (await client.get("/old/path?a=1")).json()
    assert echoed["path"] == "/new-path" and echoed["query"] == "a=1"
    assert dict(echoed["headers"])["host"] == "custom-host-header"


async def test_url_rewrite_prefix_replaces_what_the_route_matched(nursery, backend):
    gw = await start_routes(nursery, """
        - matches: [{{path: {{pathPrefix: /api}}}}]
          policies: {{urlRewrite: {{path: {{prefix: /v2}}}}}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
        - matches: [{{path: {{pathPrefix: /}}}}]
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        assert (await client.get("/api/users?x=y")).json()["path"] == "/v2/users"
        assert (await client.get("/api")).json()["path"] == "/v2"
        assert (await client.get("/apix")).json()["path"] == "/apix"  # not the /api route: untouched


def test_a_prefix_rewrite_needs_pathprefix_matches():
    text = ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - matches: [{path: {exact: /a}}]\n"
            "      policies: {urlRewrite: {path: {prefix: /b}}}\n      backends: [{host: '127.0.0.1:1'}]\n")
    assert problems(text) == ["<config>:6:37: binds[0].listeners[0].routes[0].policies.urlRewrite.path: "
                              "a prefix rewrite needs every match of the route to be a pathPrefix"]


# --- requestRedirect -------------------------------------------------------------------------------


def _redirect(scheme: str | None = None, **url: str) -> RedirectSpec:
    return RedirectSpec(UrlRewriteSpec(**url), scheme)  # type: ignore[arg-type]


@pytest.mark.parametrize(("spec", "request_url", "location"), [
    # nothing configured: the request's own URL, query kept
    (_redirect(), ("http", "a.example:8080", "/x", b"q=1"), "http://a.example:8080/x?q=1"),
    # a configured scheme takes its well-known port (Gateway API); the usual http → https redirect
    (_redirect("https"), ("http", "a.example:8080", "/x", b""), "https://a.example/x"),
    (_redirect("https"), ("http", "[::1]:8080", "/", b""), "https://[::1]/"),
    (_redirect(authority_kind="host", authority="b.example"), ("http", "[::1]:8080", "/", b""),
     "http://b.example:8080/"),  # an IPv6 Host's port
    (_redirect(authority_kind="host", authority="b.example"), ("http", "[::1]", "/", b""), "http://b.example/"),
    (_redirect(authority_kind="host", authority="b.example"), ("http", "a.example", "/", b""), "http://b.example/"),
    # host: keeps the request's port unless a scheme is configured
    (_redirect(authority_kind="host", authority="b.example"), ("http", "a.example:8080", "/", b""),
     "http://b.example:8080/"),
    (_redirect("https", authority_kind="host", authority="b.example"), ("http", "a.example:8080", "/", b""),
     "https://b.example/"),
    # port: the scheme's default port is left out
    (_redirect(authority_kind="port", authority="8443"), ("http", "a.example", "/", b""), "http://a.example:8443/"),
    (_redirect("https", authority_kind="port", authority="443"), ("http", "a.example:80", "/", b""),
     "https://a.example/"),
    (_redirect(authority_kind="port", authority="80"), ("http", "a.example:8080", "/", b""), "http://a.example/"),
    (_redirect(authority_kind="full", authority="c.example:9"), ("https", "a.example", "/", b""),
     "https://c.example:9/"),
    # path: full (empty is /), or the matched prefix replaced element-wise
    (_redirect(path_kind="full", path=""), ("http", "a", "/x/y", b"k=v"), "http://a/?k=v"),
    (_redirect(path_kind="prefix", path="/v2"), ("http", "a", "/api/users", b""), "http://a/v2/users"),
])
def test_redirect_location_follows_gateway_api_and_agentgateway(spec, request_url, location):
    scheme, host, path, query = request_url
    assert redirect_location(spec, scheme, host, path, query, "/api") == location


async def test_request_redirect_answers_without_calling_the_backend(nursery, backend):
    gw = await start_routes(nursery, """
        - name: moved
          matches: [{{path: {{pathPrefix: /old}}}}]
          policies:
            urlRewrite: {{authority: {{host: internal.example}}}}
            requestRedirect: {{scheme: https, path: {{prefix: /new}}, status: 301}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
        - name: found
          matches: [{{path: {{pathPrefix: /tmp}}}}]
          policies:
            requestRedirect: {{authority: {{port: 8443}}}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port)
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        moved = await client.get("/old/a/b?q=1", headers={"host": "shop.example:8080"})
        events = await reader.events()
        found = await client.get("/tmp/z", headers={"host": "shop.example:8080"})
        encoded = await client.get("/old/a%20b", headers={"host": "shop.example"})
    # after urlRewrite (whose Host it starts from), as agentgateway orders them
    assert (moved.status_code, moved.headers["location"], moved.text) == (
        301, "https://internal.example/new/a/b?q=1", "")
    assert (found.status_code, found.headers["location"]) == (302, "http://shop.example:8443/tmp/z")
    assert encoded.headers["location"] == "https://internal.example/new/a%20b"  # the path as sent, still encoded
    assert backend.requests == 0  # answered by the gateway
    redirect = next(e["message"] for e in events if e["message"].get("kind") == "requestRedirect")
    assert (redirect["result"], redirect["status"]) == ("redirected", 301)


@pytest.mark.parametrize(("policy", "message"), [
    ("requestRedirect: {path: {full: 'new page'}}", "requestRedirect.path: 'new page' contains whitespace"),
    ("urlRewrite: {path: {full: v2/x}}", "urlRewrite.path: expected a path starting with /, got 'v2/x'"),
    ('urlRewrite: {authority: {full: "a.example\\r\\nx: y"}}', "urlRewrite.authority: 'a.example\\r\\nx: y' contains"),
])
def test_rewritten_parts_must_fit_a_url(policy, message):
    text = f"binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {{{policy}}}\n"
    (problem,) = problems(text)
    assert message in problem, problem


def test_a_prefix_redirect_needs_pathprefix_matches_and_a_redirect_status():
    text = ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - matches: [{path: {exact: /a}}]\n"
            "      policies: {requestRedirect: {path: {prefix: /b}}}\n")
    assert problems(text) == ["<config>:6:42: binds[0].listeners[0].routes[0].policies.requestRedirect.path: "
                              "a prefix redirect needs every match of the route to be a pathPrefix"]
    text = "binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {requestRedirect: {status: 200}}\n"
    assert len(problems(text)) == 1 and "requestRedirect.status" in problems(text)[0]


# --- csrf --------------------------------------------------------------------------------------------

TRUSTED = CsrfSpec(("https://app.example",))


@pytest.mark.parametrize(("method", "headers", "refused"), [
    ("GET", {"origin": "https://evil.example", "sec-fetch-site": "cross-site"}, False),  # safe methods pass
    ("OPTIONS", {"origin": "https://evil.example"}, False),
    ("POST", {}, False),  # no Origin, no Sec-Fetch-Site: not a browser's cross-site request
    ("POST", {"origin": "null"}, False),
    ("POST", {"origin": "http://shop.example:8080"}, False),  # its own scheme://host
    ("POST", {"origin": "https://shop.example:8080"}, True),  # another scheme is another origin
    ("POST", {"origin": "http://shop.example"}, True),  # another port too
    ("DELETE", {"origin": "https://evil.example"}, True),
    ("POST", {"origin": "https://app.example"}, False),  # additionalOrigins
    ("POST", {"sec-fetch-site": "same-origin", "origin": "https://evil.example"}, False),  # the browser's word wins
    ("POST", {"sec-fetch-site": "none"}, False),
    ("POST", {"sec-fetch-site": "same-site", "origin": "http://shop.example:8080"}, True),
    ("POST", {"sec-fetch-site": "cross-site", "origin": "https://app.example"}, False),
    ("PUT", {"origin": "https://\xe9vil.example"}, True),  # not ASCII: malformed
])
def test_csrf_follows_agentgateway(method, headers, refused):
    pairs = [(k.encode(), v.encode("latin-1")) for k, v in headers.items()]
    reason = csrf_refusal(TRUSTED, method, pairs, "http", "shop.example:8080")
    assert (reason is not None) == refused, reason


def test_csrf_reasons_say_what_was_refused():
    def why(**headers: str) -> str | None:
        pairs = [(k.replace("_", "-").encode(), v.encode("latin-1")) for k, v in headers.items()]
        return csrf_refusal(TRUSTED, "POST", pairs, "http", "shop.example")
    assert why(origin="https://evil.example") == "Origin https://evil.example is not http://shop.example"
    assert why(sec_fetch_site="cross-site") == "Sec-Fetch-Site is cross-site"
    assert why(origin="https://\xe9.example") == "malformed Origin or Sec-Fetch-Site header"


async def test_csrf_answers_403_before_the_backend(nursery, backend):
    gw = await start_routes(nursery, """
        - policies: {{csrf: {{additionalOrigins: ["https://app.example"]}}}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port)
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        evil = await client.post("/x", content=b"a", headers={"origin": "https://evil.example"})
        events = await reader.events()
        own = await client.post("/x", content=b"a", headers={"origin": str(client.base_url).rstrip("/")})
        app = await client.post("/x", content=b"a", headers={"origin": "https://app.example"})
    assert (evil.status_code, evil.text) == (403, "CSRF validation failed")
    (decision,) = [e for e in events if e["message"].get("kind") == "csrf"]
    assert (decision["message"]["type"], decision["severity"], decision["message"]["result"]) == (
        "policy", "warn", "rejected")
    assert decision["message"]["reason"] == f"Origin https://evil.example is not {str(client.base_url).rstrip('/')}"
    assert (own.status_code, app.status_code) == (200, 200)
    assert backend.requests == 2


def test_csrf_origins_must_be_origins():
    text = ("binds:\n- port: 3000\n  listeners:\n  - routes:\n"
            "    - policies: {csrf: {additionalOrigins: [app.example, 'https://b.example/']}}\n")
    assert problems(text) == [
        "<config>:5:44: binds[0].listeners[0].routes[0].policies.csrf.additionalOrigins: 'app.example' is not an "
        "origin such as https://app.example.com",
        "<config>:5:44: binds[0].listeners[0].routes[0].policies.csrf.additionalOrigins: 'https://b.example/' is "
        "not an origin such as https://app.example.com"]


# --- delay -------------------------------------------------------------------------------------------


def test_delay_results_follow_agentgateway():
    assert delay_seconds(2000) == 2.0
    assert delay_seconds(12.5) == 0.0125
    assert delay_seconds(timedelta(milliseconds=500)) == 0.5
    assert delay_seconds(0) == delay_seconds(-5) == delay_seconds("2s") == delay_seconds(True) == 0.0


def test_delay_accepts_a_duration_or_cel_and_rejects_neither():
    routes = "binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {delay: {duration: '%s'}}\n"
    config = parse_config(routes % "2s", env=LOOPBACK_SERVERS)
    assert config.binds[0].listeners[0].routes[0].policies.delay.seconds == 2.0
    config = parse_config(routes % "random() < 0.1 ? 2000 : 0", env=LOOPBACK_SERVERS)
    assert config.binds[0].listeners[0].routes[0].policies.delay.seconds is None
    (message,) = problems(routes % "2 +")
    assert "policies.delay.duration: expected a duration such as 2s or a CEL expression: syntax error" in message


async def test_delay_holds_the_request_and_counts_against_request_timeout(nursery, backend, mock_clock):
    gw = await start_routes(nursery, """
        - policies:
            delay: {{duration: 'request.headers["x-chaos"] == "1" ? 3000 : 0'}}
            timeout: {{requestTimeout: 60s}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
        - matches: [{{path: {{pathPrefix: /short}}}}]
          policies:
            delay: {{duration: 2s}}
            timeout: {{requestTimeout: 1s}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        assert (await client.get("/")).status_code == 200  # the expression gives 0: no delay
        results = {}

        async def get(path, headers):
            results[path] = await client.get(path, headers=headers)

        async with trio.open_nursery() as requests:
            requests.start_soon(get, "/chaos", {"x-chaos": "1"})
            requests.start_soon(get, "/short", {})
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert backend.requests == 1  # both are held
            mock_clock.jump(1.5)  # /short's 1s requestTimeout passes during its 2s delay
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert "/short" in results and backend.requests == 1
            mock_clock.jump(2)
    assert results["/short"].status_code == 504 and results["/short"].text == "request timeout"
    assert results["/chaos"].status_code == 200 and backend.requests == 2


# --- directResponse: conditional ------------------------------------------------------------------


async def test_conditional_direct_response_answers_the_first_true_entry_or_passes(nursery, backend):
    gw = await start_routes(nursery, """
        - policies:
            directResponse:
              conditional:
              - condition: 'request.headers["x-fault"] == "abort"'
                status: 503
                body: injected fault
              - condition: 'request.path == "/teapot"'
                status: 418
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        aborted = await client.get("/", headers={"x-fault": "abort"})
        assert (aborted.status_code, aborted.text) == (503, "injected fault")
        assert (await client.get("/teapot")).status_code == 418
        assert (await client.get("/x")).status_code == 200  # no condition true: the backend answers
    assert backend.requests == 1


async def test_a_conditional_fallback_entry_always_answers(nursery):
    gw = await start_routes(nursery, """
        - policies:
            directResponse:
              conditional:
              - {{condition: 'request.method == "POST"', status: 201}}
              - {{status: 200, body: fallback}}
    """, port=free_port())
    async with gw.client() as client:
        assert (await client.post("/")).status_code == 201
        answer = await client.get("/")
        assert (answer.status_code, answer.text) == (200, "fallback")


@pytest.mark.parametrize("policy, message", [
    ("{conditional: [{status: 200}, {condition: 'true', status: 201}]}",
     "conditional[0]: an entry without a condition is the fallback and must be the last one"),
    ("{status: 200, conditional: [{condition: 'true', status: 201}]}",
     "status: use either conditional or status/body, not both"),
    ("{body: x}", "status is required (or give conditional)"),
    ("{conditional: [{condition: 'true', status: 200, headers: {}}]}",
     "'headers' is an agentgateway feature that trioproxy does not implement"),
])
def test_bad_direct_responses_are_named(policy, message):
    (found,) = problems(f"binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {{directResponse: {policy}}}\n")
    assert found.endswith(message), found


# --- retry -------------------------------------------------------------------------------------------


RETRY_ROUTE = """
    - policies:
        retry: {{attempts: {attempts}, codes: [503]}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


async def test_retry_calls_again_on_a_listed_status_with_x_retry_attempt(nursery, backend):
    gw = await start_routes(nursery, RETRY_ROUTE, port=free_port(), backend=backend.port, attempts=2)
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        answer = await client.get("/flaky?fail=2&key=a")
        assert (answer.status_code, answer.text) == (200, "attempt 3")  # attempts 2 = 3 calls, as agentgateway
        assert backend.last_headers.count(("x-retry-attempt", "2")) == 1
        exhausted = await client.get("/flaky?fail=5&key=b")
        assert (exhausted.status_code, exhausted.text) == (503, "attempt 3")  # the last answer is the client's
        assert (await client.get("/flaky?fail=1&key=c&status=500")).status_code == 500  # not listed: no retry
    assert backend.flaky == {"a": 3, "b": 3, "c": 1}
    events = await reader.events()
    retries = [e["message"] for e in events if e["message"]["type"] == "retry"]
    assert retries == [{"type": "retry", "attempt": 1, "reason": "status 503"},
                       {"type": "retry", "attempt": 2, "reason": "status 503"}]
    assert [t for t, _ in shape(events)].count("backendCallStart") == 3


async def test_retry_replays_a_small_body_but_never_a_chunked_one(nursery, backend):
    gw = await start_routes(nursery, RETRY_ROUTE, port=free_port(), backend=backend.port, attempts=1)
    async with gw.client() as client:
        answer = await client.post("/flaky?key=small", content=b"x" * 1000)
        assert answer.status_code == 200

        async def chunks():
            yield b"y" * 100
            yield b"y" * 100

        streamed = await client.post("/flaky?key=chunked", content=chunks())
        assert streamed.status_code == 503  # streamed: not retryable, the first answer stands
    assert [s for s in backend.seen if "small" in s[1]] == [("POST", "/flaky?key=small", 1000)] * 2
    assert [s for s in backend.seen if "chunked" in s[1]] == [("POST", "/flaky?key=chunked", 200)]


async def test_retry_on_a_failed_connection_and_the_request_timeout_caps_all_attempts(nursery, backend):
    gw = await start_routes(nursery, """
        - matches: [{{path: {{pathPrefix: /down}}}}]
          policies: {{retry: {{attempts: 3, codes: []}}}}
          backends: [{{host: "127.0.0.1:{dead}"}}]
        - policies:
            retry: {{attempts: 50, codes: [503], backoff: 100ms}}
            timeout: {{requestTimeout: 350ms}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, dead=free_port())
    reader = await watch(nursery, gw, 'request.path == "/down"')
    async with gw.client() as client:
        assert (await client.get("/down")).status_code == 503
        answer = await client.get("/flaky?fail=100&key=t")
    assert (answer.status_code, answer.text) == (504, "request timeout")
    assert 2 <= backend.flaky["t"] <= 5  # 50 attempts allowed, ~4 fit in 350 ms
    retries = [e["message"] for e in await reader.events() if e["message"]["type"] == "retry"]
    assert [r["attempt"] for r in retries] == [1, 2, 3]
    assert retries[0]["reason"].startswith("upstream connect error")


# --- requestMirror -----------------------------------------------------------------------------------


async def test_mirror_copies_requests_and_never_delays_or_fails_them(nursery, backend):
    mirror = await nursery.start(EchoBackend().serve)
    silent = await trio.open_tcp_listeners(0, host="127.0.0.1")  # accepts, never answers
    held: list[trio.SocketStream] = []

    async def hold() -> None:
        while True:
            held.append(await silent[0].accept())

    nursery.start_soon(hold)
    gw = await start_routes(nursery, """
        - matches: [{{path: {{pathPrefix: /copy}}}}]
          policies:
            requestMirror: {{backend: {{host: "127.0.0.1:{mirror}"}}, percentage: 1.0}}
            retry: {{attempts: 1, codes: [503]}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
        - matches: [{{path: {{pathPrefix: /silent}}}}]
          policies:
            requestMirror: {{backend: {{host: "127.0.0.1:{silent}"}}, percentage: 1}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
        - matches: [{{path: {{pathPrefix: /down}}}}]
          policies:
            requestMirror: {{backend: {{host: "127.0.0.1:{dead}"}}, percentage: 1}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
        - matches: [{{path: {{pathPrefix: /never}}}}]
          policies:
            requestMirror: {{backend: {{host: "127.0.0.1:{mirror}"}}, percentage: 0}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, mirror=mirror.port, dead=free_port(),
        silent=silent[0].socket.getsockname()[1])
    async with gw.client() as client:
        with trio.fail_after(5):
            received = mirror.received
            assert (await client.post("/copy?q=1", content=b"payload")).status_code == 200
            await received.wait()
            for path in ("/silent", "/down", "/never", "/silent"):
                assert (await client.get(path)).status_code == 200
    assert mirror.seen == [("POST", "/copy?q=1", 7)]  # a buffered body is copied too
    assert backend.seen[0] == ("POST", "/copy?q=1", 7)
    sender = gw.info.runtime.mirrors
    assert sender.in_flight <= 2  # the silent mirror's copies are still waiting; nobody else did
    assert sender.failed >= 1  # the dead mirror failed in the background


# --- adminAddr / statsAddr / readinessAddr: off -------------------------------------------------------


def test_server_addresses_accept_off():
    config = parse_config("config: {adminAddr: 'off', statsAddr: off}\nbinds: []\n", env={})
    assert config.servers.off == frozenset({"admin", "stats"})
    assert parse_config("binds: []\n", env={"READINESS_ADDR": "off"}).servers.off == frozenset({"readiness"})


async def test_servers_set_to_off_are_not_started(nursery, backend):
    text = f"""
config: {{adminAddr: off, statsAddr: off, readinessAddr: off}}
binds:
- port: {free_port()}
  listeners:
  - routes:
    - backends: [{{host: "127.0.0.1:{backend.port}"}}]
"""
    env = {k: v for k, v in os.environ.items() if k not in LOOPBACK_SERVERS}
    config = parse_config(text, env=env)
    info = await nursery.start(partial(serve_gateway, config, bind_host="127.0.0.1"))
    assert (info.admin, info.stats, info.readiness) == (None, None, None)
    port = info.ports[config.binds[0].port]
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"http://127.0.0.1:{port}/")).status_code == 200
    from trioproxy.config.dump import config_dump

    assert json.loads(json.dumps(config_dump(config)))["config"]["adminAddr"] == "off"
