"""A read ``document.Document`` → the frozen runtime ``model.Config``: the only hand-written step.

Reading has already checked every type, syntax and unknown field. What is left here is what
needs more than one field or the environment: defaults that depend on a position
(``route<index>``), keys, duplicate names and ports, server-address env overrides, and building
the runtime specs (compiled regexes, ``LocalRateLimitSpec``). Problems go through
``reader.at(obj, "wireField", message)`` so they carry the file position like reading's.

To compile a new policy kind: add ``"<attribute>": <function(value, reader) -> runtime spec>`` to
``POLICY_COMPILERS`` (the attribute is the same on ``document.*Policies`` and
``model.Policies``); return ``None`` after reporting a problem.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ..policies.authorization import AuthorizationSpec, Rule
from ..policies.cors import CorsSpec
from ..policies.jwt import JwksError, JwksSource, JwtAuthSpec, ProviderSpec, parse_jwks
from ..policies.ratelimit_local import LocalRateLimitSpec
from ..policies.ratelimit_remote import (
    RemoteDescriptor,
    RemoteEntry,
    RemoteRateLimitSpec,
    compile_entry,
    never_evaluating,
)
from . import document as d
from . import model as m
from .describe import Reader
from .scalars import parse_address

# --- policies ----------------------------------------------------------------------------------


def _header_pairs(value: tuple[d.HeaderPair, ...] | dict[str, str]) -> tuple[tuple[bytes, bytes], ...]:
    items = value.items() if isinstance(value, dict) else ((p.name, p.value) for p in value)
    return tuple((name.encode(), text.encode()) for name, text in items)


def _header_modifier(value: d.HeaderModifier, r: Reader) -> m.HeaderModifier:
    return m.HeaderModifier(add=_header_pairs(value.add), set=_header_pairs(value.set),
                            remove=tuple(name.encode() for name in value.remove))


def _timeout(value: d.Timeout, r: Reader) -> m.TimeoutPolicy:
    return m.TimeoutPolicy(value.request_timeout, value.backend_request_timeout)


def _direct_response(value: d.DirectResponse, r: Reader) -> m.DirectResponsePolicy:
    return m.DirectResponsePolicy(value.status, value.body)


def _backend_auth(value: d.BackendAuth, r: Reader) -> m.BackendAuth:
    return m.BackendAuth(value.key)


def _local_rate_limit(value: tuple[d.LocalRateLimit, ...], r: Reader) -> tuple[LocalRateLimitSpec, ...] | None:
    specs = []
    for entry in value:
        try:
            specs.append(LocalRateLimitSpec(entry.max_tokens, entry.tokens_per_fill, entry.fill_interval, entry.type))
        except ValueError as exc:  # the spec names the wire field first: "maxTokens: ..."
            wire, message = str(exc).split(": ", 1)
            r.at(entry, wire, message)
    return tuple(specs) if len(specs) == len(value) else None


def _remote_rate_limit(value: d.RemoteRateLimit, r: Reader) -> RemoteRateLimitSpec | None:
    """Entries whose value cannot compile are errors; those that can never evaluate (a bare word
    such as ``users``, an unknown variable) are warned about: their descriptor is always skipped."""
    from ..cel import CelError

    descriptors = []
    ok = True
    for descriptor in value.descriptors:
        entries = []
        for entry in descriptor.entries:
            try:
                compile_entry(entry.value)
                entries.append(RemoteEntry(entry.key, entry.value))
            except CelError as exc:
                r.at(entry, "value", str(exc))
                ok = False
        descriptors.append(RemoteDescriptor(tuple(entries), descriptor.type))
    if not ok:
        return None
    spec = RemoteRateLimitSpec(value.host, value.domain, tuple(descriptors), value.failure_mode,
                               value.timeout if value.timeout is not None else 1.0)
    for warning in never_evaluating(spec):
        logging.getLogger("trioproxy.config").warning("remoteRateLimit (domain %s): %s", value.domain, warning)
    return spec


def _jwks(value: d.JwksRef | str, owner: Any, r: Reader) -> JwksSource | None:
    """A JWKS source; a file or inline JWKS is read and checked now, a URL at start."""
    if isinstance(value, str):
        text, source = value, JwksSource(inline=value)
    elif value.url is not None:
        if not value.url.startswith(("http://", "https://")):
            r.at(value, "url", f"expected an http:// or https:// URL, got {value.url!r}")
            return None
        return JwksSource(url=value.url)
    else:
        assert value.file is not None
        try:
            text = Path(value.file).read_text()
        except OSError as exc:
            r.at(value, "file", f"cannot read {value.file}: {exc.strerror or exc}")
            return None
        source = JwksSource(file=value.file, inline=text)
    try:
        parse_jwks(text)
    except JwksError as exc:
        r.at(value if not isinstance(value, str) else owner, "file" if not isinstance(value, str) else "jwks", str(exc))
        return None
    return source


def _jwt_auth(value: d.JwtAuth, r: Reader) -> JwtAuthSpec | None:
    single = value.issuer is not None or value.jwks is not None or value.audiences
    if value.providers and single:
        r.at(value, "providers", "use either providers or issuer/audiences/jwks, not both")
        return None
    providers = []
    if value.providers:
        for provider in value.providers:
            source = _jwks(provider.jwks, provider, r)
            if source is not None:
                providers.append(ProviderSpec(provider.issuer, source, provider.audiences))
        if len(providers) != len(value.providers):
            return None
    else:
        ok = True
        for wire, given in (("issuer", value.issuer), ("jwks", value.jwks)):
            if given is None:
                r.at(value, None, f"{wire} is required (or give providers)")
                ok = False
        if not ok:
            return None
        assert value.issuer is not None and value.jwks is not None
        source = _jwks(value.jwks, value, r)
        if source is None:
            return None
        providers.append(ProviderSpec(value.issuer, source, value.audiences))
    return JwtAuthSpec(tuple(providers), value.mode)


def _authorization(value: d.Authorization, r: Reader) -> AuthorizationSpec:
    rules = []
    for rule in value.rules:
        if isinstance(rule, str):
            rules.append(Rule("allow", rule))
        else:
            if rule.allow is not None:  # exactly one of the three, checked when read
                rules.append(Rule("allow", rule.allow))
            elif rule.deny is not None:
                rules.append(Rule("deny", rule.deny))
            elif rule.require is not None:
                rules.append(Rule("require", rule.require))
    return AuthorizationSpec(tuple(rules))


def _cors(value: d.Cors, r: Reader) -> CorsSpec:
    return CorsSpec(allow_origins=value.allow_origins, allow_methods=value.allow_methods,
                    allow_headers=value.allow_headers, expose_headers=value.expose_headers,
                    allow_credentials=value.allow_credentials,
                    max_age=int(value.max_age) if value.max_age is not None else None)


#: attribute of ``document.*Policies`` / ``model.Policies`` → document value to runtime spec.
POLICY_COMPILERS: dict[str, Callable[[Any, Reader], Any]] = {
    "jwt_auth": _jwt_auth,
    "authorization": _authorization,
    "cors": _cors,
    "local_rate_limit": _local_rate_limit,
    "remote_rate_limit": _remote_rate_limit,
    "request_header_modifier": _header_modifier,
    "response_header_modifier": _header_modifier,
    "timeout": _timeout,
    "direct_response": _direct_response,
    "backend_auth": _backend_auth,
}


def compile_policies(policies: Any, r: Reader) -> m.Policies:
    if policies is None:
        return m.EMPTY_POLICIES
    fields: dict[str, Any] = {}
    for attribute in attrs.fields(type(policies)):
        value = getattr(policies, attribute.name)
        if value is None or value == ():
            continue
        spec = POLICY_COMPILERS[attribute.name](value, r)
        if spec is not None:
            fields[attribute.name] = spec
    return m.Policies(**fields) if fields else m.EMPTY_POLICIES


# --- routes --------------------------------------------------------------------------------------


def _value_matches(matches: tuple[d.ValueMatch, ...], *, lower: bool) -> tuple[m.ValueMatch, ...]:
    out = []
    for match in matches:
        name = match.name.lower() if lower else match.name
        if match.value.regex is not None:
            out.append(m.ValueMatch(name, "regex", match.value.regex, re.compile(match.value.regex)))
        else:
            out.append(m.ValueMatch(name, "exact", match.value.exact or ""))
    return tuple(out)


def _match(match: d.Match) -> m.RouteMatch:
    path = m.PathMatch("pathPrefix", "/")
    if match.path is not None:
        if match.path.regex is not None:
            path = m.PathMatch("regex", match.path.regex, re.compile(match.path.regex))
        elif match.path.exact is not None:
            path = m.PathMatch("exact", match.path.exact)
        elif match.path.path_prefix is not None:
            path = m.PathMatch("pathPrefix", match.path.path_prefix)
    return m.RouteMatch(path=path, method=match.method, headers=_value_matches(match.headers, lower=True),
                        query=_value_matches(match.query, lower=False))


def _backend(backend: d.Backend, r: Reader) -> m.Backend:
    policies = compile_policies(backend.policies, r)
    if backend.ai is None:
        assert backend.host is not None
        return m.Backend(str(backend.host), backend.host, backend.weight, policies)
    ai = backend.ai
    model = ai.provider.open_ai.model if ai.provider.open_ai is not None else None
    return m.Backend(ai.name, ai.host_override, backend.weight, policies,
                     m.AIBackend(ai.name, "openAI", model, ai.path_override))


def _route(route: d.Route, listener_key: str, r: Reader) -> m.Route:
    index = r.origin(route).index or 0
    name = route.name or f"route{index}"
    policies = compile_policies(route.policies, r)
    backends = tuple(_backend(b, r) for b in route.backends)
    if policies.backend_auth is not None:  # a route's backendAuth is each backend's, unless it has its own
        backends = tuple(b if b.policies.backend_auth is not None else attrs.evolve(
            b, policies=attrs.evolve(b.policies, backend_auth=policies.backend_auth)) for b in backends)
    return m.Route(
        key=f"{listener_key}/{route.namespace}/{name}",
        name=name,
        namespace=route.namespace,
        hostnames=route.hostnames,
        matches=tuple(_match(x) for x in route.matches) or (m.RouteMatch(),),
        policies=policies,
        backends=backends,
        index=index,
    )


def _listener(listener: d.Listener, port: int, r: Reader) -> m.Listener:
    index = r.origin(listener).index or 0
    key = f"default/default/bind/{port}/listener{index}"
    routes = []
    seen: dict[str, str] = {}
    for route in listener.routes:
        compiled = _route(route, key, r)
        if compiled.key in seen:
            r.at(route, "name", f"duplicate route name {compiled.name!r} (also at {seen[compiled.key]})")
        seen.setdefault(compiled.key, r.origin(route).path)
        routes.append(compiled)
    return m.Listener(key=key, name=listener.name or f"listener{index}", protocol=listener.protocol,
                      hostname=listener.hostname, policies=compile_policies(listener.policies, r),
                      routes=tuple(routes))


# --- servers and the whole config --------------------------------------------------------------

SERVER_ENV = (("admin", "admin_addr", "ADMIN_ADDR"), ("stats", "stats_addr", "STATS_ADDR"),
              ("readiness", "readiness_addr", "READINESS_ADDR"))


def _servers(servers: d.Servers | None, env: Mapping[str, str], r: Reader) -> m.ServerAddrs:
    defaults = m.ServerAddrs()
    out = {}
    for attribute, field_name, env_name in SERVER_ENV:
        value = getattr(servers, field_name) if servers is not None else None
        if env.get(env_name):
            try:
                value = parse_address(env[env_name], allow_port_zero=True)
            except ValueError:
                r.problem(f"env {env_name}", f"expected HOST:PORT, got {env[env_name]!r}")
        out[attribute] = value or getattr(defaults, attribute)
    token = env.get("ADMIN_TOKEN") or (servers.admin_token if servers is not None else None)
    return m.ServerAddrs(**out, admin_token=token or None)


def compile_document(document: d.Document, env: Mapping[str, str], r: Reader) -> m.Config:
    """The runtime config of a read document; problems go to ``r`` (the caller raises)."""
    binds = []
    ports: dict[int, int] = {}
    for bind in document.binds:
        index = r.origin(bind).index or 0
        if bind.port in ports and bind.port != 0:
            r.at(bind, "port", f"port {bind.port} is already bound by binds[{ports[bind.port]}]")
        ports.setdefault(bind.port, index)
        binds.append(m.Bind(bind.port, tuple(_listener(x, bind.port, r) for x in bind.listeners)))
    servers = document.config
    return m.Config(servers=_servers(servers, env, r), binds=tuple(binds),
                    logging=_logging(servers.logging, r) if servers and servers.logging else None,
                    tracing=_tracing(servers.tracing, r) if servers and servers.tracing else None,
                    workers=servers.workers if servers and servers.workers is not None else 1)


def _log_fields(value: d.LogFields | None, r: Reader) -> m.LogFieldsSpec:
    if value is None:
        return m.LogFieldsSpec()
    for name, source in value.add.items():
        _check_cel(source, value, "add", r, f"{name}: ")
    return m.LogFieldsSpec(tuple(value.add.items()), value.remove)


def _check_cel(source: str, obj: Any, wire: str, r: Reader, prefix: str = "") -> None:
    from ..cel import CelError, compile_expression

    try:
        compile_expression(source)
    except CelError as error:
        r.at(obj, wire, f"{prefix}invalid CEL expression: {error}")


def _logging(value: d.Logging, r: Reader) -> m.LoggingSpec:
    if value.filter is not None:
        _check_cel(value.filter, value, "filter", r)
    return m.LoggingSpec(value.level, value.format, value.filter, _log_fields(value.fields, r))


def _tracing(value: d.Tracing, r: Reader) -> m.TracingSpec:
    if not value.otlp_endpoint.startswith(("http://", "https://")):
        r.at(value, "otlpEndpoint", f"expected an http:// or https:// URL, got {value.otlp_endpoint!r}")
    return m.TracingSpec(
        value.otlp_endpoint, value.otlp_protocol, tuple(value.headers.items()), value.path,
        0.0 if value.random_sampling is None else value.random_sampling,
        1.0 if value.client_sampling is None else value.client_sampling, _log_fields(value.fields, r))
