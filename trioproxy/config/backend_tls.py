"""TLS to backends, pure: a ``backendTLS`` spec → an ``ssl.SSLContext``, and the checks after a handshake.

``BackendTls`` is the frozen runtime form of a ``backendTLS`` policy (docs/backend-tls.md);
``SYSTEM_TRUST`` is what the ``ai`` provider defaults use. ``build_context`` is called once per
spec (at load time to report bad files, then by the pool, which caches the context per spec), so
the handshake of each new connection only wraps a socket. Verification follows the spec:

- default: the system trust store (``ssl.create_default_context``) or ``root``, SNI and the
  certificate's name checked against ``hostname`` (default: the backend's host);
- ``subjectAltNames``: the chain is verified, then the certificate must carry one of these names
  (DNS, URI or IP) *instead of* the hostname (``check_subject_alt_names`` after the handshake);
- ``insecureHost``: the chain is verified, the name is not; ``insecure``: nothing is verified.

The ``fingerprint`` (sha256 of the files' contents) makes a reload after a certificate rotation
compare unequal, so a new context (and new connections) follow.
"""

from __future__ import annotations

import hashlib
import ipaddress
import ssl
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import attrs

__all__ = [
    "DEFAULT_ALPN",
    "SYSTEM_TRUST",
    "BackendTls",
    "TlsConfigError",
    "build_context",
    "check_subject_alt_names",
    "file_fingerprint",
    "server_name",
]

#: trioproxy speaks HTTP/1.1 to backends, so that is what it offers unless ``alpn`` says otherwise.
DEFAULT_ALPN = ("http/1.1",)


class TlsConfigError(ValueError):
    """A backendTLS file that cannot be used; the message starts with the wire field name."""


@attrs.frozen
class BackendTls:
    """A ``backendTLS`` policy as the connection pool uses it (wire names in docs/backend-tls.md)."""

    root: str | None = None  # CA bundle (PEM) instead of the system trust store
    hostname: str | None = None  # SNI and the name verified; None: the backend's host
    insecure: bool = False
    insecure_host: bool = False
    cert: str | None = None  # client certificate chain (PEM), mTLS
    key: str | None = attrs.field(default=None)  # its private key (a path; redacted in dumps anyway)
    alpn: tuple[str, ...] | None = None
    subject_alt_names: tuple[str, ...] = ()
    fingerprint: str = attrs.field(default="", repr=False)


SYSTEM_TRUST = BackendTls()


def file_fingerprint(paths: Iterable[str | None]) -> str:
    """sha256 over the contents of ``paths`` (None skipped); ``OSError`` if one cannot be read."""
    digest = hashlib.sha256()
    for path in paths:
        if path is not None:
            digest.update(Path(path).read_bytes())
            digest.update(b"\0")
    return digest.hexdigest()


def server_name(spec: BackendTls, host: str) -> str:
    """The name sent as SNI and verified: ``hostname``, else the backend's host (for an IP
    address Python sends no SNI and checks the certificate's IP entries)."""
    return spec.hostname or host


def build_context(spec: BackendTls) -> ssl.SSLContext:
    """The client context for ``spec``; ``TlsConfigError`` naming the field when a file is unusable."""
    if spec.root is not None:
        try:
            context = ssl.create_default_context(cafile=spec.root)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"root: cannot load CA bundle {spec.root}: {_reason(exc)}") from None
    else:
        context = ssl.create_default_context()
    if spec.cert is not None or spec.key is not None:
        if spec.cert is None:
            raise TlsConfigError("key: requires cert (the client certificate)")
        try:
            context.load_cert_chain(spec.cert, spec.key)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(f"cert: cannot load client certificate {spec.cert}"
                                 f"{' with key ' + spec.key if spec.key else ''}: {_reason(exc)}") from None
    if spec.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif spec.insecure_host or spec.subject_alt_names:
        context.check_hostname = False  # the chain is still verified (CERT_REQUIRED)
    try:
        context.set_alpn_protocols(list(spec.alpn if spec.alpn is not None else DEFAULT_ALPN))
    except (ValueError, ssl.SSLError) as exc:  # pragma: no cover - names are checked when read
        raise TlsConfigError(f"alpn: {exc}") from None
    return context


def check_subject_alt_names(spec: BackendTls, peer_cert: dict[str, Any] | None) -> bool:
    """After a verified handshake: does the certificate carry one of ``subjectAltNames``?

    True when the spec has none (the hostname check already ran) or is insecure."""
    if not spec.subject_alt_names or spec.insecure or spec.insecure_host:
        return True
    names = peer_cert.get("subjectAltName", ()) if peer_cert else ()
    for wanted in spec.subject_alt_names:
        for kind, value in names:
            if kind == "DNS" and _dns_matches(value, wanted):
                return True
            if kind == "URI" and value == wanted:
                return True
            if kind == "IP Address" and _same_ip(value, wanted):
                return True
    return False


def _dns_matches(pattern: str, name: str) -> bool:
    pattern, name = pattern.lower().rstrip("."), name.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _, rest = name.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == name


def _same_ip(a: str, b: str) -> bool:
    try:
        return ipaddress.ip_address(a.strip()) == ipaddress.ip_address(b)
    except ValueError:
        return False


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).lower().replace("_", " ")
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
