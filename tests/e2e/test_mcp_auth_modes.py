"""mcpAuthentication's modes, its default resource (the request's origin and path) and audience
binding, in front of the echo backend (the stage works for any backend)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import free_port, start_routes
from tests.jwt_helpers import ISSUER, jwks, make_key

KEY = make_key("RS256", "k1")
OTHER = make_key("RS256", "k2")

ROUTE = """
- name: api
  matches:
  - path: {{pathPrefix: /api}}
  - path: {{exact: /.well-known/oauth-protected-resource/api}}
  policies:
    mcpAuthentication:
      mode: {mode}
      issuer: "{issuer}"
      audiences: {audiences}
      jwks: '{jwks}'
  backends: [{{host: "127.0.0.1:{backend}"}}]
"""


async def gateway(nursery, backend, mode: str, audiences: str = "[]"):
    return await start_routes(nursery, ROUTE, port=free_port(), mode=mode, issuer=ISSUER, audiences=audiences,
                              jwks=json.dumps(jwks(KEY)), backend=backend.port)


async def test_strict_binds_the_token_to_the_resource_and_serves_the_metadata(nursery, backend):
    gw = await gateway(nursery, backend, "strict")
    resource = gw.url + "/api"
    async with gw.client() as client:
        r = await client.get("/api")
        assert r.status_code == 401 and r.text == "authentication failure: no bearer token found"
        assert r.headers["www-authenticate"] == (
            f'Bearer resource_metadata="{gw.url}/.well-known/oauth-protected-resource/api"')
        metadata = (await client.get("/.well-known/oauth-protected-resource/api")).json()
        assert metadata == {"resource": resource, "authorization_servers": [ISSUER],
                            "bearer_methods_supported": ["header"]}
        ok = await client.get("/api", headers={"authorization": f"Bearer {KEY.token(aud=resource)}"})
        assert ok.status_code == 200
        assert "authorization" not in dict(ok.json()["headers"])  # the validated token stays here
        elsewhere = await client.get("/api", headers={"authorization": f"Bearer {KEY.token()}"})  # aud trioproxy
        assert elsewhere.status_code == 401 and 'error="invalid_token"' in elsewhere.headers["www-authenticate"]
        assert "token audience is not this resource" in elsewhere.text
        forged = await client.get("/api", headers={"authorization": f"Bearer {OTHER.token(aud=resource)}"})
        assert forged.status_code == 401


async def test_configured_audiences_replace_the_resource(nursery, backend):
    gw = await gateway(nursery, backend, "strict", "[trioproxy]")
    async with gw.client() as client:
        assert (await client.get("/api", headers={"authorization": f"Bearer {KEY.token()}"})).status_code == 200
        r = await client.get("/api", headers={"authorization": f"Bearer {KEY.token(aud=gw.url + '/api')}"})
        assert r.status_code == 401


@pytest.mark.parametrize("mode, missing, invalid", [("optional", 200, 401), ("permissive", 200, 200)])
async def test_optional_and_permissive(nursery, backend, mode, missing, invalid):
    gw = await gateway(nursery, backend, mode)
    async with gw.client() as client:
        assert (await client.get("/api")).status_code == missing
        bad = await client.get("/api", headers={"authorization": f"Bearer {OTHER.token(aud=gw.url + '/api')}"})
        assert bad.status_code == invalid
