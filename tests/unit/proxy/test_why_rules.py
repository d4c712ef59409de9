"""The pure parts of a request's ``why`` (docs/history.md, "Why"): the 404 route-miss explainer,
a local limiter's and a rate limit service's refusal, a token's failed check, the attempts list,
and the duration text."""

from __future__ import annotations

import json
import logging
import textwrap
from types import SimpleNamespace

import pytest

from tests.jwt_helpers import AUDIENCE, ISSUER, jwks, make_key, unsigned_token
from tests.memory_harness import Backend, answer, memory_gateway
from tests.unit.proxy.test_request_telemetry_rules import AccessLog, exchange
from tests.unit.proxy.test_resilience_memory import limited, openai, traced
from trioproxy.config import parse_config
from trioproxy.errors import BudgetExceeded, KeyRefused, duration_text
from trioproxy.policies.jwt import JwksSource, JwtFailure, JwtVerifier, KeyHolder, ProviderSpec, parse_jwks
from trioproxy.policies.ratelimit_local import LocalRateLimiter, LocalRateLimitSpec
from trioproxy.policies.ratelimit_remote import RemoteRateLimitPolicy
from trioproxy.proxy.request_telemetry import log_request
from trioproxy.proxy.routing import Request, explain_misses
from trioproxy.proxy.why import attempts_why, with_attempts
from trioproxy.rls.protos import rls_pb2
from trioproxy.telemetry.access_log import TextFormatter
from trioproxy.telemetry.history import History


def routes(routes_yaml: str):
    text = "binds:\n- port: 3000\n  listeners:\n  - routes:\n" + textwrap.indent(textwrap.dedent(routes_yaml).strip(), "    ")
    return parse_config(text + "\n", env={}).binds[0].listeners[0].routes


def explain(routes_yaml: str, path: str, *, method: str = "GET", host: str = "example.com",
            headers: list[tuple[bytes, bytes]] | None = None, query: bytes = b"", limit: int = 20) -> dict:
    return explain_misses(routes(routes_yaml), Request(method, path, host, headers or [], query), limit)


def misses(why: dict) -> dict[str, tuple[str, str]]:
    return {r["route"].split("/")[-1]: (r["missed"], r["detail"]) for r in why["routes"]}


def test_each_route_says_which_check_missed():
    why = explain("""
        - {name: host, hostnames: ["*.internal", api.example.org]}
        - {name: path, matches: [{path: {exact: /exact}}]}
        - {name: regex, matches: [{path: {regex: "/v[0-9]+/.*"}}]}
        - {name: method, matches: [{method: POST, path: {pathPrefix: /x}}]}
        - {name: header, matches: [{path: {pathPrefix: /x}, headers: [{name: x-env, value: {exact: prod}}]}]}
        - {name: query, matches: [{path: {pathPrefix: /x}, query: [{name: page, value: {regex: "[0-9]+"}}]}]}
    """, "/x/y", headers=[(b"x-env", b"dev")], query=b"page=last")
    assert why["evaluated"] == 6 and "more" not in why
    assert misses(why) == {
        "host": ("hostname", "host 'example.com' is not *.internal, api.example.org"),
        "path": ("path", "path '/x/y' is not exact '/exact'"),
        "regex": ("path", "path '/x/y' is not regex '/v[0-9]+/.*'"),
        "method": ("method", "method GET is not POST"),
        "header": ("headers", "header x-env is 'dev', wanted exact 'prod'"),
        "query": ("query", "query page is 'last', wanted regex '[0-9]+'"),
    }


def test_an_absent_header_and_a_credential_are_not_shown():
    why = explain("""
        - {name: absent, matches: [{headers: [{name: x-tenant, value: {exact: a}}]}]}
        - {name: secret, matches: [{headers: [{name: authorization, value: {exact: "Bearer s3cret"}}]}]}
        - {name: token, matches: [{query: [{name: token, value: {exact: t0ken}}]}]}
    """, "/", headers=[(b"authorization", b"Bearer guess")], query=b"token=guess")
    assert misses(why) == {
        "absent": ("headers", "header x-tenant is absent, wanted exact 'a'"),
        "secret": ("headers", "header authorization is <redacted>, wanted exact <redacted>"),
        "token": ("query", "query token is <redacted>, wanted exact <redacted>"),
    }
    assert "s3cret" not in str(why) and "guess" not in str(why) and "t0ken" not in str(why)


