"""Why, for every decision (issue 34): each refusal's reason, and the attempts of a retried or
failed-over request, in the trace's ``requestFinished``, the history (``/api/requests``) and the
access log, through a real in-process gateway; the client's body says no more than before."""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest
import trio

from tests.conftest import free_port, start_gateway, start_routes
from tests.e2e.test_basic_auth import basic, users_yaml
from tests.e2e.test_keys_gateway import start_keyed
from tests.e2e.test_trace import watch
from tests.jwt_helpers import AUDIENCE, ISSUER, jwks, make_key
from tests.rls_helpers import ratelimit_server


@pytest.fixture(scope="module")
def key():
    return make_key("ES256", "signing-key")


def config(backend: int, dead: int, key) -> str:
    document = json.dumps(json.dumps(jwks(key)))  # a YAML double-quoted string holding the JWKS JSON
    text = f"""\
config:
  history: {{size: 100}}
  backend: {{responseHeaderTimeout: 300ms}}
binds:
- port: {{port}}
  listeners:
  - name: main
    routes:
    - name: limited
      matches: [{{path: {{pathPrefix: /limited}}}}]
      policies:
        localRateLimit: [{{maxTokens: 5, tokensPerFill: 5, fillInterval: 1h}}, {{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: perclient
      matches: [{{path: {{pathPrefix: /perclient}}}}]
      policies:
        localRateLimit: [{{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s, perClientAddress: true}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: jwt
      matches: [{{path: {{pathPrefix: /jwt}}}}]
      policies:
        jwtAuth: {{mode: strict, issuer: "{ISSUER}", audiences: [{AUDIENCE}], jwks: {document}}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: basic
      matches: [{{path: {{pathPrefix: /basic}}}}]
      policies:
        basicAuth:
          mode: strict
          htpasswd: {users_yaml()}
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: key
      matches: [{{path: {{pathPrefix: /key}}}}]
      policies:
        apiKey: {{mode: strict, keys: [{{key: k1}}]}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: authz
      matches: [{{path: {{pathPrefix: /authz}}}}]
      policies:
        authorization: {{rules: [{{deny: 'request.headers["x-user"] == "mallory"'}}]}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: forms
      matches: [{{path: {{pathPrefix: /forms}}}}]
      policies: {{csrf: {{}}}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: flaky
      matches: [{{path: {{pathPrefix: /flaky}}}}]
      policies:
        retry: {{attempts: 1, codes: [503]}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: dead
      matches: [{{path: {{pathPrefix: /dead}}}}]
      policies:
        retry: {{attempts: 2, codes: [503]}}
      backends: [{{host: "127.0.0.1:{dead}"}}]
    - name: unreachable
      matches: [{{path: {{pathPrefix: /unreachable}}}}]
      backends: [{{host: "127.0.0.1:{dead}"}}]
    - name: hungdefault
      matches: [{{path: {{pathPrefix: /hang}}, headers: [{{name: x-default, value: {{exact: "1"}}}}]}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: hung
      matches: [{{path: {{pathPrefix: /hang}}}}]
      policies:
        timeout: {{backendRequestTimeout: 200ms}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: deadline
      matches: [{{path: {{pathPrefix: /slow}}}}]
      policies:
        timeout: {{requestTimeout: 200ms}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: garbled
      matches: [{{path: {{pathPrefix: /garbage}}}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: hosted
      hostnames: [api.example.com]
      matches: [{{path: {{pathPrefix: /hosted}}}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: posts
      matches: [{{method: POST, path: {{pathPrefix: /posts}}}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: envs
      matches: [{{path: {{pathPrefix: /envs}}, headers: [{{name: x-env, value: {{exact: prod}}}}]}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: search
      matches: [{{path: {{exact: /search}}, query: [{{name: q, value: {{regex: "[a-z]+"}}}}]}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""
    return text.replace("{", "{{").replace("}", "}}").replace("{{port}}", "{port}")


@pytest.fixture
async def gw(nursery, backend, key):
    dead = free_port()  # nothing listens there: each connection is refused
    return await start_gateway(nursery, config(backend.port, dead, key), port=free_port())


async def why_of(nursery, gw, log_lines, method: str, path: str, **kwargs) -> tuple[httpx.Response, dict]:
    """One request, watched: its answer, and its ``why`` as the trace, the history and the access log
    have it (the three must agree)."""
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        response = await client.request(method, path, **kwargs)
    events = await reader.events()
    finished = events[-1]["message"]
    assert finished["type"] == "requestFinished" and finished["status"] == response.status_code
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin:  # recorded before the trace ends
        entries = (await admin.get("/api/requests", params={"limit": "1"})).json()
    assert entries[0]["path"] == path.split("?")[0]
    [line] = [line for line in await log_lines() if line["message"] == "request"][-1:]
    assert line["http.path"] == path.split("?")[0]
    why = finished.get("why")
    assert entries[0]["why"] == why and line.get("why") == why, (entries[0]["why"], line.get("why"))
    assert why is not None
    return response, why


async def test_a_local_limit_names_its_entry_remaining_and_reset(nursery, gw, log_lines):
    async with gw.client() as client:
        assert (await client.get("/limited")).status_code == 200
    response, why = await why_of(nursery, gw, log_lines, "GET", "/limited")
    assert (response.status_code, response.text) == (429, "rate limit exceeded")
    assert why == {"policy": "localRateLimit", "index": 1,
                   "limit": {"maxTokens": 1, "tokensPerFill": 1, "fillInterval": 60.0, "type": "requests"},
                   "remaining": 0, "resetSeconds": why["resetSeconds"]}
    assert 0 < why["resetSeconds"] <= 60 and response.headers["retry-after"] == str(why["resetSeconds"])


async def test_a_per_client_limit_names_the_address(nursery, gw, log_lines):
    async with gw.client() as client:
        assert (await client.get("/perclient")).status_code == 200
    response, why = await why_of(nursery, gw, log_lines, "GET", "/perclient")
    assert response.status_code == 429
    assert (why["policy"], why["index"], why["perClientAddress"], why["remaining"]) == (
        "localRateLimit", 0, "127.0.0.1", 0)


async def test_an_expired_token_says_how_long_ago(nursery, gw, log_lines, key):
    token = key.token(exp=int(time.time()) - 192)
    response, why = await why_of(nursery, gw, log_lines, "GET", "/jwt", headers={"authorization": f"Bearer {token}"})
    assert (response.status_code, response.text) == (401, "authentication failure: token has expired")
    assert (why["policy"], why["check"], why["kid"], why["issuer"]) == ("jwtAuth", "exp", "signing-key", ISSUER)
    assert re.fullmatch(r"expired 3m1[23]s ago", why["detail"]), why


@pytest.mark.parametrize("case, check, detail", [
    ("audience", "aud", 'audience "someone-else", expected one of ["trioproxy"]'),
    ("issuer", "iss", f'issuer "https://other.example", expected "{ISSUER}"'),
    ("kid", "kid", 'no provider publishes key "rotated-away"'),
    ("signature", "signature", 'the signature does not verify with key "signing-key"'),
    ("missing", "missing", "no bearer token found"),
])
async def test_each_token_check_is_named(nursery, gw, log_lines, key, case, check, detail):
    token = {"audience": lambda: key.token(aud="someone-else"),
             "issuer": lambda: key.token(iss="https://other.example"),
             "kid": lambda: key.token(kid="rotated-away"),
             "signature": lambda: make_key("ES256", "signing-key").token(),
             "missing": lambda: None}[case]()
    headers = {"authorization": f"Bearer {token}"} if token else {}
    response, why = await why_of(nursery, gw, log_lines, "GET", "/jwt", headers=headers)
    assert response.status_code == 401 and "expected" not in response.text  # the detail is the operator's
    assert (why["policy"], why["check"], why["detail"]) == ("jwtAuth", check, detail)


@pytest.mark.parametrize("headers, check, detail", [
    (basic("alice", "nope"), "password", "wrong password for user 'alice'"),
    (basic("mallory", "x"), "user", "unknown user 'mallory'"),
    ({}, "missing", "no basic authentication credentials found"),
])
async def test_basic_auth_names_its_check(nursery, gw, log_lines, headers, check, detail):
    response, why = await why_of(nursery, gw, log_lines, "GET", "/basic", headers=headers)
    assert (response.status_code, response.text) == (
        401, "basic authentication failure: " + ("invalid credentials" if headers else detail))
    assert (why["policy"], why["check"], why["detail"]) == ("basicAuth", check, detail)


async def test_an_unknown_api_key_and_a_denying_rule(nursery, gw, log_lines):
    response, why = await why_of(nursery, gw, log_lines, "GET", "/key", headers={"authorization": "Bearer nope"})
    assert (response.status_code, why) == (401, {"policy": "apiKey", "check": "unknown",
                                                 "detail": "no key of the policy matches"})
    response, why = await why_of(nursery, gw, log_lines, "GET", "/authz", headers={"x-user": "mallory"})
    assert (response.status_code, response.text) == (403, "authorization failed")
    assert why == {"policy": "authorization", "rule": 'request.headers["x-user"] == "mallory"',
                   "detail": "deny rule matched"}


async def test_a_cross_site_post_names_its_origin(nursery, gw, log_lines):
    response, why = await why_of(nursery, gw, log_lines, "POST", "/forms", headers={"origin": "https://evil.example"})
    assert (response.status_code, response.text) == (403, "CSRF validation failed")
    assert why == {"policy": "csrf", "detail": f"Origin https://evil.example is not http://{gw.url[7:]}"}


async def test_a_404_lists_each_route_and_what_it_missed(nursery, gw, log_lines):
    response, why = await why_of(nursery, gw, log_lines, "GET", "/search?q=42", headers={"x-env": "dev"})
    assert (response.status_code, response.text) == (404, "route not found")  # no route structure for the client
    routes = {r["route"]: (r["missed"], r["detail"]) for r in why["routes"]}
    assert why["evaluated"] == 18 and len(routes) == 18
    assert routes["default/hosted"] == ("hostname", "host '127.0.0.1' is not api.example.com")
    assert routes["default/limited"] == ("path", "path '/search' is not pathPrefix '/limited'")
    assert routes["default/search"] == ("query", "query q is '42', wanted regex '[a-z]+'")
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin:  # CEL over it
        found = (await admin.get("/api/requests", params={"expression": "response.why.evaluated == 18"})).json()
    assert [e["path"] for e in found] == ["/search"]
    response, why = await why_of(nursery, gw, log_lines, "GET", "/posts/1")
    routes = {r["route"]: (r["missed"], r["detail"]) for r in why["routes"]}
    assert routes["default/posts"] == ("method", "method GET is not POST")
    response, why = await why_of(nursery, gw, log_lines, "GET", "/envs", headers={"x-env": "dev"})
    routes = {r["route"]: (r["missed"], r["detail"]) for r in why["routes"]}
    assert routes["default/envs"] == ("headers", "header x-env is 'dev', wanted exact 'prod'")


async def test_a_retried_success_lists_its_attempts(nursery, gw, log_lines):
    response, why = await why_of(nursery, gw, log_lines, "GET", "/flaky?fail=1&key=why")
    assert response.status_code == 200
    backend = why["attempts"][0]["backend"]
    assert why == {"attempts": [{"backend": backend, "outcome": "status 503"}, {"backend": backend, "outcome": "ok"}]}


async def test_a_failed_failover_lists_every_attempt(nursery, gw, log_lines):
    response, why = await why_of(nursery, gw, log_lines, "GET", "/dead")
    assert response.status_code == 503
    assert [a["outcome"] for a in why["attempts"]] == [response.text] * 3
    assert "refused" in response.text


async def test_an_unreachable_backend_names_it_and_its_address(nursery, gw, log_lines):
    response, why = await why_of(nursery, gw, log_lines, "GET", "/unreachable")
    assert response.status_code == 503 and "refused" in response.text
    assert why["target"].startswith("127.0.0.1:") and why["detail"] == response.text
    assert set(why) == {"backend", "target", "detail"} and why["backend"]


async def test_a_backend_that_answers_garbage_is_named(nursery, gw, log_lines):
    response, why = await why_of(nursery, gw, log_lines, "GET", "/garbage")
    assert response.status_code == 502
    assert set(why) == {"backend", "target", "detail"} and why["detail"] == response.text


async def test_a_backend_timeout_names_its_setting_and_limit(nursery, gw, log_lines):
    response, why = await why_of(nursery, gw, log_lines, "GET", "/hang")
    assert (response.status_code, response.text) == (504, "upstream call timeout")
    assert why == {"policy": "timeout", "check": "backendRequestTimeout", "limit": 0.2, "backend": why["backend"],
                   "detail": f"backend {why['backend']} sent no response headers within 0.2s of the call's start"}


async def test_a_backend_without_a_timeout_policy_names_the_response_header_timeout(nursery, gw, log_lines):
    response, why = await why_of(nursery, gw, log_lines, "GET", "/hang", headers={"x-default": "1"})
    assert (response.status_code, response.text) == (504, "upstream call timeout")
    assert why == {"policy": "timeout", "check": "responseHeaderTimeout", "limit": 0.3, "backend": why["backend"],
                   "detail": f"backend {why['backend']} sent no response headers within 0.3s of the call's start"}


async def test_a_request_timeout_says_where_the_request_was(nursery, gw, log_lines):
    response, why = await why_of(nursery, gw, log_lines, "GET", "/slow?ms=5000")
    assert (response.status_code, response.text) == (504, "request timeout")
    assert why == {"policy": "timeout", "check": "requestTimeout", "limit": 0.2,
                   "detail": "no response headers within 0.2s of the request's arrival; the backend call was under way"}


async def test_a_plain_success_has_no_why(nursery, gw, log_lines):
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        assert (await client.get("/flaky?fail=0&key=plain")).status_code == 200
    assert "why" not in (await reader.events())[-1]["message"]
    assert "why" not in [line for line in await log_lines() if line["message"] == "request"][-1]
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin:
        with trio.fail_after(10):
            while not (entries := (await admin.get("/api/requests")).json()):
                await trio.sleep(0.01)
    assert entries[0]["why"] is None


# --- remote limits (a real `trioproxy ratelimit-server`) and runtime keys (a real SQLite store) ----------

RLS = """
domain: why
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1}
"""

REMOTE = """
- name: remote
  policies:
    remoteRateLimit:
      host: "{rls}"
      domain: why
      descriptors:
      - entries: [{{key: user, value: 'request.headers["x-user"]'}}]
  backends: [{{host: "127.0.0.1:{backend}"}}]
