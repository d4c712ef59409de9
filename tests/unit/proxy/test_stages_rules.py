"""The request stages of proxy/stages.py that had no in-process test (urlRewrite, requestRedirect,
csrf, delay) over the in-memory harness: what the backend receives, what the client is answered,
the virtual time a delay takes and the trace events each stage writes."""

from __future__ import annotations

from typing import Any

import trio

from tests.memory_harness import Backend, answer, memory_gateway


def routes(body: str) -> str:
    return "binds:\n- port: 3000\n  listeners:\n  - routes:\n" + "".join(
        f"    {line}\n" for line in body.strip("\n").splitlines())


async def traced(gw: Any, *args: Any, **kwargs: Any) -> tuple[Any, list[dict[str, Any]]]:
    watcher = gw.runtime.trace.watch()
    response = await gw.request(*args, **kwargs)
    events = []
    with trio.move_on_after(5):
        while True:
            event = await watcher.next_event()
            events.append({"severity": event["severity"], **event["message"]})
            if event["message"]["type"] == "requestFinished":
                break
    return response, events


def policy_events(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "policy" and e.get("kind") == kind]


REDIRECTS = routes("""
- name: moved
  matches: [{path: {pathPrefix: /old}}]
  policies:
    urlRewrite: {authority: {host: internal.example}}
    requestRedirect: {scheme: https, path: {prefix: /new}, status: 301}
  backends: [{host: "b.test:80"}]
- name: found
  matches: [{path: {pathPrefix: /tmp}}]
  policies:
    requestRedirect: {authority: {port: 8443}}
  backends: [{host: "b.test:80"}]
""")


async def test_a_redirect_starts_from_the_rewritten_host_and_never_calls_the_backend(autojump_clock):
    backend = Backend(answer())
    async with memory_gateway(REDIRECTS, {"b.test:80": backend}) as gw:
        moved, events = await traced(gw, "GET", "/old/a/b?q=1", host="shop.example:8080")
        found = await gw.request("GET", "/tmp/z", host="shop.example:8080")
        encoded = await gw.request("GET", "/old/a%20b", host="shop.example")
    assert (moved.status, moved.header("location"), moved.body) == (301, "https://internal.example/new/a/b?q=1", b"")
    assert (found.status, found.header("location")) == (302, "http://shop.example:8443/tmp/z")
    assert encoded.header("location") == "https://internal.example/new/a%20b"  # the path as sent
    assert backend.received == []
    (redirect,) = policy_events(events, "requestRedirect")
    assert (redirect["result"], redirect["status"], redirect["location"]) == (
        "redirected", 301, "https://internal.example/new/a/b?q=1")
    (rewrite,) = policy_events(events, "urlRewrite")
    assert rewrite["result"] == "rewrote request URL"
    assert "urlRewrite" in [e["stage"] for e in events if e["type"] == "requestSnapshot"]



async def _never(*_: Any) -> Any:
    raise AssertionError("not called")


async def test_a_redirect_reads_a_bare_asgi_scope_with_its_defaults_and_the_server_address():
    """The stage over scopes as ASGI allows them: no ``raw_path``, ``scheme``, ``query_string``
    or Host (the server's address stands in), and no route match (the prefix is ``/``)."""
    from trioproxy.config import parse_config
    from trioproxy.errors import DirectResponse
    from trioproxy.proxy.exchange import Exchange
    from trioproxy.proxy.stages import RequestRedirectStage

    config = parse_config(routes("""
- policies: {requestRedirect: {path: {prefix: /new}, status: 301}}
  backends: [{host: "b.test:80"}]
"""), env={})
    stage = RequestRedirectStage(config.binds[0].listeners[0].routes[0].policies.request_redirect)

    async def location(scope: dict[str, Any]) -> tuple[int, Any]:
        try:
            await stage.request(Exchange({"type": "http", "method": "GET", **scope}, _never, _never, arrival=0.0))
        except DirectResponse as answer:
            return answer.status, list(answer.headers)
        raise AssertionError("no redirect")

    bare = await location({"path": "/a b", "headers": [], "server": ("10.0.0.1", 8080)})
    full = await location({"path": "/a b", "raw_path": b"/a%20b", "scheme": "https", "query_string": b"q=1",
                           "headers": [(b"host", b"shop.example")], "server": ("10.0.0.1", 8080)})
    assert bare == (301, [(b"location", b"http://10.0.0.1:8080/new/a b")])
    assert full == (301, [(b"location", b"https://shop.example/new/a%20b?q=1")])


