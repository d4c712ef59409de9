"""Golden tests: a manifest in → the translated model (keys, matches, buckets) and the statuses out."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime

import pytest

from trioproxy.config import ConfigError, parse_config
from trioproxy.config.manifest import compile_manifest, parse_documents, read_resources
from trioproxy.policies.ratelimit_local import LocalRateLimitSpec

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
STAMP = "2026-01-02T03:04:05Z"

GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw, namespace: gateway-system, generation: 3}
spec:
  gatewayClassName: trioproxy
  listeners:
  - {name: main, port: 3000, protocol: HTTP}
"""

ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: llm, namespace: gateway-system}
spec:
  parentRefs: [{name: gw}]
  hostnames: [api.example.com]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /v1}
      method: POST
      headers: [{name: X-Team, value: eng}]
      queryParams: [{type: RegularExpression, name: v, value: "[0-9]+"}]
    filters:
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: x-a, value: "1"}], remove: [x-b]}
    backendRefs: [{name: llm-svc, port: 8000, weight: 3}, {name: other, namespace: ai, port: 80}]
  - name: health
    matches: [{path: {type: Exact, value: /healthz}}]
    backendRefs: [{name: llm-svc, port: 8001}]
"""


def policy(body: str, name: str = "limits") -> str:
    return (f"apiVersion: trioproxy.dev/v1alpha1\nkind: ProxyPolicy\nmetadata: {{name: {name}, namespace: gateway-system}}\n"
            + textwrap.dedent(body))


def compile_docs(*docs: str):
    text = "\n---\n".join(textwrap.dedent(d).strip("\n") for d in docs)
    resources, rejected = read_resources(parse_documents(text, "m.yaml"), "m.yaml")
    return compile_manifest(resources, now=NOW, env={}, rejected=tuple(rejected))


def cond(kind: str, ok: bool, reason: str, message: str, generation: int = 1) -> dict:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message,
            "lastTransitionTime": STAMP, "observedGeneration": generation}


def routes(result) -> dict:
    return {r.key: r for b in result.config.binds for l in b.listeners for r in l.routes}


def listeners(result) -> dict:
    return {l.key: l for b in result.config.binds for l in b.listeners}


GW_REF = {"group": "gateway.networking.k8s.io", "kind": "Gateway", "namespace": "gateway-system", "name": "gw"}
VALID = [cond("Accepted", True, "Valid", "Policy is valid"), cond("Attached", True, "Attached", "Policy is attached")]


def test_route_targeted_policy_translates_routes_matches_and_buckets():
    result = compile_docs(GATEWAY, ROUTE, policy("""
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm}]
          traffic:
            rateLimit:
              local:
              - {tokens: 5000, unit: Hours}
              - {requests: 10, burst: 5, unit: Seconds}
        """))
    assert result.rejected == ()
    assert [b.port for b in result.config.binds] == [3000]
    assert list(listeners(result)) == ["gateway-system/gw/bind/3000/listener0"]
    by_key = routes(result)
    assert list(by_key) == ["gateway-system/gw/bind/3000/listener0/gateway-system/llm",
                            "gateway-system/gw/bind/3000/listener0/gateway-system/llm.health"]
    main, health = by_key.values()
    buckets = (LocalRateLimitSpec(5000, 5000, 3600, "tokens"), LocalRateLimitSpec(15, 10, 1, "requests"))
    assert main.policies.local_rate_limit == buckets
    assert health.policies.local_rate_limit == buckets  # every rule of the targeted route
    match = main.matches[0]
    assert (match.path.kind, match.path.value, match.method) == ("pathPrefix", "/v1", "POST")
    assert [(h.name, h.kind, h.value) for h in match.headers] == [("x-team", "exact", "eng")]
    assert [(q.name, q.kind, q.value) for q in match.query] == [("v", "regex", "[0-9]+")]
    assert main.hostnames == ("api.example.com",)
    assert main.policies.request_header_modifier.set == ((b"x-a", b"1"),)
    assert main.policies.request_header_modifier.remove == (b"x-b",)
    assert [(str(b.target), b.weight) for b in main.backends] == [("llm-svc:8000", 3), ("other.ai:80", 1)]
    assert (health.matches[0].path.kind, health.matches[0].path.value) == ("exact", "/healthz")
    assert result.config.gateway_names == ("gw",)

    gateway, route, limits = result.statuses
    assert gateway["status"]["conditions"] == [cond("Accepted", True, "Accepted", "Gateway is valid", 3),
                                               cond("Programmed", True, "Programmed", "Gateway is serving", 3)]
    assert gateway["status"]["listeners"][0]["attachedRoutes"] == 1
    assert route["status"] == {"parents": [{
        "parentRef": GW_REF, "controllerName": "trioproxy.dev/gateway",
        "conditions": [cond("Accepted", True, "Accepted", "Route was valid"),
                       cond("ResolvedRefs", True, "ResolvedRefs", "All references resolved")]}]}
    assert limits == {"apiVersion": "trioproxy.dev/v1alpha1", "kind": "ProxyPolicy",
                      "metadata": {"name": "limits", "namespace": "gateway-system"},
                      "status": {"ancestors": [{"ancestorRef": GW_REF, "controllerName": "trioproxy.dev/gateway",
                                                "conditions": VALID}]}}


def test_gateway_targeted_policy_is_a_listener_budget_and_policies_combine():
    result = compile_docs(GATEWAY, ROUTE, policy("""
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw}]
          traffic: {rateLimit: {local: [{requests: 100, unit: Minutes}]}}
        """), policy("""
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: gw, sectionName: main}]
          traffic: {rateLimit: {local: [{tokens: 7, unit: Seconds}]}}
        """, name="second"))
    (listener,) = listeners(result).values()
    assert listener.policies.local_rate_limit == (LocalRateLimitSpec(100, 100, 60, "requests"),
                                                  LocalRateLimitSpec(7, 7, 1, "tokens"))
    assert all(r.policies.local_rate_limit == () for r in routes(result).values())
    assert [s["status"]["ancestors"][0]["conditions"] for s in result.statuses[2:]] == [VALID, VALID]


def test_missing_target_is_pending_and_changes_nothing():
    result = compile_docs(GATEWAY, ROUTE, policy("""
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: missing}]
          traffic: {rateLimit: {local: [{requests: 1, unit: Hours}]}}
        """))
    assert all(r.policies.local_rate_limit == () for r in routes(result).values())
    assert result.statuses[2]["status"]["ancestors"] == [{
        "ancestorRef": {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "gateway-system",
                        "name": "missing"},
        "controllerName": "trioproxy.dev/gateway",
        "conditions": [cond("Accepted", True, "Valid", "Policy is valid"),
                       cond("Attached", False, "Pending", "HTTPRoute gateway-system/missing not found")]}]


def test_route_attached_to_no_gateway():
    orphan = ROUTE.replace("parentRefs: [{name: gw}]", "parentRefs: [{name: nowhere}]")
    result = compile_docs(GATEWAY, orphan, policy("""
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm}]
          traffic: {rateLimit: {local: [{requests: 1, unit: Hours}]}}
        """))
    assert routes(result) == {}
    assert result.statuses[0]["status"]["listeners"][0]["attachedRoutes"] == 0
    (parent,) = result.statuses[1]["status"]["parents"]
    assert parent["parentRef"]["name"] == "nowhere"
    assert parent["conditions"][0] == cond("Accepted", False, "NoMatchingParent",
                                           "Gateway gateway-system/nowhere not found")
    assert result.statuses[2]["status"]["ancestors"][0]["conditions"][1] == cond(
        "Attached", False, "Pending", "HTTPRoute gateway-system/llm is not attached to any Gateway")


def test_two_gateways_share_a_route():
    second = GATEWAY.replace("name: gw,", "name: gw2,").replace("port: 3000", "port: 3001").replace(
        "generation: 3", "generation: 1")
    shared = ROUTE.replace("parentRefs: [{name: gw}]", "parentRefs: [{name: gw}, {name: gw2, port: 3001}]")
    result = compile_docs(GATEWAY, second, shared, policy("""
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm}]
          traffic: {rateLimit: {local: [{requests: 2, unit: Seconds}]}}
        """))
    keys = [k for k in routes(result) if k.endswith("/llm")]
    assert keys == ["gateway-system/gw/bind/3000/listener0/gateway-system/llm",
                    "gateway-system/gw2/bind/3001/listener0/gateway-system/llm"]
    assert all(routes(result)[k].policies.local_rate_limit == (LocalRateLimitSpec(2, 2, 1),) for k in keys)
    parents = result.statuses[2]["status"]["parents"]
    assert [(p["parentRef"]["name"], p["conditions"][0]["status"]) for p in parents] == [("gw", "True"),
                                                                                         ("gw2", "True")]
    assert parents[1]["parentRef"]["port"] == 3001
    ancestors = result.statuses[3]["status"]["ancestors"]
    assert [a["ancestorRef"]["name"] for a in ancestors] == ["gw", "gw2"]
    assert all(a["conditions"] == VALID for a in ancestors)


def test_route_from_another_namespace_needs_allowed_routes_all():
    other = ROUTE.replace("namespace: gateway-system}", "namespace: apps}").replace(
        "{name: gw}", "{name: gw, namespace: gateway-system}")
    result = compile_docs(GATEWAY, other)
    assert routes(result) == {}
    assert result.statuses[1]["status"]["parents"][0]["conditions"][0]["reason"] == "NotAllowedByListeners"
    opened = GATEWAY.replace("protocol: HTTP}", "protocol: HTTP, allowedRoutes: {namespaces: {from: All}}}")
    assert next(iter(routes(compile_docs(opened, other)))).endswith("/apps/llm")


INVALID = [
    ("{tokens: 5, unit: Fortnights}",
     'spec.traffic.rateLimit.local[0].unit: Unsupported value: "Fortnights": supported values: "Seconds", "Minutes", "Hours"'),
    ("{unit: Hours}", 'spec.traffic.rateLimit.local[0]: Invalid value: "object": exactly one of requests or tokens must be set'),
    ("{requests: 1, tokens: 1, unit: Hours}",
     'spec.traffic.rateLimit.local[0]: Invalid value: "object": exactly one of requests or tokens must be set'),
    ("{tokens: 10, burst: 2, unit: Hours}",
     'spec.traffic.rateLimit.local[0]: Invalid value: "object": burst is allowed only with requests'),
    ("{requests: 0, unit: Hours}", ("spec.traffic.rateLimit.local[0].requests: Invalid value: 0: "
     "spec.traffic.rateLimit.local[0].requests in body should be greater than or equal to 1")),
    ("{requests: 1, burst: -1, unit: Hours}", ("spec.traffic.rateLimit.local[0].burst: Invalid value: -1: "
     "spec.traffic.rateLimit.local[0].burst in body should be greater than or equal to 0")),
    ("{requests: ten, unit: Hours}", ('spec.traffic.rateLimit.local[0].requests: Invalid value: "string": '
     'spec.traffic.rateLimit.local[0].requests in body must be of type integer: "string"')),
    ("{requests: 1}", "spec.traffic.rateLimit.local[0].unit: Required value"),
    ("{requests: 1, unit: Hours, per: user}", 'unknown field "spec.traffic.rateLimit.local[0].per"'),
]


@pytest.mark.parametrize(("entry", "message"), INVALID, ids=[e for e, _ in INVALID])
def test_every_validation_error_is_the_api_servers_message(entry, message):
    result = compile_docs(GATEWAY, ROUTE, policy(f"""
        spec:
          targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm}}]
          traffic: {{rateLimit: {{local: [{{requests: 1, unit: Seconds}}, {entry}]}}}}
        """).replace("local[0]", "local[1]"))
    message = message.replace("local[0]", "local[1]")
    (ancestor,) = result.statuses[2]["status"]["ancestors"]
    assert ancestor["ancestorRef"] == GW_REF  # the target exists: the status names its Gateway
    assert ancestor["conditions"] == [cond("Accepted", False, "Invalid", message),
                                      cond("Attached", False, "Pending", "the policy is not valid")]
    assert result.rejected == (f"ProxyPolicy gateway-system/limits rejected: {message}",)
    assert all(r.policies.local_rate_limit == () for r in routes(result).values())  # none of it applies


@pytest.mark.parametrize(("spec", "message"), [
    ("{}", "spec.targetRefs: Required value"),
    ("{targetRefs: []}", "spec.targetRefs: Invalid value: 0: spec.targetRefs in body should have at least 1 items"),
    ("{targetRefs: [{group: gateway.networking.k8s.io, kind: Service, name: x}]}",
     'spec.targetRefs[0].kind: Unsupported value: "Service": supported values: "Gateway", "HTTPRoute"'),
    ("{targetRefs: [{kind: HTTPRoute, name: llm}]}", "spec.targetRefs[0].group: Required value"),
])
def test_target_ref_errors(spec, message):
    result = compile_docs(GATEWAY, ROUTE, policy(f"spec: {spec}\n"))
    conditions = result.statuses[2]["status"]["ancestors"][0]["conditions"]
    assert conditions[0] == cond("Accepted", False, "Invalid", message)


GLOBAL = """
        spec:
          targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm}}]
          traffic:
            rateLimit:
              global:
                host: 127.0.0.1:8081
                domain: gateway
                failureMode: {mode}
                descriptors:
                - entries: [{{name: user, expression: 'request.headers["x-user"]'}}]
                - entries: [{{name: tenant, expression: '"acme"'}}]
                  unit: Tokens
        """


def test_global_rate_limit_becomes_the_remote_rate_limit_spec():
    from trioproxy.policies.ratelimit_remote import RemoteDescriptor, RemoteEntry, RemoteRateLimitSpec

    result = compile_docs(GATEWAY, ROUTE, policy(GLOBAL.format(mode="FailOpen")))
    assert result.statuses[2]["status"]["ancestors"][0]["conditions"] == VALID
    limited = {key: r.policies.remote_rate_limit for key, r in routes(result).items()
               if r.policies.remote_rate_limit is not None}
    assert limited and all("/gateway-system/llm" in key for key in limited)  # the target's rules only
    assert set(limited.values()) == {RemoteRateLimitSpec("127.0.0.1:8081", "gateway", (
        RemoteDescriptor((RemoteEntry("user", 'request.headers["x-user"]'),), "requests"),
        RemoteDescriptor((RemoteEntry("tenant", '"acme"'),), "tokens")), "failOpen", 1.0)}


@pytest.mark.parametrize(("change", "message"), [
    (("FailOpen", "Sometimes"), 'spec.traffic.rateLimit.global.failureMode: Unsupported value: "Sometimes": '
                                'supported values: "FailClosed", "FailOpen"'),
    (("unit: Tokens", "unit: Bytes"), 'spec.traffic.rateLimit.global.descriptors[1].unit: Unsupported value: '
                                      '"Bytes": supported values: "Requests", "Tokens"'),
    (("host: 127.0.0.1:8081", "host: nowhere"), "spec.traffic.rateLimit.global.host: expected HOST:PORT, got 'nowhere'"),
    (("'\"acme\"'", "'acme('"), "spec.traffic.rateLimit.global.descriptors[1].entries[0].expression: "),
])
def test_global_rate_limit_errors_name_the_field(change, message):
    text = GLOBAL.format(mode="FailOpen").replace(*change)
    result = compile_docs(GATEWAY, ROUTE, policy(text))
    accepted = result.statuses[2]["status"]["ancestors"][0]["conditions"][0]
    assert (accepted["status"], accepted["reason"]) == ("False", "Invalid")
    assert accepted["message"].startswith(message), accepted["message"]
    assert all(r.policies.remote_rate_limit is None for r in routes(result).values())


def test_invalid_gateway_and_route_do_not_stop_the_valid_ones():
    bad_gw = GATEWAY.replace("name: gw,", "name: bad,").replace("port: 3000", "port: 70000")
    bad_route = ROUTE.replace("name: llm,", "name: broken,").replace("type: PathPrefix", "type: Glob")
    result = compile_docs(GATEWAY, bad_gw, ROUTE, bad_route, "apiVersion: v1\nkind: Service\nmetadata: {name: s}")
    assert list(listeners(result)) == ["gateway-system/gw/bind/3000/listener0"]
    assert len(routes(result)) == 2
    assert result.rejected == (
        ("m.yaml: document 5: unsupported resource apiVersion='v1' kind='Service' (expected Gateway "
         "(gateway.networking.k8s.io/v1), HTTPRoute (gateway.networking.k8s.io/v1), ProxyPolicy (trioproxy.dev/v1alpha1))"),
        ("Gateway gateway-system/bad rejected: spec.listeners[0].port: Invalid value: 70000: "
         "spec.listeners[0].port in body should be less than or equal to 65535"),
        ("HTTPRoute gateway-system/broken rejected: spec.rules[0].matches[0].path.type: Unsupported value: "
         '"Glob": supported values: "Exact", "PathPrefix", "RegularExpression"'))
    assert result.statuses[1]["status"]["conditions"][0]["status"] == "False"
    assert result.statuses[3]["status"]["parents"][0]["conditions"][0]["reason"] == "UnsupportedValue"


def test_parse_config_dispatches_on_apiversion_and_keeps_statuses():
    config = parse_config(textwrap.dedent(GATEWAY) + "---\n" + textwrap.dedent(ROUTE), env={})
    assert config.binds[0].listeners[0].key == "gateway-system/gw/bind/3000/listener0"
    assert [s["kind"] for s in config.statuses] == ["Gateway", "HTTPRoute"]
    with pytest.raises(ConfigError) as error:
        parse_config("apiVersion: x\n---\n- [", source="m.yaml")
    assert error.value.problems == ["m.yaml:4:1: invalid YAML: did not find expected node content"]


def test_an_invalid_edit_keeps_the_last_valid_version_and_unchanged_conditions_keep_their_time():
    good = policy("""
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm}]
          traffic: {rateLimit: {local: [{requests: 5, unit: Minutes}]}}
        """)
    first = compile_docs(GATEWAY, ROUTE, good)
    text = "\n---\n".join(textwrap.dedent(d).strip("\n") for d in (GATEWAY, ROUTE, good.replace("Minutes", "Weeks")))
    resources, _ = read_resources(parse_documents(text, "m.yaml"), "m.yaml")
    later = datetime(2026, 1, 2, 4, 0, 0, tzinfo=UTC)
    second = compile_manifest(resources, now=later, env={}, previous=first.config)
    assert all(r.policies.local_rate_limit == (LocalRateLimitSpec(5, 5, 60),) for r in routes(second).values())
    message = ('spec.traffic.rateLimit.local[0].unit: Unsupported value: "Weeks": supported values: "Seconds", '
               '"Minutes", "Hours"; the last valid version keeps applying')
    accepted, attached = second.statuses[2]["status"]["ancestors"][0]["conditions"]
    assert (accepted["status"], accepted["reason"], accepted["message"]) == ("False", "Invalid", message)
    assert accepted["lastTransitionTime"] == "2026-01-02T04:00:00Z"  # it changed
    assert attached == cond("Attached", True, "Attached", "Policy is attached")  # unchanged: the first time
    assert second.rejected == (f"ProxyPolicy gateway-system/limits rejected: {message}",)
    # a resource removed from the file is gone, not kept
    third = compile_manifest(resources[:2], now=later, env={}, previous=second.config)
    assert all(r.policies.local_rate_limit == () for r in routes(third).values())


FILTERS_ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: gateway-system}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /api}}]
    filters:
    - type: URLRewrite
      urlRewrite: {hostname: internal.example, path: {type: ReplacePrefixMatch, replacePrefixMatch: /v2}}
    - type: RequestMirror
      requestMirror: {backendRef: {name: shadow, namespace: test, port: 8080}, fraction: {numerator: 1, denominator: 4}}
    backendRefs: [{name: api, port: 80}]
  - name: moved
    filters:
    - type: RequestRedirect
      requestRedirect: {scheme: https, hostname: www.example, port: 443, statusCode: 301,
                        path: {type: ReplaceFullPath, replaceFullPath: /home}}
  - name: port
    filters:
    - type: RequestRedirect
      requestRedirect: {port: 8443}
    - type: RequestMirror
      requestMirror: {backendRef: {name: shadow, port: 9}, percent: 5}
"""