"""


@pytest.fixture(scope="module")
def rls(tmp_path_factory):
    config = tmp_path_factory.mktemp("rls") / "rls.yaml"
    config.write_text(RLS)
    with ratelimit_server(config) as server:  # in-process counters (its default store)
        yield server


async def test_a_remote_limit_names_its_descriptor(nursery, backend, rls, log_lines):
    gw = await start_routes(nursery, REMOTE, port=free_port(), rls=rls.target, backend=backend.port)
    user = f"why-{time.time_ns()}"
    async with gw.client() as client:
        assert (await client.get("/", headers={"x-user": user})).status_code == 200
    response, why = await why_of(nursery, gw, log_lines, "GET", "/", headers={"x-user": user})
    assert (response.status_code, response.text) == (429, "rate limit exceeded")
    assert why == {"policy": "remoteRateLimit", "descriptor": [["user", user]],
                   "limit": {"requestsPerUnit": 1, "unit": "DAY"}, "remaining": 0,
                   "resetSeconds": why["resetSeconds"]}
    assert 0 < why["resetSeconds"] <= 86400


async def test_an_unreachable_rate_limit_service_says_so(nursery, backend, log_lines):
    gw = await start_routes(nursery, REMOTE, port=free_port(), rls=f"127.0.0.1:{free_port()}", backend=backend.port)
    response, why = await why_of(nursery, gw, log_lines, "GET", "/", headers={"x-user": "u"})
    assert (response.status_code, response.text) == (500, "rate limit failed")
    assert (why["policy"], why["check"], why["failureMode"]) == ("remoteRateLimit", "call", "failClosed")
    assert why["detail"]


async def test_runtime_keys_budget_revoked_and_expired(nursery, tmp_path, log_lines):
    keyed = await start_keyed(nursery, tmp_path)
    gw = keyed.gateway
    secret, key = await keyed.create_key(name="plain", limits={"requests": {"minute": 1}})
    headers = {"authorization": f"Bearer {secret}"}
    async with gw.client() as client:
        assert (await client.get("/plain/v1/models", headers=headers)).status_code == 200
    response, why = await why_of(nursery, gw, log_lines, "GET", "/plain/v1/models", headers=headers)
    assert response.status_code == 429 and response.text.startswith("budget exceeded: key plain's")
    assert why == {"policy": "budget", "subject": "key plain", "metric": "requests", "window": "minute",
                   "limit": 1, "resetsAt": why["resetsAt"]}
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:00Z", why["resetsAt"]) and why["resetsAt"] in response.text

    assert (await keyed.admin.delete(f"/api/keys/{key['id']}")).status_code == 200
    response, why = await why_of(nursery, gw, log_lines, "GET", "/plain/v1/models", headers=headers)
    assert (response.status_code, response.text) == (401, "api key authentication failure: key revoked")
    assert (why["policy"], why["check"], why["key"]) == ("apiKey", "revoked", {"id": key["id"], "name": "plain"})
    assert re.fullmatch(r"revoked \d+s ago", why["detail"]), why

    response, why = await why_of(nursery, gw, log_lines, "GET", "/plain/v1/models",
                                 headers={"authorization": "Bearer sk-tp-nobody"})
    assert (response.status_code, why["check"], why["detail"]) == (
        401, "unknown", "neither a key of the policy nor a runtime key matches")

    expired, old = await keyed.create_key(name="old", expiresAt="2020-01-01T00:00:00Z")
    response, why = await why_of(nursery, gw, log_lines, "GET", "/plain/v1/models",
                                 headers={"authorization": f"Bearer {expired}"})
    assert (response.status_code, why["check"], why["key"]["name"]) == (401, "expired", "old")
    assert re.fullmatch(r"expired \d+d(\d+h)?(\d+m)?(\d+s)? ago", why["detail"]), why
    await keyed.admin.aclose()


LLM_LIMITED = """\
config:
  history: {{size: 100}}