REWRITES = routes("""
- name: prefix
  matches: [{path: {pathPrefix: /api}}]
  policies: {urlRewrite: {path: {prefix: /v2}, authority: {full: "inner.test:9"}}}
  backends: [{host: "b.test:80"}]
- name: full
  matches: [{path: {pathPrefix: /all}}]
  policies: {urlRewrite: {path: {full: /fixed}, authority: {port: 8081}}}
  backends: [{host: "b.test:80"}]
- name: empty
  matches: [{path: {pathPrefix: /none}}]
  policies: {urlRewrite: {path: {full: ""}}}
  backends: [{host: "b.test:80"}]
""")


async def test_url_rewrite_replaces_the_matched_prefix_or_the_whole_path_and_the_host(autojump_clock):
    backend = Backend(answer())
    async with memory_gateway(REWRITES, {"b.test:80": backend}) as gw:
        prefixed, events = await traced(gw, "GET", "/api/users%20x?q=1", host="shop.example:8080")
        await gw.request("GET", "/all/x", host="shop.example:8080")
        await gw.request("GET", "/none/x", host="shop.example")
    assert prefixed.status == 200
    first, second, third = backend.received
    assert (first.target, first.header("host")) == ("/v2/users%20x?q=1", "inner.test:9")
    assert (second.target, second.header("host")) == ("/fixed", "shop.example:8081")
    assert (third.target, third.header("host")) == ("/", "shop.example")
    (rewrite,) = policy_events(events, "urlRewrite")
    assert rewrite["path"] == "/v2/users%20x"


CSRF = routes("""
- policies: {csrf: {additionalOrigins: ["https://app.example"]}}
  backends: [{host: "b.test:80"}]
""")


async def test_csrf_refuses_a_cross_site_post_and_passes_same_origin_listed_and_safe_requests(autojump_clock):
    backend = Backend(answer())
    async with memory_gateway(CSRF, {"b.test:80": backend}) as gw:
        refused, refused_events = await traced(gw, "POST", "/x", host="shop.example",
                                               headers=[(b"origin", b"https://evil.example")])
        same, same_events = await traced(gw, "POST", "/x", host="shop.example",
                                         headers=[(b"origin", b"http://shop.example")])
        listed = await gw.request("POST", "/x", host="shop.example", headers=[(b"origin", b"https://app.example")])
        safe = await gw.request("GET", "/x", host="shop.example", headers=[(b"origin", b"https://evil.example")])
    assert refused.status == 403
    assert (same.status, listed.status, safe.status) == (200, 200, 200)
    assert len(backend.received) == 3
    (rejected,) = policy_events(refused_events, "csrf")
    assert (rejected["severity"], rejected["result"]) == ("warn", "rejected") and rejected["reason"]
    (allowed,) = policy_events(same_events, "csrf")
    assert (allowed["severity"], allowed["result"]) == ("info", "allowed") and "reason" not in allowed


DELAYS = routes("""
- name: fixed
  matches: [{path: {pathPrefix: /fixed}}]
  policies: {delay: {duration: 2s}}
  backends: [{host: "b.test:80"}]
- name: chaos
  matches: [{path: {pathPrefix: /chaos}}]
  policies:
    delay: {duration: 'request.headers["x-chaos"] == "1" ? 3000 : 0'}
  backends: [{host: "b.test:80"}]
""")


async def test_a_delay_waits_its_duration_or_what_its_expression_says(autojump_clock):
    backend = Backend(answer())
    async with memory_gateway(DELAYS, {"b.test:80": backend}) as gw:
        start = trio.current_time()
        fixed, fixed_events = await traced(gw, "GET", "/fixed")
        chaos, chaos_events = await traced(gw, "GET", "/chaos", headers=[(b"x-chaos", b"1")])
        calm, calm_events = await traced(gw, "GET", "/chaos")
    assert (fixed.status, chaos.status, calm.status) == (200, 200, 200)
    arrivals = [r.at - start for r in backend.received]
    assert arrivals[0] == 2.0 and arrivals[1] - fixed.at + start == 3.0 and arrivals[2] - chaos.at + start == 0.0
    assert [(e["result"], e["delay"]) for e in policy_events(fixed_events, "delay")] == [("delayed", "2000ms")]
    assert [(e["result"], e["delay"]) for e in policy_events(chaos_events, "delay")] == [("delayed", "3000ms")]
    assert [(e["result"], e["delay"]) for e in policy_events(calm_events, "delay")] == [("no delay", "0ms")]