def test_the_alternative_that_got_furthest_explains_the_route():
    why = explain("""
        - name: two
          matches:
          - {path: {pathPrefix: /a}}
          - {method: PUT, path: {pathPrefix: /b}}
    """, "/b/1")
    assert misses(why) == {"two": ("method", "method GET is not PUT")}


def test_the_list_is_capped_and_a_matching_route_is_not_listed():
    many = "\n".join(f"- {{name: r{i}, matches: [{{path: {{exact: /r{i}}}}}]}}" for i in range(30))
    why = explain(many, "/r25", limit=20)
    assert (why["evaluated"], why["more"], len(why["routes"])) == (30, 10, 20)
    why = explain(many, "/r5", limit=20)  # r5 matches (a 404 from elsewhere): only the others are explained
    assert "r5" not in misses(why) and len(why["routes"]) == 19



def test_a_condition_that_holds_is_read_from_the_request_and_a_later_one_explains_the_miss():
    why = explain("""
        - {name: header, matches: [{headers: [{name: x-env, value: {exact: prod}}], query: [{name: b, value: {exact: "2"}}]}]}
        - {name: second, matches: [{query: [{name: a, value: {exact: "1"}}, {name: b, value: {exact: "2"}}]}]}
        - {name: taken, matches: [{headers: [{name: x-env, value: {exact: prod}}], query: [{name: a, value: {exact: "1"}}]}]}
    """, "/", headers=[(b"x-env", b"prod")], query=b"a=1&b=3")
    assert misses(why) == {  # "taken" holds on every check: not listed
        "header": ("query", "query b is '3', wanted exact '2'"),
        "second": ("query", "query b is '3', wanted exact '2'"),
    }


def test_a_blank_query_value_is_shown_as_given_not_as_absent():
    why = explain("""
        - {name: flag, matches: [{query: [{name: flag, value: {exact: "on"}}]}]}
    """, "/", query=b"flag=")
    assert misses(why) == {"flag": ("query", "query flag is '', wanted exact 'on'")}


def test_of_alternatives_that_miss_the_same_check_the_first_explains_the_route():
    why = explain("""
        - name: two
          matches:
          - {path: {exact: /first}}
          - {path: {exact: /second}}
    """, "/other")
    assert misses(why) == {"two": ("path", "path '/other' is not exact '/first'")}


def test_exactly_limit_routes_are_all_listed_with_no_more_and_the_default_limit_is_20():
    many = "\n".join(f"- {{name: r{i}, matches: [{{path: {{exact: /r{i}}}}}]}}" for i in range(25))
    why = explain_misses(routes(many)[:20], Request("GET", "/none", "example.com", []), 20)
    assert (why["evaluated"], len(why["routes"]), "more" in why) == (20, 20, False)
    why = explain_misses(routes(many), Request("GET", "/none", "example.com", []))
    assert (why["evaluated"], len(why["routes"]), why["more"]) == (25, 20, 5)

def test_a_local_limiter_names_the_entry_that_refuses():
    limiter = LocalRateLimiter([LocalRateLimitSpec(10, 10, 3600.0), LocalRateLimitSpec(2, 1, 30.0)], now=0.0)
    assert limiter.admit(0.0).allowed and limiter.admit(1.0).allowed and not limiter.admit(2.0).allowed
    assert limiter.refusal(10.0) == {
        "policy": "localRateLimit", "index": 1, "remaining": 0, "resetSeconds": 20,
        "limit": {"maxTokens": 2, "tokensPerFill": 1, "fillInterval": 30.0, "type": "requests"}}
    before = limiter.observe(10.0)
    limiter.refusal(10.0)
    assert limiter.observe(10.0) == before  # read only


