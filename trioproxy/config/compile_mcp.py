"""The ``mcp`` backend, ``mcpAuthentication``, ``mcpAuthorization`` and ``config.session``: document
values to runtime specs (``compile.py`` calls these; docs/mcp.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import attrs

from ..policies.authorization import AuthorizationSpec
from ..policies.jwt import JwksSource
from ..policies.mcp_auth import McpAuthenticationSpec
from . import document as d
from . import model as m
from .describe import Reader

__all__ = ["authentication", "backend", "session_key", "with_route_authorization"]

Authorization = Callable[[d.Authorization, Reader], AuthorizationSpec]


def _url(host: d.McpHost, default_path: str, r: Reader) -> str | None:
    """``http://host:port/path`` of a remote target; ``host`` a URL or a name with ``port``."""
    if "://" in host.host:
        parts = urlsplit(host.host)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            r.at(host, "host", f"expected an http:// or https:// URL, got {host.host!r}")
            return None
        if host.port is not None or host.path is not None:
            r.at(host, "port" if host.port is not None else "path", "give port and path in the URL")
            return None
        return host.host if parts.path else host.host.rstrip("/") + default_path
    name, _, port = host.host.partition(":")
    if port and host.port is None:
        if not port.isdigit():
            r.at(host, "host", f"expected HOST:PORT or a URL, got {host.host!r}")
            return None
    elif host.port is not None and not port:
        port = str(host.port)
    else:
        r.at(host, "port", "the port is required (in host as HOST:PORT, or as port)")
        return None
    return f"http://{name}:{port}{host.path or default_path}"


def backend(value: d.Backend, policies: m.Policies, r: Reader, authorization: Authorization) -> m.Backend | None:
    """An ``mcp`` backend: its targets, checked (unique names; a transport this build runs)."""
    spec = value.mcp
    assert spec is not None
    targets = []
    seen: set[str] = set()
    for target in spec.targets:
        if target.name in seen:
            r.at(target, "name", f"duplicate target name {target.name!r}")
        seen.add(target.name)
        if not target.name or "_" in target.name and spec.prefix_mode != "never":
            r.at(target, "name", "a target name must be non-empty and have no '_' (the prefix delimiter)")
        if target.mcp is not None:
            url = _url(target.mcp, "/mcp", r)
            if url is not None:
                targets.append(m.McpTarget(target.name, "mcp", url=url))
        elif target.sse is not None:
            url = _url(target.sse, "/sse", r)
            if url is not None:
                targets.append(m.McpTarget(target.name, "sse", url=url))
        elif target.stdio is not None:
            stdio = target.stdio
            targets.append(m.McpTarget(target.name, "stdio", cmd=stdio.cmd, args=stdio.args,
                                       env=tuple(sorted(stdio.env.items()))))
    own = value.policies.mcp_authorization if value.policies is not None else None
    mcp = m.McpBackend(tuple(targets), stateful=spec.stateful_mode == "stateful", prefix_mode=spec.prefix_mode,
                       fail_open=spec.failure_mode == "failOpen",
                       authorization=authorization(own, r) if own is not None else None)
    first = next((t for t in targets if t.url), None)
    address = m.Address("127.0.0.1", 0)
    if first is not None:
        parts = urlsplit(first.url)
        address = m.Address(parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80))
    name = "mcp/" + ",".join(t.name for t in spec.targets)
    return m.Backend(name, address, value.weight, policies, mcp=mcp)


def with_route_authorization(backends: tuple[m.Backend, ...], route: d.Route, r: Reader,
                             authorization: Authorization) -> tuple[m.Backend, ...]:
    """The route's ``mcpAuthorization`` given to each of its mcp backends that has none of its own."""
    value = route.policies.mcp_authorization if route.policies is not None else None
    if value is None:
        return backends
    if not any(b.mcp is not None for b in backends):
        r.at(route.policies, "mcpAuthorization", "mcpAuthorization applies to a route with an mcp backend")
        return backends
    spec = authorization(value, r)
    return tuple(attrs.evolve(b, mcp=attrs.evolve(b.mcp, authorization=spec))
                 if b.mcp is not None and b.mcp.authorization is None else b for b in backends)


def authentication(value: d.McpAuthentication, r: Reader,
                   jwks: Callable[[Any, Any, Reader], JwksSource | None]) -> McpAuthenticationSpec | None:
    source = jwks(value.jwks, value, r)
    if source is None:
        return None
    meta = value.resource_metadata or d.McpResourceMetadata()
    extra = tuple((k, v) for k, v in (("resource_documentation", meta.resource_documentation),
                                      ("resource_policy_uri", meta.resource_policy_uri),
                                      ("resource_name", meta.resource_name)) if v is not None)
    return McpAuthenticationSpec(value.issuer, source, value.audiences, value.mode, meta.resource,
                                 meta.scopes_supported, meta.bearer_methods_supported or ("header",), extra)


def session_key(servers: d.Servers | None, r: Reader) -> bytes | None:
    """``config.session.key``: 32 bytes from 64 hex digits."""
    session = servers.session if servers is not None else None
    if session is None:
        return None
    try:
        key = bytes.fromhex(session.key)
    except ValueError:
        key = b""
    if len(key) != 32:
        r.at(session, "key", "expected 64 hex digits (openssl rand -hex 32)")
        return None
    return key
