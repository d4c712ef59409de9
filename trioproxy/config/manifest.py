"""Kubernetes-style manifests (Gateway, HTTPRoute, ProxyPolicy) → the same frozen ``model.Config``
the standalone file compiles to, plus the resources' statuses (docs/manifests.md).

One pure function, ``compile_manifest(resources, now=...)``, does both: what is served and
why each resource is or is not, so the status can never disagree with the data plane. An
invalid or unattached resource is left out (and reported); it never stops the valid ones.

Keys: listener ``<gwNamespace>/<gwName>/bind/<port>/listener<index>`` (index in the Gateway's
``spec.listeners``), route ``<listenerKey>/<routeNamespace>/<routeName>`` (rule 0; rule i > 0 is
``<routeName>.<i>``, or ``<routeName>.<ruleName>`` when the rule is named).

Extension point: ``TRAFFIC_TRANSLATORS`` maps a ``spec.traffic`` field to a function
``(value, policy) -> {model.Policies attribute: value}``; ``None`` = held but not applied by
this version, which makes the policy ``Accepted=False`` with a message saying so.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import attrs
from attrs import frozen
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from ..policies.auth_manifest import ManifestValueError, translate_authorization, translate_jwt_authentication
from ..policies.mirror import MirrorSpec
from ..policies.ratelimit_local import UNIT_SECONDS, LocalRateLimitSpec
from ..policies.ratelimit_remote_manifest import translate_global_rate_limit
from ..policies.url_rewrite import RedirectSpec, UrlRewriteSpec
from . import model as m
from .describe import Reader
from .manifest_document import GATEWAY_GROUP, SPECS
from .manifest_validate import strip_nulls, validate_spec

__all__ = [
    "CONTROLLER",
    "TRAFFIC_TRANSLATORS",
    "ManifestResult",
    "Resource",
    "compile_manifest",
    "is_manifest_text",
    "read_resources",
    "statuses_of",
]

CONTROLLER = "trioproxy.dev/gateway"
POLICY_API = "trioproxy.dev/v1alpha1"
GATEWAY_API = f"{GATEWAY_GROUP}/v1"


@frozen
class Resource:
    """One document of the manifest, as written (``spec`` with nulls stripped)."""

    api_version: str
    kind: str
    name: str
    namespace: str
    generation: int
    spec: Any
    index: int  # position in the file (documents counted from 0)

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    def head(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind,
                "metadata": {"name": self.name, "namespace": self.namespace}}


@frozen
class ManifestResult:
    config: m.Config
    statuses: tuple[dict[str, Any], ...]
    rejected: tuple[str, ...]  # one line per resource left out (logged by the loader)


class ManifestError(ValueError):
    """The text is not a readable manifest (one line per problem)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


# --- reading -------------------------------------------------------------------------------------


def is_manifest_text(documents: list[Any]) -> bool:
    return any(isinstance(d, dict) and "apiVersion" in d for d in documents)


def read_resources(documents: list[Any], source: str) -> tuple[list[Resource], list[str]]:
    """Documents → resources; a document that is not one of the three kinds is a rejected line."""
    resources, rejected = [], []
    for index, doc in enumerate(documents):
        where = f"{source}: document {index + 1}"
        if doc is None:
            continue
        if not isinstance(doc, dict):
            rejected.append(f"{where}: expected a mapping with apiVersion and kind")
            continue
        api, kind = str(doc.get("apiVersion")), str(doc.get("kind"))
        if (api, kind) not in SPECS:
            known = ", ".join(f"{k} ({a})" for a, k in SPECS)
            rejected.append(f"{where}: unsupported resource apiVersion={doc.get('apiVersion')!r} "
                            f"kind={doc.get('kind')!r} (expected {known})")
            continue
        meta: dict[str, Any] = doc["metadata"] if isinstance(doc.get("metadata"), dict) else {}
        name, namespace = meta.get("name"), meta.get("namespace") or "default"
        if not isinstance(name, str) or not name:
            rejected.append(f"{where}: {kind} metadata.name: Required value: name is required")
            continue
        generation = meta.get("generation")
        generation = generation if isinstance(generation, int) and not isinstance(generation, bool) else 1
        resources.append(Resource(api, kind, name, str(namespace), generation, strip_nulls(doc.get("spec")), index))
    return resources, rejected


