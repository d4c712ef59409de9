"""The mcp backend, mcpAuthentication, mcpAuthorization and config.session as read from a config."""

from __future__ import annotations

import pytest

from tests.unit.config.test_config import load, problems

ROUTE = """binds:
- port: 3000
  listeners:
  - routes:
    - policies: {policies}
      backends:
      - mcp:
          targets: {targets}
"""
TWO = '[{name: math, mcp: {host: "http://127.0.0.1:8001/mcp"}}, {name: text, mcp: {host: "127.0.0.1:8002"}}]'


def test_targets_and_modes_are_read():
    config = load(ROUTE.format(policies="{mcpAuthorization: {rules: ['mcp.tool.name == \"add\"']}}", targets=TWO))
    backend = config.binds[0].listeners[0].routes[0].backends[0]
    assert backend.kind == "mcp" and backend.name == "mcp/math,text"
    assert [(t.name, t.url) for t in backend.mcp.targets] == [
        ("math", "http://127.0.0.1:8001/mcp"), ("text", "http://127.0.0.1:8002/mcp")]
    assert backend.mcp.prefixed and backend.mcp.stateful and not backend.mcp.fail_open
    assert backend.mcp.authorization.rules[0].expression == 'mcp.tool.name == "add"'


@pytest.mark.parametrize("targets, expected", [
    ('[{name: a, mcp: {host: "http://h:1/mcp"}}, {name: a, mcp: {host: "http://h:2/mcp"}}]',
     "mcp.targets[1].name: duplicate target name 'a'"),
    ('[{name: a_b, mcp: {host: "http://h:1/mcp"}}]', "mcp.targets[0].name: a target name must be non-empty"),
    ('[{name: a, mcp: {host: "ftp://h/x"}}]', "mcp.targets[0].mcp.host: expected an http:// or https:// URL"),
    ('[{name: a, mcp: {host: "h"}}]', "mcp.targets[0].mcp.port: the port is required"),
    ('[{name: a, sse: {host: "h"}}]', "mcp.targets[0].sse.port: the port is required"),
    ('[{name: a, mcp: {host: "http://h:1/mcp"}, stdio: {cmd: x}}]', "expected exactly one of: mcp, sse, stdio"),
    ('[{name: a, openapi: {}}]', "'openapi' is an agentgateway feature that trioproxy does not implement"),
    ("[]", "mcp.targets: expected at least one entry"),
])
def test_bad_targets_are_named(targets, expected):
    found = problems(ROUTE.format(policies="{}", targets=targets))
    assert any(expected in line for line in found), found


def test_a_stdio_target_is_read():
    config = load(ROUTE.format(policies="{}", targets="[{name: ev, stdio: {cmd: npx, args: [-y, srv], env: {A: b}}}, "
                                                      "{name: old, sse: {host: 'h', port: 9}}]"))
    stdio, sse = config.binds[0].listeners[0].routes[0].backends[0].mcp.targets
    assert (stdio.transport, stdio.cmd, stdio.args, stdio.env) == ("stdio", "npx", ("-y", "srv"), (("A", "b"),))
    assert (sse.transport, sse.url) == ("sse", "http://h:9/sse")


def test_session_key_and_policies_checked():
    found = problems("config: {session: {key: nothex}}\n" + ROUTE.format(policies="{}", targets=TWO))
    assert any("config.session.key: expected 64 hex digits" in line for line in found), found
    assert load("config: {session: {key: '" + "ab" * 32 + "'}}\n" + ROUTE.format(
        policies="{}", targets=TWO)).session_key == b"\xab" * 32
    found = problems("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {mcpAuthorization: {rules: "
                     "['true']}}\n      backends: [{host: '127.0.0.1:1'}]\n")
    assert any("mcpAuthorization applies to a route with an mcp backend" in line for line in found), found
    found = problems(ROUTE.format(policies="{mcpAuthorization: {rules: ['mcp.tool.name == ']}}", targets=TWO))
    assert any("mcpAuthorization.rules[0]" in line for line in found), found
    auth = "{mcpAuthentication: {issuer: 'http://idp', jwks: {url: 'http://idp/certs'}, resourceMetadata: " \
           "{resource: 'http://gw/mcp', scopesSupported: [a]}}}"
    spec = load(ROUTE.format(policies=auth, targets=TWO)).binds[0].listeners[0].routes[0].policies.mcp_authentication
    assert (spec.issuer, spec.jwks.url, spec.resource, spec.scopes_supported, spec.mode) == (
        "http://idp", "http://idp/certs", "http://gw/mcp", ("a",), "strict")
