"""The pure parts of MCP support: JSON-RPC message kinds and errors, the signed session id, names
and their prefixes, mcpAuthorization per item, and the resource metadata."""

from __future__ import annotations

import json

import pytest

from trioproxy.config.model import McpBackend, McpTarget
from trioproxy.mcp import jsonrpc as rpc
from trioproxy.mcp.relay import McpRelay
from trioproxy.mcp.session import SessionCodec
from trioproxy.mcp.upstream import HttpTargets
from trioproxy.policies.authorization import AuthorizationSpec, Rule
from trioproxy.policies.jwt import JwksSource
from trioproxy.policies.mcp_auth import McpAuthenticationSpec, audience_matches, challenge, metadata_document


@pytest.mark.parametrize("body, code", [
    (b"{nope", rpc.PARSE_ERROR),
    (b"\xff", rpc.PARSE_ERROR),
    (b"[]", rpc.INVALID_REQUEST),
    (b'"text"', rpc.INVALID_REQUEST),
    (b'{"id": 1, "method": "x"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "x"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "x"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": true, "method": "x"}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 1, "method": ""}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": [1]}', rpc.INVALID_REQUEST),
    (b'{"jsonrpc": "2.0", "id": 1}', rpc.INVALID_REQUEST),
])
def test_malformed_messages_are_refused_with_their_code_and_http_400(body, code):
    with pytest.raises(rpc.JsonRpcError) as raised:
        rpc.parse(body)
    assert (raised.value.code, raised.value.status) == (code, 400)
    assert raised.value.body()["error"]["code"] == code


def test_message_kinds():
    assert rpc.kind_of(rpc.parse(b'{"jsonrpc": "2.0", "id": "a", "method": "tools/list"}')) == "request"
    assert rpc.kind_of(rpc.parse(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')) == "notification"
    assert rpc.kind_of(rpc.parse(b'{"jsonrpc": "2.0", "id": 3, "result": {}}')) == "response"
    assert rpc.kind_of(rpc.parse(b'{"jsonrpc": "2.0", "id": 3, "error": {"code": 1, "message": "m"}}')) == "response"
    with pytest.raises(rpc.JsonRpcError) as raised:
        rpc.parse(b'{"jsonrpc": "1.0", "id": 7, "method": "x"}')
    assert raised.value.id == 7  # the client can match the error to its request


def test_the_session_id_round_trips_and_only_its_key_reads_it():
    codec = SessionCodec(b"k" * 32)
    sessions = {"math": ("abc", "2025-06-18"), "text": (None, "2025-03-26")}
    sid = codec.encode(sessions)
    assert codec.decode(sid) == sessions
    assert SessionCodec(b"k" * 32).decode(sid) == sessions  # another process, same key
    assert SessionCodec(b"j" * 32).decode(sid) is None
    payload, mac = sid.split(".")
    forged = json.dumps({"v": 1, "t": {"math": ["stolen", "2025-06-18"]}}).encode()
    import base64
    forged_payload = base64.urlsafe_b64encode(forged).rstrip(b"=").decode()
    assert codec.decode(f"{forged_payload}.{mac}") is None
    for bad in ("", "nodot", f"{payload}.", f".{mac}", f"{payload}x.{mac}"):
        assert codec.decode(bad) is None
    assert SessionCodec().key != SessionCodec().key  # no key: a random one per process


def relay(targets=("math", "text"), prefix="conditional", rules=()) -> McpRelay:
    spec = McpBackend(tuple(McpTarget(t, "mcp", url=f"http://127.0.0.1:1/{t}") for t in targets),
                      prefix_mode=prefix,
                      authorization=AuthorizationSpec(tuple(Rule("allow", r) for r in rules)) if rules else None)
    return McpRelay(spec, SessionCodec(b"k" * 32), HttpTargets())


def test_names_are_prefixed_with_several_targets_and_resolved_back():
    r = relay()
    assert r.expose("math", "add", "tool") == "math_add"
    assert r.expose("math", "math://pi", "resource") == "math+math://pi"
    assert r.resolve("math_add", "tool") == ("math", "add")
    assert r.resolve("math_slow_count", "tool") == ("math", "slow_count")  # the first _ delimits
    assert r.resolve("math+math://pi", "resource") == ("math", "math://pi")
    for unknown in ("add", "nope_add", "math_", "_add"):
        assert r.resolve(unknown, "tool") is None
    single = relay(("math",))
    assert single.expose("math", "add", "tool") == "add"
    assert single.resolve("add", "tool") == ("math", "add")
    assert relay(("math",), "always").expose("math", "add", "tool") == "math_add"
    assert relay(prefix="never").resolve("add", "tool") is None  # found by listing instead


def test_authorization_per_item_sees_the_claims_the_tool_and_the_arguments():
    r = relay(rules=('has(mcp.tool) && mcp.tool.target == "text"',
                     'has(mcp.tool) && mcp.tool.name == "add" && jwt.group == "eng"',
                     'has(mcp.tool) && mcp.tool.name == "big" && mcp.arguments.n < 10'))
    eng, sales = {"jwt": {"group": "eng"}}, {"jwt": {"group": "sales"}}
    assert r.allowed(sales, "tools/call", "tool", "text", "echo")
    assert r.allowed(eng, "tools/list", "tool", "math", "add")
    assert not r.allowed(sales, "tools/list", "tool", "math", "add")
    assert not r.allowed(eng, "prompts/list", "prompt", "math", "add")  # no rule allows prompts
    assert r.allowed(sales, "tools/call", "tool", "math", "big", {"n": 3})
    assert not r.allowed(sales, "tools/call", "tool", "math", "big", {"n": 30})
    assert not r.allowed(sales, "tools/list", "tool", "math", "big")  # no arguments in a listing
    assert relay().allowed({}, "tools/call", "tool", "math", "add")  # no rules: everything


def test_resource_metadata_and_challenge():
    spec = McpAuthenticationSpec("http://idp/realms/demo", JwksSource(url="http://idp/certs"),
                                 scopes_supported=("openid",), extra=(("resource_documentation", "http://doc"),))
    assert json.loads(metadata_document(spec, "http://gw/mcp")) == {
        "resource": "http://gw/mcp", "authorization_servers": ["http://idp/realms/demo"],
        "bearer_methods_supported": ["header"], "scopes_supported": ["openid"],
        "resource_documentation": "http://doc"}
    assert challenge("http://gw:3000", "/mcp") == \
        b'Bearer resource_metadata="http://gw:3000/.well-known/oauth-protected-resource/mcp"'
    assert challenge("http://gw", "/mcp", "invalid_token").endswith(b', error="invalid_token"')
    assert audience_matches({"aud": ["http://gw/mcp", "account"]}, ("http://gw/mcp",))
    assert audience_matches({"aud": "http://gw/mcp"}, ("http://gw/mcp",))
    assert not audience_matches({"aud": "account"}, ("http://gw/mcp",))
    assert not audience_matches({}, ("http://gw/mcp",))