# --- jwtAuth and mcpAuthentication compiled from the config, inline JWKS ----------------------------


def _jwt_config() -> tuple[str, Any, Any]:
    import json

    from tests.jwt_helpers import AUDIENCE, ISSUER, jwks, make_key

    first, second = make_key("ES256", "k1"), make_key("EdDSA", "k2")
    other = "https://other.test"
    config = routes(f"""
- name: jwt
  matches: [{{path: {{pathPrefix: /jwt}}}}]
  policies:
    jwtAuth:
      mode: strict
      providers:
      - {{issuer: "{ISSUER}", jwks: '{json.dumps(jwks(first))}'}}
      - {{issuer: "{other}", jwks: '{json.dumps(jwks(second))}'}}
  backends: [{{host: "b.test:80"}}]
- name: mcp
  matches: [{{path: {{pathPrefix: /mcp}}}}]
  policies:
    mcpAuthentication: {{mode: strict, issuer: "{ISSUER}", audiences: [{AUDIENCE}], jwks: '{json.dumps(jwks(first))}'}}
  backends: [{{host: "b.test:80"}}]
""")
    return config, first, (second, other)


async def test_jwt_auth_built_from_inline_key_sets_checks_each_providers_tokens(autojump_clock):
    config, first, (second, other) = _jwt_config()
    backend = Backend(answer())
    async with memory_gateway(config, {"b.test:80": backend}) as gw:
        bearer = [(b"authorization", f"Bearer {first.token()}".encode())]
        ok_first = await gw.request("GET", "/jwt", headers=bearer)
        ok_second = await gw.request("GET", "/jwt", headers=[
            (b"authorization", f"Bearer {second.token(iss=other)}".encode())])
        crossed = await gw.request("GET", "/jwt", headers=[
            (b"authorization", f"Bearer {second.token()}".encode())])  # the first issuer, the other's key
        missing = await gw.request("GET", "/jwt")
        mcp_ok = await gw.request("GET", "/mcp", headers=bearer)
        mcp_missing = await gw.request("GET", "/mcp")
    assert (ok_first.status, ok_second.status, crossed.status, missing.status) == (200, 200, 401, 401)
    assert (mcp_ok.status, mcp_missing.status) == (200, 401)


# --- runtime keys (apiKey runtimeKeys) over a real SQLite key store ---------------------------------


def _keyed(store: str) -> str:
    import json

    return "config:\n  store: " + json.dumps(store) + "\n  keys: {requestLog: {enabled: true}}\n" + routes("""
- name: strict
  matches: [{path: {pathPrefix: /strict}}]
  policies:
    apiKey: {runtimeKeys: true, mode: strict, logPayloads: true, keys: [{key: static-one, metadata: {owner: static}}]}
  backends: [{host: "b.test:80"}]
- name: open
  matches: [{path: {pathPrefix: /open}}]
  policies: {apiKey: {runtimeKeys: true, mode: permissive}}
  backends: [{host: "b.test:80"}]
- name: unlogged
  matches: [{path: {pathPrefix: /unlogged}}]
  policies: {apiKey: {runtimeKeys: true, mode: strict}}
  backends: [{host: "b.test:80"}]
- name: static
  matches: [{path: {pathPrefix: /static}}]
  policies: {apiKey: {mode: strict, keys: [{key: static-one}]}}
  backends: [{host: "b.test:80"}]
""")


def _bearer(secret: str) -> list[tuple[bytes, bytes]]:
    return [(b"authorization", f"Bearer {secret}".encode())]


def _state(events: list[dict[str, Any]], stage: str) -> dict[str, Any]:
    (snapshot,) = [e for e in events if e["type"] == "requestSnapshot" and e["stage"] == stage]
    return snapshot["requestState"]


def _why(events: list[dict[str, Any]]) -> Any:
    (finished,) = [e for e in events if e["type"] == "requestFinished"]
    return finished.get("why")


