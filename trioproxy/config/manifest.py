"""Kubernetes-style manifests (Gateway, HTTPRoute, ProxyPolicy) → the same frozen ``model.Config``
the standalone file compiles to, plus the resources' statuses (docs/manifests.md).

One pure function, ``compile_manifest(resources, now=...)``, does both: what is served and
why each resource is or is not, so the status can never disagree with the data plane. An
invalid or unattached resource is left out (and reported); it never stops the valid ones.
It runs in steps, one function each: check every resource and read the valid ones into their
described classes (``manifest_document``), once; make the Gateways' listeners; attach the
HTTPRoutes (their rules built by ``manifest_translate``); apply the ProxyPolicies; then the
model and the statuses (``manifest_status``).

Keys: listener ``<gwNamespace>/<gwName>/bind/<port>/listener<index>`` (index in the Gateway's
``spec.listeners``), route ``<listenerKey>/<routeNamespace>/<routeName>`` (rule 0; rule i > 0 is
``<routeName>.<i>``, or ``<routeName>.<ruleName>`` when the rule is named).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import attrs
from attrs import frozen
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from . import model as m
from .compile import compile_servers
from .describe import Reader
from .manifest_document import (
    GATEWAY_GROUP,
    SPECS,
    GatewayListener,
    GatewaySpec,
    HTTPRouteSpec,
    ParentRef,
    ProxyPolicySpec,
    read_spec,
)
from .manifest_status import KEPT, ancestor, carry_times, condition, gateway_status, mark_kept, parent, timestamp
from .manifest_translate import RuleRoute, route_rules, translate_traffic
from .manifest_validate import strip_nulls, validate_spec

__all__ = [
    "ManifestError",
    "ManifestResult",
    "Resource",
    "compile_manifest",
    "is_manifest_text",
    "load_manifest",
    "parse_documents",
    "read_resources",
    "statuses_of",
]

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

    @property
    def identity(self) -> tuple[str, str, str]:
        return self.kind, self.namespace, self.name

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


# --- checking: every resource once, the valid ones read into their described classes --------------


@frozen
class _Gateway:
    """A valid Gateway, its spec read (these three are what ``Config.manifest_sources`` keeps)."""

    resource: Resource
    spec: GatewaySpec


@frozen
class _Route:
    """A valid HTTPRoute, its spec read and its rules built."""

    resource: Resource
    spec: HTTPRouteSpec
    rules: tuple[RuleRoute, ...]


@frozen
class _Policy:
    """A valid ProxyPolicy, its spec read (its traffic is translated when applied)."""

    resource: Resource
    spec: ProxyPolicySpec


_Valid = _Gateway | _Route | _Policy


@attrs.define
class _Checked:
    """The resources after checking, in file order (a refused edit replaced by its last valid version)."""

    resources: list[Resource] = attrs.Factory(list)
    valid: dict[int, _Valid] = attrs.Factory(dict)  # index → the resource, read
    problems: dict[int, list[str]] = attrs.Factory(dict)  # index → why it is left out
    kept: dict[int, list[str]] = attrs.Factory(dict)  # index → why its edit was refused

    def add(self, resource: Resource, outcome: _Valid | list[str]) -> None:
        if isinstance(outcome, list):
            self.resources.append(resource)
            self.problems[resource.index] = outcome
        else:
            self.resources.append(outcome.resource)
            self.valid[resource.index] = outcome


def _read(resource: Resource) -> _Valid | list[str]:
    """The resource read into its described class, or its problems (the API server's messages,
    then what the schema cannot say: a regular expression that does not compile...)."""
    cls = SPECS[(resource.api_version, resource.kind)]
    problems = validate_spec(cls, resource.spec if resource.spec is not None else {})
    if problems:
        return problems
    spec = read_spec(cls, resource.spec)
    if isinstance(spec, HTTPRouteSpec):
        rules, problems = route_rules(spec)
        return problems or _Route(resource, spec, rules)
    if isinstance(spec, GatewaySpec):
        return _Gateway(resource, spec)
    return _Policy(resource, spec)


def _check(resources: list[Resource], previous: m.Config | None) -> _Checked:
    """Every resource checked; an invalid edit of a resource that was valid in ``previous`` keeps
    its last valid version (as an API server refuses an invalid update); a duplicate is left out."""
    last_valid: dict[tuple[str, str, str], _Valid] = {
        v.resource.identity: v for v in (previous.manifest_sources if previous is not None else ())}
    checked = _Checked()
    first: dict[tuple[str, str, str], Resource] = {}
    for res in resources:
        if res.identity in first:
            checked.add(res, [f"duplicate {res.kind} {res.namespace}/{res.name} "
                              f"(also document {first[res.identity].index + 1})"])
            continue
        first[res.identity] = res
        outcome = _read(res)
        before = last_valid.get(res.identity)
        if isinstance(outcome, list) and before is not None:
            checked.kept[res.index] = outcome
            outcome = attrs.evolve(before, resource=attrs.evolve(before.resource, index=res.index,
                                                                 generation=res.generation))
        checked.add(res, outcome)
    return checked


def _rejected_lines(checked: _Checked) -> list[str]:
    lines = []
    for res in checked.resources:
        found = checked.problems.get(res.index) or checked.kept.get(res.index)
        if found:
            lines.append(f"{res.ref} rejected: {'; '.join(found)}{KEPT if res.index in checked.kept else ''}")
    return lines


# --- Gateways → listeners; HTTPRoutes attach to them ------------------------------------------------


@attrs.define
class _Listener:
    """A Gateway listener while routes attach and policies apply (becomes a ``model.Listener``)."""

    gateway: Resource
    spec: GatewayListener
    key: str
    policies: m.Policies = m.EMPTY_POLICIES
    routes: list[tuple[_Route, RuleRoute]] = attrs.Factory(list)
    route_policies: dict[str, m.Policies] = attrs.Factory(dict)  # route key → extra policies

    def route_key(self, route: _Route, rule: RuleRoute) -> str:
        return f"{self.key}/{route.resource.namespace}/{route.resource.name}{rule.suffix}"


@attrs.define
class _Attachments:
    """The listeners of each valid Gateway, and the listeners each HTTPRoute attached to."""

    by_gateway: dict[tuple[str, str], list[_Listener]]
    by_route: dict[tuple[str, str], list[_Listener]] = attrs.Factory(dict)
    route_names: set[tuple[str, str]] = attrs.Factory(set)  # every HTTPRoute of the file, valid or not

    def attach(self, route: _Route, listener: _Listener) -> None:
        if all(r is not route for r, _ in listener.routes):
            listener.routes.extend((route, rule) for rule in route.rules)
            self.by_route.setdefault((route.resource.namespace, route.resource.name), []).append(listener)


def _listeners(checked: _Checked) -> _Attachments:
    by_gateway = {}
    for gw in (v for v in checked.valid.values() if isinstance(v, _Gateway)):
        ns, name = gw.resource.namespace, gw.resource.name
        by_gateway[(ns, name)] = [_Listener(gw.resource, spec, f"{ns}/{name}/bind/{spec.port}/listener{i}")
                                  for i, spec in enumerate(gw.spec.listeners)]
    routes = {(r.namespace, r.name) for r in checked.resources if r.kind == "HTTPRoute"}
    return _Attachments(by_gateway, route_names=routes)


def _hostname_matches(listener: str | None, hostnames: tuple[str, ...]) -> bool:
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


def _routes_from(listener: GatewayListener) -> str:
    """``allowedRoutes.namespaces.from``: Same (the default) or All."""
    namespaces = listener.allowed_routes.namespaces if listener.allowed_routes is not None else None
    return namespaces.from_ if namespaces is not None else "Same"


def _attach(route: _Route, ref: ParentRef, attachments: _Attachments) -> tuple[bool, str, str]:
    """Attach ``route`` to the listeners ``ref`` selects; (accepted, reason, message) of the parent."""
    ns = ref.namespace or route.resource.namespace
    gateway = f"Gateway {ns}/{ref.name}"
    listeners = attachments.by_gateway.get((ns, ref.name))
    if listeners is None:
        return False, "NoMatchingParent", f"{gateway} not found"
    chosen = [x for x in listeners if ref.section_name in (None, x.spec.name) and ref.port in (None, x.spec.port)]
    allowed = [x for x in chosen if route.resource.namespace == ns or _routes_from(x.spec) == "All"]
    hosts = [x for x in allowed if _hostname_matches(x.spec.hostname, route.spec.hostnames)]
    if not chosen:
        what = " ".join(f"{k} {v}" for k, v in (("sectionName", ref.section_name), ("port", ref.port)) if v is not None)
        return False, "NoMatchingParent", f"{gateway} has no listener with {what}"
    if not allowed:
        return False, "NotAllowedByListeners", f"{gateway} allows routes from its own namespace only"
    if not hosts:
        return False, "NoMatchingListenerHostname", f"no hostname of the route matches a listener of {gateway}"
    for listener in hosts:
        attachments.attach(route, listener)
    return True, "Accepted", "Route was valid"


def _route_parents(route: _Route, attachments: _Attachments, stamp: str) -> list[dict[str, Any]]:
    out = []
    generation = route.resource.generation
    for ref in route.spec.parent_refs:
        accepted = _attach(route, ref, attachments)
        where: dict[str, Any] = {"namespace": ref.namespace or route.resource.namespace, "name": ref.name}
        where.update({k: v for k, v in (("sectionName", ref.section_name), ("port", ref.port)) if v is not None})
        out.append(parent(where, [
            condition("Accepted", *accepted, generation, stamp),
            condition("ResolvedRefs", True, "ResolvedRefs", "All references resolved", generation, stamp)]))
    return out


def _invalid_route_parents(res: Resource, problems: list[str], stamp: str) -> list[dict[str, Any]]:
    """The parents of a route that is not valid, as far as its spec says (each parentRef that is a mapping)."""
    spec = res.spec if isinstance(res.spec, dict) else {}
    refs = spec["parentRefs"] if isinstance(spec.get("parentRefs"), list) else []
    conditions = [condition("Accepted", False, "UnsupportedValue", "; ".join(problems), res.generation, stamp),
                  condition("ResolvedRefs", False, "UnsupportedValue", "the route is not valid", res.generation,
                            stamp)]
    out = []
    for ref in [r for r in refs if isinstance(r, dict)] or [{}]:
        where = {"namespace": ref.get("namespace", res.namespace), "name": ref.get("name", "?")}
        where.update({k: ref[k] for k in ("sectionName", "port") if k in ref})
        out.append(parent(where, [dict(c) for c in conditions]))
    return out


def _attach_routes(checked: _Checked, attachments: _Attachments, stamp: str) -> dict[int, list[dict[str, Any]]]:
    """Every HTTPRoute's ``status.parents``, attaching the valid ones on the way (in file order)."""
    parents = {}
    for res in (r for r in checked.resources if r.kind == "HTTPRoute"):
        route = checked.valid.get(res.index)
        if isinstance(route, _Route):
            parents[res.index] = _route_parents(route, attachments, stamp)
        else:
            parents[res.index] = _invalid_route_parents(res, checked.problems[res.index], stamp)
    return parents


