"""``/config_dump``: the effective config as JSON, keyed like traces, secrets redacted."""

from __future__ import annotations

from typing import Any

import attrs

from ..policies.jwt import JwksSource
from ..redaction import public_jwks
from .model import TRACE_KINDS, Address, Config, HeaderModifier, Policies

REDACTED = "<redacted>"
SECRET_FIELDS = {"key", "secret", "password", "token"}
# ``attrs.field(metadata={"secret": True})`` marks any other field a dump and a trace must not show
# (apiKey's digests, basicAuth's hashes).


def _plain(value: Any) -> Any:
    """attrs values → JSON-able data; bytes decoded, regex patterns dropped, secrets hidden."""
    if isinstance(value, Address):
        return str(value)
    if isinstance(value, JwksSource) and value.inline is not None:
        value = attrs.evolve(value, inline=public_jwks(value.inline))  # a JWKS pasted with its private key
    if isinstance(value, HeaderModifier) and value.from_env:
        value = attrs.evolve(value, add=_env_hidden(value.add, value.from_env), set=_env_hidden(value.set, value.from_env))
    if attrs.has(type(value)):
        out = {}
        for field in attrs.fields(type(value)):
            if field.name in ("pattern", "from_env"):  # a compiled regex; which header values are secret
                continue
            item = getattr(value, field.name)
            secret = field.name in SECRET_FIELDS or field.metadata.get("secret")
            out[_camel(field.name)] = REDACTED if secret and item else _plain(item)
        return out
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value


def _env_hidden(headers: tuple[tuple[bytes, bytes], ...], names: frozenset[bytes]) -> tuple[tuple[bytes, bytes], ...]:
    """A header modifier's values read from ``$VAR`` are secrets the config put there."""
    return tuple((name, REDACTED.encode()) if name.lower() in names else (name, text) for name, text in headers)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def policies_by_kind(policies: Policies, phase: str) -> dict[str, Any]:
    """Every policy kind of ``phase`` → its spec as data, ``None`` when unset (trace shape)."""
    out: dict[str, Any] = {}
    for kind, attribute in TRACE_KINDS[phase]:
        value = getattr(policies, attribute) if attribute else None
        out[kind] = _plain(value) if value not in (None, ()) else None
    return out


#: model field → its name in the config file (frontendPolicies.http, config.backend), for the dump
FRONTEND_NAMES = {"max_buffer_size": "maxBufferSize", "max_headers": "http1MaxHeaders",
                  "idle_timeout": "http1IdleTimeout", "header_timeout": "requestHeaderTimeout",
                  "body_idle_timeout": "requestBodyIdleTimeout", "max_connections": "maxConnections",
                  "max_connections_per_client": "maxConnectionsPerClient",
                  "max_in_flight": "maxRequestsInFlight", "websocket_max_message_size": "websocketMaxMessageSize"}
BACKEND_NAMES = {"connect_timeout": "connectTimeout", "pool_idle_timeout": "poolIdleTimeout",
                 "pool_max_idle": "poolMaxSize", "response_header_timeout": "responseHeaderTimeout"}


def _renamed(spec: Any, names: dict[str, str]) -> dict[str, Any]:
    """The effective values (defaults included) under the config file's names; seconds for durations."""
    return {names[field.name]: getattr(spec, field.name) for field in attrs.fields(type(spec))}


def config_dump(config: Config) -> dict[str, Any]:
    return {
        "config": {
            "adminAddr": "off" if "admin" in config.servers.off else str(config.servers.admin),
            "statsAddr": "off" if "stats" in config.servers.off else str(config.servers.stats),
            "readinessAddr": "off" if "readiness" in config.servers.off else str(config.servers.readiness),
            **({"adminToken": REDACTED} if config.servers.admin_token else {}),
            "backend": _renamed(config.backend, BACKEND_NAMES),
            "workers": config.workers,
            "history": {"size": config.history.size},
            **({"prices": {name: {wire: value for wire, value in (
                ("input", o.input), ("output", o.output), ("cachedInput", o.cached_input), ("reasoning", o.reasoning),
                ("cacheWrite", o.cache_write)) if value is not None} for name, o in config.prices}}
               if config.prices else {}),  # the overrides, over the bundled catalog (docs/pricing.md)
        },
        "frontendPolicies": {"http": _renamed(config.frontend, FRONTEND_NAMES)},
        "binds": [
            {
                "key": bind.key,
                "port": bind.port,
                "listeners": [
                    {
                        "key": listener.key,
                        "name": listener.name,
                        "protocol": listener.protocol,
                        "hostname": listener.hostname,
                        "policies": policies_by_kind(listener.policies, "gateway"),
                        "routes": [
                            {
                                "key": route.key,
                                "name": route.name,
                                "namespace": route.namespace,
                                "hostnames": list(route.hostnames),
                                "matches": _plain(route.matches),
                                "policies": policies_by_kind(route.policies, "route"),
                                "backends": [
                                    {
                                        "name": backend.name,
                                        "type": backend.kind,
                                        "target": str(backend.target),
                                        "weight": backend.weight,
                                        "ai": _plain(backend.ai),
                                        **({"mcp": _plain(backend.mcp)} if backend.mcp is not None else {}),
                                        "tls": _plain(backend.tls),
                                        "policies": policies_by_kind(backend.policies, "backend"),
                                    }
                                    for backend in route.backends
                                ],
                            }
                            for route in listener.routes
                        ],
                    }
                    for listener in bind.listeners
                ],
            }
            for bind in config.binds
        ],
        "statuses": list(config.statuses),
    }