async def test_a_runtime_key_authenticates_with_its_metadata_key_and_team(tmp_path):
    backend = Backend(answer(body=b"the answer"))
    async with memory_gateway(_keyed(str(tmp_path / "keys.db")), {"b.test:80": backend}) as gw:
        service = gw.runtime.keys
        team = await service.create_team(name="lab")
        record, secret = await service.create_key(name="alice-laptop", team=team.id, metadata={"owner": "alice"},
                                                  limits={"requests": {"day": 2}})
        lone, lone_secret = await service.create_key(name="lone")
        ok, events = await traced(gw, "GET", "/strict/a", headers=_bearer(secret))
        lone_ok, lone_events = await traced(gw, "GET", "/unlogged/a", headers=_bearer(lone_secret))
        static = await gw.request("GET", "/strict/b", headers=_bearer("static-one"))
        second = await gw.request("GET", "/strict/c", headers=_bearer(secret))
        over, over_events = await traced(gw, "GET", "/strict/d", headers=_bearer(secret))
        await service.flush()
        logged = await service.request_log(key=record.id)
        unlogged = await service.request_log(key=lone.id)
    assert (ok.status, lone_ok.status, static.status, second.status) == (200, 200, 200, 200)
    assert over.status == 429  # the key's principal counted its requests: the third is over its budget
    assert [r.header("authorization") for r in backend.received] == [None, None, None, None]
    state = _state(events, "apiKey")
    assert state["apiKey"] == {"owner": "alice", "name": "alice-laptop", "id": record.id, "key": "<redacted>"}
    assert state["key"] == service_key_cel(record, team) and state["team"]["name"] == "lab"
    (authenticated,) = policy_events(events, "apiKey")
    assert (authenticated["result"], authenticated["metadata"]) == (
        "authenticated", {"owner": "alice", "name": "alice-laptop", "id": record.id})
    lone_state = _state(lone_events, "apiKey")
    assert lone_state["apiKey"] == {"name": "lone", "id": lone.id, "key": "<redacted>"}
    assert lone_state["key"]["name"] == "lone" and "team" not in lone_state
    assert _why(over_events)["policy"] == "budget"
    # logPayloads: the request log keeps the answer on the route that asks for it
    assert [e.get("response") for e in logged] == ["the answer"] * 2 and len(unlogged) == 1
    assert unlogged[0].get("response") is None


def service_key_cel(record: Any, team: Any) -> dict[str, Any]:
    from trioproxy.keys.service import Principal

    return Principal(record, team).key.cel()


async def test_a_revoked_key_is_refused_in_every_mode_and_an_unknown_one_only_in_strict_mode(tmp_path):
    backend = Backend(answer())
    async with memory_gateway(_keyed(str(tmp_path / "keys.db")), {"b.test:80": backend}) as gw:
        service = gw.runtime.keys
        revoked, revoked_secret = await service.create_key(name="gone")
        await service.revoke_key(revoked.id)
        _, good = await service.create_key(name="good")
        strict, strict_events = await traced(gw, "GET", "/strict/a", headers=_bearer(revoked_secret))
        permissive, permissive_events = await traced(gw, "GET", "/open/a", headers=_bearer(revoked_secret))
        unknown, unknown_events = await traced(gw, "GET", "/strict/a", headers=_bearer("sk-tp-not-a-key"))
        passed, passed_events = await traced(gw, "GET", "/open/a", headers=_bearer("sk-tp-not-a-key"))
        static, static_events = await traced(gw, "GET", "/static/a", headers=_bearer(good))
    assert (strict.status, strict.body) == (401, b"api key authentication failure: key revoked")
    assert (permissive.status, permissive.body) == (401, b"api key authentication failure: key revoked")
    for events in (strict_events, permissive_events):
        (rejected,) = policy_events(events, "apiKey")
        assert (rejected["severity"], rejected["result"], rejected["reason"]) == ("warn", "rejected", "key revoked")
        why = _why(events)
        assert (why["policy"], why["check"], why["key"]) == ("apiKey", "revoked", {"id": revoked.id, "name": "gone"})
        assert why["detail"].startswith("revoked ")
    assert (unknown.status, unknown.body) == (401, b"api key authentication failure: invalid credentials")
    assert _why(unknown_events)["detail"] == "neither a key of the policy nor a runtime key matches"
    assert passed.status == 200 and [e["result"] for e in policy_events(passed_events, "apiKey")] == ["skipped"]
    # a policy without runtimeKeys never asks the store
    assert static.status == 401 and _why(static_events)["detail"] == "no key of the policy matches"
    assert len(backend.received) == 1


