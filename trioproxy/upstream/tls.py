"""Opening a TLS connection to a backend (``trio.SSLStream`` over TCP) for the upstream pool.

The pool keys connections by address; a ``TlsAddress`` carries its ``backendTLS`` spec, so TLS
connections are pooled and reused exactly like plain ones and the handshake is paid once per
connection. Contexts are built once per spec (``backend_tls.build_context``) and cached.

Handshake failures become ``BackendTlsFailed`` (503): ``upstream connect error: certificate
verify failed`` for an untrusted chain, a name that does not match (hostname or
subjectAltNames), and ``upstream connect error: TLS handshake failed: <reason>`` otherwise. The
detail (which check failed) is logged once per backend and reason.
"""

from __future__ import annotations

import logging
import ssl

import trio

from ..config.backend_tls import BackendTls, TlsConfigError, build_context, check_subject_alt_names, server_name
from ..config.model import TlsAddress
from ..errors import BackendTlsFailed

__all__ = ["VERIFY_FAILED", "open_tls"]

log = logging.getLogger("trioproxy.upstream.pool")

VERIFY_FAILED = "upstream connect error: certificate verify failed"
_CONTEXTS: dict[BackendTls, ssl.SSLContext] = {}
_MAX_CONTEXTS = 256  # specs change only with the config; a bound keeps many reloads from piling up
_logged: set[tuple[str, str]] = set()


def context_for(spec: BackendTls) -> ssl.SSLContext:
    context = _CONTEXTS.get(spec)
    if context is None:
        if len(_CONTEXTS) >= _MAX_CONTEXTS:
            _CONTEXTS.clear()
        try:
            context = _CONTEXTS[spec] = build_context(spec)
        except TlsConfigError as exc:  # a file changed since the config was loaded
            raise BackendTlsFailed(f"upstream connect error: backendTLS.{exc}") from None
    return context


def _fail(target: TlsAddress, message: str, detail: str) -> BackendTlsFailed:
    key = (str(target), detail)
    if key not in _logged and len(_logged) < 1024:
        _logged.add(key)
        log.warning("TLS to %s failed: %s", target, detail)
    return BackendTlsFailed(message)


async def open_tls(target: TlsAddress) -> trio.SSLStream[trio.SocketStream]:
    """TCP, then the TLS handshake and the checks of ``target.tls``; ``OSError`` if unreachable."""
    spec = target.tls
    context = context_for(spec)
    tcp = await trio.open_tcp_stream(target.host, target.port)
    stream = trio.SSLStream(tcp, context, server_hostname=server_name(spec, target.host), https_compatible=True)
    try:
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError as exc:
            cause = exc.__cause__
            if isinstance(cause, ssl.SSLCertVerificationError):
                raise _fail(target, VERIFY_FAILED, cause.verify_message or str(cause)) from None
            reason = cause.reason if isinstance(cause, ssl.SSLError) and cause.reason else str(cause or exc)
            reason = str(reason).lower().replace("_", " ")
            raise _fail(target, f"upstream connect error: TLS handshake failed: {reason}", reason) from None
        if not check_subject_alt_names(spec, stream.getpeercert()):
            raise _fail(target, VERIFY_FAILED, f"certificate names none of subjectAltNames {list(spec.subject_alt_names)}")
        selected = stream.selected_alpn_protocol()
        if selected not in (None, "http/1.1"):
            raise _fail(target, f"upstream connect error: backend chose ALPN {selected}; trioproxy speaks http/1.1",
                        f"ALPN {selected}")
    except BaseException:
        tcp.socket.close()
        raise
    return stream