def parse_documents(text: str, source: str) -> list[Any]:
    yaml = YAML(typ="safe")
    yaml.version = (1, 2)
    try:
        return list(yaml.load_all(text))
    except YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError([f"{where}: invalid YAML: {problem}"]) from None


# --- conditions -----------------------------------------------------------------------------------


def _condition(kind: str, ok: bool, reason: str, message: str, resource: Resource, now: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message,
            "lastTransitionTime": now, "observedGeneration": resource.generation}


def _timestamp(now: datetime | None) -> str:
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- translation -----------------------------------------------------------------------------------


def _local_limits(value: Any, policy: Resource) -> dict[str, Any]:
    specs = []
    for entry in value.get("local", ()):
        n = entry.get("requests", entry.get("tokens"))
        burst = entry.get("burst", 0)
        specs.append(LocalRateLimitSpec(n + burst, n, UNIT_SECONDS[entry["unit"]],
                                        "requests" if "requests" in entry else "tokens"))
    return {"local_rate_limit": tuple(specs)}


def _rate_limit(value: Any, policy: Resource) -> dict[str, Any]:
    fields = _local_limits(value, policy)
    if "global" in value:
        fields["remote_rate_limit"] = translate_global_rate_limit(value["global"])
    return fields


class NotApplied(Exception):
    """A traffic field this version holds but does not apply (its path)."""


def _not_supported(path: str) -> Callable[[Any, Resource], dict[str, Any]]:
    def translate(value: Any, policy: Resource) -> dict[str, Any]:
        raise NotApplied(path)
    return translate


#: ``spec.traffic`` field → (value, policy) → model.Policies fields. Another policy kind = one entry.
TRAFFIC_TRANSLATORS: dict[str, Callable[[Any, Resource], dict[str, Any]]] = {
    "rateLimit": _rate_limit,
    "jwtAuthentication": translate_jwt_authentication,
    "authorization": translate_authorization,
}


def _merge(policies: m.Policies, fields: Mapping[str, Any]) -> m.Policies:
    """Several policies on one target combine: list kinds append, others are replaced."""
    changes = {}
    for name, value in fields.items():
        old = getattr(policies, name)
        changes[name] = old + value if isinstance(old, tuple) else value
    return attrs.evolve(policies, **changes)


def _set_fields(policies: m.Policies) -> dict[str, Any]:
    return {f.name: getattr(policies, f.name) for f in attrs.fields(m.Policies)
            if getattr(policies, f.name) not in (None, ())}


def _header_modifier(spec: dict[str, Any]) -> m.HeaderModifier:
    def pairs(items: list[dict[str, str]]) -> tuple[tuple[bytes, bytes], ...]:
        return tuple((p["name"].encode(), p["value"].encode()) for p in items)
    return m.HeaderModifier(add=pairs(spec.get("add", [])), set=pairs(spec.get("set", [])),
                            remove=tuple(n.encode() for n in spec.get("remove", [])))


def _path_modifier(path: dict[str, Any] | None) -> dict[str, Any]:
    """``HTTPPathModifier`` as UrlRewriteSpec's path fields (validated: the value of its type is set)."""
    if path is None:
        return {}
    if path["type"] == "ReplaceFullPath":
        return {"path_kind": "full", "path": path["replaceFullPath"]}
    return {"path_kind": "prefix", "path": path["replacePrefixMatch"]}


def _url_rewrite(spec: dict[str, Any]) -> UrlRewriteSpec:
    """``URLRewrite``: its hostname is the whole Host sent upstream."""
    host = {"authority_kind": "full", "authority": spec["hostname"]} if "hostname" in spec else {}
    return UrlRewriteSpec(**_path_modifier(spec.get("path")), **host)


