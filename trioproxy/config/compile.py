"""A read ``document.Document`` → the frozen runtime ``model.Config``: the only hand-written step.

Reading has already checked every type, syntax and unknown field. What is left here is what
needs more than one field or the environment: defaults that depend on a position
(``route<index>``), keys, duplicate names and ports, server-address env overrides, and building
the runtime specs (compiled regexes, ``LocalRateLimitSpec``). Problems go through
``reader.at(obj, "wireField", message)`` so they carry the file position like reading's.

A policy kind's compile function is its entry in ``POLICY_COMPILERS`` (step 4 of docs/pipeline.md,
"Adding a policy kind"); it returns ``None`` after reporting a problem.
"""

from __future__ import annotations

import logging
import re
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..llm.pricing import MissingPrice, PriceCatalog
from ..llm.providers import (
    PRESETS,
    PROVIDERS,
    ROUTE_KINDS,
    ProviderDefaults,
    azure_defaults,
    bedrock_defaults,
    vertex_defaults,
)
from ..policies.api_key import ApiKeySpec, CredentialLocation, key_digest
from ..policies.authorization import AuthorizationSpec, Rule
from ..policies.basic_auth import BasicAuthSpec, HtpasswdError, parse_htpasswd
from ..policies.cors import CorsSpec
from ..policies.csrf import CsrfSpec
from ..policies.delay import DelaySpec
from ..policies.jwt import JwksError, JwksSource, JwtAuthSpec, ProviderSpec, parse_jwks
from ..policies.mirror import MirrorSpec
from ..policies.ratelimit_local import LocalRateLimitSpec
from ..policies.ratelimit_remote import (
    RemoteDescriptor,
    RemoteEntry,
    RemoteRateLimitSpec,
    compile_entry,
    never_evaluating,
)
from ..policies.resilience import DEFAULT_HEALTH
from ..policies.retry import RetrySpec
from ..policies.url_rewrite import RedirectSpec, UrlRewriteSpec
from . import compile_mcp
from . import document as d
from . import model as m
from . import resilience_compile as resilience
from .backend_tls import SYSTEM_TRUST, BackendTls, TlsConfigError, build_context, file_fingerprint
from .describe import SIMPLE_ENV, Origin, Reader
from .scalars import parse_duration, parse_server_address

# --- policies ----------------------------------------------------------------------------------


def _header_pairs(value: tuple[d.HeaderPair, ...] | dict[str, str]) -> tuple[tuple[bytes, bytes], ...]:
    items = value.items() if isinstance(value, dict) else ((p.name, p.value) for p in value)
    return tuple((name.encode(), text.encode()) for name, text in items)


def _header_modifier(value: d.HeaderModifier, r: Reader) -> m.HeaderModifier:
    return m.HeaderModifier(add=_header_pairs(value.add), set=_header_pairs(value.set),
                            remove=tuple(name.encode() for name in value.remove),
                            from_env=_names_from_env(r.origins.get(id(value))))


def _names_from_env(origin: Origin | None) -> frozenset[bytes]:
    """The header names of an add/set whose value, as written, holds ``$VAR`` or ``${VAR}``."""
    if origin is None or not isinstance(origin.node, MappingNode):
        return frozenset()
    return frozenset(
        str(name.value).lower().encode()
        for key, headers in origin.node.value if key.value in ("add", "set")
        for name, text in _header_nodes(headers)
        if isinstance(name, ScalarNode) and isinstance(text, ScalarNode)
        and any(found.group(1) or found.group(2) for found in SIMPLE_ENV.finditer(str(text.value))))


def _header_nodes(node: Node) -> list[tuple[Node | None, Node | None]]:
    """(name, value) nodes of ``{name: value}`` or ``[{name, value}]``."""
    if isinstance(node, MappingNode):
        return list(node.value)
    if not isinstance(node, SequenceNode):
        return []
    fields = [{k.value: v for k, v in item.value} for item in node.value if isinstance(item, MappingNode)]
    return [(f.get("name"), f.get("value")) for f in fields]


def _timeout(value: d.Timeout, r: Reader) -> m.TimeoutPolicy:
    return m.TimeoutPolicy(value.request_timeout, value.backend_request_timeout)


