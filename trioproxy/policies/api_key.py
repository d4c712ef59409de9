"""``apiKey``: requests authenticated by a static API key, as agentgateway's ``http/apikey.rs``.

The gateway keeps only each key's SHA-256 (a key given in the config is hashed at load; a
``keyHash: sha256:<hex>`` keeps the key out of the file altogether), so a lookup compares
digests, never the key itself byte by byte. The credential is read from a header (by default
``Authorization: Bearer <key>``), a query parameter or a cookie, and is removed from the request
once it authenticated it, so the backend never sees it. The key's metadata is CEL's ``apiKey``
(``apiKey.team``), beside ``apiKey.key``, which is always ``<redacted>``.

Modes: ``strict`` needs a valid key (401 ``api key authentication failure: no API Key found`` /
``invalid credentials``); ``optional`` (the default) lets requests without a key pass and
rejects a wrong one; ``permissive`` lets both pass without ``apiKey``.
"""

from __future__ import annotations

import hashlib
from collections.abc import MutableMapping
from typing import Any, Literal, Protocol
from urllib.parse import parse_qsl, unquote_plus

import attrs
from attrs import frozen

from ..asgi import Header

__all__ = ["ApiKeySpec", "CredentialLocation", "RequestView", "cookie_pairs", "key_digest"]


class RequestView(Protocol):
    """What a credential is read from and taken off: an ``Exchange``, named by what is used so this
    spec stays below the exchange (docs/pipeline.md, "Adding a policy kind")."""

    headers: list[Header]
    scope: MutableMapping[str, Any]


def key_digest(key: str) -> str:
    """The hex SHA-256 a key is known by."""
    return hashlib.sha256(key.encode()).hexdigest()


@frozen
class CredentialLocation:
    """Where the key is: a header (with a prefix stripped), a query parameter or a cookie."""

    kind: Literal["header", "queryParameter", "cookie"] = "header"
    name: str = "authorization"
    prefix: str = "Bearer "  # headers only; "" takes the whole value

    def extract(self, x: RequestView) -> str | None:
        if self.kind == "header":
            name = self.name.encode().lower()
            value = next((v for k, v in x.headers if k == name), None)
            if value is None:
                return None
            text = value.decode("latin-1")
            if not text[:len(self.prefix)].lower() == self.prefix.lower():
                return None
            return text[len(self.prefix):].strip() or None
        if self.kind == "queryParameter":
            query = x.scope.get("query_string", b"").decode("latin-1")
            return next((v for k, v in parse_qsl(query) if k == self.name), None)  # blank values are left out
        return next((value for name, value, _ in cookie_pairs(x) if name == self.name and value), None)

    def remove(self, x: RequestView) -> None:
        """Take the credential off the request before it goes upstream."""
        if self.kind == "header":
            name = self.name.encode().lower()
            x.headers = [h for h in x.headers if h[0] != name]
        elif self.kind == "queryParameter":
            query: bytes = x.scope.get("query_string", b"")
            # names compared decoded, as parse_qsl read them: api%5Fkey is api_key too
            kept = [p for p in query.split(b"&") if unquote_plus(p.partition(b"=")[0].decode("latin-1")) != self.name]
            x.scope["query_string"] = b"&".join(kept)
        else:
            rest = [piece for name, _, piece in cookie_pairs(x) if name != self.name]
            x.headers = [h for h in x.headers if h[0] != b"cookie"] + (
                [(b"cookie", "; ".join(rest).encode("latin-1"))] if rest else [])


def cookie_pairs(x: RequestView) -> list[tuple[str | None, str, str]]:
    """(name, value, the piece as sent) of each ``;``-separated piece of every ``Cookie`` header.

    Read leniently, as browsers and agentgateway do: a piece that is no ``name=value`` (``junk``, a
    stray ``;``) is skipped (name None) but kept when the header is rewritten. The standard
    library's ``SimpleCookie`` stops at the first such piece, so ``a=b; junk; key=VALID`` hid the
    key behind it. The first cookie of a name wins (the most specific path comes first).
    """
    pairs: list[tuple[str | None, str, str]] = []
    for header, raw in x.headers:
        if header != b"cookie":
            continue
        for piece in raw.decode("latin-1").split(";"):
            piece = piece.strip()
            if not piece:
                continue
            name, eq, value = piece.partition("=")
            value = value.strip()
            if len(value) > 1 and value[0] == value[-1] == '"':
                value = value[1:-1]
            pairs.append((name.strip() if eq and name.strip() else None, value, piece))
    return pairs


@frozen
class ApiKeySpec:
    # (hex SHA-256, metadata pairs); never in /config_dump or a trace: a digest can be guessed
    keys: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = attrs.field(metadata={"secret": True})
    mode: Literal["strict", "optional", "permissive"] = "optional"
    location: CredentialLocation = CredentialLocation()
    #: also accept the key store's runtime keys (``trioproxy/keys``, docs/keys.md)
    runtime_keys: bool = False
    #: the request log keeps runtime-keyed requests' bodies (redacted, cut: proxy/keys_stage.py)
    log_payloads: bool = False
