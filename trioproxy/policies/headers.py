"""Header shaping: hop-by-hop removal, forwarding headers, and the header modifier policies."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from attrs import frozen

from ..asgi import Header


@frozen
class HeaderModifier:
    add: tuple[tuple[bytes, bytes], ...] = ()
    set: tuple[tuple[bytes, bytes], ...] = ()
    remove: tuple[bytes, ...] = ()
    #: names (lower case) whose value was read from ``$VAR``: a secret the config puts on the
    #: request, hidden in traces and ``/config_dump`` (docs/reliability.md row 6)
    from_env: frozenset[bytes] = frozenset()


# RFC 9110 §7.6.1 hop-by-hop fields, plus framing that the next hop recomputes.
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"te", b"trailer", b"upgrade",
     b"proxy-authenticate", b"proxy-authorization"}
)
# ``trioproxy trace --port`` marks its injected request with this header so that its trace
# expression matches exactly that request; it is the trace client's, never the backend's.
TRACE_ID_HEADER = b"x-trioproxy-trace-id"


def header_value(headers: Iterable[Header], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


def apply_modifier(headers: list[Header], modifier: HeaderModifier | None) -> list[Header]:
    """``set`` replaces, ``add`` appends, ``remove`` drops; a new list, the input is untouched."""
    if modifier is None:
        return headers
    drop = {name for name, _ in modifier.set} | set(modifier.remove)
    if drop:
        headers = [h for h in headers if h[0] not in drop]
    return headers + list(modifier.set) + list(modifier.add)


def _connection_tokens(headers: Iterable[Header]) -> set[bytes]:
    return {t.strip().lower() for name, value in headers if name == b"connection" for t in value.split(b",")}


def without_hop_by_hop(headers: Sequence[Header]) -> list[Header]:
    """Drop hop-by-hop fields and those the ``Connection`` header names."""
    tokens = _connection_tokens(headers)
    return [h for h in headers if h[0] not in HOP_BY_HOP and h[0] not in tokens]


def forwarded_request_headers(headers: Sequence[Header], *, client: str | None, scheme: str,
                              framing: Header | None) -> list[Header]:
    """What goes upstream: no hop-by-hop fields nor the trace client's ``TRACE_ID_HEADER``,
    ``x-forwarded-for`` extended, the body's framing.

    ``framing`` is the request's own ``content-length`` or ``transfer-encoding: chunked`` (the
    latter is hop-by-hop, so it is re-added here for a chunked body the pool re-chunks).
    """
    out: list[Header] = []
    forwarded_for = None
    tokens = _connection_tokens(headers)
    for name, value in headers:
        if name in HOP_BY_HOP or name in tokens or name == b"content-length" or name == TRACE_ID_HEADER:
            continue
        if name == b"expect" and value.lower() == b"100-continue":
            continue  # the gateway answered it; the body follows the head upstream at once
        if name == b"x-forwarded-for":
            forwarded_for = value
            continue
        out.append((name, value))
    if client:
        address = client.encode()
        out.append((b"x-forwarded-for", forwarded_for + b", " + address if forwarded_for else address))
    elif forwarded_for:
        out.append((b"x-forwarded-for", forwarded_for))
    out.append((b"x-forwarded-proto", scheme.encode()))
    if framing is not None:
        out.append(framing)
    return out


def request_framing(headers: Iterable[Header]) -> Header | None:
    """The body framing of a client request, as it must be declared upstream."""
    for name, value in headers:
        if name == b"content-length":
            return (name, value)
        if name == b"transfer-encoding":
            return (b"transfer-encoding", b"chunked")
    return None


def host_without_port(host: str) -> str:
    """The Host header's name, lowercase, without its port and without a trailing dot: ``example.com.``
    is the fully qualified spelling of ``example.com`` and must meet its routes (as Envoy and
    agentgateway normalise it), not fall through to the catch-all ones."""
    if host.startswith("["):
        return host[: host.find("]") + 1].lower()
    name = host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()
    return name[:-1] if name.endswith(".") else name