def _request_redirect(spec: dict[str, Any]) -> RedirectSpec:
    """``RequestRedirect``: hostname and port as Gateway API says (a port that is the configured
    scheme's default is left out; without a port, a configured scheme takes its well-known one)."""
    scheme, hostname, port = spec.get("scheme"), spec.get("hostname"), spec.get("port")
    authority: dict[str, Any] = {}
    if hostname is not None and port is not None:
        default = {"http": 80, "https": 443}.get(scheme or "")
        authority = {"authority_kind": "full", "authority": hostname if port == default else f"{hostname}:{port}"}
    elif hostname is not None:
        authority = {"authority_kind": "host", "authority": hostname}
    elif port is not None:
        authority = {"authority_kind": "port", "authority": str(port)}
    return RedirectSpec(UrlRewriteSpec(**_path_modifier(spec.get("path")), **authority), scheme,
                        spec.get("statusCode", 302))


def _request_mirror(spec: dict[str, Any]) -> MirrorSpec:
    ref = spec["backendRef"]
    host = f"{ref['name']}.{ref['namespace']}" if ref.get("namespace") else ref["name"]
    if "fraction" in spec:
        share = spec["fraction"]["numerator"] / spec["fraction"].get("denominator", 100)
    else:
        share = spec.get("percent", 100) / 100
    return MirrorSpec(m.Address(host, ref["port"]), min(1.0, share))


#: HTTPRoute filter type -> (its field, the Policies attribute, translation)
_FILTERS: dict[str, tuple[str, str, Callable[[dict[str, Any]], Any]]] = {
    "RequestHeaderModifier": ("requestHeaderModifier", "request_header_modifier", _header_modifier),
    "ResponseHeaderModifier": ("responseHeaderModifier", "response_header_modifier", _header_modifier),
    "RequestRedirect": ("requestRedirect", "request_redirect", _request_redirect),
    "URLRewrite": ("urlRewrite", "url_rewrite", _url_rewrite),
    "RequestMirror": ("requestMirror", "request_mirror", _request_mirror),
}


def _value_matches(items: list[dict[str, str]], *, lower: bool) -> tuple[m.ValueMatch, ...]:
    out = []
    for item in items:
        name = item["name"].lower() if lower else item["name"]
        if item.get("type", "Exact") == "RegularExpression":
            out.append(m.ValueMatch(name, "regex", item["value"], re.compile(item["value"])))
        else:
            out.append(m.ValueMatch(name, "exact", item["value"]))
    return tuple(out)


def _match(match: dict[str, Any]) -> m.RouteMatch:
    path = match.get("path", {})
    kind, value = path.get("type", "PathPrefix"), path.get("value", "/")
    if kind == "RegularExpression":
        path_match = m.PathMatch("regex", value, re.compile(value))
    else:
        path_match = m.PathMatch("exact" if kind == "Exact" else "pathPrefix", value)
    return m.RouteMatch(path=path_match, method=match.get("method"),
                        headers=_value_matches(match.get("headers", []), lower=True),
                        query=_value_matches(match.get("queryParams", []), lower=False))


def _check_regexes(route: Resource) -> list[str]:
    problems = []
    for r, rule in enumerate(route.spec.get("rules", [])):
        for i, match in enumerate(rule.get("matches", [])):
            candidates = [("path", match.get("path", {}))] + [
                (f"{field}[{j}]", item) for field in ("headers", "queryParams")
                for j, item in enumerate(match.get(field, []))]
            for where, item in candidates:
                if item.get("type") == "RegularExpression":
                    try:
                        re.compile(item.get("value", ""))
                    except re.error as exc:
                        problems.append(f"spec.rules[{r}].matches[{i}].{where}.value: Invalid value: "
                                        f"{item.get('value')!r}: invalid regular expression: {exc}")
    return problems


@frozen
class _RuleRoute:
    """One HTTPRoute rule, built once, placed in every listener it attaches to."""

    suffix: str
    matches: tuple[m.RouteMatch, ...]
    policies: m.Policies
    backends: tuple[m.Backend, ...]