frontendPolicies: {{http: {{maxBufferSize: 200, requestBodyIdleTimeout: 300ms}}}}
llm:
  port: {port}
  models:
  - name: gpt-*
    provider: openAI
    params: {{hostOverride: "127.0.0.1:{mock}"}}
"""


async def test_an_llm_body_too_large_or_too_slow_and_an_unknown_model(nursery, log_lines):
    from fixtures.mock_openai import MockOpenAI

    mock = MockOpenAI()
    await nursery.start(mock.serve)
    gw = await start_gateway(nursery, LLM_LIMITED, port=free_port(), mock=mock.port)
    chat = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 300}]}
    response, why = await why_of(nursery, gw, log_lines, "POST", "/v1/chat/completions", json=chat)
    assert (response.status_code, why) == (413, {"check": "maxBufferSize", "limit": 200,
                                                 "detail": "the body must be buffered here and passed 200 bytes"})
    response, why = await why_of(nursery, gw, log_lines, "POST", "/v1/chat/completions", json={"model": "llama"})
    assert response.json()["error"]["code"] == "model_not_found"
    assert why == {"policy": "llm", "check": "model_not_found", "detail": "model 'llama' matches none of 'gpt-*'"}

    # a body that stops arriving: 408 once requestBodyIdleTimeout passes without a byte
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))
        await stream.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += await stream.receive_some()
        await stream.aclose()
    assert answer.startswith(b"HTTP/1.1 408 ")
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin:
        [entry] = (await admin.get("/api/requests", params={"limit": "1"})).json()
    assert entry["why"] == {"check": "requestBodyIdleTimeout", "limit": 0.3, "detail": "no request body bytes for 0.3s"}