async def test_mcp_and_jwt_authentication_with_a_remote_key_set_fetch_it_for_the_first_token(nursery):
    """A ``jwks`` URL: the stage's verifier reads the runtime's remote set for that URL, fetched on
    the first unknown ``kid``; mcpAuthentication checks the audience against its audiences."""
    import json

    from tests.jwks_server import JwksServer
    from tests.jwt_helpers import AUDIENCE, ISSUER, jwks, make_key

    key = make_key("ES256", "k1")
    server = await nursery.start(JwksServer(jwks(key)).serve)
    other = await nursery.start(JwksServer(jwks(key)).serve)  # jwtAuth's: a set no other stage fetches
    config = routes(f"""
- matches: [{{path: {{pathPrefix: /jwt}}}}]
  policies:
    jwtAuth: {{mode: strict, providers: [{{issuer: "{ISSUER}", jwks: {{url: {json.dumps(other.url)}}}}}]}}
  backends: [{{host: "b.test:80"}}]
- policies:
    mcpAuthentication: {{mode: strict, issuer: "{ISSUER}", audiences: [{AUDIENCE}], jwks: {{url: {json.dumps(server.url)}}}}}
  backends: [{{host: "b.test:80"}}]
""")
    backend = Backend(answer())
    async with memory_gateway(config, {"b.test:80": backend}) as gw:
        ok = await gw.request("GET", "/mcp", headers=_bearer(key.token()))
        wrong, wrong_events = await traced(gw, "GET", "/mcp", headers=_bearer(key.token(aud="someone-else")))
        registered = gw.runtime.jwks.get(server.url)
        jwt_ok = await gw.request("GET", "/jwt", headers=_bearer(key.token()))
    assert ok.status == 200 and server.fetches == 1 and registered.last_success is not None
    assert jwt_ok.status == 200 and other.fetches == 1
    assert (wrong.status, wrong.body) == (401, b"authentication failure: token has the wrong audience")
    why = _why(wrong_events)
    assert (why["policy"], why["check"], why["audience"]) == ("mcpAuthentication", "aud", "someone-else")
    assert [r.header("authorization") for r in backend.received] == [None, None]


# --- the why of each refusal, read off the raised error ------------------------------------------


async def test_each_basic_auth_refusal_says_which_check_failed_and_for_whom():
    import pytest

    from tests.e2e.test_basic_auth import BOB
    from tests.unit.policies.test_basic_auth_rules import exchange
    from tests.unit.proxy.test_header_stages import RecordingTracer
    from trioproxy.errors import BasicAuthenticationFailed
    from trioproxy.policies.basic_auth import BasicAuthSpec
    from trioproxy.proxy.stages import BasicAuthStage

    stage = BasicAuthStage(BasicAuthSpec((("bob", BOB),), realm="Ops", mode="strict"))
    expected = {
        None: {"check": "missing", "detail": "no basic authentication credentials found"},
        "bob": {"check": "malformed", "detail": "the credentials are not base64 user:password"},
        "eve:builder": {"check": "user", "detail": "unknown user 'eve'", "username": "eve"},
        "bob:no": {"check": "password", "detail": "wrong password for user 'bob'", "username": "bob"},
    }
    for credentials, why in expected.items():
        with pytest.raises(BasicAuthenticationFailed) as failed:
            await stage.request(exchange(RecordingTracer(), credentials))
        assert failed.value.why == {"policy": "basicAuth", **why}
        assert list(failed.value.headers) == [(b"www-authenticate", b'Basic realm="Ops"')]


AUTHZ = routes("""
- name: authz
  matches: [{path: {pathPrefix: /authz}}]
  policies:
    authorization: {rules: [{deny: 'request.headers["x-who"] == "eve"'}, 'request.headers["x-who"] == "bob"']}
  backends: [{host: "b.test:80"}]
- name: keyed
  matches: [{path: {pathPrefix: /keyed}}]
  policies: {apiKey: {mode: strict, keys: [{key: k1}]}}
  backends: [{host: "b.test:80"}]
""")