def test_a_service_refusal_names_the_descriptor_it_refused():
    response = rls_pb2.RateLimitResponse(overall_code=2)
    response.statuses.add(code=1, limit_remaining=7)
    over = response.statuses.add(code=2, limit_remaining=0)
    over.current_limit.requests_per_unit = 5
    over.current_limit.unit = 2
    over.current_limit.name = "per-user"
    over.duration_until_reset.seconds = 42
    sent = [[("tenant", "acme")], [("user", "bob")]]
    assert RemoteRateLimitPolicy.refusal(response, sent) == {
        "policy": "remoteRateLimit", "descriptor": [["user", "bob"]],
        "limit": {"requestsPerUnit": 5, "unit": "MINUTE", "name": "per-user"}, "remaining": 0, "resetSeconds": 42}
    bare = rls_pb2.RateLimitResponse(overall_code=2)
    assert RemoteRateLimitPolicy.refusal(bare, []) == {"policy": "remoteRateLimit", "descriptor": None}


@pytest.fixture(scope="module")
def key():
    return make_key("ES256", "k1")


def failure(verifier: JwtVerifier, token: str, now: float) -> dict:
    with pytest.raises(JwtFailure) as refused:
        verifier.verify(token, now)
    return refused.value.why()


def test_a_token_failure_names_its_check(key):
    holder = KeyHolder(parse_jwks(jwks(key)))
    verifier = JwtVerifier([(ProviderSpec(ISSUER, JwksSource(inline="{}"), (AUDIENCE,)), holder)])
    now = 1_000_000
    assert failure(verifier, key.token(exp=now - 192, iat=now - 600), now) == {
        "policy": "jwtAuth", "check": "exp", "detail": "expired 3m12s ago", "kid": "k1", "issuer": ISSUER}
    assert failure(verifier, key.token(exp=now + 600, nbf=now + 3725), now)["detail"] == "valid in 1h2m5s"
    assert failure(verifier, "not.a.token", now) == {
        "policy": "jwtAuth", "check": "malformed", "detail": "the token header is not readable"}
    alg = failure(verifier, unsigned_token("k1"), now)
    assert (alg["check"], alg["alg"]) == ("alg", "none")
    aud = failure(verifier, key.token(aud=["a", "b"]), now)
    assert (aud["check"], aud["audience"], aud["expected"]) == ("aud", ["a", "b"], [AUDIENCE])
    big = JwtVerifier([], max_token_bytes=10)
    assert failure(big, "x" * 11, now)["check"] == "size"
    # a cached token that expired since: its key id is still named
    fresh = key.token(exp=now + 60, iat=now)
    verifier.verify(fresh, now)
    assert failure(verifier, fresh, now + 60 + 61 + 120) == {
        "policy": "jwtAuth", "check": "exp", "detail": "expired 3m1s ago", "kid": "k1", "issuer": ISSUER}
    assert failure(verifier, key.token(exp=now - 192), now)["detail"].startswith("expired")
    assert JwtFailure("r", "kid", kid=None).why("mcpAuthentication") == {
        "policy": "mcpAuthentication", "check": "kid", "detail": "r"}


def test_runtime_key_and_budget_refusals_carry_their_why():
    assert KeyRefused("key revoked", key=("id1", "laptop"), detail="revoked 5s ago").why == {
        "policy": "apiKey", "check": "revoked", "detail": "revoked 5s ago", "key": {"id": "id1", "name": "laptop"}}
    assert KeyRefused("invalid api key").why == {"policy": "apiKey", "check": "unknown", "detail": "invalid api key"}
    assert BudgetExceeded("team lab", "cost", "month", 10.0, 1_800_000_000.0, now=1_799_999_000.0).why == {
        "policy": "budget", "subject": "team lab", "metric": "cost", "window": "month", "limit": 10.0,
        "resetsAt": "2027-01-15T08:00:00Z"}
    assert BudgetExceeded("key k", "tokens", "total", 5, None).why["resetsAt"] is None