def _direct_response(value: d.DirectResponse, r: Reader) -> m.DirectResponsePolicy | m.ConditionalDirectResponse | None:
    if not value.conditional:
        if value.status is None:
            r.at(value, None, "status is required (or give conditional)")
            return None
        return m.DirectResponsePolicy(value.status, value.body)
    if value.status is not None:
        r.at(value, "status", "use either conditional or status/body, not both")
        return None
    entries = value.conditional
    for entry in entries[:-1]:
        if entry.condition is None:
            r.at(entry, None, "an entry without a condition is the fallback and must be the last one")
            return None
    return m.ConditionalDirectResponse(tuple(m.DirectResponsePolicy(e.status, e.body, e.condition) for e in entries))


def _retry(value: d.Retry, r: Reader) -> RetrySpec:
    return resilience.retry_spec(value)


def _csrf(value: d.Csrf, r: Reader) -> CsrfSpec:
    for origin in value.additional_origins:
        if "://" not in origin or origin.endswith("/"):
            r.at(value, "additionalOrigins", f"{origin!r} is not an origin such as https://app.example.com")
    return CsrfSpec(tuple(dict.fromkeys(value.additional_origins)))


def _url_rewrite(value: d.UrlRewrite | d.RequestRedirect, r: Reader) -> UrlRewriteSpec:
    """The path and authority parts, shared by urlRewrite and requestRedirect."""
    path_kind: Any = None
    path: str | None = ""
    if value.path is not None:
        path_kind, path = ("full", value.path.full) if value.path.full is not None else ("prefix", value.path.prefix)
    authority_kind: Any = None
    authority = ""
    given = value.authority
    if isinstance(given, d.AuthorityRewrite):
        if given.full is not None:
            authority_kind, authority = "full", given.full
        elif given.host is not None:
            authority_kind, authority = "host", given.host
        else:
            authority_kind, authority = "port", str(given.port)
    for wire, text in (("path", path or ""), ("authority", authority)):  # they go into a request line or Location
        if any(c.isspace() or not c.isprintable() for c in text):
            r.at(value, wire, f"{text!r} contains whitespace or control characters")
        elif wire == "path" and text and not text.startswith("/"):
            r.at(value, wire, f"expected a path starting with /, got {text!r}")
    return UrlRewriteSpec(path_kind, path or "", authority_kind, authority)


def _request_redirect(value: d.RequestRedirect, r: Reader) -> RedirectSpec:
    return RedirectSpec(_url_rewrite(value, r), value.scheme, 302 if value.status is None else value.status)


def _request_mirror(value: d.RequestMirror, r: Reader) -> MirrorSpec:
    return MirrorSpec(value.backend.host, value.percentage)


def _delay(value: d.Delay, r: Reader) -> DelaySpec | None:
    """A duration such as ``2s``, else a CEL expression (agentgateway's ``de_duration_or_expression``)."""
    try:
        return DelaySpec(value.duration, parse_duration(value.duration))
    except ValueError:
        pass
    from ..cel import CelError, compile_expression

    try:
        compile_expression(value.duration)
    except CelError as error:
        r.at(value, "duration", f"expected a duration such as 2s or a CEL expression: {error}")
        return None
    return DelaySpec(value.duration)


def _backend_auth(value: d.BackendAuth, r: Reader) -> m.BackendAuth:
    return m.BackendAuth(value.key)


def _backend_tls(value: d.BackendTLS, r: Reader) -> BackendTls | None:
    """Files are read now (errors name the field), and a context is built once to prove they work."""
    for wire, path in (("root", value.root), ("cert", value.cert), ("key", value.key)):
        if path is not None and not Path(path).is_file():
            r.at(value, wire, f"cannot read {path}: no such file")
            return None
    if value.insecure and (value.insecure_host or value.subject_alt_names):
        r.at(value, "insecure", "insecure skips every check: insecureHost/subjectAltNames would not apply")
        return None
    if value.key is not None and value.cert is None:
        r.at(value, "key", "requires cert (the client certificate)")
        return None
    try:
        spec = BackendTls(root=value.root, hostname=value.hostname, insecure=value.insecure,
                          insecure_host=value.insecure_host, cert=value.cert, key=value.key, alpn=value.alpn,
                          subject_alt_names=value.subject_alt_names,
                          fingerprint=file_fingerprint((value.root, value.cert, value.key)))
        build_context(spec)
    except OSError as exc:
        r.at(value, None, f"cannot read a file: {exc.strerror or exc}")
        return None
    except TlsConfigError as exc:
        wire, message = str(exc).split(": ", 1)
        r.at(value, wire, message)
        return None
    if value.alpn is not None and "http/1.1" not in value.alpn:
        logging.getLogger("trioproxy.config").warning(
            "backendTLS.alpn %s lacks http/1.1: trioproxy speaks HTTP/1.1 to backends", list(value.alpn))
    if value.insecure:
        logging.getLogger("trioproxy.config").warning(
            "backendTLS.insecure: the backend's certificate is not verified (hostname %s)", value.hostname or "-")
    return spec


