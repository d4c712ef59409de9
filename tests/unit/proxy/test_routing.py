"""Route precedence as agentgateway and the Gateway API order it (pure: no sockets)."""

from __future__ import annotations

import textwrap

from trioproxy.config import parse_config
from trioproxy.proxy.routing import BindTable, Request, host_without_port, hostname_matches


def table(routes_yaml: str, listeners: str | None = None) -> BindTable:
    if listeners is None:
        listeners = "  - routes:\n" + textwrap.indent(textwrap.dedent(routes_yaml).strip(), "    ")
    config = parse_config(f"binds:\n- port: 3000\n  listeners:\n{listeners}\n", env={})
    return BindTable(config.binds[0])


def pick(bind: BindTable, path: str, *, method: str = "GET", host: str = "example.com",
         headers: list[tuple[bytes, bytes]] | None = None, query: bytes = b"") -> str | None:
    found = bind.listener_for(host)
    if found is None:
        return None
    selection = found[1].select(Request(method, path, host, headers or [], query))
    return selection.route.name if selection.route else None


def test_exact_beats_prefix_beats_regex_whatever_the_order():
    bind = table("""
        - {name: regex, matches: [{path: {regex: "/api/.*"}}]}
        - {name: prefix, matches: [{path: {pathPrefix: /api}}]}
        - {name: exact, matches: [{path: {exact: /api/users}}]}
    """)
    assert pick(bind, "/api/users") == "exact"
    assert pick(bind, "/api/other") == "prefix"


def test_longer_prefix_first_and_prefixes_match_whole_segments():
    bind = table("""
        - {name: short, matches: [{path: {pathPrefix: /v1}}]}
        - {name: long, matches: [{path: {pathPrefix: /v1/chat}}]}
        - {name: root}
    """)
    assert pick(bind, "/v1/chat/completions") == "long"
    assert pick(bind, "/v1/models") == "short"
    assert pick(bind, "/v1") == "short"
    assert pick(bind, "/v10") == "root"
    assert pick(bind, "/v1/chatter") == "short"


def test_method_then_more_headers_then_more_query_then_config_order():
    bind = table("""
        - {name: plain, matches: [{path: {pathPrefix: /}}]}
        - {name: one-header, matches: [{path: {pathPrefix: /}, headers: [{name: X-A, value: {exact: "1"}}]}]}
        - name: two-headers
          matches: [{path: {pathPrefix: /}, headers: [{name: x-a, value: {exact: "1"}}, {name: x-b, value: {regex: "b+"}}]}]
        - {name: post, matches: [{path: {pathPrefix: /}, method: POST}]}
        - {name: query, matches: [{path: {pathPrefix: /}, query: [{name: debug, value: {exact: "1"}}]}]}
        - {name: plain-later, matches: [{path: {pathPrefix: /}}]}
    """)
    assert pick(bind, "/", method="POST", headers=[(b"x-a", b"1"), (b"x-b", b"bbb")]) == "post"
    assert pick(bind, "/", headers=[(b"x-a", b"1"), (b"x-b", b"bbb")]) == "two-headers"
    assert pick(bind, "/", headers=[(b"x-a", b"1"), (b"x-b", b"c")]) == "one-header"
    assert pick(bind, "/", headers=[(b"x-a", b"1")], query=b"debug=1") == "one-header"
    assert pick(bind, "/", query=b"debug=1&x=2") == "query"
    assert pick(bind, "/") == "plain"


def test_hostname_buckets_exact_then_wildcard_then_none():
    bind = table("""
        - {name: any-host}
        - {name: wildcard, hostnames: ["*.example.com"]}
        - {name: exact, hostnames: [api.example.com], matches: [{path: {exact: /only}}]}
    """)
    assert pick(bind, "/only", host="api.example.com") == "exact"
    # The exact-host bucket has no match for this path: fall through to the wildcard bucket.
    assert pick(bind, "/other", host="api.example.com") == "wildcard"
    assert pick(bind, "/", host="example.com") == "any-host"  # a wildcard does not match its own base


def test_listener_hostname_selects_the_listener():
    bind = table("", listeners='  - {hostname: "*.internal", routes: [{name: internal}]}\n'
                               '  - {routes: [{name: public}]}')
    assert pick(bind, "/", host="svc.internal") == "internal"
    assert pick(bind, "/", host="example.com") == "public"