# --- ProxyPolicies → policies of listeners and routes ----------------------------------------------


@frozen
class _Target:
    """A targetRef, from a valid policy or (as written, for its status) from an invalid one."""

    group: Any
    kind: Any
    name: Any
    section: Any  # None: every listener


def _targets(res: Resource, policy: _Valid | None) -> list[_Target]:
    if isinstance(policy, _Policy):
        return [_Target(t.group, t.kind, t.name, t.section_name) for t in policy.spec.target_refs]
    spec = res.spec if isinstance(res.spec, dict) else {}
    refs = spec["targetRefs"] if isinstance(spec.get("targetRefs"), list) else []
    return [_Target(t.get("group", GATEWAY_GROUP), t.get("kind", "?"), t.get("name", "?"), t.get("sectionName"))
            for t in [t for t in refs if isinstance(t, dict)] or [{}]]


def _resolve(res: Resource, target: _Target, attachments: _Attachments) -> tuple[list[_Listener], str]:
    """The listeners ``target`` stands for, and why the policy is pending ("" when it is not)."""
    ns, name = res.namespace, target.name
    key = (ns, name) if isinstance(name, str) else None
    if target.kind == "Gateway":
        own = attachments.by_gateway.get(key) if key is not None else None
        if own is None:
            return [], f"Gateway {ns}/{name} not found"
        listeners = [x for x in own if target.section in (None, x.spec.name)]
        return listeners, "" if listeners else f"Gateway {ns}/{name} has no listener named {target.section}"
    listeners = attachments.by_route.get(key, []) if key is not None else []
    if key not in attachments.route_names:
        return listeners, f"HTTPRoute {ns}/{name} not found"
    return listeners, "" if listeners else f"HTTPRoute {ns}/{name} is not attached to any Gateway"


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