def _local_rate_limit(value: tuple[d.LocalRateLimit, ...], r: Reader) -> tuple[LocalRateLimitSpec, ...] | None:
    specs = []
    for entry in value:
        try:
            specs.append(LocalRateLimitSpec(entry.max_tokens, entry.tokens_per_fill, entry.fill_interval, entry.type,
                                            entry.per_client_address))
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


def _basic_auth(value: d.BasicAuth, r: Reader) -> BasicAuthSpec | None:
    where: Any
    if isinstance(value.htpasswd, str):
        text, where, wire = value.htpasswd, value, "htpasswd"
    else:
        try:
            text = Path(value.htpasswd.file).read_text()
        except OSError as exc:
            r.at(value.htpasswd, "file", f"cannot read {value.htpasswd.file}: {exc.strerror or exc}")
            return None
        where, wire = value.htpasswd, "file"
    try:
        users = parse_htpasswd(text)
    except HtpasswdError as exc:
        r.at(where, wire, str(exc))
        return None
    location = _location(value.authorization_location) or CredentialLocation("header", "authorization", "Basic ")
    return BasicAuthSpec(users, value.realm or "Restricted", value.mode, location)


def _location(where: d.CredentialLocation | None) -> CredentialLocation | None:
    if where is None:
        return None
    if where.header is not None:
        return CredentialLocation("header", where.header.name, where.header.prefix or "")
    if where.query_parameter is not None:
        return CredentialLocation("queryParameter", where.query_parameter.name, "")
    assert where.cookie is not None  # one of the three (checked by the description)
    return CredentialLocation("cookie", where.cookie.name, "")


def _api_key(value: d.ApiKeyAuth, r: Reader) -> ApiKeySpec:
    keys = []
    for entry in value.keys:
        if entry.key is not None:
            digest = key_digest(entry.key)
        else:
            assert entry.key_hash is not None  # one of key, keyHash (checked by the description)
            hexdigest = entry.key_hash.removeprefix("sha256:").lower()
            if not entry.key_hash.startswith("sha256:") or len(hexdigest) != 64 or not all(
                    c in "0123456789abcdef" for c in hexdigest):
                r.at(entry, "keyHash", f"expected sha256:<64 hex digits>, got {entry.key_hash!r}")
            digest = hexdigest
        keys.append((digest, tuple(entry.metadata.items())))
    if not keys and not value.runtime_keys:
        r.at(value, "keys", "required field is missing (or set runtimeKeys: true)")
    return ApiKeySpec(tuple(keys), value.mode, _location(value.location) or CredentialLocation(),
                      runtime_keys=value.runtime_keys, log_payloads=value.log_payloads)


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
    "basic_auth": _basic_auth,
    "api_key": _api_key,
    "authorization": _authorization,
    "cors": _cors,
    "local_rate_limit": _local_rate_limit,
    "remote_rate_limit": _remote_rate_limit,
    "request_header_modifier": _header_modifier,
    "response_header_modifier": _header_modifier,
    "timeout": _timeout,
    "direct_response": _direct_response,
    "backend_auth": _backend_auth,
    "backend_tls": _backend_tls,
    "retry": _retry,
    "csrf": _csrf,
    "url_rewrite": _url_rewrite,
    "request_redirect": _request_redirect,
    "request_mirror": _request_mirror,
    "delay": _delay,
    "ai": lambda value, r: None,  # its routes map belongs to the ai backends: _backend and _route read it
    "health": lambda value, r: None,  # outlier detection belongs to the backends: _backend and _route read it
    "load_balancer": lambda value, r: None,  # the route's: _route reads it
    "mcp_authentication": lambda value, r: compile_mcp.authentication(value, r, _jwks),
    "mcp_authorization": lambda value, r: None,  # belongs to the mcp backends: compile_mcp reads it
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


