"""Where a backend, mirror or server is: host and port, and whether it is reached over TLS.

Below the policies (a ``requestMirror`` spec names an address) and the model; ``model.py``
re-exports both names.
"""

from __future__ import annotations

from attrs import frozen

from .backend_tls import SYSTEM_TRUST, BackendTls

__all__ = ["Address", "TlsAddress"]


@frozen
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@frozen
class TlsAddress(Address):
    """An address reached over TLS. Never equal to the plain ``Address`` of the same host and port,
    so the connection pool, which keys by address, never hands a plain connection to a TLS
    backend or the other way round."""

    tls: BackendTls = SYSTEM_TRUST
