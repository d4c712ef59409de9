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

from typing import TYPE_CHECKING, Literal

from attrs import frozen

from ..errors import DirectResponse
from .stage import SpecStage

if TYPE_CHECKING:
    from ..exchange import Exchange

__all__ = ["RedirectSpec", "RequestRedirectStage", "UrlRewriteSpec", "UrlRewriteStage", "redirect_location",
           "rewrite_authority", "rewrite_prefix"]


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
    from ..routing import host_without_port  # late: routing imports the config model

    name = host_without_port(host) or host
    return name if spec.authority == "80" else f"{name}:{spec.authority}"


class UrlRewriteStage(SpecStage[UrlRewriteSpec]):
    kind = "urlRewrite"
    __slots__ = ()

    async def request(self, x: Exchange) -> None:
        spec = self.spec
        if spec.path_kind == "full":
            x.upstream_path = spec.path or "/"
        elif spec.path_kind == "prefix":
            matched = x.route_match.path.value if x.route_match is not None else "/"  # a pathPrefix (checked at load)
            raw = x.scope.get("raw_path")
            current = x.upstream_path or (raw.decode("latin-1") if raw else x.scope["path"])
            x.upstream_path = rewrite_prefix(current, matched, spec.path)
        if spec.authority_kind is not None:
            host = x.authority()
            x.headers = [h for h in x.headers if h[0] != b"host"] + [
                (b"host", rewrite_authority(spec, host).encode())]
        if x.tracer.active:
            x.tracer.event("policy", kind="urlRewrite", result="rewrote request URL", path=x.upstream_path)
            x.tracer.snapshot("urlRewrite", x)


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
    from ..routing import host_without_port  # late: routing imports the config model

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


class RequestRedirectStage(SpecStage[RedirectSpec]):
    """Answers with the redirect: after urlRewrite (whose path and Host it starts from), before
    delay and directResponse, as in agentgateway."""

    kind = "requestRedirect"
    __slots__ = ()

    async def request(self, x: Exchange) -> None:
        scope = x.scope
        raw = scope.get("raw_path")
        path = x.upstream_path or (raw.decode("latin-1") if raw else scope["path"])
        host = x.authority()
        if not host and scope.get("server"):
            host = "{}:{}".format(*scope["server"])
        matched = x.route_match.path.value if x.route_match is not None else "/"  # a pathPrefix for a prefix
        location = redirect_location(self.spec, scope.get("scheme", "http"), host, path,
                                     scope.get("query_string", b""), matched)
        if x.tracer.active:
            x.tracer.event("policy", kind="requestRedirect", result="redirected", status=self.spec.status,
                           location=location)
        raise DirectResponse(self.spec.status, "", headers=((b"location", location.encode("latin-1")),))