async def test_an_authorization_refusal_names_its_rule_and_an_api_key_refusal_its_check(autojump_clock):
    backend = Backend(answer())
    async with memory_gateway(AUTHZ, {"b.test:80": backend}) as gw:
        denied, denied_events = await traced(gw, "GET", "/authz", headers=[(b"x-who", b"eve")])
        unmatched, unmatched_events = await traced(gw, "GET", "/authz", headers=[(b"x-who", b"carol")])
        allowed = await gw.request("GET", "/authz", headers=[(b"x-who", b"bob")])
        keyless, keyless_events = await traced(gw, "GET", "/keyed")
        unknown, unknown_events = await traced(gw, "GET", "/keyed", headers=_bearer("k2"))
    assert (denied.status, unmatched.status, allowed.status, keyless.status, unknown.status) == (403, 403, 200, 401, 401)
    assert _why(denied_events) == {"policy": "authorization", "rule": 'request.headers["x-who"] == "eve"',
                                   "detail": "deny rule matched"}
    assert _why(unmatched_events) == {"policy": "authorization", "rule": None, "detail": "no allow rule matched"}
    assert _why(keyless_events) == {"policy": "apiKey", "check": "missing", "detail": "no API Key found"}
    assert _why(unknown_events) == {"policy": "apiKey", "check": "unknown", "detail": "no key of the policy matches"}


async def test_a_remote_rate_limit_refusal_or_failure_says_why_and_a_watched_one_shows_the_limit():
    import pytest

    from tests.e2e.test_ratelimit_remote import _response
    from tests.unit.policies.test_ratelimit_remote_rules import FakeClient, exchange, stage_for
    from tests.unit.proxy.test_header_stages import RecordingTracer
    from trioproxy.errors import RateLimited, RateLimitFailed

    with pytest.raises(RateLimitFailed) as failed:
        await stage_for(FakeClient(fail="unreachable"))[0].request(exchange())
    assert failed.value.why == {"policy": "remoteRateLimit", "check": "call", "detail": "unreachable",
                                "failureMode": "failClosed"}
    over = _response(2, (5, 0, 2))
    over.statuses[0].code = 2  # the descriptor the service refused
    with pytest.raises(RateLimited) as limited:
        await stage_for(FakeClient(over))[0].request(exchange())
    assert limited.value.why == {"policy": "remoteRateLimit", "descriptor": [["path", "/p"]],
                                 "limit": {"requestsPerUnit": 5, "unit": "MINUTE"}, "remaining": 0,
                                 "resetSeconds": 7}
    # the service sent its own x-ratelimit headers: the limit is still looked up for a watcher
    tracer = RecordingTracer()
    stage, _ = stage_for(FakeClient(_response(1, (10, 4, 1), headers=[("X-RateLimit-Limit", "10")])))
    await stage.request(exchange(tracer))
    assert (tracer.events[-1][1]["limit"], tracer.events[-1][1]["remaining"]) == (10, 4)


async def test_a_descriptor_with_a_cel_entry_is_read_from_the_activation_beside_a_direct_one():
    from tests.unit.policies.test_ratelimit_remote_rules import FakeClient, exchange, stage_for
    from trioproxy.policies.ratelimit_remote import RemoteDescriptor, RemoteEntry

    client = FakeClient()
    stage, _ = stage_for(client, RemoteDescriptor((RemoteEntry("path", "request.path"),
                                                   RemoteEntry("user", '"u-" + request.headers["x-user"]'))))
    assert not stage.policy.direct
    await stage.request(exchange())
    assert client.calls == [("gw", [([("path", "/p"), ("user", "u-ann")], None)], 0.25)]


def _policies(body: str) -> Any:
    from trioproxy.config import parse_config

    return parse_config(routes(body), env={}).binds[0].listeners[0].routes[0].policies


def _bare(scope: dict[str, Any]) -> Any:
    from trioproxy.proxy.exchange import Exchange

    return Exchange({"type": "http", "method": "GET", **scope}, _never, _never, arrival=0.0)


async def test_csrf_compares_the_origin_with_the_scheme_and_the_host_with_its_port():
    import pytest

    from trioproxy.errors import CsrfValidationFailed
    from trioproxy.proxy.stages import CsrfStage

    stage = CsrfStage(_policies("""
- policies: {csrf: {}}
  backends: [{host: "b.test:80"}]
""").csrf)

    def post(origin: bytes, host: bytes, **scope: Any) -> Any:
        return _bare({"method": "POST", "path": "/", "headers": [(b"host", host), (b"origin", origin)], **scope})

    await stage.request(post(b"http://shop.example", b"shop.example"))  # no scheme in the scope: http
    await stage.request(post(b"https://shop.example", b"shop.example", scheme="https"))
    await stage.request(post(b"http://shop.example:8080", b"shop.example:8080"))  # the Host's port counts
    with pytest.raises(CsrfValidationFailed) as refused:
        await stage.request(post(b"http://shop.example", b"shop.example", scheme="https"))
    assert refused.value.why == {"policy": "csrf", "detail": "Origin http://shop.example is not https://shop.example"}