def _rules(route: Resource) -> tuple[_RuleRoute, ...]:
    out = []
    for i, rule in enumerate(route.spec.get("rules", []) or [{}]):
        suffix = "" if i == 0 else f".{rule.get('name') or i}"
        policies = m.EMPTY_POLICIES
        for f in rule.get("filters", []):  # validated: each type at most once, with its field
            wire, attribute, translate = _FILTERS[f["type"]]
            policies = attrs.evolve(policies, **{attribute: translate(f[wire])})
        backends = []
        for ref in rule.get("backendRefs", []):
            host = f"{ref['name']}.{ref['namespace']}" if ref.get("namespace") else ref["name"]
            target = m.Address(host, ref["port"])
            backends.append(m.Backend(str(target), target, ref.get("weight", 1)))
        out.append(_RuleRoute(suffix, tuple(_match(x) for x in rule.get("matches", [])) or (m.RouteMatch(),),
                              policies, tuple(backends)))
    return tuple(out)


def _hostname_matches(listener: str | None, hostnames: list[str]) -> bool:
    """Gateway API: a route attaches when one of its hostnames intersects the listener's."""
    if not listener or not hostnames:
        return True
    for host in hostnames:
        if host == listener:
            return True
        if listener.startswith("*.") and host.endswith(listener[1:]):
            return True
        if host.startswith("*.") and listener.endswith(host[1:]):
            return True
    return False


@attrs.define
class _Listener:
    gateway: Resource
    index: int
    spec: dict[str, Any]
    key: str
    policies: m.Policies = m.EMPTY_POLICIES
    routes: list[tuple[Resource, _RuleRoute]] = attrs.Factory(list)
    route_policies: dict[str, m.Policies] = attrs.Factory(dict)  # route key → extra policies