def compile_match(match: d.Match) -> m.RouteMatch:
    """A route's match (a manifest's HTTPRoute matches come here too, as ``d.Match``)."""
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


def _provider(provider: d.Provider) -> tuple[str, str | None, ProviderDefaults]:
    """(name, model override, defaults) of the one provider given (exactly one, checked when read)."""
    if provider.azure is not None:
        azure = provider.azure
        return "azure", azure.model, azure_defaults(azure.resource_name, azure.resource_type, azure.api_version,
                                                    azure.model, azure.project_name)
    if provider.vertex is not None:
        vertex = provider.vertex
        return "vertex", vertex.model, vertex_defaults(vertex.project_id, vertex.region)
    if provider.bedrock is not None:
        bedrock = provider.bedrock
        return "bedrock", bedrock.model, bedrock_defaults(bedrock.region)
    for name, options in (("anthropic", provider.anthropic), ("gemini", provider.gemini)):
        if options is not None:
            return name, options.model, PROVIDERS[name]
    for name, defaults in PRESETS.items():
        options = getattr(provider, name)
        if options is not None:
            return name, options.model, defaults
    return "openAI", provider.open_ai.model if provider.open_ai is not None else None, PROVIDERS["openAI"]


def _ai_routes(policy: d.AiPolicy, r: Reader) -> tuple[tuple[str, str], ...]:
    """An ai policy's routes map as (suffix, endpoint kind), longest suffix first and ``*`` last (as
    agentgateway orders it: the most specific suffix wins); a kind trioproxy lacks is an error naming it."""
    routes = []
    for suffix, kind in policy.routes.items():
        if kind not in ROUTE_KINDS:
            r.at(policy, "routes", f"{suffix!r}: route kind {kind!r} is an agentgateway feature that trioproxy "
                                   "does not implement")
        elif not suffix:
            r.at(policy, "routes", "an empty path suffix matches every path: use '*'")
        else:
            routes.append((suffix, ROUTE_KINDS[kind]))
    return tuple(sorted(routes, key=lambda item: (item[0] == "*", -len(item[0]))))


def _backend(backend: d.Backend, r: Reader) -> m.Backend:
    compiled = _plain_backend(backend, r)
    health = resilience.backend_health(backend, r)
    return attrs.evolve(compiled, health=health) if health is not None else compiled


def _plain_backend(backend: d.Backend, r: Reader) -> m.Backend:
    policies = compile_policies(backend.policies, r)
    ai_policy = backend.policies.ai if backend.policies is not None else None
    if backend.ai is None and ai_policy is not None:
        r.at(backend.policies, "ai", "an ai policy applies to an ai backend, not a host")
    if backend.mcp is not None:
        return compile_mcp.backend(backend, policies, r, _authorization) or m.Backend("mcp", m.Address("", 0))
    if backend.ai is None:
        assert backend.host is not None
        return _with_tls(m.Backend(str(backend.host), backend.host, backend.weight, policies), policies.backend_tls)
    ai = backend.ai
    name, model, defaults = _provider(ai.provider)
    paths: tuple[tuple[str, str], ...] = ()
    if ai.host_override is not None:  # as agentgateway: the client's path, plain HTTP unless backendTLS
        target, tls = ai.host_override, policies.backend_tls
    else:  # the provider's path for each endpoint kind (llm_providers.endpoint_kind)
        target = m.Address(defaults.host, defaults.port)
        paths = defaults.paths
        tls = policies.backend_tls or (SYSTEM_TRUST if defaults.tls else None)
    return _with_tls(m.Backend(ai.name, target, backend.weight, policies, m.AIBackend(
        ai.name, name, model, ai.path_override, paths, defaults.stream_usage_option, defaults.key_header,
        ai.provider.bedrock.region if ai.provider.bedrock is not None else None,
        _ai_routes(ai_policy, r) if ai_policy is not None else ())), tls)


def _with_tls(backend: m.Backend, tls: BackendTls | None) -> m.Backend:
    """``backend`` reached over ``tls`` (None: plain): its target becomes a ``TlsAddress``."""
    plain = m.Address(backend.target.host, backend.target.port)
    target = plain if tls is None else m.TlsAddress(plain.host, plain.port, tls)
    return attrs.evolve(backend, target=target, tls=tls)