async def test_a_prefix_rewrite_reads_a_bare_asgi_scope_without_a_route_match():
    from trioproxy.proxy.stages import UrlRewriteStage

    stage = UrlRewriteStage(_policies("""
- policies: {urlRewrite: {path: {prefix: /v2}}}
  backends: [{host: "b.test:80"}]
""").url_rewrite)
    x = _bare({"path": "/a b", "headers": []})
    await stage.request(x)
    assert x.upstream_path == "/v2/a b"


# --- the compiler: limiters kept across reloads, decisions counted under their key ---------------------

LIMITED = routes("""
- name: limited
  matches: [{{path: {{pathPrefix: /limited}}}}]
  policies: {{localRateLimit: [{{maxTokens: {tokens}, tokensPerFill: 1, fillInterval: 60s}}]}}
  backends: [{{host: "b.test:80"}}]
- name: each
  matches: [{{path: {{pathPrefix: /each}}}}]
  policies: {{localRateLimit: [{{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s, perClientAddress: true}}]}}
  backends: [{{host: "b.test:80"}}]
- name: remote
  matches: [{{path: {{pathPrefix: /remote}}}}]
  policies:
    remoteRateLimit:
      host: "127.0.0.1:1"
      domain: gw
      failureMode: failClosed
      descriptors:
      - entries: [{{key: path, value: request.path}}]
  backends: [{{host: "b.test:80"}}]
""")


def _decisions(gw: Any) -> dict[tuple[str, str, str], float]:
    return {(s.labels["policy"], s.labels["key"], s.labels["result"]): s.value
            for family in gw.runtime.metrics.registry.collect() if family.name == "trioproxy_ratelimit_decisions"
            for s in family.samples if s.name.endswith("_total")}


async def test_a_reload_keeps_an_unchanged_routes_limiter_and_each_decision_counts_under_its_route():
    from trioproxy.config import parse_config

    backend = Backend(answer())
    async with memory_gateway(LIMITED.format(tokens=1), {"b.test:80": backend}) as gw:
        statuses = [(await gw.request("GET", "/limited")).status for _ in range(2)]
        for _ in range(2):  # the same config twice: the spent limiter is kept each time
            gw.runtime.apply(parse_config(LIMITED.format(tokens=1), env={}))
            statuses.append((await gw.request("GET", "/limited")).status)
        made: list[str] = []  # the workers' factory shares limiters between processes by this key
        factory = gw.runtime.state.limiter_factory
        gw.runtime.state.limiter_factory = lambda specs, key, now: made.append(key) or factory(specs, key, now)
        gw.runtime.apply(parse_config(LIMITED.format(tokens=2), env={}))  # changed: a fresh limiter
        statuses.append((await gw.request("GET", "/limited")).status)
        each = [(await gw.request("GET", "/each")).status for _ in range(2)]
        remote = await gw.request("GET", "/remote")
        decisions = _decisions(gw)
        keys = {route.name: route.key for route in gw.runtime.state.config.binds[0].listeners[0].routes}
    assert statuses == [200, 429, 429, 429, 200] and each == [200, 429] and made == [keys["limited"]]
    assert remote.status == 500 and len(backend.received) == 3
    assert decisions[("localRateLimit", keys["limited"], "rejected")] == 3
    assert decisions[("localRateLimit", keys["each"], "rejected")] == 1
    assert decisions[("remoteRateLimit", keys["remote"], "failed")] == 1


MIRROR_RETRY = routes("""
- name: mirrored
  matches: [{path: {pathPrefix: /m}}]
  policies: {requestMirror: {backend: {host: "m.test:80"}, percentage: 0.5}}
  backends: [{host: "b.test:80"}]
- name: retried
  matches: [{path: {pathPrefix: /r}}]
  policies: {retry: {attempts: 1, codes: [503]}}
  backends: [{host: "r.test:80"}]
""")