def compile_manifest(resources: list[Resource], *, env: Mapping[str, str] | None = None,
                     now: datetime | None = None, rejected: tuple[str, ...] = (),
                     previous: m.Config | None = None) -> ManifestResult:
    """The served config and every resource's status (pure: same inputs, same answer).

    ``previous`` is the config of the last load: a resource whose edit is invalid keeps its last
    valid version (as an API server refuses an invalid update), and a condition that did not
    change keeps its ``lastTransitionTime``.
    """
    stamp = _timestamp(now)
    statuses: dict[int, dict[str, Any]] = {}
    out_rejected = list(rejected)
    problems: dict[int, list[str]] = {}
    seen: dict[tuple[str, str, str], Resource] = {}
    for res in resources:
        found = validate_spec(SPECS[(res.api_version, res.kind)], res.spec if res.spec is not None else {})
        if res.kind == "HTTPRoute" and not found:
            found = _check_regexes(res)
        identity = (res.kind, res.namespace, res.name)
        if identity in seen:
            found = [f"duplicate {res.kind} {res.namespace}/{res.name} (also document {seen[identity].index + 1})"]
        else:
            seen[identity] = res
        problems[res.index] = found

    kept: dict[int, list[str]] = {}
    last_valid = {(r.kind, r.namespace, r.name): r for r in (previous.manifest_sources if previous else ())}
    for i, res in enumerate(resources):
        before = last_valid.get((res.kind, res.namespace, res.name))
        if problems[res.index] and before is not None and not problems[res.index][0].startswith("duplicate"):
            kept[res.index] = problems[res.index]
            problems[res.index] = []
            resources = [*resources[:i], attrs.evolve(before, index=res.index, generation=res.generation),
                         *resources[i + 1:]]
    for res in resources:
        found = problems[res.index] or kept.get(res.index, [])
        if found:
            out_rejected.append(f"{res.ref} rejected: {'; '.join(found)}{KEPT if res.index in kept else ''}")

    def valid(kind: str) -> list[Resource]:
        return [r for r in resources if r.kind == kind and not problems[r.index]]

    # Gateways → listeners
    listeners: list[_Listener] = []
    by_gateway: dict[tuple[str, str], list[_Listener]] = {}
    for gw in valid("Gateway"):
        own = by_gateway.setdefault((gw.namespace, gw.name), [])
        for i, spec in enumerate(gw.spec["listeners"]):
            listener = _Listener(gw, i, spec, f"{gw.namespace}/{gw.name}/bind/{spec['port']}/listener{i}")
            own.append(listener)
            listeners.append(listener)

    # HTTPRoutes → attachments
    route_parents: dict[int, list[dict[str, Any]]] = {}
    attached_to: dict[tuple[str, str], list[_Listener]] = {}
    for route in [r for r in resources if r.kind == "HTTPRoute"]:
        parents = route_parents.setdefault(route.index, [])
        spec = route.spec if isinstance(route.spec, dict) else {}
        refs: list[Any] = spec["parentRefs"] if isinstance(spec.get("parentRefs"), list) else []
        if problems[route.index]:
            message = "; ".join(problems[route.index])
            for ref in refs or [{}]:
                parents.append(_parent(ref, route, [
                    _condition("Accepted", False, "UnsupportedValue", message, route, stamp),
                    _condition("ResolvedRefs", False, "UnsupportedValue", "the route is not valid", route, stamp)]))
            continue
        rules = _rules(route)
        for ref in refs:
            ns = ref.get("namespace", route.namespace)
            gw_listeners = by_gateway.get((ns, ref["name"]))
            accepted: tuple[bool, str, str]
            if gw_listeners is None:
                accepted = (False, "NoMatchingParent", f"Gateway {ns}/{ref['name']} not found")
            else:
                chosen = [x for x in gw_listeners if ref.get("sectionName") in (None, x.spec["name"])
                          and ref.get("port") in (None, x.spec["port"])]
                allowed = [x for x in chosen if route.namespace == ns or
                           x.spec.get("allowedRoutes", {}).get("namespaces", {}).get("from", "Same") == "All"]
                hosts = [x for x in allowed if _hostname_matches(x.spec.get("hostname"), spec.get("hostnames", []))]
                if not chosen:
                    what = " ".join(f"{k} {ref[k]}" for k in ("sectionName", "port") if k in ref)
                    accepted = (False, "NoMatchingParent", f"Gateway {ns}/{ref['name']} has no listener with {what}")
                elif not allowed:
                    accepted = (False, "NotAllowedByListeners",
                                f"Gateway {ns}/{ref['name']} allows routes from its own namespace only")
                elif not hosts:
                    accepted = (False, "NoMatchingListenerHostname",
                                f"no hostname of the route matches a listener of Gateway {ns}/{ref['name']}")
                else:
                    accepted = (True, "Accepted", "Route was valid")
                    for listener in hosts:
                        if all(r is not route for r, _ in listener.routes):
                            listener.routes.extend((route, rule) for rule in rules)
                            attached_to.setdefault((route.namespace, route.name), []).append(listener)
            parents.append(_parent(ref, route, [
                _condition("Accepted", *accepted, route, stamp),
                _condition("ResolvedRefs", True, "ResolvedRefs", "All references resolved", route, stamp)]))

    # ProxyPolicies → policies of listeners and routes
    policy_ancestors: dict[int, list[dict[str, Any]]] = {}
    invalid_policies: set[int] = set()
    for policy in [r for r in resources if r.kind == "ProxyPolicy"]:
        ancestors = policy_ancestors.setdefault(policy.index, [])
        spec = policy.spec if isinstance(policy.spec, dict) else {}
        fields: dict[str, Any] = {}
        invalid = list(problems[policy.index])
        if not invalid:
            for name, value in (spec.get("traffic") or {}).items():
                try:
                    fields = {**fields, **TRAFFIC_TRANSLATORS[name](value, policy)}
                except NotApplied as exc:
                    invalid.append(f"{exc.args[0]}: not supported by this version of trioproxy")
                except ManifestValueError as exc:  # "<field path>: <what is wrong>"
                    invalid.append(str(exc))
            if invalid:
                invalid_policies.add(policy.index)
                out_rejected.append(f"{policy.ref} rejected: {'; '.join(invalid)}")
        refs = spec["targetRefs"] if isinstance(spec.get("targetRefs"), list) else []
        for target in [t for t in refs if isinstance(t, dict)] or [{}]:
            kind, name = target.get("kind", "?"), target.get("name", "?")
            targets: list[_Listener] = []
            pending = ""
            if kind == "Gateway":
                targets = [x for x in by_gateway.get((policy.namespace, name), [])
                           if target.get("sectionName") in (None, x.spec["name"])]
                if (policy.namespace, name) not in by_gateway:
                    pending = f"Gateway {policy.namespace}/{name} not found"
                elif not targets:
                    pending = f"Gateway {policy.namespace}/{name} has no listener named {target.get('sectionName')}"
            else:
                targets = attached_to.get((policy.namespace, name), [])
                if not any(r.kind == "HTTPRoute" and (r.namespace, r.name) == (policy.namespace, name)
                           for r in resources):
                    pending = f"HTTPRoute {policy.namespace}/{name} not found"
                elif not targets:
                    pending = f"HTTPRoute {policy.namespace}/{name} is not attached to any Gateway"
            if invalid:
                accepted_c = _condition("Accepted", False, "Invalid", "; ".join(invalid), policy, stamp)
                attached = _condition("Attached", False, "Pending", "the policy is not valid", policy, stamp)
            else:
                accepted_c = _condition("Accepted", True, "Valid", "Policy is valid", policy, stamp)
                attached = (_condition("Attached", False, "Pending", pending, policy, stamp) if pending else
                            _condition("Attached", True, "Attached", "Policy is attached", policy, stamp))
            if not invalid and not pending:
                for listener in targets:
                    if kind == "Gateway":
                        listener.policies = _merge(listener.policies, fields)
                    else:
                        for route, rule in listener.routes:
                            if (route.namespace, route.name) == (policy.namespace, name):
                                key = f"{listener.key}/{route.namespace}/{route.name}{rule.suffix}"
                                listener.route_policies[key] = _merge(
                                    listener.route_policies.get(key, m.EMPTY_POLICIES), fields)
            gateways = {(x.gateway.namespace, x.gateway.name) for x in targets}
            if gateways:
                for ns, gw_name in sorted(gateways):
                    ancestors.append(_ancestor({"group": GATEWAY_GROUP, "kind": "Gateway", "namespace": ns,
                                                "name": gw_name}, [accepted_c, attached]))
            else:
                ref = {"group": target.get("group", GATEWAY_GROUP), "kind": kind, "namespace": policy.namespace,
                       "name": name}
                if "sectionName" in target:
                    ref["sectionName"] = target["sectionName"]
                ancestors.append(_ancestor(ref, [accepted_c, attached]))

    # the model
    binds: dict[int, list[m.Listener]] = {}
    for listener in listeners:
        routes: list[m.Route] = []
        for route, rule in listener.routes:
            key = f"{listener.key}/{route.namespace}/{route.name}{rule.suffix}"
            extra = listener.route_policies.get(key)
            policies = _merge(rule.policies, _set_fields(extra)) if extra else rule.policies
            routes.append(m.Route(key=key, name=route.name + rule.suffix, namespace=route.namespace,
                                  hostnames=tuple(route.spec.get("hostnames", [])), matches=rule.matches,
                                  policies=policies, backends=rule.backends, index=len(routes)))
        binds.setdefault(listener.spec["port"], []).append(m.Listener(
            key=listener.key, name=listener.spec["name"], protocol="HTTP", hostname=listener.spec.get("hostname"),
            policies=listener.policies, routes=tuple(routes)))

    # statuses, in file order
    for res in resources:
        if res.kind == "Gateway":
            statuses[res.index] = _gateway_status(res, problems[res.index], by_gateway, stamp)
        elif res.kind == "HTTPRoute":
            statuses[res.index] = {"parents": route_parents.get(res.index, [])}
        else:
            statuses[res.index] = {"ancestors": policy_ancestors.get(res.index, [])}
    for index, found in kept.items():
        _mark_kept(statuses[index], "; ".join(found) + KEPT)
    out = tuple({**res.head(), "status": statuses[res.index]} for res in resources)
    if previous is not None:
        out = _carry_times(out, previous.statuses)
    from .compile import compile_servers

    reader = Reader(env if env is not None else {})
    config = m.Config(servers=compile_servers(None, env if env is not None else {}, reader),
                      binds=tuple(m.Bind(port, tuple(ls)) for port, ls in binds.items()),
                      gateway_names=tuple(dict.fromkeys(gw.name for gw in valid("Gateway"))) or ("default",),
                      statuses=out, manifest_sources=tuple(
                          r for r in resources if not problems[r.index] and r.index not in invalid_policies))
    out_rejected.extend(p.render(None) for p in reader.problems)
    config = attrs.evolve(config, rejected=tuple(out_rejected))
    return ManifestResult(config, out, tuple(out_rejected))


