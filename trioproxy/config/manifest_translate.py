"""A manifest's typed specs (``manifest_document``) → the runtime pieces of ``model.Config``.

An HTTPRoute's filters and matches are Gateway API's shapes of what the standalone format also
has (``urlRewrite``, ``requestRedirect``, ``requestMirror``, header modifiers, matches): each is
restated as the standalone ``document`` value and built by the standalone format's own compiler
(``compile.POLICY_COMPILERS``, ``compile.compile_match``), so both formats make the same runtime
spec, with the same checks. A compiler's problem is reported at the manifest field it came from
(``spec.rules[0].filters[1].urlRewrite.path: ...``).

Extension point: ``TRAFFIC_TRANSLATORS`` maps a ProxyPolicy ``spec.traffic`` field (wire name) to
``(value, policy) -> {model.Policies attribute: runtime spec}``; a translator raises
``ManifestValueError`` (its message starting with the field's path) for an invalid value, or
``NotApplied`` for a field this version holds but does not apply.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar, cast

from attrs import frozen
from ruamel.yaml.nodes import MappingNode

from ..policies.auth_manifest import translate_authorization, translate_jwt_authentication
from ..policies.manifest_values import ManifestValueError
from ..policies.ratelimit_local import UNIT_SECONDS
from ..policies.ratelimit_remote_manifest import translate_global_rate_limit
from . import document as d
from . import manifest_document as md
from . import model as m
from .compile import POLICY_COMPILERS, compile_match
from .describe import Origin, Reader, plan_of

__all__ = ["TRAFFIC_TRANSLATORS", "NotApplied", "RuleRoute", "route_rules", "translate_traffic"]


T = TypeVar("T")


def _made(cls: type[T], **fields: Any) -> T:
    """A described value built here rather than read (mypy does not see ``@described`` classes' attrs)."""
    return cast(T, cast(Any, cls)(**fields))


# --- HTTPRoute rules -------------------------------------------------------------------------------


@frozen
class RuleRoute:
    """One HTTPRoute rule, built once, placed in every listener it attaches to."""

    suffix: str  # of the route's name and key: "" for rule 0, ".<rule name or index>" after
    matches: tuple[m.RouteMatch, ...]
    policies: m.Policies
    backends: tuple[m.Backend, ...]


def route_rules(spec: md.HTTPRouteSpec) -> tuple[tuple[RuleRoute, ...], list[str]]:
    """The route's rules (no rules: one rule for every request), or the problems that make the
    route invalid (``spec.rules[0]...: message``)."""
    problems = _regex_problems(spec)
    if problems:
        return (), problems
    r = Reader({})
    rules = tuple(_rule(rule, i, r) for i, rule in enumerate(spec.rules or (_made(md.RouteRule),)))
    return rules, [p.render(None) for p in r.problems]


def _rule(rule: md.RouteRule, index: int, r: Reader) -> RuleRoute:
    return RuleRoute(
        suffix="" if index == 0 else f".{rule.name or index}",
        matches=tuple(compile_match(_match(x)) for x in rule.matches) or (m.RouteMatch(),),
        policies=_filter_policies(rule.filters, f"spec.rules[{index}].filters", r),
        backends=tuple(_backend(ref) for ref in rule.backend_refs))


def _backend(ref: md.BackendRef) -> m.Backend:
    target = _address(ref)
    return m.Backend(str(target), target, ref.weight)


def _address(ref: md.ServiceRef) -> m.Address:
    """``name:port``, or ``name.namespace:port`` with a namespace (a Service's DNS name)."""
    return m.Address(f"{ref.name}.{ref.namespace}" if ref.namespace else ref.name, ref.port)


def _regex_problems(spec: md.HTTPRouteSpec) -> list[str]:
    """Every RegularExpression match that does not compile (the schema cannot say it)."""
    problems = []
    for r, rule in enumerate(spec.rules):
        for i, match in enumerate(rule.matches):
            candidates: list[tuple[str, md.PathMatch | md.ValueMatch | None]] = [("path", match.path)]
            candidates += [(f"headers[{j}]", item) for j, item in enumerate(match.headers)]
            candidates += [(f"queryParams[{j}]", item) for j, item in enumerate(match.query_params)]
            for where, item in candidates:
                problem = _regex_problem(item)
                if problem is not None:
                    assert item is not None
                    problems.append(f"spec.rules[{r}].matches[{i}].{where}.value: Invalid value: "
                                    f"{item.value!r}: invalid regular expression: {problem}")
    return problems


def _regex_problem(item: md.PathMatch | md.ValueMatch | None) -> str | None:
    if item is None or item.type != "RegularExpression":
        return None
    try:
        re.compile(item.value)
    except re.error as exc:
        return str(exc)
    return None


# --- matches: Gateway API's HTTPRouteMatch as the standalone d.Match -------------------------------


def _match(match: md.RouteMatch) -> d.Match:
    return _made(d.Match, path=_path_match(match.path), method=match.method,
                 headers=_value_matches(match.headers), query=_value_matches(match.query_params))


def _path_match(path: md.PathMatch | None) -> d.PathMatch | None:
    if path is None:
        return None  # every path: pathPrefix /
    if path.type == "RegularExpression":
        return _made(d.PathMatch, regex=path.value)
    if path.type == "Exact":
        return _made(d.PathMatch, exact=path.value)
    return _made(d.PathMatch, path_prefix=path.value)


def _value_matches(items: tuple[md.ValueMatch, ...]) -> tuple[d.ValueMatch, ...]:
    def condition(item: md.ValueMatch) -> d.ValueCondition:
        if item.type == "RegularExpression":
            return _made(d.ValueCondition, regex=item.value)
        return _made(d.ValueCondition, exact=item.value)
    return tuple(_made(d.ValueMatch, name=x.name, value=condition(x)) for x in items)


# --- filters: Gateway API's HTTPRouteFilter as the standalone route policies ---------------------


def _header_modifier(value: md.HeaderFilter) -> d.HeaderModifier:
    def pairs(items: tuple[md.HeaderPair, ...]) -> tuple[d.HeaderPair, ...]:
        return tuple(_made(d.HeaderPair, name=p.name, value=p.value) for p in items)
    return _made(d.HeaderModifier, add=pairs(value.add), set=pairs(value.set), remove=value.remove)


def _path_rewrite(path: md.PathModifier | None) -> d.PathRewrite | None:
    """``HTTPPathModifier`` (validated: the field of its type is set)."""
    if path is None:
        return None
    if path.type == "ReplaceFullPath":
        return _made(d.PathRewrite, full=path.replace_full_path)
    return _made(d.PathRewrite, prefix=path.replace_prefix_match)


def _url_rewrite(value: md.URLRewriteFilter) -> d.UrlRewrite:
    """``URLRewrite``: its hostname is the whole Host sent upstream."""
    authority = _made(d.AuthorityRewrite, full=value.hostname) if value.hostname is not None else None
    return _made(d.UrlRewrite, authority=authority, path=_path_rewrite(value.path))


def _request_redirect(value: md.RequestRedirectFilter) -> d.RequestRedirect:
    return _made(d.RequestRedirect, scheme=value.scheme, authority=_redirect_authority(value),
                 path=_path_rewrite(value.path), status=value.status_code)


def _redirect_authority(value: md.RequestRedirectFilter) -> d.AuthorityRewrite | None:
    """Hostname and port as Gateway API says: a port that is the configured scheme's default is
    left out; without a port, a configured scheme takes its well-known one (the host alone is kept)."""
    hostname, port = value.hostname, value.port
    if hostname is not None and port is not None:
        default = {"http": 80, "https": 443}.get(value.scheme or "")
        return _made(d.AuthorityRewrite, full=hostname if port == default else f"{hostname}:{port}")
    if hostname is not None:
        return _made(d.AuthorityRewrite, host=hostname)
    if port is not None:
        return _made(d.AuthorityRewrite, port=port)
    return None


def _request_mirror(value: md.RequestMirrorFilter) -> d.RequestMirror:
    if value.fraction is not None:
        share = value.fraction.numerator / value.fraction.denominator
    else:
        share = (100 if value.percent is None else value.percent) / 100
    backend = _made(d.MirrorBackend, host=_address(value.backend_ref))
    return _made(d.RequestMirror, backend=backend, percentage=min(1.0, share))


#: HTTPRoute filter type → (its RouteFilter attribute, which is also the model.Policies attribute, the
#: standalone value it stands for)
_FILTERS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "RequestHeaderModifier": ("request_header_modifier", _header_modifier),
    "ResponseHeaderModifier": ("response_header_modifier", _header_modifier),
    "RequestRedirect": ("request_redirect", _request_redirect),
    "URLRewrite": ("url_rewrite", _url_rewrite),
    "RequestMirror": ("request_mirror", _request_mirror),
}


