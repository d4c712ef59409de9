"""``urlRewrite``: the path (``full`` or the matched ``prefix``) and the Host sent upstream.

Pure rewriting functions plus a thin stage, as agentgateway's ``http/filters.rs`` behaves: a
full path replaces the path and keeps the query; a prefix replaces the part the route's
``pathPrefix`` matched, element-wise, so ``/api`` → ``/v2`` turns ``/api/x`` into ``/v2/x``; an
authority ``host`` drops the request's port (agentgateway does so for http requests) and a
``port`` of 80 is left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from attrs import frozen

from .stage import Stage

if TYPE_CHECKING:
    from ..exchange import Exchange

__all__ = ["UrlRewriteSpec", "UrlRewriteStage", "rewrite_authority", "rewrite_prefix"]


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


class UrlRewriteStage(Stage):
    kind = "urlRewrite"
    __slots__ = ("spec",)

    def __init__(self, spec: UrlRewriteSpec) -> None:
        self.spec = spec

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
            host = next((v.decode("latin-1") for k, v in x.headers if k == b"host"), "")
            x.headers = [h for h in x.headers if h[0] != b"host"] + [
                (b"host", rewrite_authority(spec, host).encode())]
        if x.tracer.active:
            x.tracer.event("policy", kind="urlRewrite", result="rewrote request URL", path=x.upstream_path)
            x.tracer.snapshot("urlRewrite", x)