def test_attempts_are_listed_in_order_with_the_last_error_for_one_without_an_outcome():
    assert attempts_why(["a", "b"], ["status 503", "ok"], None) == [
        {"backend": "a", "outcome": "status 503"}, {"backend": "b", "outcome": "ok"}]
    assert attempts_why(["a", "b", "a"], ["status 503"], "upstream call timeout") == [
        {"backend": "a", "outcome": "status 503"}, {"backend": "b", "outcome": "upstream call timeout"},
        {"backend": "a", "outcome": "upstream call timeout"}]
    assert attempts_why(["a", "b"], None, None)[1] == {"backend": "b", "outcome": "failed"}


@pytest.mark.parametrize("seconds, text", [
    (0, "0s"), (0.9, "0s"), (59, "59s"), (60, "1m"), (192, "3m12s"), (3600, "1h"), (3725, "1h2m5s"),
    (90061, "1d1h1m1s"), (-192, "3m12s"),
])
def test_duration_text(seconds, text):
    assert duration_text(seconds) == text


def test_the_text_log_format_writes_why_as_one_json_value():
    record = logging.LogRecord("trioproxy.access", logging.INFO, __file__, 1, "request", None, None)
    why = {"policy": "jwtAuth", "check": "exp", "detail": "expired 3m12s ago"}
    record.fields = {"http.status": 401, "why": why}
    line = TextFormatter().format(record)
    text = line.split(" why=", 1)[1]
    assert json.loads(json.loads(text)) == why  # quoted as any value with spaces, then the JSON itself



def test_a_refusals_why_goes_to_the_history_summary_and_the_access_line():
    history, access = History(10), AccessLog()
    x = exchange()
    x.error, x.error_kind = "route not found", "RouteNotFound"
    x.why = {"routes": [], "evaluated": 0}
    log_request(access, history, "b", x, 404, 0.0)  # type: ignore[arg-type]
    [entry] = history.entries
    assert entry.why == {"routes": [], "evaluated": 0}
    [(fields, *_)] = access.lines
    assert fields["why"] == {"routes": [], "evaluated": 0}

# --- through the in-memory gateway (tests/memory_harness.py): virtual models' targets -----------------


async def test_a_failover_lists_its_targets_and_every_target_over_quota_is_named(autojump_clock):
    backends = {"a.test:80": Backend(answer(503)), "b.test:80": openai("from b")}
    async with memory_gateway(limited(""), backends) as gw:
        response, events = await traced(gw)
    assert response.status == 200
    assert events[-1]["why"] == {"attempts": [{"backend": "a", "outcome": "status 503"},
                                              {"backend": "b", "outcome": "ok"}]}

    one = "[{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s}]"
    backends = {"a.test:80": openai("from a"), "b.test:80": openai("from b")}
    async with memory_gateway(limited(one, one), backends) as gw:
        assert [(await traced(gw))[0].status for _ in range(2)] == [200, 200]
        refused, events = await traced(gw)
    assert refused.status == 429
    why = events[-1]["why"]
    assert why["policy"] == "localRateLimit"
    assert [(t["target"], t["index"], t["remaining"], t["limit"]["maxTokens"]) for t in why["targets"]] == [
        ("a", 0, 0, 1), ("b", 0, 0, 1)]


def test_with_attempts_keeps_the_refusal_and_adds_attempts_and_skipped_targets():
    # with_attempts reads only these attributes of an Exchange
    x = SimpleNamespace(why={"policy": "localRateLimit", "index": 0}, attempts=["a", "b"], outcomes=["status 503"],
                        error="upstream call timeout", skipped=("c",))
    assert with_attempts(x) == {
        "policy": "localRateLimit", "index": 0, "skipped": ["c"],
        "attempts": [{"backend": "a", "outcome": "status 503"}, {"backend": "b", "outcome": "upstream call timeout"}]}
    assert x.why == {"policy": "localRateLimit", "index": 0}  # a copy: the refusal's own why is unchanged
    bare = SimpleNamespace(why=None, attempts=["a", "b"], outcomes=["status 503", "ok"], error=None, skipped=[])
    assert with_attempts(bare) == {"attempts": [{"backend": "a", "outcome": "status 503"}, {"backend": "b", "outcome": "ok"}]}