def _filter_policies(filters: tuple[md.RouteFilter, ...], path: str, r: Reader) -> m.Policies:
    wire = {f.attribute: f.wire for f in plan_of(md.RouteFilter).fields}
    fields = {}
    for i, given in enumerate(filters):  # validated: each type at most once, with its field
        attribute, standalone = _FILTERS[given.type]
        spec = _compiled(attribute, standalone(getattr(given, attribute)), f"{path}[{i}].{wire[attribute]}", r)
        if spec is not None:
            fields[attribute] = spec
    return m.Policies(**fields) if fields else m.EMPTY_POLICIES


def _compiled(attribute: str, value: Any, path: str, r: Reader) -> Any:
    """The runtime spec of ``value``, a standalone policy value standing for the manifest field at
    ``path``, by the standalone compiler (``None`` after a problem, reported at ``path``; a list's
    items at ``path[i]``)."""
    placed = enumerate(value) if isinstance(value, tuple) else ((None, value),)
    for i, item in placed:
        where = path if i is None else f"{path}[{i}]"
        r.origins[id(item)] = Origin(where, MappingNode("tag:yaml.org,2002:map", []), None)
    return POLICY_COMPILERS[attribute](value, r)


# --- ProxyPolicy traffic -------------------------------------------------------------------------