def _route(route: d.Route, listener_key: str, r: Reader) -> m.Route:
    index = r.origin(route).index or 0
    name = route.name or f"route{index}"
    policies = compile_policies(route.policies, r)
    redirect = policies.request_redirect
    prefixes = (("url_rewrite", "rewrite", policies.url_rewrite),
                ("request_redirect", "redirect", redirect.url if redirect is not None else None))
    for attribute, noun, rewrite in prefixes:  # a prefix replaces what a pathPrefix match matched
        if rewrite is not None and rewrite.path_kind == "prefix" and any(
                x.path is not None and x.path.path_prefix is None for x in route.matches):
            r.at(getattr(route.policies, attribute), "path",
                 f"a prefix {noun} needs every match of the route to be a pathPrefix")
    backends = compile_mcp.with_route_authorization(tuple(_backend(b, r) for b in route.backends), route, r,
                                                    _authorization)
    if policies.backend_auth is not None:  # a route's backendAuth is each backend's, unless it has its own
        backends = tuple(b if b.policies.backend_auth is not None else attrs.evolve(
            b, policies=attrs.evolve(b.policies, backend_auth=policies.backend_auth)) for b in backends)
    if route.policies is not None and route.policies.ai is not None:  # likewise the ai policy's routes map
        routes = _ai_routes(route.policies.ai, r)
        backends = tuple(attrs.evolve(b, ai=attrs.evolve(b.ai, routes=routes))
                         if b.ai is not None and not b.ai.routes else b for b in backends)
    if policies.backend_tls is not None:  # likewise backendTLS (over an ai provider's default TLS)
        backends = tuple(b if b.policies.backend_tls is not None else _with_tls(attrs.evolve(
            b, policies=attrs.evolve(b.policies, backend_tls=policies.backend_tls)), policies.backend_tls)
            for b in backends)
    if route.policies is not None and route.policies.health is not None:  # likewise outlier detection
        health = resilience.health_spec(route.policies.health)
        backends = tuple(b if b.health is not None else attrs.evolve(b, health=resilience.for_backend(health, b))
                         for b in backends)
    if not backends and policies.direct_response is None and policies.request_redirect is None:
        r.warn(route, None, f"route {name} has no backends and no directResponse or requestRedirect: "
                            f"every request it matches is answered 503 no backend available for route {name}")
    return m.Route(
        key=f"{listener_key}/{route.namespace}/{name}",
        name=name,
        namespace=route.namespace,
        hostnames=route.hostnames,
        matches=tuple(compile_match(x) for x in route.matches) or (m.RouteMatch(),),
        policies=policies,
        backends=backends,
        index=index,
        balancer=resilience.balancer_spec(route.policies.load_balancer) if route.policies is not None else None,
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
                      routes=tuple(routes), tls=_listener_tls(listener, r))


def _listener_tls(listener: d.Listener, r: Reader) -> m.ListenerTls | None:
    """The listener's TLS files, checked now (readable, a matching chain and key, a CA bundle)."""
    from .listener_tls import TlsFileError, server_context

    value = listener.tls
    if value is None:
        if listener.protocol == "HTTPS":
            r.at(listener, "protocol", "HTTPS needs tls: {cert, key}")
        return None
    if listener.protocol != "HTTPS":
        r.at(listener, "tls", "tls needs protocol: HTTPS")
    tls = m.ListenerTls(value.cert, value.key, value.root)
    try:
        server_context(tls)
    except TlsFileError as error:
        r.at(value, error.field, str(error))
    return tls


def _bind_tls(bind: d.Bind, r: Reader) -> None:
    """A bind is one socket: all its listeners speak TLS or none does, with one certificate."""
    with_tls = [listener for listener in bind.listeners if listener.tls is not None]
    if with_tls and len(with_tls) != len(bind.listeners):
        plain = next(listener for listener in bind.listeners if listener.tls is None)
        r.at(plain, "tls", "every listener of a bind with a TLS listener needs the same tls (one socket)")
    elif len({(x.tls.cert, x.tls.key, x.tls.root) for x in with_tls if x.tls is not None}) > 1:
        r.at(with_tls[1], "tls", "one certificate per bind in this version: the listeners of a bind need the same tls")


# --- the llm: format -----------------------------------------------------------------------------

DEFAULT_LLM_PORT = 4000  # agentgateway's


