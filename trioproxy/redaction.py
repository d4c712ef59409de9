"""What traces never show: credential headers and credential query parameters.

One list for both places a trace reader can reach a request: the events it reads (header maps,
URLs) and the CEL filter it writes. The filter is evaluated against the redacted activation,
so ``request.headers["authorization"].startsWith("Bearer s")`` sees ``<redacted>`` and cannot
recover a secret one prefix at a time (docs/reliability.md, row 6). Policies (authorization,
rate-limit descriptors, the access log's filter) are written by the operator and keep seeing
the real values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote_plus

from attrs import frozen

REDACTED = "<redacted>"
CREDENTIAL_HEADERS = frozenset({
    b"authorization", b"proxy-authorization", b"cookie", b"set-cookie", b"x-api-key", b"x-auth-token"})
#: query parameters whose value is a credential (OAuth 2.0 bearer in a URI, API keys)
CREDENTIAL_QUERY_PARAMS = frozenset({"access_token", "api_key", "apikey", "key", "token"})


@frozen
class Redaction:
    """The header and query-parameter names whose values traces hide: the usual credential names,
    plus wherever the loaded config's ``apiKey`` and ``basicAuth`` policies read credentials from
    (``Runtime`` builds it at each load: a key in ``x-team-key`` is as secret as one in
    ``authorization``)."""

    headers: frozenset[bytes] = CREDENTIAL_HEADERS
    params: frozenset[str] = CREDENTIAL_QUERY_PARAMS

    def also(self, headers: frozenset[bytes] = frozenset(), params: frozenset[str] = frozenset()) -> Redaction:
        return Redaction(self.headers | headers, self.params | params)

    def target(self, target: str) -> str:
        """``/p?access_token=s&q=1`` → ``/p?access_token=<redacted>&q=1``; anything else unchanged.
        Names are compared decoded, as a backend's query parser reads them (``access%5Ftoken``)."""
        path, sep, query = target.partition("?")
        if not sep or not query:
            return target
        parts = query.split("&")
        changed = False
        for i, part in enumerate(parts):
            name, eq, _ = part.partition("=")
            if eq and unquote_plus(name).lower() in self.params:
                parts[i] = f"{name}={REDACTED}"
                changed = True
        return f"{path}?{'&'.join(parts)}" if changed else target

    def activation(self, activation: Mapping[str, Any]) -> dict[str, Any]:
        """A CEL activation (``cel.build_activation``) whose ``request`` shows what a trace shows."""
        request = activation.get("request")
        if not isinstance(request, Mapping):
            return dict(activation)
        headers = {name: REDACTED if name.encode("latin-1") in self.headers else value
                   for name, value in request.get("headers", {}).items()}
        clean = {**request, "headers": headers}
        for key in ("pathAndQuery", "uri"):
            if isinstance(request.get(key), str):
                clean[key] = self.target(request[key])
        return {**activation, "request": clean}


#: the members of a JWK that are private key material (RFC 7518 §6.2.2, §6.3.2, §6.4; RFC 8037)
JWK_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "k", "oth"})


def public_jwks(text: str) -> str:
    """A JWKS (JSON text) with every private member of its keys shown as ``<redacted>``: a JWKS
    should hold public keys only, but an operator can paste a private one (``/config_dump``)."""
    try:
        document = json.loads(text)
    except ValueError:
        return REDACTED
    if not isinstance(document, dict):
        return REDACTED
    keys = document.get("keys")
    for jwk in keys if isinstance(keys, list) else [document]:
        if isinstance(jwk, dict):
            for member in JWK_PRIVATE_MEMBERS & jwk.keys():
                jwk[member] = REDACTED
    return json.dumps(document)


DEFAULT = Redaction()
redact_target = DEFAULT.target
redact_activation = DEFAULT.activation
