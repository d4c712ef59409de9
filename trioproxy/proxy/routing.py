"""Pure route selection: listener by hostname, then route by Gateway API precedence.

Precedence (as agentgateway and the Gateway API): the most specific hostname bucket that has
any route (exact host, then wildcards by length, then routes without hostnames); inside it the
(route, match) pairs ordered by path kind (exact > prefix > regex), longer path first, a method
match before none, more header matches, more query matches, and finally config order. The order
is computed once per listener when the config is compiled; a request walks a short list.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl

from attrs import frozen

from ..config.model import Bind, Listener, Route, RouteMatch, ValueMatch
from ..policies.headers import host_without_port as host_without_port
from ..redaction import CREDENTIAL_HEADERS, CREDENTIAL_QUERY_PARAMS, REDACTED

PATH_RANK = {"exact": 0, "pathPrefix": 1, "regex": 2}


def hostname_matches(pattern: str, host: str) -> bool:
    """``*.example.com`` matches any name below example.com, not example.com itself."""
    if pattern.startswith("*."):
        return host.endswith(pattern[1:]) and len(host) > len(pattern) - 1
    return host == pattern


def _specificity(pattern: str | None) -> tuple[int, int]:
    """Sort key: exact names first, then longer wildcards, then no hostname at all."""
    if pattern is None:
        return (2, 0)
    if pattern.startswith("*."):
        return (1, -len(pattern))
    return (0, 0)


def _match_key(match: RouteMatch, route: Route) -> tuple[Any, ...]:
    return (
        PATH_RANK[match.path.kind],
        -len(match.path.value),
        match.method is None,
        -len(match.headers),
        -len(match.query),
        route.index,
    )


@frozen
class Request:
    """What routing reads from a request."""

    method: str
    path: str
    host: str  # without port, lowercase
    headers: Sequence[tuple[bytes, bytes]]
    query_string: bytes = b""


@frozen
class Selection:
    route: Route | None
    evaluated: tuple[str, ...]
    match: RouteMatch | None = None  # the alternative that matched (a prefix urlRewrite needs it)


def _header(headers: Iterable[tuple[bytes, bytes]], name: str) -> str | None:
    wanted = name.encode()
    values = [v.decode("latin-1") for k, v in headers if k == wanted]
    return ",".join(values) if values else None


def _matches(match: RouteMatch, request: Request, query: dict[str, str] | None) -> bool:
    if match.method is not None and match.method != request.method:
        return False
    if not match.path.matches(request.path):
        return False
    for cond in match.headers:
        if not cond.matches(_header(request.headers, cond.name)):
            return False
    if match.query:
        assert query is not None
        for cond in match.query:
            if not cond.matches(query.get(cond.name)):
                return False
    return True


class RouteTable:
    """The routes of one listener, pre-sorted into hostname buckets."""

    def __init__(self, routes: Sequence[Route]) -> None:
        buckets: dict[str | None, list[tuple[RouteMatch, Route]]] = {}
        for route in routes:
            for hostname in route.hostnames or (None,):
                for match in route.matches:
                    buckets.setdefault(hostname, []).append((match, route))
        ordered = sorted(buckets.items(), key=lambda item: _specificity(item[0]))
        self.buckets = [(host, sorted(pairs, key=lambda p: _match_key(p[0], p[1]))) for host, pairs in ordered]
        self.needs_query = any(match.query for _, pairs in self.buckets for match, _ in pairs)

    def select(self, request: Request) -> Selection:
        query = dict(parse_qsl(request.query_string.decode("latin-1"), keep_blank_values=True)) if self.needs_query else None
        evaluated: list[str] = []
        for hostname, pairs in self.buckets:
            if hostname is not None and not hostname_matches(hostname, request.host):
                continue
            for match, route in pairs:
                if not evaluated or evaluated[-1] != route.key:
                    evaluated.append(route.key)
                if _matches(match, request, query):
                    return Selection(route, tuple(dict.fromkeys(evaluated)), match)
        return Selection(None, tuple(dict.fromkeys(evaluated)))


# --- why a request found no route (a 404's ``why``: docs/history.md) ----------------------------

#: the routes a 404's ``why`` lists at most (``evaluated`` counts them all)
MAX_EXPLAINED = 20
#: how far a match alternative got, by the check it failed (the furthest one explains the route)
_CHECKS = ("hostname", "path", "method", "headers", "query")


def _value_text(name: str, actual: str | None, cond: ValueMatch, secret: bool) -> str:
    shown = "absent" if actual is None else REDACTED if secret else repr(actual)
    return f"{name} is {shown}, wanted {cond.kind} {REDACTED if secret else repr(cond.value)}"


def _first_miss(match: RouteMatch, request: Request, query: list[dict[str, str]]) -> tuple[int, str] | None:
    """(index in ``_CHECKS``, detail) of the first check ``match`` fails, None when it matches. The
    path comes before the method here (routing checks the method first, a cheaper test): an
    operator reading a 404 asks about the path first. ``query``: the parsed query, parsed on first
    use into its one slot."""
    if not match.path.matches(request.path):
        return 1, f"path {request.path!r} is not {match.path.kind} {match.path.value!r}"
    if match.method is not None and match.method != request.method:
        return 2, f"method {request.method} is not {match.method}"
    for cond in match.headers:
        actual = _header(request.headers, cond.name)
        if not cond.matches(actual):
            return 3, "header " + _value_text(cond.name, actual, cond, cond.name.encode() in CREDENTIAL_HEADERS)
    if match.query:
        if not query:
            query.append(dict(parse_qsl(request.query_string.decode("latin-1"), keep_blank_values=True)))
        for cond in match.query:
            value = query[0].get(cond.name)
            if not cond.matches(value):
                return 4, "query " + _value_text(cond.name, value, cond, cond.name in CREDENTIAL_QUERY_PARAMS)
    return None


def explain_misses(routes: Sequence[Route], request: Request, limit: int = MAX_EXPLAINED) -> dict[str, Any]:
    """Why no route of a listener took ``request`` (pure; run only for a 404): per route, in config
    order, the check that ``missed`` (``hostname``, ``path``, ``method``, ``headers``, ``query``) and a
    ``detail``; a route with several match alternatives is explained by the one that got furthest.
    At most ``limit`` routes are listed; ``evaluated`` counts them all."""
    query: list[dict[str, str]] = []
    host = request.host
    listed: list[dict[str, str]] = []
    for route in routes[:limit]:
        hostnames = route.hostnames
        if hostnames and not any(hostname_matches(h, host) for h in hostnames):
            listed.append({"route": f"{route.namespace}/{route.name}", "missed": "hostname",
                           "detail": f"host {host!r} is not {', '.join(hostnames)}"})
            continue
        best: tuple[int, str] | None = None
        for match in route.matches:
            miss = _first_miss(match, request, query)
            if miss is None:
                break  # it matches (a route only a later listener's precedence hid): nothing to explain
            if best is None or miss[0] > best[0]:
                best = miss
        else:
            check, detail = best if best is not None else (1, "the route has no matches")
            listed.append({"route": f"{route.namespace}/{route.name}", "missed": _CHECKS[check], "detail": detail})
    why: dict[str, Any] = {"routes": listed, "evaluated": len(routes)}
    if len(routes) > limit:
        why["more"] = len(routes) - limit
    return why


class BindTable:
    """The listeners of one bind, chosen by the request's host like the routes are."""

    def __init__(self, bind: Bind) -> None:
        self.bind = bind
        self.listeners = sorted(
            ((listener, RouteTable(listener.routes)) for listener in bind.listeners),
            key=lambda item: _specificity(item[0].hostname),
        )

    def listener_for(self, host: str) -> tuple[Listener, RouteTable] | None:
        for listener, table in self.listeners:
            if listener.hostname is None or hostname_matches(listener.hostname, host):
                return listener, table
        return None