async def test_a_mirror_copies_the_requests_its_draw_picks_and_retry_reaches_the_call(autojump_clock, monkeypatch):
    from tests.memory_harness import answers
    from trioproxy.proxy import stages

    backend, mirror, flaky = Backend(answer()), Backend(answer()), Backend(answers(503, 200))
    async with memory_gateway(MIRROR_RETRY, {"b.test:80": backend, "m.test:80": mirror, "r.test:80": flaky}) as gw:
        for draw, path in ((0.4, "/m/picked"), (0.5, "/m/not-picked")):  # copied when the draw is below 0.5
            monkeypatch.setattr(stages.random, "random", lambda draw=draw: draw)
            assert (await gw.request("GET", path)).status == 200
        await trio.testing.wait_all_tasks_blocked()
        retried = await gw.request("GET", "/r")
    assert [r.target for r in backend.received] == ["/m/picked", "/m/not-picked"]
    assert [r.target for r in mirror.received] == ["/m/picked"]
    assert retried.status == 200 and len(flaky.received) == 2


async def test_a_jwt_refusal_says_which_check_failed(autojump_clock):
    config, first, (second, _) = _jwt_config()
    async with memory_gateway(config, {"b.test:80": Backend(answer())}) as gw:
        _, missing = await traced(gw, "GET", "/jwt")
        _, crossed = await traced(gw, "GET", "/jwt", headers=_bearer(second.token()))
        _, expired = await traced(gw, "GET", "/jwt", headers=_bearer(first.token(exp=1)))
    assert _why(missing) == {"policy": "jwtAuth", "check": "missing", "detail": "no bearer token found"}
    assert (_why(crossed)["policy"], _why(crossed)["check"]) == ("jwtAuth", "iss")  # the other issuer's key
    assert (_why(expired)["policy"], _why(expired)["check"]) == ("jwtAuth", "exp")


CORS = routes("""
- policies: {cors: {allowOrigins: ["https://app.example"]}}
  backends: [{host: "b.test:80"}]
""")


async def test_the_trace_names_each_phase_with_its_policies_and_an_empty_origin_as_sent(autojump_clock):
    async with memory_gateway(CORS, {"b.test:80": Backend(answer())}) as gw:
        _, events = await traced(gw, "GET", "/x", headers=[(b"origin", b"")])
    selections = [e for e in events if e["type"] == "policySelection"]
    assert [e["phase"] for e in selections] == ["gateway", "route", "backend"]
    assert selections[1]["effectivePolicy"]["cors"]["allowOrigins"] == ["https://app.example"]
    assert [(e["result"], e["origin"]) for e in policy_events(events, "cors")] == [("disallowed origin", "")]


async def test_a_tokens_policy_whose_tokens_descriptor_was_skipped_charges_nothing():
    from types import SimpleNamespace

    from tests.unit.policies.test_ratelimit_remote_rules import TOKENS, FakeAfter, FakeClient, exchange, stage_for
    from trioproxy.policies.ratelimit_remote import RemoteDescriptor, RemoteEntry

    after = FakeAfter()
    client = FakeClient()
    stage, _ = stage_for(client, RemoteDescriptor((RemoteEntry("path", "request.path"),)), TOKENS,
                         after_response=after)
    x = exchange(headers=[(b"host", b"h")])  # no x-user: only the path descriptor is sent
    await stage.request(x)
    x.usage = SimpleNamespace(total_tokens=42)
    stage.finish(x)
    assert client.calls == [("gw", [([("path", "/p")], None)], 0.25)]
    assert x.remote_charges == [] and after.spawned == []


async def test_the_verified_password_cache_keeps_the_newest_entries_up_to_its_size(monkeypatch):
    from tests.e2e.test_basic_auth import BOB
    from trioproxy.policies import basic_auth
    from trioproxy.policies.basic_auth import BasicAuthSpec
    from trioproxy.proxy.stages import BasicAuthStage

    verdict = {"ok": True}
    monkeypatch.setattr(basic_auth, "verify_password", lambda hashed, password: verdict["ok"])
    monkeypatch.setattr(basic_auth, "CACHE_SIZE", 2)
    stage = BasicAuthStage(BasicAuthSpec((("bob", BOB),)))
    for password in (b"1", b"2", b"3"):
        assert await stage._verify("bob", password, BOB)
    verdict["ok"] = False  # from now on only the cache says yes
    assert [await stage._verify("bob", p, BOB) for p in (b"1", b"2", b"3")] == [False, True, True]
