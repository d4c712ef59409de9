"""TLS on a bind: the server SSL context of a listener's ``tls: {cert, key, root?}`` (agentgateway's).

One context per bind, built once at start (and at load, to check the files): the certificate
chain and key, ALPN ``h2`` then ``http/1.1`` (hypercorn serves HTTP/2 to a client that picks
``h2``), TLS 1.2 at least, and with ``root`` a required client certificate verified against that
CA bundle (mTLS). docs/protocols.md.
"""

from __future__ import annotations

import ssl

from .model import ListenerTls

ALPN = ["h2", "http/1.1"]


class TlsFileError(ValueError):
    """A file of a ``tls`` block cannot be used; ``field`` is its wire name (cert, key, root)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def server_context(tls: ListenerTls) -> ssl.SSLContext:
    """The context serving ``tls``; ``TlsFileError`` names the field whose file is unusable."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _readable("cert", tls.cert)
    _readable("key", tls.key)
    try:
        context.load_cert_chain(tls.cert, tls.key)
    except ssl.SSLError as exc:
        raise TlsFileError("key", f"{tls.cert} and {tls.key} are not a PEM certificate chain and its"
                                  f" private key ({exc.reason or exc})") from None
    if tls.root is not None:
        _readable("root", tls.root)
        try:
            context.load_verify_locations(cafile=tls.root)
        except ssl.SSLError as exc:
            raise TlsFileError("root", f"{tls.root} is not a PEM CA bundle ({exc.reason or exc})") from None
        context.verify_mode = ssl.CERT_REQUIRED
    context.set_alpn_protocols(ALPN)
    return context


def _readable(field: str, path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise TlsFileError(field, f"cannot read {path}: {exc.strerror or exc}") from None
