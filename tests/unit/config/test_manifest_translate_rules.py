"""A manifest's typed specs → the runtime model (config/manifest_translate.py), through the manifest
compiler: a route without rules, backend names, RegularExpression matches (compiled, and refused
with the field that holds them), the header modifier's ``add``, the redirect's authority as Gateway
API says, the mirror's share, and ``spec.traffic`` translated field by field (the extension point's
``NotApplied`` included)."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from trioproxy.config import manifest_translate
from trioproxy.config.manifest import compile_manifest, parse_documents, read_resources
from trioproxy.config.manifest_translate import NotApplied, translate_traffic
from trioproxy.policies.url_rewrite import RedirectSpec, UrlRewriteSpec

GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: ns}
spec:
  gatewayClassName: trioproxy
  listeners:
  - {name: main, port: 3000, protocol: HTTP}
"""


def route(rules: str) -> str:
    return ("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: ns}\n"
            "spec:\n  parentRefs: [{name: gw}]\n" + textwrap.indent(textwrap.dedent(rules), "  "))


def policy(traffic: str) -> str:
    return ("apiVersion: trioproxy.dev/v1alpha1\nkind: ProxyPolicy\nmetadata: {name: p, namespace: ns}\n"
            "spec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]\n"
            f"  traffic: {traffic}\n")


def compile_docs(*docs: str) -> Any:
    text = "\n---\n".join(textwrap.dedent(d).strip("\n") for d in docs)
    resources, rejected = read_resources(parse_documents(text, "m.yaml"), "m.yaml")
    return compile_manifest(resources, env={}, rejected=tuple(rejected))


def by_suffix(result: Any) -> dict[str, Any]:
    return {r.key.removeprefix("ns/gw/bind/3000/listener0/ns/"): r
            for b in result.config.binds for listener in b.listeners for r in listener.routes}


def test_a_route_without_rules_is_one_rule_for_every_request():
    result = compile_docs(GATEWAY, route(""))
    assert result.rejected == ()
    (only,) = by_suffix(result).values()
    assert only.key.endswith("/ns/r")
    assert [(m.path.kind, m.path.value) for m in only.matches] == [("pathPrefix", "/")]
    assert only.backends == ()


def test_backends_are_named_by_their_address():
    result = compile_docs(GATEWAY, route("""
        rules:
        - backendRefs: [{name: svc, port: 8000, weight: 3}, {name: other, namespace: ai, port: 80}]
        """))
    assert [(b.name, str(b.target), b.weight) for b in by_suffix(result)["r"].backends] == [
        ("svc:8000", "svc:8000", 3), ("other.ai:80", "other.ai:80", 1)]


def test_a_regular_expression_path_is_a_regex_match():
    result = compile_docs(GATEWAY, route("""
        rules:
        - matches:
          - path: {type: RegularExpression, value: "/v[0-9]+"}
            headers: [{type: RegularExpression, name: x-v, value: "[ab]"}]
        """))
    (match,) = by_suffix(result)["r"].matches
    assert (match.path.kind, match.path.value) == ("regex", "/v[0-9]+")
    assert match.path.pattern.fullmatch("/v12")
    assert [(h.name, h.kind, h.value) for h in match.headers] == [("x-v", "regex", "[ab]")]


def test_every_regular_expression_that_does_not_compile_is_named_at_its_field():
    result = compile_docs(GATEWAY, route("""
        rules:
        - matches:
          - path: {type: PathPrefix, value: /a}
            headers: [{name: a, value: "["}]
            queryParams: [{name: q, value: "("}]
        - matches:
          - path: {type: Exact, value: /ok}
          - path: {type: RegularExpression, value: "/(a"}
            headers: [{name: a, value: x}, {type: RegularExpression, name: b, value: "[b"}]
            queryParams: [{type: RegularExpression, name: q, value: "*"}]
        """))
    assert result.rejected == ((
        "HTTPRoute ns/r rejected: "
        "spec.rules[1].matches[1].path.value: Invalid value: '/(a': invalid regular expression: missing ), "
        "unterminated subpattern at position 1; "
        "spec.rules[1].matches[1].headers[1].value: Invalid value: '[b': invalid regular expression: "
        "unterminated character set at position 0; "
        "spec.rules[1].matches[1].queryParams[0].value: Invalid value: '*': invalid regular expression: "
        "nothing to repeat at position 0"),)
    assert by_suffix(result) == {}


