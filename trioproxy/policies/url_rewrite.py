"""``urlRewrite``: the path (``full`` or the matched ``prefix``) and the Host sent upstream; and
``requestRedirect``, which changes the same parts (and the scheme) of the URL it answers with.

Pure rewriting functions plus a thin stage, as agentgateway's ``http/filters.rs`` behaves: a
full path replaces the path and keeps the query; a prefix replaces the part the route's
``pathPrefix`` matched, element-wise, so ``/api`` → ``/v2`` turns ``/api/x`` into ``/v2/x``; an
authority ``host`` drops the request's port (agentgateway does so for http requests) and a
``port`` of 80 is left out. A redirect's Location follows agentgateway's ``RequestRedirect``: the
request's scheme, Host and path (as a urlRewrite before it left them) with the configured parts
replaced, the query kept. Ports as Gateway API's HTTPRoute RequestRedirect says: a configured
scheme takes its well-known port (so ``scheme: https`` alone redirects to port 443), else the
request's port is kept; a port that is the new scheme's default (80, 443) is left out.
"""

from __future__ import annotations

from typing import Literal

from attrs import frozen

from .headers import host_without_port

__all__ = ["RedirectSpec", "UrlRewriteSpec", "redirect_location", "rewrite_authority", "rewrite_prefix"]


@frozen
class UrlRewriteSpec:
    path_kind: Literal["full", "prefix"] | None = None
    path: str = ""
    authority_kind: Literal["full", "host", "port"] | None = None  # None: keep the request's Host
    authority: str = ""


def rewrite_prefix(path: str, matched: str, replacement: str) -> str:
    """``path`` with the element-wise prefix ``matched`` replaced by ``replacement``."""
    prefix = matched.rstrip("/")
    rest = path[len(prefix):] if path.startswith(prefix) else path
    new = replacement
    if not new.endswith("/") and rest and not rest.startswith("/"):
        new += "/"
    if new.endswith("/") and rest.startswith("/"):
        new = new[:-1]
    return (new + rest) or "/"


def rewrite_authority(spec: UrlRewriteSpec, host: str) -> str:
    """The new Host header value for a request whose Host was ``host``."""
    if spec.authority_kind in ("full", "host"):
        return spec.authority
    assert spec.authority_kind == "port"
    name = host_without_port(host) or host
    return name if spec.authority == "80" else f"{name}:{spec.authority}"


@frozen
class RedirectSpec:
    url: UrlRewriteSpec  # the path and authority parts, as a urlRewrite's
    scheme: Literal["http", "https"] | None = None  # None: the request's
    status: int = 302


_DEFAULT_PORTS = {"http": "80", "https": "443"}


def redirect_location(spec: RedirectSpec, scheme: str, host: str, path: str, query: bytes,
                      matched_prefix: str = "/") -> str:
    """The Location for a request to ``scheme://host path?query`` (``matched_prefix``: the route's
    pathPrefix, for a ``prefix`` path)."""
    new_scheme = spec.scheme or scheme
    url = spec.url
    kind = url.authority_kind
    if kind == "full":
        authority = url.authority
    else:
        name = url.authority if kind == "host" else (host_without_port(host) or host)
        if kind == "port":
            port = url.authority
        elif spec.scheme is not None:  # Gateway API: the configured scheme's well-known port
            port = ""
        else:
            port = _port_of(host)
        authority = name if not port or port == _DEFAULT_PORTS.get(new_scheme) else f"{name}:{port}"
    if url.path_kind == "full":
        path = url.path or "/"
    elif url.path_kind == "prefix":
        path = rewrite_prefix(path, matched_prefix, url.path)
    return f"{new_scheme}://{authority}{path}" + (f"?{query.decode('latin-1')}" if query else "")


def _port_of(host: str) -> str:
    """The port of a Host value (``""`` without one)."""
    if host.startswith("["):  # [v6 address]:port
        close = host.find("]")
        return host[close + 2:] if host[close + 1:close + 2] == ":" else ""
    return host.rsplit(":", 1)[1] if host.count(":") == 1 else ""