KEPT = "; the last valid version keeps applying"


def _mark_kept(status: dict[str, Any], message: str) -> None:
    """An invalid edit of a resource whose last valid version still applies: Accepted says why."""
    entries = status.get("parents") or status.get("ancestors") or [status]
    for entry in entries:
        for condition in entry.get("conditions", []):
            if condition["type"] == "Accepted":
                reason = "UnsupportedValue" if "parents" in status else "Invalid"
                condition.update(status="False", reason=reason, message=message)


def _carry_times(statuses: tuple[dict[str, Any], ...], before: tuple[Any, ...]) -> tuple[dict[str, Any], ...]:
    """Keep ``lastTransitionTime`` of every condition whose status and reason did not change."""
    old_times: dict[str, str] = {}

    def walk(status: Any, prefix: str, record: bool) -> None:
        entries = [(str(e.get("parentRef") or e.get("ancestorRef")), e)
                   for e in status.get("parents", []) + status.get("ancestors", [])] + [("", status)]
        for ref, entry in entries:
            for c in entry.get("conditions", []):
                key = f"{prefix}|{ref}|{c['type']}|{c['status']}|{c['reason']}"
                if record:
                    old_times[key] = c["lastTransitionTime"]
                elif key in old_times:
                    c["lastTransitionTime"] = old_times[key]

    for item in before:
        if isinstance(item, dict):
            walk(item.get("status", {}), f"{item['kind']}|{item['metadata']}", True)
    for item in statuses:
        walk(item["status"], f"{item['kind']}|{item['metadata']}", False)
    return statuses