def test_exact_values_that_are_not_regular_expressions_are_taken_as_they_are():
    result = compile_docs(GATEWAY, route("""
        rules:
        - matches:
          - path: {type: PathPrefix, value: /a}
            headers: [{name: a, value: "["}]
            queryParams: [{name: q, value: "("}]
        """))
    assert result.rejected == ()
    (match,) = by_suffix(result)["r"].matches
    assert [(h.kind, h.value) for h in match.headers] == [("exact", "[")]
    assert [(q.kind, q.value) for q in match.query] == [("exact", "(")]


def test_filters_header_add_path_only_rewrite_and_the_default_mirror_share():
    result = compile_docs(GATEWAY, route("""
        rules:
        - filters:
          - type: URLRewrite
            urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /x}}
          - type: RequestMirror
            requestMirror: {backendRef: {name: m, port: 1}}
          - type: RequestHeaderModifier
            requestHeaderModifier: {add: [{name: x-a, value: "1"}]}
          backendRefs: [{name: s, port: 80}]
        - filters: [{type: RequestMirror, requestMirror: {backendRef: {name: m, port: 1},
                                                          fraction: {numerator: 5, denominator: 4}}}]
          backendRefs: [{name: s, port: 80}]
        """))
    assert result.rejected == ()
    first, second = by_suffix(result).values()
    assert first.policies.url_rewrite == UrlRewriteSpec("full", "/x", None, "")  # the Host is left alone
    assert first.policies.request_mirror.percentage == 1.0  # neither percent nor fraction: every request
    assert first.policies.request_header_modifier.add == ((b"x-a", b"1"),)
    assert second.policies.request_mirror.percentage == 1.0  # a fraction above one is every request


@pytest.mark.parametrize(("redirect", "authority"), [
    ("{scheme: http, hostname: h, port: 80}", ("full", "h")),  # the scheme's default port is left out
    ("{scheme: https, hostname: h, port: 443}", ("full", "h")),
    ("{scheme: http, hostname: h, port: 8080}", ("full", "h:8080")),
    ("{scheme: http, hostname: h, port: 443}", ("full", "h:443")),
    ("{hostname: h, port: 443}", ("full", "h:443")),  # no scheme: no default to leave out
    ("{hostname: h, port: 80}", ("full", "h:80")),
    ("{hostname: h}", ("host", "h")),  # the port is kept
    ("{port: 8443}", ("port", "8443")),
    ("{scheme: https}", (None, "")),
])
def test_the_redirects_authority(redirect, authority):
    result = compile_docs(GATEWAY, route(f"""
        rules:
        - filters: [{{type: RequestRedirect, requestRedirect: {redirect}}}]
        """))
    assert result.rejected == ()
    spec = by_suffix(result)["r"].policies.request_redirect
    assert isinstance(spec, RedirectSpec)
    assert (spec.url.authority_kind, spec.url.authority) == authority


def test_a_traffic_field_after_an_absent_one_is_translated():
    result = compile_docs(GATEWAY, route("rules: [{backendRefs: [{name: s, port: 80}]}]\n"),
                          policy("{authorization: {rules: ['request.method == \"GET\"']}}"))
    assert result.rejected == ()
    policies = by_suffix(result)["r"].policies
    assert policies.authorization is not None and policies.local_rate_limit == ()


def test_no_traffic_is_no_fields_and_no_problems():
    assert translate_traffic(None, object()) == ({}, [])


def test_a_translator_gets_the_policy_and_a_field_it_does_not_apply_is_a_problem(monkeypatch):
    from trioproxy.config import manifest_document as md

    seen = []

    def not_applied(value: Any, policy: Any) -> dict[str, Any]:
        seen.append(policy)
        raise NotApplied("spec.traffic.rateLimit")

    def applied(value: Any, policy: Any) -> dict[str, Any]:
        seen.append(policy)
        return {"authorization": "built"}

    monkeypatch.setitem(manifest_translate.TRAFFIC_TRANSLATORS, "rateLimit", not_applied)
    monkeypatch.setitem(manifest_translate.TRAFFIC_TRANSLATORS, "authorization", applied)
    traffic = md.read_spec(md.Traffic, {"rateLimit": {"local": [{"requests": 1, "unit": "Seconds"}]},
                                        "authorization": {"rules": ["true"]}})
    owner = object()
    assert translate_traffic(traffic, owner) == (
        {"authorization": "built"}, ["spec.traffic.rateLimit: not supported by this version of trioproxy"])
    assert seen == [owner, owner]