def _llm_provider(model: d.LlmModel, r: Reader) -> Any:
    """``provider: openAI`` as the ``ai`` backend's ``provider: {openAI: {model}}``: any provider
    ``document.Provider`` describes is accepted, others are named as agentgateway-only."""
    from .agentgateway_fields import UNIMPLEMENTED
    from .describe import wire_name

    by_wire = {wire_name(a): a for a in attrs.fields(typing.cast(Any, d.Provider))}
    attribute = by_wire.get(model.provider)
    if attribute is None:
        if model.provider in UNIMPLEMENTED["Provider"]:
            r.at(model, "provider", f"'{model.provider}' is an agentgateway feature that trioproxy does not implement")
        else:
            r.at(model, "provider", f"unknown provider {model.provider!r} (expected one of: {', '.join(by_wire)})")
        return None
    if attribute.name == "bedrock":  # its region has no place among trioproxy's llm params (awsRegion)
        r.at(model, "provider", "'bedrock' needs a region: use a binds ai backend with provider: {bedrock: {region}}")
        return None
    options_type = next(t for t in typing.get_args(typing.get_type_hints(d.Provider)[attribute.name])
                        if t is not type(None))
    params = model.params
    extra: dict[str, Any] = {}
    if options_type is d.VertexOptions:
        if params is None or not params.vertex_project:
            r.at(model, "params", "provider vertex needs params.vertexProject")
            return None
        extra = {"project_id": params.vertex_project, "region": params.vertex_region}
    options = _made(options_type, model=params.model if params is not None else None, **extra)
    return _made(d.Provider, **{attribute.name: options})


def _target_limits(model: d.LlmModel, r: Reader) -> tuple[LocalRateLimitSpec, ...]:
    """``llm.models[].localRateLimit``: the target's quota (a bucket per client address has no place there)."""
    for entry in model.local_rate_limit:
        if entry.per_client_address:
            r.at(entry, "perClientAddress", "a model's localRateLimit is its provider's quota: no perClientAddress")
    specs = _local_rate_limit(model.local_rate_limit, r) if model.local_rate_limit else ()
    return tuple(s for s in specs or () if not s.per_client_address)


def _made(cls: type, **fields: Any) -> Any:
    """A document object built here rather than read (the ``llm:`` format becomes ``binds``)."""
    return cls(**fields)


def _llm(llm: d.Llm, r: Reader) -> m.Bind:
    """``llm:`` → one bind, one listener, one route whose ``ai`` backends are chosen by model."""
    from ..llm.models import specificity, validate_pattern

    port = llm.port if llm.port is not None else DEFAULT_LLM_PORT
    listener_key = f"default/default/bind/{port}/listener0"
    backends: list[m.Backend] = []
    entries = []
    for model in llm.models:
        problem = validate_pattern(model.name)
        if problem is not None:
            r.at(model, "name", problem)
        provider = _llm_provider(model, r)
        params = model.params or _made(d.LlmParams)
        if provider is None:
            continue
        auth = _made(d.BackendPolicies, backend_auth=_made(d.BackendAuth, key=params.api_key)) if params.api_key else None
        backend = _made(d.Backend, policies=auth, ai=_made(
            d.AIBackend, name=model.name, provider=provider, host_override=params.host_override,
            path_override=params.path_override))
        expression = model.transformation.model if model.transformation is not None else None
        entries.append(m.LlmModelRoute(model.name, len(backends), expression))
        backends.append(attrs.evolve(_backend(backend, r), health=resilience.health_spec(model.health) or DEFAULT_HEALTH,
                                     target_limits=_target_limits(model, r)))
    entries.sort(key=lambda e: -specificity(e.pattern))  # stable: config order among equals
    entries[:0] = resilience.virtual_models(llm, entries, r)  # exact public names, before any wildcard
    route = m.Route(key=f"{listener_key}/default/llm", name="llm", namespace="default", hostnames=(),
                    matches=(m.RouteMatch(),), policies=compile_policies(llm.policies, r), backends=tuple(backends),
                    index=0, models=tuple(entries))
    listener = m.Listener(key=listener_key, name="llm", protocol="HTTP", hostname=None,
                          policies=m.EMPTY_POLICIES, routes=(route,))
    return m.Bind(port, (listener,))


# --- servers and the whole config --------------------------------------------------------------