def _parent(ref: dict[str, Any], route: Resource, conditions: list[dict[str, Any]]) -> dict[str, Any]:
    parent = {"group": GATEWAY_GROUP, "kind": "Gateway", "namespace": ref.get("namespace", route.namespace),
              "name": ref.get("name", "?")}
    parent.update({k: ref[k] for k in ("sectionName", "port") if k in ref})
    return {"parentRef": parent, "controllerName": CONTROLLER, "conditions": conditions}


def _ancestor(ref: dict[str, Any], conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {"ancestorRef": ref, "controllerName": CONTROLLER, "conditions": conditions}


def _gateway_status(gw: Resource, problems: list[str], by_gateway: dict[tuple[str, str], list[_Listener]],
                    stamp: str) -> dict[str, Any]:
    if problems:
        message = "; ".join(problems)
        return {"conditions": [_condition("Accepted", False, "Invalid", message, gw, stamp),
                               _condition("Programmed", False, "Invalid", "the Gateway is not valid", gw, stamp)]}
    listeners = []
    for x in by_gateway[(gw.namespace, gw.name)]:
        listeners.append({"name": x.spec["name"], "attachedRoutes": len({(r.namespace, r.name) for r, _ in x.routes}),
                          "supportedKinds": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute"}],
                          "conditions": [_condition("Accepted", True, "Accepted", "Listener is valid", gw, stamp),
                                         _condition("Programmed", True, "Programmed", "Listener is serving", gw,
                                                    stamp)]})
    return {"conditions": [_condition("Accepted", True, "Accepted", "Gateway is valid", gw, stamp),
                           _condition("Programmed", True, "Programmed", "Gateway is serving", gw, stamp)],
            "listeners": listeners}


def statuses_of(text: str, source: str, *, env: Mapping[str, str] | None = None,
                now: datetime | None = None) -> tuple[tuple[dict[str, Any], ...], tuple[str, ...]]:
    """``trioproxy status``: (statuses, rejected lines) of manifest text (raises ``ManifestError``)."""
    documents = parse_documents(text, source)
    resources, rejected = read_resources(documents, source)
    result = compile_manifest(resources, env=env, now=now, rejected=tuple(rejected))
    return result.statuses, result.rejected


def load_manifest(text: str, source: str, *, env: Mapping[str, str] | None = None,
                  now: datetime | None = None, previous: m.Config | None = None) -> ManifestResult:
    """The loader's path for manifests (rejected resources are in ``config.rejected``)."""
    documents = parse_documents(text, source)
    resources, rejected = read_resources(documents, source)
    return compile_manifest(resources, env=env, now=now, rejected=tuple(rejected), previous=previous)