def test_evaluated_routes_are_listed_in_evaluation_order():
    bind = table("""
        - {name: a, matches: [{path: {exact: /a}}]}
        - {name: b, matches: [{path: {pathPrefix: /b}}]}
    """)
    _, routes = bind.listener_for("h")
    selection = routes.select(Request("GET", "/zzz", "h", []))
    assert selection.route is None
    assert [key.rsplit("/", 1)[1] for key in selection.evaluated] == ["a", "b"]


def test_host_helpers():
    assert host_without_port("API.example.com:8080") == "api.example.com"
    assert host_without_port("[::1]:80") == "[::1]"
    assert hostname_matches("*.example.com", "a.b.example.com")
    assert not hostname_matches("*.example.com", "example.com")


def test_longer_wildcard_hostname_beats_a_shorter_one_whatever_the_order():
    bind = table("""
        - {name: short, hostnames: ["*.example.com"]}
        - {name: long, hostnames: ["*.api.example.com"]}
    """)
    assert pick(bind, "/", host="v1.api.example.com") == "long"
    assert pick(bind, "/", host="web.example.com") == "short"


def test_a_wildcard_matches_only_whole_labels():
    """``*.example.com`` needs the dot: ``badexample.com`` shares the suffix but is another domain."""
    assert hostname_matches("*.example.com", "a.example.com")
    assert not hostname_matches("*.example.com", "badexample.com")
    assert not hostname_matches("*.example.com", "example.com")
    assert not hostname_matches("*.example.com", ".example.com")  # an empty label is no label


def test_header_and_query_matching_edges():
    """Repeated headers are matched joined with ","; an absent header never matches, not even
    ``.*``; a query parameter given empty (``?debug=``) is present with the value ""."""
    bind = table("""
        - {name: joined, matches: [{headers: [{name: x-a, value: {exact: "1,2"}}]}]}
        - {name: any-b, matches: [{headers: [{name: x-b, value: {regex: ".*"}}]}]}
        - {name: blank-query, matches: [{query: [{name: debug, value: {exact: ""}}]}]}
        - {name: fallback}
    """)
    assert pick(bind, "/", headers=[(b"x-a", b"1"), (b"x-a", b"2")]) == "joined"
    assert pick(bind, "/", headers=[(b"x-a", b"1")]) == "fallback"
    assert pick(bind, "/", headers=[(b"x-b", b"")]) == "any-b"
    assert pick(bind, "/") == "fallback"
    assert pick(bind, "/", query=b"debug=") == "blank-query"


def test_host_without_port_leaves_ipv6_addresses_alone():
    assert host_without_port("API.example.com:8080") == "api.example.com"
    assert host_without_port("[::1]:8080") == "[::1]"
    assert host_without_port("fe80::1") == "fe80::1"  # unbracketed: no port can be told apart


def test_host_without_port_lowercases_a_bracketed_ipv6_address():
    """Host matching compares lowercase names; an IPv6 literal's hex digits are no exception."""
    assert host_without_port("[FE80::1]:8080") == "[fe80::1]"


def test_listener_hostname_precedence_whatever_the_order():
    """A listener without hostname listed first must not capture hosts that a more specific
    listener names: exact, then wildcard, then none, as for route hostnames."""
    bind = table("", listeners='  - {routes: [{name: any}]}\n'
                               '  - {hostname: "*.example.com", routes: [{name: wildcard}]}\n'
                               '  - {hostname: api.example.com, routes: [{name: exact}]}')
    assert pick(bind, "/", host="api.example.com") == "exact"
    assert pick(bind, "/", host="web.example.com") == "wildcard"
    assert pick(bind, "/", host="other.org") == "any"


def test_selection_names_the_match_alternative_that_matched():
    """A route with several matches reports which one matched (a prefix urlRewrite replaces that
    alternative's prefix, not the first one's)."""
    bind = table("""
        - {name: two, matches: [{path: {pathPrefix: /a}}, {path: {pathPrefix: /bb}}]}
    """)
    _, routes = bind.listener_for("h")
    selection = routes.select(Request("GET", "/bb/x", "h", []))
    assert selection.match is not None and selection.match.path.value == "/bb"
    assert routes.select(Request("GET", "/a", "h", [])).match.path.value == "/a"
