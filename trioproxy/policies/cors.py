"""CORS (``cors``): agentgateway's policy, which follows Envoy's semantics.

- A request without ``Origin`` is not a CORS request: nothing happens.
- An origin is allowed when ``allowOrigins`` holds ``*`` or an entry with the same scheme and port
  (default 80/443 filled in) whose host matches; a ``*`` in an entry's host is a wildcard
  (``https://*.example.com``, ``http://*``).
- A preflight (``OPTIONS`` with ``Origin`` and ``Access-Control-Request-Method``) from an origin
  that is not allowed is answered 200 without CORS headers and never forwarded.
- An ``OPTIONS`` request from an allowed origin is answered by the gateway: 200 with
  ``Access-Control-Allow-Origin`` (the request's origin), ``-Allow-Methods``, ``-Allow-Headers``,
  ``-Max-Age``, ``-Allow-Credentials``, ``-Expose-Headers`` as configured. ``*`` in methods or
  headers echoes what the browser asked for (``*`` itself when it asked nothing and credentials
  are off, since browsers ignore a literal ``*`` with credentials).
- Any other request from an allowed origin is forwarded; its response gets
  ``Access-Control-Allow-Origin``, ``-Allow-Credentials`` and ``-Expose-Headers``.
- A request from an origin that is not allowed is forwarded without CORS headers (the browser,
  not the gateway, withholds the response from the page).
- Every forwarded request's response gets ``Vary: Origin`` (with or without an ``Origin``), and an
  allowed preflight's answer ``Vary: Origin, Access-Control-Request-Method,
  Access-Control-Request-Headers``: the answer echoes what the request carried, so a shared cache
  keyed on the URL alone would otherwise hand one origin's ``Access-Control-Allow-Origin`` (or a
  response without it) to another (Fetch standard, "CORS protocol and HTTP caches"). agentgateway
  and Envoy add no ``Vary``; it only makes caches more careful. A disallowed preflight's empty
  answer needs none: ``OPTIONS`` answers are not stored by HTTP caches.
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from ..asgi import Header

__all__ = ["CorsDecision", "CorsSpec", "decide", "parse_origin"]


@frozen
class CorsSpec:
    allow_origins: tuple[str, ...] = ()
    allow_methods: tuple[str, ...] = ()
    allow_headers: tuple[str, ...] = ()
    expose_headers: tuple[str, ...] = ()
    allow_credentials: bool = False
    max_age: int | None = None          # seconds


@frozen
class CorsDecision:
    """``preflight``: answer now with ``headers`` (status 200, empty body); else add ``headers`` to the response."""

    result: str                         # "no origin", "preflight", "disallowed preflight", "allowed", "disallowed origin"
    preflight: bool = False
    headers: tuple[Header, ...] = ()


_DEFAULT_PORTS = {"http": 80, "https": 443}
VARY_ORIGIN: Header = (b"vary", b"origin")
VARY_PREFLIGHT: Header = (b"vary", b"origin, access-control-request-method, access-control-request-headers")


def parse_origin(value: str, *, allow_wildcard_host: bool = False) -> tuple[str, str, int] | None:
    """``scheme://host[:port]`` → (scheme, lowercased host, port), None when it is no such origin."""
    scheme, sep, rest = value.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in _DEFAULT_PORTS or not rest or any(c in rest for c in "/?#"):
        return None
    host, colon, port_text = rest.rpartition(":")
    if colon:
        if not host or ":" in host or not port_text.isdigit():
            return None
        port = int(port_text)
        if not 0 < port < 65536:
            return None
    else:
        host, port = rest, _DEFAULT_PORTS[scheme]
    if not host or (not allow_wildcard_host and "*" in host):
        return None
    return scheme, host.lower(), port


def _wildcard_match(pattern: str, value: str) -> bool:
    """``*`` matches any run of characters (including dots), as agentgateway's matcher."""
    parts = pattern.split("*")
    if len(parts) == 1:
        return pattern == value
    if not value.startswith(parts[0]) or not value.endswith(parts[-1]) or len(value) < len(parts[0]) + len(parts[-1]):
        return False
    position = len(parts[0])
    end = len(value) - len(parts[-1])
    for middle in parts[1:-1]:
        found = value.find(middle, position, end)
        if found < 0:
            return False
        position = found + len(middle)
    return True


def _header(headers: Sequence[Header], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


class CorsPolicy:
    """A compiled ``cors`` spec with a pure ``decide``."""

    def __init__(self, spec: CorsSpec) -> None:
        self.spec = spec
        self.any_origin = "*" in spec.allow_origins
        self.origins = tuple(p for p in (parse_origin(o, allow_wildcard_host=True) for o in spec.allow_origins) if p)
        credentials = [(b"access-control-allow-credentials", b"true")] if spec.allow_credentials else []
        expose = [(b"access-control-expose-headers", ",".join(spec.expose_headers).encode())] \
            if spec.expose_headers else []
        self.response_extra = tuple(credentials + expose)
        self.max_age = [(b"access-control-max-age", str(spec.max_age).encode())] if spec.max_age is not None else []

    def origin_allowed(self, origin: str) -> bool:
        if self.any_origin:
            return True
        parsed = parse_origin(origin)
        if parsed is None:
            return False
        scheme, host, port = parsed
        return any(s == scheme and p == port and (h == "*" or _wildcard_match(h, host)) for s, h, p in self.origins)

    def _preflight_list(self, configured: tuple[str, ...], requested: bytes | None, *, csv: bool) -> bytes | None:
        if not configured:
            return None
        if "*" not in configured:
            return ",".join(configured).encode()
        if requested is not None:
            text = requested.decode("latin-1")
            asked = ", ".join(p.strip() for p in text.split(",") if p.strip()) if csv else text.strip()
            if asked:
                return asked.encode()
        return None if self.spec.allow_credentials else b"*"

    def decide(self, method: str, headers: Sequence[Header]) -> CorsDecision:
        origin = _header(headers, b"origin")
        if origin is None:
            return CorsDecision("no origin", headers=(VARY_ORIGIN,))
        request_method = _header(headers, b"access-control-request-method")
        is_preflight = method == "OPTIONS" and bool(request_method and request_method.strip())
        if not self.origin_allowed(origin.decode("latin-1")):
            if is_preflight:
                return CorsDecision("disallowed preflight", preflight=True)
            return CorsDecision("disallowed origin", headers=(VARY_ORIGIN,))
        allow_origin = [(b"access-control-allow-origin", origin)]
        if method == "OPTIONS":
            answer = [*allow_origin, VARY_PREFLIGHT]
            methods = self._preflight_list(self.spec.allow_methods, request_method, csv=False)
            if methods is not None:
                answer.append((b"access-control-allow-methods", methods))
            allowed_headers = self._preflight_list(self.spec.allow_headers,
                                                   _header(headers, b"access-control-request-headers"), csv=True)
            if allowed_headers is not None:
                answer.append((b"access-control-allow-headers", allowed_headers))
            answer += self.max_age
            answer += self.response_extra
            return CorsDecision("preflight", preflight=True, headers=tuple(answer))
        return CorsDecision("allowed", headers=(*allow_origin, VARY_ORIGIN, *self.response_extra))


def decide(spec: CorsSpec, method: str, headers: Sequence[Header]) -> CorsDecision:
    """One-off convenience around :class:`CorsPolicy` (tests, tools)."""
    return CorsPolicy(spec).decide(method, headers)
