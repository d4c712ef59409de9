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

from ..config.model import Bind, Listener, Route, RouteMatch
from ..policies.headers import host_without_port as host_without_port

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
