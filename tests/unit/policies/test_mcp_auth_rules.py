"""The rules of ``policies/mcp_auth.py`` one by one (issue 35): the spec's defaults, the resource a
request names, the metadata document without optional members, the exact challenge and the audience
forms."""

from __future__ import annotations

import json

from trioproxy.policies.jwt import JwksSource
from trioproxy.policies.mcp_auth import (
    METADATA_PREFIX,
    McpAuthenticationSpec,
    audience_matches,
    challenge,
    metadata_document,
    resource_for,
)


def spec(**fields) -> McpAuthenticationSpec:  # type: ignore[no-untyped-def]
    return McpAuthenticationSpec("http://idp", JwksSource(url="http://idp/certs"), **fields)


def test_defaults():
    s = spec()
    assert (s.audiences, s.mode, s.resource, s.scopes_supported, s.bearer_methods_supported, s.extra) == \
        ((), "strict", None, (), ("header",), ())


def test_the_resource_is_the_configured_one_or_the_requests_origin_and_path():
    assert resource_for(spec(), "http://gw:3000", "/mcp") == "http://gw:3000/mcp"
    assert resource_for(spec(resource="https://api.example/mcp"), "http://gw:3000", "/mcp") == "https://api.example/mcp"
    assert resource_for(spec(resource=""), "http://gw", "/mcp") == ""  # configured, even empty


def test_metadata_without_scopes_has_no_scopes_member_and_keeps_extras_in_order():
    document = json.loads(metadata_document(spec(bearer_methods_supported=("header", "body"),
                                                 extra=(("resource_name", "Demo"), ("resource_policy_uri", "http://p"))),
                                            "http://gw/mcp"))
    assert list(document) == ["resource", "authorization_servers", "bearer_methods_supported", "resource_name",
                              "resource_policy_uri"]
    assert document["bearer_methods_supported"] == ["header", "body"]


def test_the_challenge_exactly():
    assert METADATA_PREFIX == "/.well-known/oauth-protected-resource"
    assert challenge("http://gw", "/a/mcp", "invalid_token") == \
        b'Bearer resource_metadata="http://gw/.well-known/oauth-protected-resource/a/mcp", error="invalid_token"'
    assert challenge("http://gw", "/mcp", "") == \
        b'Bearer resource_metadata="http://gw/.well-known/oauth-protected-resource/mcp", error=""'


def test_audience_forms():
    assert not audience_matches({"aud": 5}, ("5",))
    assert not audience_matches({"aud": ["a", "b"]}, ())
    assert audience_matches({"aud": ["a", "b"]}, ("x", "b"))
    assert not audience_matches({"aud": "ab"}, ("a",))  # a string is one name, not a sequence of letters