SERVER_ENV = (("admin", "admin_addr", "ADMIN_ADDR"), ("stats", "stats_addr", "STATS_ADDR"),
              ("readiness", "readiness_addr", "READINESS_ADDR"))


def compile_servers(servers: d.Servers | None, env: Mapping[str, str], r: Reader) -> m.ServerAddrs:
    """The admin, stats and readiness addresses (a manifest has no ``config``: env overrides only)."""
    defaults = m.ServerAddrs()
    out: dict[str, Any] = {}
    off = set()
    for attribute, field_name, env_name in SERVER_ENV:
        value = getattr(servers, field_name) if servers is not None else None
        if env.get(env_name):
            try:
                value = parse_server_address(env[env_name])
            except ValueError:
                r.problem(f"env {env_name}", f"expected HOST:PORT or off, got {env[env_name]!r}")
        if value == "off":
            off.add(attribute)
            value = None
        out[attribute] = value or getattr(defaults, attribute)
    token = env.get("ADMIN_TOKEN") or (servers.admin_token if servers is not None else None)
    return m.ServerAddrs(**out, admin_token=token or None, off=frozenset(off))


def compile_document(document: d.Document, env: Mapping[str, str], r: Reader,
                     base_dir: str | None = None) -> m.Config:
    """The runtime config of a read document; problems go to ``r`` (the caller raises).

    ``base_dir``: the config file's directory (relative paths such as ``config.store`` are
    resolved against it; None: the working directory)."""
    binds = []
    ports: dict[int, int] = {}
    for bind in document.binds:
        index = r.origin(bind).index or 0
        if bind.port in ports and bind.port != 0:
            r.at(bind, "port", f"port {bind.port} is already bound by binds[{ports[bind.port]}]")
        ports.setdefault(bind.port, index)
        binds.append(m.Bind(bind.port, tuple(_listener(x, bind.port, r) for x in bind.listeners)))
        _bind_tls(bind, r)
    if document.llm is not None:
        llm_bind = _llm(document.llm, r)
        if llm_bind.port in ports and llm_bind.port != 0:
            r.at(document.llm, "port", f"port {llm_bind.port} is already bound by binds[{ports[llm_bind.port]}]")
        binds.append(llm_bind)
    if not binds:
        r.warn(document, "binds", "no binds (and no llm): the gateway serves no traffic, only its admin, "
                                  "stats and readiness servers")
    servers = document.config
    logging = _logging(servers.logging, r) if servers and servers.logging else None
    tracing = _tracing(servers.tracing, r) if servers and servers.tracing else None
    frontend = document.frontend_policies
    if frontend is not None:
        logging = _with_access_log(logging, frontend, r)
        if frontend.tracing is not None:
            tracing = _frontend_tracing(frontend.tracing, r)
    return m.Config(servers=compile_servers(servers, env, r), binds=tuple(binds),
                    logging=logging, tracing=tracing, frontend=_frontend(frontend),
                    history=m.HistorySpec(**_given(size=servers.history.size)) if servers and servers.history
                    else m.HistorySpec(),
                    backend=_backend_connections(servers.backend if servers else None),
                    workers=servers.workers if servers and servers.workers is not None else 1,
                    prices=_prices(servers.prices, r) if servers and servers.prices else (),
                    store=_store(servers.store if servers else None, base_dir),
                    keys=_keys(servers.keys if servers else None),
                    session_key=compile_mcp.session_key(servers, r))


def _prices(prices: Mapping[str, d.ModelPrice], r: Reader) -> tuple[tuple[str, m.PriceOverride], ...]:
    """``config.prices``, checked against the bundled catalog it changes (docs/pricing.md)."""
    out = []
    for name, price in prices.items():
        override = m.PriceOverride(input=price.input, output=price.output, cached_input=price.cached_input,
                                   reasoning=price.reasoning, cache_write=price.cache_write)
        try:
            PriceCatalog.bundled().with_overrides([(name, override)])
        except MissingPrice as error:
            r.at(price, error.field, f"required: the bundled price catalog has no {name!r} (docs/pricing.md)")
            continue
        out.append((name, override))
    return tuple(out)


def _store(value: str | None, base_dir: str | None) -> str:
    """``config.store``: a PostgreSQL URL as written, else an absolute SQLite path (relative to the
    config file's directory)."""
    import os

    value = value or m.DEFAULT_STORE
    if value.startswith(("postgresql://", "postgres://")):
        return value
    return os.path.normpath(os.path.join(base_dir or os.getcwd(), os.path.expanduser(value)))


