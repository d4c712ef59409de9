"""Gateway and HTTPRoute are checked with Gateway API v1's own string types (its CRDs' patterns and
lengths) and HTTPPathMatch rules, with the API server's messages: what upstream rejects, trioproxy
rejects (the resource, with its status; the valid ones still load)."""

from __future__ import annotations

import pytest

from fixtures.echo_backend import EchoBackend
from tests.conftest import free_port, start_gateway
from tests.e2e.test_manifest_e2e import manifest, route
from tests.unit.config.test_manifest import GATEWAY, ROUTE, compile_docs, routes

SECTION = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
HOSTNAME = r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
HEADER = r"^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$"
NAMESPACE = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
WHEN = " when type one of ['Exact', 'PathPrefix']"


def should_match(path: str, value: str, pattern: str) -> str:
    return f'{path}: Invalid value: "{value}": {path} in body should match \'{pattern}\''


def path_rule(message: str) -> str:
    return f'spec.rules[0].matches[0].path: Invalid value: "object": {message}'


@pytest.mark.parametrize(("old", "new", "message"), [
    ("{name: X-Team, value: eng}", '{name: "x tenant", value: eng}',
     should_match("spec.rules[0].matches[0].headers[0].name", "x tenant", HEADER)),
    ("hostnames: [api.example.com]", "hostnames: [API.Example.COM]",
     should_match("spec.hostnames[0]", "API.Example.COM", HOSTNAME)),
    ("value: /v1}", "value: v1}", path_rule("value must be an absolute path and start with '/'" + WHEN)),
    ("{type: PathPrefix, value: /v1}", "{value: v1}",  # the default type, PathPrefix, is checked too
     path_rule("value must be an absolute path and start with '/'" + WHEN)),
    ("value: /v1}", "value: /v1//x}", path_rule("must not contain '//'" + WHEN)),
    ("value: /v1}", "value: /v1/..}", path_rule("must not end with '/..'" + WHEN)),
    ("value: /v1}", 'value: "/v1 x"}', path_rule(
        "must only contain valid characters (matching ^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$) "
        "for types ['Exact', 'PathPrefix']")),
    ("name: health", "name: Health", should_match("spec.rules[1].name", "Health", SECTION)),
    ("{name: x-a, value: \"1\"}", "{name: \"x:a\", value: \"1\"}", should_match(
        "spec.rules[0].filters[0].requestHeaderModifier.set[0].name", "x:a", HEADER)),
    ("namespace: ai", "namespace: AI", should_match("spec.rules[0].backendRefs[1].namespace", "AI", NAMESPACE)),
    ("parentRefs: [{name: gw}]", "parentRefs: [{name: gw, sectionName: Main}]",
     should_match("spec.parentRefs[0].sectionName", "Main", SECTION)),
    ("hostnames: [api.example.com]", f"hostnames: [{'a' * 254}]", "spec.hostnames[0]: Too long: may not be more than 253 bytes"),
])
def test_httproute_values_upstream_rejects(old, new, message):
    assert old in ROUTE
    result = compile_docs(GATEWAY, ROUTE.replace(old, new))
    assert result.rejected == (f"HTTPRoute gateway-system/llm rejected: {message}",)
    assert routes(result) == {}


@pytest.mark.parametrize(("listener", "message"), [
    ("{name: Main, port: 3000, protocol: HTTP}", should_match("spec.listeners[0].name", "Main", SECTION)),
    ("{name: main, port: 3000, protocol: HTTP, hostname: API.Example.COM}",
     should_match("spec.listeners[0].hostname", "API.Example.COM", HOSTNAME)),
    # Go's regexp: $ is the end of the text (Python's would let a final newline through)
    ('{name: "main\\n", port: 3000, protocol: HTTP}', should_match("spec.listeners[0].name", "main\\n", SECTION)),
])
def test_gateway_values_upstream_rejects(listener, message):
    gateway = GATEWAY.replace("{name: main, port: 3000, protocol: HTTP}", listener)
    result = compile_docs(gateway)
    assert result.rejected == (f"Gateway gateway-system/gw rejected: {message}",)


@pytest.mark.parametrize(("second", "message"), [
    ("{name: main, port: 3001, protocol: HTTP}", "Listener name must be unique within the Gateway"),
    ("{name: other, port: 3000, protocol: HTTP}",
     "Combination of port, protocol and hostname must be unique for each listener"),
])
def test_listener_list_rules_are_gateway_apis(second, message):
    first = "{name: main, port: 3000, protocol: HTTP}"
    result = compile_docs(GATEWAY.replace(first, f"{first}\n  - {second}"))
    assert result.rejected == (f'Gateway gateway-system/gw rejected: spec.listeners: Invalid value: "array": {message}',)


def test_values_upstream_accepts_still_load():
    accepted = (ROUTE.replace("hostnames: [api.example.com]", "hostnames: ['*.example.com', a-1.b]")
                .replace("{type: PathPrefix, value: /v1}", "{type: RegularExpression, value: 'v1.*'}")
                .replace("{name: X-Team, value: eng}", "{name: \"X-Team_1.~!#\", value: eng}"))
    gateway = GATEWAY.replace("{name: main, port: 3000, protocol: HTTP}",
                              "{name: main.v1, port: 3000, protocol: HTTP, hostname: '*.example.com'}\n"
                              "  - {name: main, port: 3000, protocol: HTTP}")  # same port, another hostname
    result = compile_docs(gateway, accepted)
    assert result.rejected == ()
    assert len(routes(result)) == 4  # two rules on each of the two listeners


async def test_a_gateway_serves_the_valid_route_and_not_the_one_upstream_rejects(nursery):
    backend = await nursery.start(EchoBackend().serve)
    bad = route("bad", "/bad", backend.port).replace("  - matches:", "  - name: Bad\n    matches:")
    gw = await start_gateway(nursery, manifest(route("good", "/good", backend.port), bad,
                                               GATEWAY_E2E), port=free_port())
    async with gw.client() as client:
        assert (await client.get("/good")).status_code == 200
        assert (await client.get("/bad")).status_code == 404  # the route was rejected: nothing serves /bad
    statuses = {s["metadata"]["name"]: s for s in gw.info.runtime.state.config.statuses}
    condition = statuses["bad"]["status"]["parents"][0]["conditions"][0]
    assert condition["status"] == "False"
    assert condition["message"] == should_match("spec.rules[0].name", "Bad", SECTION)


GATEWAY_E2E = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: gateway-system}}
spec:
  gatewayClassName: trioproxy
  listeners: [{{name: main, port: {port}, protocol: HTTP}}]
"""
