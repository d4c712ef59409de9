"""The README's "Identity provider setup" walkthrough, end to end: the dev IdP, ``trioproxy idp
setup`` as a user runs it, a gateway whose ``jwtAuth`` is pasted from the setup's output with an
authorization rule on ``jwt.group``, and user tokens from the IdP."""

from __future__ import annotations

import json
import textwrap

import httpx
import trio

from fixtures.keycloak import open_keycloak
from tests.conftest import free_port, run_cli, start_gateway

GATEWAY = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: api
      policies:
{policies}
        authorization:
          rules:
          - 'jwt.group == "eng"'
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


async def test_readme_walkthrough_eng_gets_200_other_group_403_no_token_401(nursery, backend):
    async with open_keycloak(realms=("demo",)) as kc:
        setup = await trio.to_thread.run_sync(lambda: run_cli(
            "idp", "setup", "--idp-url", kc.url, "--realm", "demo", "--admin-user", "admin",
            "--admin-password", "admin", "--client-id", "gateway",
            "--user", "alice:alice-pw:eng", "--user", "bob:bob-pw:sales"))
        assert setup.returncode == 0, setup.stderr
        pasted = setup.stdout.split("policies):\n\n", 1)[1].split("\n\n", 1)[0]
        policies = textwrap.indent(pasted, " " * 8)
        secret = json.loads((await trio.to_thread.run_sync(lambda: run_cli(
            "idp", "setup", "--idp-url", kc.url, "--realm", "demo", "--admin-user", "admin",
            "--admin-password", "admin", "--client-id", "gateway", "-o", "json"))).stdout)["clientSecret"]

        gw = await start_gateway(nursery, GATEWAY.replace("{policies}", policies.replace("{", "{{").replace("}", "}}")),
                                 port=free_port(), backend=backend.port)

        async def token(user: str, password: str) -> str:
            async with httpx.AsyncClient() as idp:
                r = await idp.post(f"{kc.url}/realms/demo/protocol/openid-connect/token", data={
                    "grant_type": "password", "client_id": "gateway", "client_secret": secret,
                    "username": user, "password": password})
                assert r.status_code == 200, r.text
                return r.json()["access_token"]

        async with gw.client() as client:
            eng = await client.get("/hello", headers={"authorization": f"Bearer {await token('alice', 'alice-pw')}"})
            sales = await client.get("/hello", headers={"authorization": f"Bearer {await token('bob', 'bob-pw')}"})
            anonymous = await client.get("/hello")
        assert eng.status_code == 200, eng.text
        assert not any(name.lower() == "authorization" for name, _ in eng.json()["headers"])  # token not forwarded
        assert (sales.status_code, sales.text) == (403, "authorization failed")
        assert anonymous.status_code == 401
        assert anonymous.text.startswith("authentication failure:")
