"""The manifest path over typed classes: specs read once into ``manifest_document``'s described
classes, HTTPRoute filters built by the standalone format's own compilers (so their checks name the
manifest field), and statuses of malformed references written instead of a traceback."""

from __future__ import annotations

import textwrap

import pytest

from trioproxy.config import manifest_document as md
from trioproxy.config.manifest import compile_manifest, parse_documents, read_resources

GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: gateway-system}
spec:
  gatewayClassName: trioproxy
  listeners:
  - {name: main, port: 3000, protocol: HTTP}
"""


def compile_docs(*docs: str):
    text = "\n---\n".join(textwrap.dedent(d).strip("\n") for d in docs)
    resources, rejected = read_resources(parse_documents(text, "m.yaml"), "m.yaml")
    return compile_manifest(resources, env={}, rejected=tuple(rejected))


def route(filters: str, backends: str = "[{name: svc, port: 80}]") -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r, namespace: gateway-system}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
  - filters: {filters}
    backendRefs: {backends}
"""


def test_read_spec_turns_wire_names_into_attributes_with_defaults():
    spec = md.read_spec(md.HTTPRouteSpec, {
        "parentRefs": [{"name": "gw", "sectionName": "main"}],
        "rules": [{"matches": [{"queryParams": [{"name": "v", "value": "1"}]}],
                   "filters": [{"type": "URLRewrite", "urlRewrite": {"hostname": "in.example"}}]}]})
    assert spec.parent_refs == (md.ParentRef(name="gw", section_name="main"),)
    rule = spec.rules[0]
    assert rule.matches[0].query_params == (md.ValueMatch(name="v", value="1"),)  # type Exact by default
    assert rule.matches[0].path is None and rule.backend_refs == ()
    assert rule.filters[0].url_rewrite == md.URLRewriteFilter(hostname="in.example")


def test_read_spec_keeps_free_form_traffic_as_written():
    value = {"mode": "Strict", "providers": [{"issuer": "x"}]}
    spec = md.read_spec(md.ProxyPolicySpec, {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}],
        "traffic": {"jwtAuthentication": value, "rateLimit": {"local": [{"tokens": 5, "unit": "Minutes"}]}}})
    assert spec.traffic.jwt_authentication == value
    assert spec.traffic.rate_limit.local == (md.LocalLimit(tokens=5, unit="Minutes"),)


@pytest.mark.parametrize(("filters", "backends", "message"), [
    ("[{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: home}}}]",
     "[{name: svc, port: 80}]", "spec.rules[0].filters[0].urlRewrite.path: expected a path starting with /, got 'home'"),
    ("[{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: a, value: b}]}}, "
     "{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: '/a b'}}}]", "[]",
     "spec.rules[0].filters[1].requestRedirect.path: '/a b' contains whitespace or control characters"),
])
def test_a_filter_the_standalone_compiler_refuses_names_its_manifest_field(filters, backends, message):
    """A rewrite path that would break the request line (or the Location) is refused as the
    standalone urlRewrite's is, and the route (not the gateway) is left out, its status saying where."""
    result = compile_docs(GATEWAY, route(filters, backends))
    assert result.rejected == (f"HTTPRoute gateway-system/r rejected: {message}",)
    [parent] = result.statuses[1]["status"]["parents"]
    assert parent["conditions"][0]["message"] == message
    assert [l.routes for b in result.config.binds for l in b.listeners] == [()]


def test_a_parent_ref_that_is_not_a_mapping_is_a_status_not_a_traceback():
    bad = """
    apiVersion: gateway.networking.k8s.io/v1
    kind: HTTPRoute
    metadata: {name: r, namespace: gateway-system}
    spec: {parentRefs: [gw]}
    """
    result = compile_docs(GATEWAY, bad)
    [parent] = result.statuses[1]["status"]["parents"]
    assert parent["parentRef"]["name"] == "?"
    assert parent["conditions"][0]["reason"] == "UnsupportedValue"
    assert 'spec.parentRefs[0]: Invalid value: "string"' in parent["conditions"][0]["message"]


def test_a_target_name_that_is_not_a_string_is_a_status_not_a_traceback():
    bad = """
    apiVersion: trioproxy.dev/v1alpha1
    kind: ProxyPolicy
    metadata: {name: p, namespace: gateway-system}
    spec: {targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: [gw]}]}
    """
    result = compile_docs(GATEWAY, bad)
    [entry] = result.statuses[1]["status"]["ancestors"]
    assert entry["ancestorRef"]["name"] == ["gw"]
    assert [c["reason"] for c in entry["conditions"]] == ["Invalid", "Pending"]
    assert result.rejected[0].startswith("ProxyPolicy gateway-system/p rejected: spec.targetRefs[0].name: ")