class NotApplied(Exception):
    """A traffic field this version holds but does not apply (its path)."""


def _rate_limit(value: md.RateLimit, policy: Any) -> dict[str, Any]:
    fields = {"local_rate_limit": _local_limits(value.local or ())}
    if value.global_ is not None:
        fields["remote_rate_limit"] = translate_global_rate_limit(value.global_)
    return fields


def _local_limits(local: tuple[md.LocalLimit, ...]) -> Any:
    r = Reader({})
    specs = _compiled("local_rate_limit", tuple(_bucket(entry) for entry in local), "spec.traffic.rateLimit.local", r)
    if r.problems:
        raise ManifestValueError("; ".join(p.render(None) for p in r.problems))
    return specs


def _bucket(entry: md.LocalLimit) -> d.LocalRateLimit:
    """``{requests|tokens: n, burst: b, unit}`` (validated: one of requests, tokens) → a bucket of
    n + b tokens refilled with n each unit."""
    n = entry.requests if entry.requests is not None else entry.tokens
    assert n is not None
    return _made(d.LocalRateLimit, max_tokens=n + (entry.burst or 0), tokens_per_fill=n,
                 fill_interval=UNIT_SECONDS[entry.unit], type="requests" if entry.requests is not None else "tokens")


#: ``spec.traffic`` field → (value, policy) → model.Policies fields. Another policy kind = one entry.
TRAFFIC_TRANSLATORS: dict[str, Callable[[Any, Any], dict[str, Any]]] = {
    "rateLimit": _rate_limit,
    "jwtAuthentication": translate_jwt_authentication,
    "authorization": translate_authorization,
}


def translate_traffic(traffic: md.Traffic | None, policy: Any) -> tuple[dict[str, Any], list[str]]:
    """(model.Policies fields, problems) of a ProxyPolicy's ``spec.traffic``, field by field."""
    fields: dict[str, Any] = {}
    problems: list[str] = []
    for f in plan_of(md.Traffic).fields if traffic is not None else ():
        value = getattr(traffic, f.attribute)
        if value is None:
            continue
        try:
            fields.update(TRAFFIC_TRANSLATORS[f.wire](value, policy))
        except NotApplied as exc:
            problems.append(f"{exc.args[0]}: not supported by this version of trioproxy")
        except ManifestValueError as exc:  # "<field path>: <what is wrong>"
            problems.append(str(exc))
    return fields, problems
