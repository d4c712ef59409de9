"""``mcpAuthentication``: the MCP authorization spec's resource-server side (agentgateway's policy).

The gateway is the OAuth protected resource: a request without a valid token is answered 401 with
``WWW-Authenticate: Bearer resource_metadata="<origin>/.well-known/oauth-protected-resource<path>"``;
that document (RFC 9728) names the issuer as the authorization server, so an MCP client can find
where to get a token. Tokens are checked by the ``jwtAuth`` verifier (issuer, JWKS, ``exp``), and
their audience must name this resource (or one of ``audiences`` when configured): a token issued
for another resource is refused. Pure parts only; the stage is ``proxy/mcp_stage.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from attrs import frozen

from .jwt import JwksSource, Mode

__all__ = ["METADATA_PREFIX", "McpAuthenticationSpec", "audience_matches", "challenge", "metadata_document",
           "resource_for"]

#: RFC 9728's well-known path; the route's path follows it
METADATA_PREFIX = "/.well-known/oauth-protected-resource"


@frozen
class McpAuthenticationSpec:
    issuer: str
    jwks: JwksSource
    audiences: tuple[str, ...] = ()
    mode: Mode = "strict"
    resource: str | None = None               # default: the request's origin and path
    scopes_supported: tuple[str, ...] = ()
    bearer_methods_supported: tuple[str, ...] = ("header",)
    #: further RFC 9728 members (resource_documentation, resource_policy_uri, resource_name), in order
    extra: tuple[tuple[str, str], ...] = ()


def resource_for(spec: McpAuthenticationSpec, origin: str, path: str) -> str:
    """The resource identifier of a request to ``path`` (the MCP endpoint's path, without the query)."""
    return spec.resource if spec.resource is not None else origin + path


def metadata_document(spec: McpAuthenticationSpec, resource: str) -> bytes:
    """The Protected Resource Metadata (RFC 9728 section 2) for ``resource``."""
    document: dict[str, Any] = {
        "resource": resource,
        "authorization_servers": [spec.issuer],
        "bearer_methods_supported": list(spec.bearer_methods_supported),
    }
    if spec.scopes_supported:
        document["scopes_supported"] = list(spec.scopes_supported)
    document.update(spec.extra)
    return json.dumps(document).encode()


def challenge(origin: str, path: str, error: str | None = None) -> bytes:
    """The ``WWW-Authenticate`` value of a 401 for the MCP endpoint at ``path`` (RFC 9728 section 5.1)."""
    value = f'Bearer resource_metadata="{origin}{METADATA_PREFIX}{path}"'
    if error is not None:
        value += f', error="{error}"'
    return value.encode("latin-1")


def audience_matches(claims: Mapping[str, Any], accepted: tuple[str, ...]) -> bool:
    """Whether the token's ``aud`` (a string or a list) names one of ``accepted``."""
    aud = claims.get("aud")
    names = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    return any(name in accepted for name in names)