def _keys(value: d.Keys | None) -> m.KeysSettings:
    if value is None:
        return m.KeysSettings()
    log = value.request_log
    return m.KeysSettings(**_given(
        refresh_interval=value.refresh_interval, flush_interval=value.flush_interval,
        reservation_ttl=value.reservation_ttl, failure_mode=value.failure_mode,
        default_max_tokens=value.default_max_tokens,
        request_log_enabled=log.enabled if log is not None else None,
        request_log_retention=log.retention if log is not None else None))


def _given(**values: Any) -> dict[str, Any]:
    """The fields set in the document (``None`` = absent: the model's default applies)."""
    return {name: value for name, value in values.items() if value is not None}


def _frontend(policies: d.FrontendPolicies | None) -> m.FrontendSpec:
    http = policies.http if policies is not None else None
    if http is None:
        return m.FrontendSpec()
    return m.FrontendSpec(**_given(
        max_buffer_size=http.max_buffer_size, max_headers=http.http1_max_headers,
        idle_timeout=http.http1_idle_timeout, header_timeout=http.request_header_timeout,
        body_idle_timeout=http.request_body_idle_timeout, max_connections=http.max_connections,
        max_connections_per_client=http.max_connections_per_client,
        max_in_flight=http.max_requests_in_flight, websocket_max_message_size=http.websocket_max_message_size))


def _backend_connections(value: d.BackendConnections | None) -> m.BackendConnectionSpec:
    if value is None:
        return m.BackendConnectionSpec()
    return m.BackendConnectionSpec(**_given(
        connect_timeout=value.connect_timeout, pool_idle_timeout=value.pool_idle_timeout,
        pool_max_idle=value.pool_max_size, response_header_timeout=value.response_header_timeout))


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


def _with_access_log(logging: m.LoggingSpec | None, frontend: d.FrontendPolicies, r: Reader) -> m.LoggingSpec | None:
    """``frontendPolicies.accessLog`` (or its other name, ``logging``) over ``config.logging``: each
    of filter, add and remove that it sets replaces config.logging's, as agentgateway merges them."""
    policy = frontend.access_log or frontend.logging
    if frontend.access_log is not None and frontend.logging is not None:
        r.at(frontend, "logging", "accessLog and logging are the same setting: keep one of them")
    if policy is None:
        return logging
    if policy.filter is not None:
        _check_cel(policy.filter, policy, "filter", r)
    for name, source in policy.add.items():
        _check_cel(source, policy, "add", r, f"{name}: ")
    base = logging or m.LoggingSpec()
    return m.LoggingSpec(
        base.level, base.format, policy.filter if policy.filter is not None else base.filter,
        m.LogFieldsSpec(tuple(policy.add.items()) if policy.add else base.fields.add,
                        policy.remove if policy.remove else base.fields.remove))


def _frontend_tracing(value: d.FrontendTracing, r: Reader) -> m.TracingSpec:
    """``frontendPolicies.tracing``: agentgateway's newer spelling of the same export."""
    for name, source in value.attributes.items():
        _check_cel(source, value, "attributes", r, f"{name}: ")
    host = value.host
    if "://" in host:
        if not host.startswith(("http://", "https://")):
            r.at(value, "host", f"expected HOST:PORT or an http:// or https:// URL, got {host!r}")
        endpoint = host
    else:
        endpoint = f"http://{host}"
    return m.TracingSpec(
        endpoint, value.protocol, (), value.path,
        0.0 if value.random_sampling is None else value.random_sampling,
        1.0 if value.client_sampling is None else value.client_sampling,
        m.LogFieldsSpec(tuple(value.attributes.items()), value.remove))


def _tracing(value: d.Tracing, r: Reader) -> m.TracingSpec:
    if not value.otlp_endpoint.startswith(("http://", "https://")):
        r.at(value, "otlpEndpoint", f"expected an http:// or https:// URL, got {value.otlp_endpoint!r}")
    return m.TracingSpec(
        value.otlp_endpoint, value.otlp_protocol, tuple(value.headers.items()), value.path,
        0.0 if value.random_sampling is None else value.random_sampling,
        1.0 if value.client_sampling is None else value.client_sampling, _log_fields(value.fields, r))