def test_redirect_rewrite_and_mirror_filters_become_the_route_policies():
    from trioproxy.config.model import Address
    from trioproxy.policies.mirror import MirrorSpec
    from trioproxy.policies.url_rewrite import RedirectSpec, UrlRewriteSpec

    result = compile_docs(GATEWAY, FILTERS_ROUTE)
    assert result.rejected == ()
    by_name = {key.rsplit("/", 1)[1]: r.policies for key, r in routes(result).items()}
    assert by_name["web"].url_rewrite == UrlRewriteSpec("prefix", "/v2", "full", "internal.example")
    assert by_name["web"].request_mirror == MirrorSpec(Address("shadow.test", 8080), 0.25)
    # hostname and port together: the port that is the scheme's default is left out
    assert by_name["web.moved"].request_redirect == RedirectSpec(
        UrlRewriteSpec("full", "/home", "full", "www.example"), "https", 301)
    assert by_name["web.port"].request_redirect == RedirectSpec(UrlRewriteSpec(None, "", "port", "8443"), None, 302)
    assert by_name["web.port"].request_mirror == MirrorSpec(Address("shadow", 9), 0.05)


FILTER_ERRORS = [
    ("[{type: RequestRedirect, requestRedirect: {}}]", "backendRefs: [{name: a, port: 1}]",
     'spec.rules[0]: Invalid value: "object": RequestRedirect filter must not be used together with backendRefs'),
    ("[{type: RequestRedirect, requestRedirect: {}}, {type: URLRewrite, urlRewrite: {}}]", "",
     'spec.rules[0]: Invalid value: "object": May specify either httpRouteFilterRequestRedirect or '
     "httpRouteFilterRequestRewrite, but not both"),
    ("[{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}]",
     "matches: [{path: {type: Exact, value: /a}}]",
     'spec.rules[0]: Invalid value: "object": When using URLRewrite filter with path.replacePrefixMatch, '
     "exactly one PathPrefix match must be specified"),
    ("[{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /b}}}]",
     "matches: [{path: {value: /a}}, {path: {value: /c}}]",
     'spec.rules[0]: Invalid value: "object": When using RequestRedirect filter with path.replacePrefixMatch, '
     "exactly one PathPrefix match must be specified"),
    ("[{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath}}}]", "",
     'spec.rules[0].filters[0].urlRewrite.path: Invalid value: "object": replaceFullPath must be specified when '
     "type is set to 'ReplaceFullPath'"),
    ("[{type: RequestMirror}]", "",
     'spec.rules[0].filters[0]: Invalid value: "object": filter.requestMirror must be specified for RequestMirror '
     "filter.type"),
    ("[{type: RequestHeaderModifier, requestRedirect: {}}]", "",
     'spec.rules[0].filters[0]: Invalid value: "object": filter.requestHeaderModifier must be specified for '
     "RequestHeaderModifier filter.type"),
    ("[{type: RequestRedirect, requestRedirect: {statusCode: 200}}]", "",
     "spec.rules[0].filters[0].requestRedirect.statusCode: Unsupported value: 200: supported values: "
     '"301", "302", "303", "307", "308"'),
    ("[{type: RequestMirror, requestMirror: {backendRef: {name: a, port: 1}, percent: 5, fraction: {numerator: 1}}}]",
     "", 'spec.rules[0].filters[0].requestMirror: Invalid value: "object": Only one of percent or fraction may be '
     "specified in HTTPRequestMirrorFilter"),
    ("[{type: RequestMirror, requestMirror: {backendRef: {name: a, port: 1}}}, "
     "{type: RequestMirror, requestMirror: {backendRef: {name: b, port: 1}}}]", "",
     'spec.rules[0]: Invalid value: "object": RequestMirror filter cannot be repeated (trioproxy: one mirror per rule)'),
]


@pytest.mark.parametrize(("filters", "rest", "message"), FILTER_ERRORS, ids=[m.split(": ")[-1][:40] for *_, m in FILTER_ERRORS])
def test_filter_rules_are_gateway_apis(filters, rest, message):
    rule = f"  - filters: {filters}\n" + (f"    {rest}\n" if rest else "")
    route = ("apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: gateway-system}\n"
             "spec:\n  parentRefs: [{name: gw}]\n  rules:\n" + rule)
    result = compile_docs(GATEWAY, route)
    assert len(result.rejected) == 1 and message in result.rejected[0], result.rejected
