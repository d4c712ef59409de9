"""Standalone YAML → ``Config``, with every problem named by its place.

The loader never stops at the first problem: ``--validate-only`` prints them all. Each
problem is one line, ``<path>: <what is wrong>``, where path is the YAML path such as
``binds[0].listeners[0].routes[1].backends[0].host``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from ..policies.ratelimit_local import LocalRateLimitSpec
from . import model as m

SIMPLE_ENV = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*)|(\$))")
DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
HOSTNAME = re.compile(r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
METHODS = {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}


class ConfigError(Exception):
    """The config is invalid; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class _Problems:
    """Collects problems while the loader walks the document."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}" if path else message)


def _describe(value: Any) -> str:
    if isinstance(value, str):
        return repr(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


class _Walker:
    """Typed accessors that record a problem and return ``None`` instead of raising."""

    def __init__(self, problems: _Problems) -> None:
        self.p = problems

    def mapping(self, value: Any, path: str, allowed: set[str], required: set[str] = frozenset()) -> dict | None:
        if not isinstance(value, dict):
            self.p.add(path, f"expected a mapping, got {_describe(value)}")
            return None
        ok = True
        for key in value:
            if key not in allowed:
                self.p.add(f"{path}.{key}" if path else str(key),
                           f"unknown field (expected one of: {', '.join(sorted(allowed))})")
                ok = False
        for key in sorted(required - value.keys()):
            self.p.add(f"{path}.{key}" if path else key, "required field is missing")
            ok = False
        return value if ok else None

    def list(self, value: Any, path: str, *, allow_empty: bool = True) -> list | None:
        if value is None:
            return []
        if not isinstance(value, list):
            self.p.add(path, f"expected a list, got {_describe(value)}")
            return None
        if not allow_empty and not value:
            self.p.add(path, "expected at least one entry")
            return None
        return value

    def string(self, value: Any, path: str) -> str | None:
        if not isinstance(value, str) or not value:
            self.p.add(path, f"expected a non-empty string, got {_describe(value)}")
            return None
        return value

    def integer(self, value: Any, path: str, low: int, high: int) -> int | None:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.p.add(path, f"expected an integer, got {_describe(value)}")
            return None
        if not low <= value <= high:
            self.p.add(path, f"expected an integer from {low} to {high}, got {value}")
            return None
        return value

    def duration(self, value: Any, path: str) -> float | None:
        if isinstance(value, str):
            text = value.strip()
            pos, total = 0, 0.0
            for found in DURATION.finditer(text):
                if found.start() != pos:
                    break
                scale = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[found.group(2)]
                total += float(found.group(1)) * scale
                pos = found.end()
            if pos == len(text) and text and total > 0:
                return total
        self.p.add(path, f"expected a duration such as 500ms, 1s, 60s or 1h, got {_describe(value)}")
        return None

    def address(self, value: Any, path: str) -> m.Address | None:
        found = HOST_PORT.match(value) if isinstance(value, str) else None
        if found is None or not 0 < int(found.group(2)) < 65536:
            self.p.add(path, f"expected HOST:PORT, got {_describe(value)}")
            return None
        return m.Address(found.group(1).strip("[]"), int(found.group(2)))

    def regex(self, value: Any, path: str) -> re.Pattern[str] | None:
        text = self.string(value, path)
        if text is None:
            return None
        try:
            return re.compile(text)
        except re.error as exc:
            self.p.add(path, f"invalid regular expression: {exc}")
            return None


def expand_env(value: Any, path: str, problems: _Problems, env: Mapping[str, str]) -> Any:
    """Expand ``$VAR`` and ``${VAR}`` in every string scalar (``$$`` is a literal ``$``)."""
    if isinstance(value, dict):
        return {k: expand_env(v, f"{path}.{k}" if path else str(k), problems, env) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, f"{path}[{i}]", problems, env) for i, v in enumerate(value)]
    if not isinstance(value, str) or "$" not in value:
        return value

    def substitute(found: re.Match[str]) -> str:
        if found.group(3):
            return "$"
        name = found.group(1) or found.group(2)
        if name not in env:
            problems.add(path, f"environment variable {name} is not set")
            return ""
        return env[name]

    return SIMPLE_ENV.sub(substitute, value)


# --- policies ------------------------------------------------------------------------------

PolicyParser = Callable[[_Walker, Any, str], Any]


def _header_pairs(w: _Walker, value: Any, path: str) -> tuple[tuple[bytes, bytes], ...]:
    """``[{name, value}]`` (agentgateway) or ``{name: value}``."""
    pairs: list[tuple[bytes, bytes]] = []
    if isinstance(value, dict):
        items = [(f"{path}.{k}", k, v) for k, v in value.items()]
    else:
        items = []
        for i, entry in enumerate(w.list(value, path) or []):
            entry = w.mapping(entry, f"{path}[{i}]", {"name", "value"}, {"name", "value"})
            if entry is not None:
                items.append((f"{path}[{i}]", entry["name"], entry["value"]))
    for where, name, val in items:
        if not isinstance(name, str) or not TOKEN.match(name):
            w.p.add(where, f"invalid header name {_describe(name)}")
            continue
        if not isinstance(val, (str, int)) or "\n" in str(val) or "\r" in str(val):
            w.p.add(where, f"invalid header value {_describe(val)}")
            continue
        pairs.append((name.lower().encode(), str(val).encode()))
    return tuple(pairs)


def _parse_header_modifier(w: _Walker, value: Any, path: str) -> m.HeaderModifier | None:
    spec = w.mapping(value, path, {"add", "set", "remove"})
    if spec is None:
        return None
    remove = []
    for i, name in enumerate(w.list(spec.get("remove"), f"{path}.remove") or []):
        if not isinstance(name, str) or not TOKEN.match(name):
            w.p.add(f"{path}.remove[{i}]", f"invalid header name {_describe(name)}")
        else:
            remove.append(name.lower().encode())
    return m.HeaderModifier(
        add=_header_pairs(w, spec.get("add"), f"{path}.add"),
        set=_header_pairs(w, spec.get("set"), f"{path}.set"),
        remove=tuple(remove),
    )


def _parse_timeout(w: _Walker, value: Any, path: str) -> m.TimeoutPolicy | None:
    spec = w.mapping(value, path, {"requestTimeout", "backendRequestTimeout"})
    if spec is None:
        return None
    return m.TimeoutPolicy(
        request_timeout=w.duration(spec["requestTimeout"], f"{path}.requestTimeout") if "requestTimeout" in spec else None,
        backend_request_timeout=(
            w.duration(spec["backendRequestTimeout"], f"{path}.backendRequestTimeout")
            if "backendRequestTimeout" in spec else None
        ),
    )


def _parse_direct_response(w: _Walker, value: Any, path: str) -> m.DirectResponsePolicy | None:
    spec = w.mapping(value, path, {"status", "body"}, {"status"})
    if spec is None:
        return None
    status = w.integer(spec["status"], f"{path}.status", 200, 599)
    body = spec.get("body", "")
    if not isinstance(body, str):
        w.p.add(f"{path}.body", f"expected a string, got {_describe(body)}")
        return None
    return m.DirectResponsePolicy(status, body) if status is not None else None


def _parse_backend_auth(w: _Walker, value: Any, path: str) -> m.BackendAuth | None:
    spec = w.mapping(value, path, {"key"}, {"key"})
    if spec is None:
        return None
    key = w.string(spec["key"], f"{path}.key")
    return m.BackendAuth(key) if key is not None else None


def _parse_local_rate_limit(w: _Walker, value: Any, path: str) -> tuple[LocalRateLimitSpec, ...] | None:
    """``[{maxTokens, tokensPerFill, fillInterval, type: requests|tokens}]``, each independent."""
    specs = []
    for i, raw in enumerate(w.list(value, path, allow_empty=False) or []):
        where = f"{path}[{i}]"
        entry = w.mapping(raw, where, {"maxTokens", "tokensPerFill", "fillInterval", "type"},
                          {"maxTokens", "tokensPerFill", "fillInterval"})
        if entry is None:
            continue
        max_tokens = w.integer(entry["maxTokens"], f"{where}.maxTokens", 1, 2**62)
        per_fill = w.integer(entry["tokensPerFill"], f"{where}.tokensPerFill", 1, 2**62)
        interval = w.duration(entry["fillInterval"], f"{where}.fillInterval")
        kind = entry.get("type", "requests")
        if kind not in ("requests", "tokens"):
            w.p.add(f"{where}.type", f"expected requests or tokens, got {_describe(kind)}")
            continue
        if None in (max_tokens, per_fill, interval):
            continue
        try:
            specs.append(LocalRateLimitSpec(max_tokens, per_fill, interval, kind))
        except ValueError as exc:  # the spec names the wire field first: "maxTokens: ..."
            w.p.add(f"{where}.{exc}".split(": ", 1)[0], str(exc).split(": ", 1)[1])
    return tuple(specs) if specs else None


def _not_supported(w: _Walker, value: Any, path: str) -> None:
    w.p.add(path, "policy is not supported by this version of trioproxy")


# kind -> (attribute on Policies, parser); phases say where a kind may appear.
POLICY_PARSERS: dict[str, tuple[str, PolicyParser]] = {
    "requestHeaderModifier": ("request_header_modifier", _parse_header_modifier),
    "responseHeaderModifier": ("response_header_modifier", _parse_header_modifier),
    "timeout": ("timeout", _parse_timeout),
    "directResponse": ("direct_response", _parse_direct_response),
    "backendAuth": ("backend_auth", _parse_backend_auth),
    "localRateLimit": ("local_rate_limit", _parse_local_rate_limit),
    "remoteRateLimit": ("", _not_supported),
    "jwtAuth": ("", _not_supported),
    "authorization": ("", _not_supported),
    "cors": ("", _not_supported),
    "retry": ("", _not_supported),
}
PHASE_KINDS = {phase: {kind for kind, _ in kinds} for phase, kinds in m.TRACE_KINDS.items()}


def _parse_policies(w: _Walker, value: Any, path: str, phase: str) -> m.Policies:
    spec = w.mapping(value, path, PHASE_KINDS[phase]) if value is not None else None
    if not spec:
        return m.EMPTY_POLICIES
    fields: dict[str, Any] = {}
    for kind, raw in spec.items():
        attribute, parser = POLICY_PARSERS[kind]
        parsed = parser(w, raw, f"{path}.{kind}")
        if attribute and parsed is not None:
            fields[attribute] = parsed
    return m.Policies(**fields)


# --- routes and backends -------------------------------------------------------------------


def _parse_value_matches(w: _Walker, value: Any, path: str, *, lower: bool) -> tuple[m.ValueMatch, ...]:
    out = []
    for i, entry in enumerate(w.list(value, path) or []):
        where = f"{path}[{i}]"
        entry = w.mapping(entry, where, {"name", "value"}, {"name", "value"})
        if entry is None:
            continue
        name = w.string(entry["name"], f"{where}.name")
        cond = w.mapping(entry["value"], f"{where}.value", {"exact", "regex"})
        if name is None or cond is None:
            continue
        if len(cond) != 1:
            w.p.add(f"{where}.value", "expected exactly one of: exact, regex")
            continue
        kind, raw = next(iter(cond.items()))
        if kind == "regex":
            pattern = w.regex(raw, f"{where}.value.regex")
            if pattern is not None:
                out.append(m.ValueMatch(name.lower() if lower else name, "regex", raw, pattern))
        elif isinstance(raw, (str, int)) and not isinstance(raw, bool):
            out.append(m.ValueMatch(name.lower() if lower else name, "exact", str(raw)))
        else:
            w.p.add(f"{where}.value.exact", f"expected a string, got {_describe(raw)}")
    return tuple(out)


def _parse_match(w: _Walker, value: Any, path: str) -> m.RouteMatch | None:
    spec = w.mapping(value, path, {"path", "method", "headers", "query"})
    if spec is None:
        return None
    path_match = m.PathMatch("pathPrefix", "/")
    if "path" in spec:
        cond = w.mapping(spec["path"], f"{path}.path", {"exact", "pathPrefix", "regex"})
        if cond is not None and len(cond) != 1:
            w.p.add(f"{path}.path", "expected exactly one of: exact, pathPrefix, regex")
        elif cond is not None:
            kind, raw = next(iter(cond.items()))
            where = f"{path}.path.{kind}"
            if kind == "regex":
                pattern = w.regex(raw, where)
                if pattern is not None:
                    path_match = m.PathMatch("regex", raw, pattern)
            elif not isinstance(raw, str) or not raw.startswith("/"):
                w.p.add(where, f"expected a path starting with '/', got {_describe(raw)}")
            else:
                path_match = m.PathMatch(kind, raw)
    method = None
    if "method" in spec:
        raw = spec["method"]
        if not isinstance(raw, str) or raw.upper() not in METHODS:
            w.p.add(f"{path}.method", f"expected an HTTP method such as GET or POST, got {_describe(raw)}")
        else:
            method = raw.upper()
    return m.RouteMatch(
        path=path_match,
        method=method,
        headers=_parse_value_matches(w, spec.get("headers"), f"{path}.headers", lower=True),
        query=_parse_value_matches(w, spec.get("query"), f"{path}.query", lower=False),
    )


def _parse_hostnames(w: _Walker, value: Any, path: str) -> tuple[str, ...]:
    out = []
    for i, raw in enumerate(w.list(value, path) or []):
        name = _parse_hostname(w, raw, f"{path}[{i}]")
        if name is not None:
            out.append(name)
    return tuple(out)


def _parse_hostname(w: _Walker, raw: Any, path: str) -> str | None:
    if not isinstance(raw, str) or not HOSTNAME.match(raw.lower()):
        w.p.add(path, f"expected a hostname such as api.example.com or *.example.com, got {_describe(raw)}")
        return None
    return raw.lower()


def _parse_backend(w: _Walker, value: Any, path: str) -> m.Backend | None:
    spec = w.mapping(value, path, {"host", "ai", "weight", "policies"})
    if spec is None:
        return None
    if ("host" in spec) == ("ai" in spec):
        w.p.add(path, "expected exactly one of: host, ai")
        return None
    weight = w.integer(spec.get("weight", 1), f"{path}.weight", 0, 1_000_000)
    policies = _parse_policies(w, spec.get("policies"), f"{path}.policies", "backend")
    if "host" in spec:
        target = w.address(spec["host"], f"{path}.host")
        if target is None or weight is None:
            return None
        return m.Backend(str(target), target, weight, policies)
    ai = w.mapping(spec["ai"], f"{path}.ai", {"name", "provider", "hostOverride", "pathOverride"}, {"name", "provider"})
    if ai is None:
        return None
    name = w.string(ai["name"], f"{path}.ai.name")
    provider = w.mapping(ai["provider"], f"{path}.ai.provider", {"openAI"}, {"openAI"})
    model = None
    if provider is not None:
        options = w.mapping(provider["openAI"] or {}, f"{path}.ai.provider.openAI", {"model"})
        if options and "model" in options:
            model = w.string(options["model"], f"{path}.ai.provider.openAI.model")
    if "hostOverride" not in ai:
        w.p.add(f"{path}.ai.hostOverride", "required: this version reaches providers over plain HTTP at HOST:PORT")
        return None
    target = w.address(ai["hostOverride"], f"{path}.ai.hostOverride")
    path_override = None
    if "pathOverride" in ai:
        raw = ai["pathOverride"]
        if not isinstance(raw, str) or not raw.startswith("/"):
            w.p.add(f"{path}.ai.pathOverride", f"expected a path starting with '/', got {_describe(raw)}")
        else:
            path_override = raw
    if None in (name, provider, target, weight):
        return None
    return m.Backend(name, target, weight, policies, m.AIBackend(name, "openAI", model, path_override))


def _parse_route(w: _Walker, value: Any, path: str, listener_key: str, index: int) -> m.Route | None:
    spec = w.mapping(value, path, {"name", "namespace", "hostnames", "matches", "policies", "backends"})
    if spec is None:
        return None
    name = w.string(spec.get("name", f"route{index}"), f"{path}.name")
    namespace = w.string(spec.get("namespace", "default"), f"{path}.namespace")
    matches = []
    for i, raw in enumerate(w.list(spec.get("matches"), f"{path}.matches") or []):
        parsed = _parse_match(w, raw, f"{path}.matches[{i}]")
        if parsed is not None:
            matches.append(parsed)
    policies = _parse_policies(w, spec.get("policies"), f"{path}.policies", "route")
    backends = []
    for i, raw in enumerate(w.list(spec.get("backends"), f"{path}.backends") or []):
        parsed = _parse_backend(w, raw, f"{path}.backends[{i}]")
        if parsed is not None:
            backends.append(parsed)
    if name is None or namespace is None:
        return None
    return m.Route(
        key=f"{listener_key}/{namespace}/{name}",
        name=name,
        namespace=namespace,
        hostnames=_parse_hostnames(w, spec.get("hostnames"), f"{path}.hostnames"),
        matches=tuple(matches) or (m.RouteMatch(),),
        policies=policies,
        backends=tuple(backends),
        index=index,
    )


def _parse_listener(w: _Walker, value: Any, path: str, port: int, index: int) -> m.Listener | None:
    spec = w.mapping(value, path, {"name", "protocol", "hostname", "policies", "routes"})
    if spec is None:
        return None
    protocol = spec.get("protocol", "HTTP")
    if protocol != "HTTP":
        w.p.add(f"{path}.protocol", f"expected HTTP, got {_describe(protocol)}")
    key = f"default/default/bind/{port}/listener{index}"
    hostname = _parse_hostname(w, spec["hostname"], f"{path}.hostname") if "hostname" in spec else None
    routes = []
    seen: dict[str, str] = {}
    for i, raw in enumerate(w.list(spec.get("routes"), f"{path}.routes") or []):
        route = _parse_route(w, raw, f"{path}.routes[{i}]", key, i)
        if route is None:
            continue
        if route.key in seen:
            w.p.add(f"{path}.routes[{i}].name", f"duplicate route name {route.name!r} (also at {seen[route.key]})")
        seen[route.key] = f"{path}.routes[{i}]"
        routes.append(route)
    name = spec.get("name", f"listener{index}")
    if not isinstance(name, str):
        w.p.add(f"{path}.name", f"expected a string, got {_describe(name)}")
    return m.Listener(
        key=key,
        name=str(name),
        protocol="HTTP",
        hostname=hostname,
        policies=_parse_policies(w, spec.get("policies"), f"{path}.policies", "gateway"),
        routes=tuple(routes),
    )


def _parse_servers(w: _Walker, value: Any, env: Mapping[str, str]) -> m.ServerAddrs:
    spec = w.mapping(value or {}, "config", {"adminAddr", "statsAddr", "readinessAddr"}) or {}
    defaults = m.ServerAddrs()
    out = {}
    for field, key, env_name in (
        ("admin", "adminAddr", "ADMIN_ADDR"),
        ("stats", "statsAddr", "STATS_ADDR"),
        ("readiness", "readinessAddr", "READINESS_ADDR"),
    ):
        if env.get(env_name):
            out[field] = _server_address(w, env[env_name], f"env {env_name}")
        elif key in spec:
            out[field] = _server_address(w, spec[key], f"config.{key}")
        else:
            out[field] = getattr(defaults, field)
    return m.ServerAddrs(**{k: v or getattr(defaults, k) for k, v in out.items()})


def _server_address(w: _Walker, value: Any, path: str) -> m.Address | None:
    """Like ``HOST:PORT`` but port 0 (pick a free port) is allowed for tests."""
    found = HOST_PORT.match(value) if isinstance(value, str) else None
    if found is None or int(found.group(2)) > 65535:
        w.p.add(path, f"expected HOST:PORT, got {_describe(value)}")
        return None
    return m.Address(found.group(1).strip("[]"), int(found.group(2)))


def build_config(document: Any, *, env: Mapping[str, str] | None = None) -> m.Config:
    """Validate a parsed YAML document and build the frozen ``Config`` (raises ``ConfigError``)."""
    problems = _Problems()
    env = os.environ if env is None else env
    w = _Walker(problems)
    if document is None:
        document = {}
    root = w.mapping(document, "", {"config", "binds"})
    if root is None:
        raise ConfigError(problems.items)
    root = expand_env(root, "", problems, env)
    servers = _parse_servers(w, root.get("config"), env)
    binds = []
    ports: dict[int, int] = {}
    for i, raw in enumerate(w.list(root.get("binds"), "binds") or []):
        where = f"binds[{i}]"
        spec = w.mapping(raw, where, {"port", "listeners"}, {"port"})
        if spec is None:
            continue
        port = w.integer(spec["port"], f"{where}.port", 0, 65535)
        if port is None:
            continue
        if port in ports and port != 0:
            problems.add(f"{where}.port", f"port {port} is already bound by binds[{ports[port]}]")
        ports[port] = i
        listeners = []
        for j, lraw in enumerate(w.list(spec.get("listeners"), f"{where}.listeners") or []):
            listener = _parse_listener(w, lraw, f"{where}.listeners[{j}]", port, j)
            if listener is not None:
                listeners.append(listener)
        binds.append(m.Bind(port, tuple(listeners)))
    if problems.items:
        raise ConfigError(problems.items)
    return m.Config(servers=servers, binds=tuple(binds))


def load_config(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None) -> m.Config:
    """Read, parse and validate a config file (raises ``ConfigError``)."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{name}: cannot read config file: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{name}: config file is not UTF-8 text"]) from None
    return parse_config(text, source=name, env=env)


def parse_config(text: str, *, source: str = "<config>", env: Mapping[str, str] | None = None) -> m.Config:
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError([f"{where}: invalid YAML: {problem}"]) from None
    if len(documents) > 1 or (documents and isinstance(documents[0], dict) and "apiVersion" in documents[0]):
        raise ConfigError([f"{source}: Kubernetes-style manifests are not supported by this version of trioproxy"])
    return build_config(documents[0] if documents else None, env=env)
