"""CORS decisions as agentgateway makes them (Envoy semantics), without a browser."""

from __future__ import annotations

import pytest

from trioproxy.policies.cors import CorsPolicy, CorsSpec, parse_origin


def h(**values):
    return [(k.replace("_", "-").encode(), v.encode()) for k, v in values.items()]


@pytest.fixture
def policy():
    """Built per test, not at import: mutmut switches a mutant on only after the module is imported."""
    return CorsPolicy(CorsSpec(
        allow_origins=("https://app.example.com", "http://*.dev.test:8080", "https://*"),
        allow_methods=("GET", "POST"), allow_headers=("authorization", "content-type"),
        expose_headers=("x-request-id",), allow_credentials=True, max_age=600))


def test_no_origin_is_not_cors(policy):
    assert policy.decide("GET", h(host="x")).result == "no origin"


@pytest.mark.parametrize("origin, allowed", [
    ("https://app.example.com", True),
    ("https://app.example.com:443", True),       # default port filled in
    ("http://app.example.com", False),           # scheme differs (and http://* is not listed)
    ("http://a.b.dev.test:8080", True),          # * spans dots
    ("http://dev.test:8080", False),
    ("http://x.dev.test", False),                # port differs
    ("https://anything.internal", True),         # https://*
    ("https://app.example.com/path", False),     # not an origin
    ("null", False),
])
def test_origin_matching(policy, origin, allowed):
    assert policy.origin_allowed(origin) is allowed


def test_preflight_is_answered_with_everything_configured(policy):
    decision = policy.decide("OPTIONS", h(origin="https://app.example.com", access_control_request_method="POST",
                                          access_control_request_headers="content-type"))
    assert decision.preflight and decision.result == "preflight"
    assert dict(decision.headers) == {
        b"access-control-allow-origin": b"https://app.example.com",
        b"access-control-allow-methods": b"GET,POST",
        b"access-control-allow-headers": b"authorization,content-type",
        b"access-control-max-age": b"600",
        b"access-control-allow-credentials": b"true",
        b"access-control-expose-headers": b"x-request-id",
        b"vary": b"origin, access-control-request-method, access-control-request-headers",
    }


def test_disallowed_preflight_is_answered_without_cors_headers(policy):
    decision = policy.decide("OPTIONS", h(origin="http://evil.test", access_control_request_method="GET"))
    assert decision.preflight and decision.headers == () and decision.result == "disallowed preflight"


def test_simple_request_gets_response_headers_and_disallowed_one_passes_bare(policy):
    decision = policy.decide("GET", h(origin="https://app.example.com"))
    assert not decision.preflight
    assert dict(decision.headers) == {b"access-control-allow-origin": b"https://app.example.com",
                                      b"access-control-allow-credentials": b"true",
                                      b"access-control-expose-headers": b"x-request-id", b"vary": b"origin"}
    decision = policy.decide("GET", h(origin="http://evil.test"))
    assert (decision.preflight, decision.headers, decision.result) == (False, ((b"vary", b"origin"),),
                                                                       "disallowed origin")


def test_wildcards_echo_what_the_browser_asked():
    policy = CorsPolicy(CorsSpec(allow_origins=("*",), allow_methods=("*",), allow_headers=("*",)))
    decision = policy.decide("OPTIONS", h(origin="http://x.test", access_control_request_method="PUT",
                                          access_control_request_headers="x-a,  x-b"))
    headers = dict(decision.headers)
    assert headers[b"access-control-allow-methods"] == b"PUT"
    assert headers[b"access-control-allow-headers"] == b"x-a, x-b"
    assert headers[b"access-control-allow-origin"] == b"http://x.test"
    decision = policy.decide("OPTIONS", h(origin="http://x.test", access_control_request_method="PUT"))
    assert dict(decision.headers)[b"access-control-allow-headers"] == b"*"


def test_parse_origin():
    assert parse_origin("http://Example.com") == ("http", "example.com", 80)
    assert parse_origin("https://e.com:8443") == ("https", "e.com", 8443)
    for bad in ("ftp://e.com", "http://e.com:0", "http://e.com/x", "http://e*.com", "e.com", "http://:80"):
        assert parse_origin(bad) is None, bad


def test_wildcard_host_matching_agrees_with_a_regex():
    import re

    from hypothesis import given, settings
    from hypothesis import strategies as st

    from trioproxy.policies.cors import _wildcard_match

    alphabet = st.sampled_from("ab.*")

    @settings(max_examples=400, deadline=None)
    @given(st.text(alphabet, max_size=8), st.text(st.sampled_from("ab."), max_size=8))
    def check(pattern, value):
        reference = re.fullmatch(".*".join(map(re.escape, pattern.split("*"))), value) is not None
        assert _wildcard_match(pattern, value) is reference

    check()
