"""CORS rules the older tests left unguarded (found by mutation testing): headers sent only when
configured, the expose-headers separator, what counts as a preflight, multi-``*`` origins, the
port and host rules of an origin, and the stage's trace events and answers."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.policies.test_cors import h
from tests.unit.proxy.test_header_stages import RecordingTracer
from trioproxy.errors import DirectResponse
from trioproxy.policies.cors import CorsPolicy, CorsSpec, decide, parse_origin
from trioproxy.proxy.stages import CorsStage

ORIGIN = "https://app.example.com"
PREFLIGHT_VARY = b"origin, access-control-request-method, access-control-request-headers"


def test_nothing_unconfigured_is_sent():
    policy = CorsPolicy(CorsSpec(allow_origins=(ORIGIN,)))
    preflight = policy.decide("OPTIONS", h(origin=ORIGIN, access_control_request_method="GET"))
    assert preflight.headers == ((b"access-control-allow-origin", ORIGIN.encode()), (b"vary", PREFLIGHT_VARY))
    assert policy.decide("GET", h(origin=ORIGIN)).headers == ((b"access-control-allow-origin", ORIGIN.encode()),
                                                              (b"vary", b"origin"))


def test_expose_headers_are_comma_separated_and_max_age_zero_is_sent():
    policy = CorsPolicy(CorsSpec(allow_origins=("*",), expose_headers=("x-a", "x-b"), max_age=0))
    assert policy.decide("GET", h(origin=ORIGIN)).headers == (
        (b"access-control-allow-origin", ORIGIN.encode()), (b"vary", b"origin"),
        (b"access-control-expose-headers", b"x-a,x-b"))
    preflight = policy.decide("OPTIONS", h(origin=ORIGIN, access_control_request_method="GET"))
    assert preflight.headers == ((b"access-control-allow-origin", ORIGIN.encode()), (b"vary", PREFLIGHT_VARY),
                                 (b"access-control-max-age", b"0"),
                                 (b"access-control-expose-headers", b"x-a,x-b"))


def test_only_an_options_request_is_a_preflight():
    policy = CorsPolicy(CorsSpec(allow_origins=(ORIGIN,), allow_methods=("GET",)))
    asked = {"access_control_request_method": "GET"}
    assert policy.decide("GET", h(origin="http://evil.test", **asked)) == \
        policy.decide("GET", h(origin="http://evil.test"))
    assert policy.decide("GET", h(origin="http://evil.test", **asked)).result == "disallowed origin"
    allowed = policy.decide("POST", h(origin=ORIGIN, **asked))
    assert (allowed.result, allowed.preflight) == ("allowed", False)
    # OPTIONS without (or with a blank) request method from a disallowed origin is forwarded
    for extra in ({}, {"access_control_request_method": "  "}):
        decision = policy.decide("OPTIONS", h(origin="http://evil.test", **extra))
        assert (decision.result, decision.preflight) == ("disallowed origin", False)


def test_wildcards_with_credentials_echo_or_send_nothing():
    policy = CorsPolicy(CorsSpec(allow_origins=("*",), allow_methods=("*",), allow_headers=("*",),
                                 allow_credentials=True))
    decision = policy.decide("OPTIONS", h(origin=ORIGIN, access_control_request_method=" PUT ",
                                          access_control_request_headers=" , x-a ,, x-b"))
    assert dict(decision.headers)[b"access-control-allow-methods"] == b"PUT"
    assert dict(decision.headers)[b"access-control-allow-headers"] == b"x-a, x-b"
    decision = policy.decide("OPTIONS", h(origin=ORIGIN, access_control_request_method="PUT",
                                          access_control_request_headers=" , "))
    assert b"access-control-allow-headers" not in dict(decision.headers)


@pytest.mark.parametrize(("pattern", "origin", "allowed"), [
    ("https://*.*.example.com", "https://a.b.example.com", True),
    ("https://*.*.example.com", "https://a.example.com", False),
    ("https://a*b*c.test", "https://axxbyyc.test", True),
    ("https://a*b*c.test", "https://axxcyyb.test", False),
    ("https://*-api.*.test", "https://eu-api.prod.test", True),
    ("https://*-api.*.test", "https://eu-web.prod.test", False),
    ("https://*", "https://anything", True),
    ("https://*", "http://anything", False),
    ("http://*:8080", "http://x:8080", True),
    ("http://*:8080", "http://x:8081", False),
])
def test_wildcard_origins_with_several_stars(pattern, origin, allowed):
    assert CorsPolicy(CorsSpec(allow_origins=(pattern,))).origin_allowed(origin) is allowed


def test_origin_ports_and_hosts():
    assert parse_origin("http://e.com:65535") == ("http", "e.com", 65535)
    assert parse_origin("http://e.com:1") == ("http", "e.com", 1)
    assert parse_origin("HTTPS://E.COM") == ("https", "e.com", 443)
    for bad in ("http://e.com:65536", "http://e.com:99999", "http://a:b:80", "http://[::1]:80",
                "http://e.com:", "http://e.com:-1", "http://e.com:8o", "http://", "http://e.com?x",
                "http://e.com#x", "https//e.com", "http:/e.com"):
        assert parse_origin(bad) is None, bad
    assert parse_origin("http://*.e.com:80") is None
    assert parse_origin("http://*.e.com:80", allow_wildcard_host=True) == ("http", "*.e.com", 80)
    assert parse_origin("http://*", allow_wildcard_host=True) == ("http", "*", 80)


def test_a_bad_configured_origin_is_ignored_not_matched():
    policy = CorsPolicy(CorsSpec(allow_origins=("app.example.com", ORIGIN)))
    assert policy.origins == (("https", "app.example.com", 443),) and not policy.any_origin
    assert not policy.origin_allowed("https://other.example.com")
    assert not policy.origin_allowed("nonsense")


def test_decide_is_the_policy_decision():
    spec = CorsSpec(allow_origins=(ORIGIN,), allow_credentials=True)
    assert decide(spec, "GET", h(origin=ORIGIN)) == CorsPolicy(spec).decide("GET", h(origin=ORIGIN))


class FakeExchange:
    def __init__(self, method: str, headers: list[tuple[bytes, bytes]], tracer: Any = None) -> None:
        self.scope = {"method": method}
        self.headers = headers
        self.tracer = tracer
        self.extra_response_headers: list[tuple[bytes, bytes]] = [(b"x-before", b"1")]


async def test_stage_answers_preflights_and_adds_response_headers_with_trace_events():
    stage = CorsStage(CorsPolicy(CorsSpec(allow_origins=(ORIGIN,), allow_methods=("GET",))))
    tracer = RecordingTracer()
    with pytest.raises(DirectResponse) as answer:
        await stage.request(FakeExchange("OPTIONS", h(origin=ORIGIN, access_control_request_method="GET"), tracer))
    assert answer.value.status == 200 and str(answer.value) == ""
    assert list(answer.value.headers) == [(b"access-control-allow-origin", ORIGIN.encode()),
                                          (b"vary", PREFLIGHT_VARY), (b"access-control-allow-methods", b"GET")]
    assert tracer.events == [("policy", {"severity": "info", "kind": "cors", "result": "preflight",
                                         "origin": ORIGIN})]

    tracer = RecordingTracer()
    x = FakeExchange("GET", h(origin=ORIGIN), tracer)
    await stage.request(x)
    assert x.extra_response_headers == [(b"x-before", b"1"), (b"access-control-allow-origin", ORIGIN.encode()),
                                        (b"vary", b"origin")]
    assert tracer.events == [("policy", {"severity": "info", "kind": "cors", "result": "allowed",
                                         "origin": ORIGIN})]

    tracer = RecordingTracer()
    x = FakeExchange("GET", h(origin="http://evil.test"), tracer)
    await stage.request(x)
    assert x.extra_response_headers == [(b"x-before", b"1"), (b"vary", b"origin")]
    assert tracer.events == [("policy", {"severity": "warn", "kind": "cors", "result": "disallowed origin",
                                         "origin": "http://evil.test"})]

    tracer = RecordingTracer()
    with pytest.raises(DirectResponse) as answer:
        await stage.request(FakeExchange("OPTIONS", h(origin="http://evil.test", access_control_request_method="GET"),
                                         tracer))
    assert answer.value.status == 200 and list(answer.value.headers) == []
    assert tracer.events[0][1]["severity"] == "warn"

    tracer = RecordingTracer()
    x = FakeExchange("GET", h(host="x"), tracer)
    await stage.request(x)
    assert tracer.events == [] and x.extra_response_headers == [(b"x-before", b"1"), (b"vary", b"origin")]


@pytest.mark.parametrize(("pattern", "value", "matches"), [
    ("ab*ba", "aba", False),     # prefix and suffix may not overlap
    ("ab*ba", "abba", True),
    ("a*a*a", "aa", False),      # each middle part is searched after the prefix
    ("a*a*a", "aaa", True),
    ("*a*b*", "aba", True),      # the first occurrence leaves room for what follows
    ("*a*a*", "a", False),       # ... and the next search starts after it
    ("*a*a*", "aa", True),
])
def test_wildcard_matching_edge_cases(pattern, value, matches):
    from trioproxy.policies.cors import _wildcard_match

    assert _wildcard_match(pattern, value) is matches


def test_an_uppercase_host_is_lowercased_not_refused():
    assert parse_origin("http://XX.Test") == ("http", "xx.test", 80)


def test_a_configured_method_list_is_sent_as_written_and_a_wildcard_echoes_the_method_as_asked():
    policy = CorsPolicy(CorsSpec(allow_origins=("*",), allow_methods=("*",)))
    decision = policy.decide("OPTIONS", h(origin=ORIGIN, access_control_request_method="PUT,GET"))
    assert dict(decision.headers)[b"access-control-allow-methods"] == b"PUT,GET"


def test_decide_answers_a_preflight():
    spec = CorsSpec(allow_origins=(ORIGIN,))
    assert decide(spec, "OPTIONS", h(origin=ORIGIN, access_control_request_method="GET")).preflight