def _apply(res: Resource, target: _Target, listeners: list[_Listener], fields: Mapping[str, Any]) -> None:
    """A Gateway target: its listeners' policies; an HTTPRoute target: each of its rules' (by route key)."""
    for listener in listeners:
        if target.kind == "Gateway":
            listener.policies = _merge(listener.policies, fields)
            continue
        for route, rule in listener.routes:
            if (route.resource.namespace, route.resource.name) == (res.namespace, target.name):
                key = listener.route_key(route, rule)
                listener.route_policies[key] = _merge(listener.route_policies.get(key, m.EMPTY_POLICIES), fields)


def _policy_conditions(res: Resource, invalid: list[str], pending: str, stamp: str) -> list[dict[str, Any]]:
    generation = res.generation
    if invalid:
        return [condition("Accepted", False, "Invalid", "; ".join(invalid), generation, stamp),
                condition("Attached", False, "Pending", "the policy is not valid", generation, stamp)]
    accepted = condition("Accepted", True, "Valid", "Policy is valid", generation, stamp)
    if pending:
        return [accepted, condition("Attached", False, "Pending", pending, generation, stamp)]
    return [accepted, condition("Attached", True, "Attached", "Policy is attached", generation, stamp)]


def _ancestors(res: Resource, target: _Target, listeners: list[_Listener],
               conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per Gateway the target is attached to, or the target itself when there is none."""
    gateways = sorted({(x.gateway.namespace, x.gateway.name) for x in listeners})
    if gateways:
        return [ancestor({"group": GATEWAY_GROUP, "kind": "Gateway", "namespace": ns, "name": name},
                         [dict(c) for c in conditions]) for ns, name in gateways]
    ref = {"group": target.group, "kind": target.kind, "namespace": res.namespace, "name": target.name}
    if target.section is not None:
        ref["sectionName"] = target.section
    return [ancestor(ref, conditions)]


@attrs.define
class _Applied:
    ancestors: dict[int, list[dict[str, Any]]] = attrs.Factory(dict)  # index → status.ancestors
    invalid: set[int] = attrs.Factory(set)  # valid policies whose traffic is not
    rejected: list[str] = attrs.Factory(list)


def _apply_policies(checked: _Checked, attachments: _Attachments, stamp: str) -> _Applied:
    """Every ProxyPolicy's ``status.ancestors``, applying the valid ones on the way (in file order)."""
    applied = _Applied()
    for res in (r for r in checked.resources if r.kind == "ProxyPolicy"):
        policy = checked.valid.get(res.index)
        fields: dict[str, Any] = {}
        invalid = checked.problems.get(res.index, [])
        if isinstance(policy, _Policy):
            fields, invalid = translate_traffic(policy.spec.traffic, res)
            if invalid:
                applied.invalid.add(res.index)
                applied.rejected.append(f"{res.ref} rejected: {'; '.join(invalid)}")
        entries = applied.ancestors.setdefault(res.index, [])
        for target in _targets(res, policy):
            listeners, pending = _resolve(res, target, attachments)
            if not invalid and not pending:
                _apply(res, target, listeners, fields)
            entries.extend(_ancestors(res, target, listeners, _policy_conditions(res, invalid, pending, stamp)))
    return applied


# --- the model and the statuses --------------------------------------------------------------------


def _model_listener(listener: _Listener) -> m.Listener:
    routes: list[m.Route] = []
    for route, rule in listener.routes:
        key = listener.route_key(route, rule)
        extra = listener.route_policies.get(key)
        policies = _merge(rule.policies, _set_fields(extra)) if extra else rule.policies
        routes.append(m.Route(key=key, name=route.resource.name + rule.suffix, namespace=route.resource.namespace,
                              hostnames=route.spec.hostnames, matches=rule.matches, policies=policies,
                              backends=rule.backends, index=len(routes)))
    return m.Listener(key=listener.key, name=listener.spec.name, protocol="HTTP", hostname=listener.spec.hostname,
                      policies=listener.policies, routes=tuple(routes))


def _binds(attachments: _Attachments) -> tuple[m.Bind, ...]:
    """Listeners by port: two Gateways on one port share the bind."""
    binds: dict[int, list[m.Listener]] = {}
    for listeners in attachments.by_gateway.values():
        for listener in listeners:
            binds.setdefault(listener.spec.port, []).append(_model_listener(listener))
    return tuple(m.Bind(port, tuple(ls)) for port, ls in binds.items())


def _attached_routes(attachments: _Attachments, gateway: Resource) -> list[tuple[str, int]]:
    """(name, number of HTTPRoutes attached) of each listener of a valid Gateway."""
    listeners = attachments.by_gateway.get((gateway.namespace, gateway.name), [])
    return [(x.spec.name, len({(r.resource.namespace, r.resource.name) for r, _ in x.routes})) for x in listeners]


def _statuses(checked: _Checked, attachments: _Attachments, parents: dict[int, list[dict[str, Any]]],
              applied: _Applied, stamp: str) -> tuple[dict[str, Any], ...]:
    """Every resource's ``{apiVersion, kind, metadata, status}``, in file order."""
    out = []
    for res in checked.resources:
        if res.kind == "Gateway":
            status = gateway_status(checked.problems.get(res.index, []), _attached_routes(attachments, res),
                                    res.generation, stamp)
        elif res.kind == "HTTPRoute":
            status = {"parents": parents.get(res.index, [])}
        else:
            status = {"ancestors": applied.ancestors.get(res.index, [])}
        if res.index in checked.kept:
            mark_kept(status, "; ".join(checked.kept[res.index]) + KEPT)
        out.append({**res.head(), "status": status})
    return tuple(out)


def compile_manifest(resources: list[Resource], *, env: Mapping[str, str] | None = None,
                     now: datetime | None = None, rejected: tuple[str, ...] = (),
                     previous: m.Config | None = None) -> ManifestResult:
    """The served config and every resource's status (pure: same inputs, same answer).

    ``previous`` is the config of the last load: a resource whose edit is invalid keeps its last
    valid version (as an API server refuses an invalid update), and a condition that did not
    change keeps its ``lastTransitionTime``.
    """
    stamp = timestamp(now)
    checked = _check(resources, previous)
    attachments = _listeners(checked)
    parents = _attach_routes(checked, attachments, stamp)
    applied = _apply_policies(checked, attachments, stamp)
    statuses = _statuses(checked, attachments, parents, applied, stamp)
    if previous is not None:
        statuses = carry_times(statuses, previous.statuses)
    reader = Reader(env if env is not None else {})
    servers = compile_servers(None, env if env is not None else {}, reader)
    out_rejected = (*rejected, *_rejected_lines(checked), *applied.rejected, *(p.render(None) for p in reader.problems))
    config = m.Config(servers=servers, binds=_binds(attachments),
                      gateway_names=tuple(dict.fromkeys(name for _, name in attachments.by_gateway)) or ("default",),
                      statuses=statuses, rejected=out_rejected, manifest_sources=tuple(
                          v for i, v in checked.valid.items() if i not in applied.invalid))
    return ManifestResult(config, statuses, out_rejected)


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
