"""MCP authentication and tool-level authorization, end to end: the Keycloak-compatible IdP
(fixtures/keycloak.py) prepared by ``idp setup --mcp-resource``, the gateway in front of two MCP
servers, and the official SDK as the client with each user's token."""

from __future__ import annotations

import base64
import json
import re

import httpx
import pytest
import trio
import yaml
from mcp.shared.exceptions import MCPError

from fixtures.keycloak import open_keycloak
from tests.conftest import ROOT, free_port, run_cli, start_gateway
from tests.mcp_helpers import mcp_client, mcp_servers, rpc
from trioproxy.config import parse_config
from trioproxy.idp.keycloak_setup import SetupRequest, UserSpec, run_setup

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: tools
      matches:
      - path: {{exact: /mcp}}
      - path: {{exact: /.well-known/oauth-protected-resource/mcp}}
      policies:
        mcpAuthentication:
          issuer: "{issuer}"
          jwks: {{url: "{jwks}"}}
          resourceMetadata:
            resource: "{resource}"
            scopesSupported: [openid, profile]
        mcpAuthorization:
          rules:
          - 'has(mcp.tool) && mcp.tool.target == "text"'
          - 'has(mcp.tool) && mcp.tool.target == "math" && jwt.group == "eng"'
          - 'has(mcp.prompt) || has(mcp.resource)'
          - {{deny: 'has(mcp.tool) && mcp.tool.name == "echo" && mcp.arguments.text == "forbidden"'}}
      backends:
      - mcp:
          targets:
          - {{name: math, mcp: {{host: "{math}"}}}}
          - {{name: text, mcp: {{host: "{text}"}}}}
"""


def claims_of(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


async def prepared(kc, resource: str):
    return await run_setup(SetupRequest(
        idp_url=kc.url, realm="demo", admin_user="admin", admin_password="admin", client_id="gateway",
        users=(UserSpec.parse("alice:pw-a:eng"), UserSpec.parse("bob:pw-b:sales")), mcp_resource=resource))


async def password_token(token_endpoint: str, client_id: str, user: str, password: str, **extra: str) -> str:
    async with httpx.AsyncClient() as client:
        r = await client.post(token_endpoint, data={"grant_type": "password", "client_id": client_id,
                                                    "username": user, "password": password, **extra})
    assert r.status_code == 200, r.text
    return r.json()["access_token"]


async def test_a_client_discovers_the_idp_from_the_401_and_its_claims_decide_which_tools_it_sees(nursery):
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    async with open_keycloak() as kc, mcp_servers("math", "text") as (math, text):
        result = await prepared(kc, resource)
        await start_gateway(nursery, CONFIG, port=port, issuer=result.issuer, jwks=result.jwks_uri,
                            resource=resource, math=math.url, text=text.url)

        # 1. no token: 401 naming the resource metadata (RFC 9728), which names the IdP
        r = await rpc(resource, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        assert r.status_code == 401
        challenge = r.headers["www-authenticate"]
        assert challenge == f'Bearer resource_metadata="http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"'
        metadata_url = re.search(r'resource_metadata="([^"]+)"', challenge).group(1)
        async with httpx.AsyncClient() as client:
            metadata = (await client.get(metadata_url)).json()
            assert metadata == {"resource": resource, "authorization_servers": [result.issuer],
                                "bearer_methods_supported": ["header"], "scopes_supported": ["openid", "profile"]}
            discovery = (await client.get(metadata["authorization_servers"][0]
                                          + "/.well-known/openid-configuration")).json()

        # 2. tokens from the public MCP client idp setup made, bound to the resource
        alice = await password_token(discovery["token_endpoint"], "mcp-client", "alice", "pw-a")
        bob = await password_token(discovery["token_endpoint"], "mcp-client", "bob", "pw-b")
        assert resource in claims_of(alice)["aud"] and claims_of(alice)["group"] == "eng"

        # 3. alice (eng) sees and calls the math tools; bob (sales) neither sees nor calls them
        async with mcp_client(resource, {"authorization": f"Bearer {alice}"}) as session:
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["math_add", "math_slow_count", "text_echo", "text_shout"]
            assert (await session.call_tool("math_add", {"a": 20, "b": 22})).structured_content == {"result": 42}
        async with mcp_client(resource, {"authorization": f"Bearer {bob}"}) as session:
            assert [t.name for t in (await session.list_tools()).tools] == ["text_echo", "text_shout"]
            with pytest.raises(MCPError) as denied:
                await session.call_tool("math_add", {"a": 1, "b": 2})
            # the same answer as a tool that does not exist: nothing tells bob it is there
            assert (denied.value.error.code, denied.value.error.message) == (-32602, "Unknown tool: math_add")
            assert (await session.call_tool("text_echo", {"text": "hi"})).structured_content == {"result": "hi"}
            with pytest.raises(MCPError) as denied:  # a rule over the call's arguments
                await session.call_tool("text_echo", {"text": "forbidden"})
            assert denied.value.error.message == "Unknown tool: text_echo"
            assert [p.name for p in (await session.list_prompts()).prompts] == ["math_review", "text_greet"]

        # 4. a valid token of the realm for another audience is refused
        other = await password_token(discovery["token_endpoint"], "gateway", "alice", "pw-a",
                                     client_secret=result.client_secret)
        r = await rpc(resource, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                      headers={"authorization": f"Bearer {other}"})
        assert r.status_code == 401
        assert 'error="invalid_token"' in r.headers["www-authenticate"]
        assert "token audience is not this resource" in r.text


async def test_idp_setup_prints_the_mcp_authentication_block_to_paste(tmp_path):
    resource = "http://127.0.0.1:3000/mcp"
    async with open_keycloak() as kc:
        result = await trio.to_thread.run_sync(lambda: run_cli(
            "idp", "setup", "--idp-url", kc.url, "--realm", "demo", "--admin-user", "admin", "--admin-password",
            "admin", "--client-id", "gateway", "--user", "alice:pw:eng", "--mcp-resource", resource))
        assert result.returncode == 0, result.stderr
        assert "[10/10] mcp client: public client mcp-client created: PKCE S256" in result.stdout
        block = result.stdout.split("mcpAuthentication policy", 1)[1].split("\n\n", 1)[1]
        policy = yaml.safe_load(block)["mcpAuthentication"]
        assert policy["issuer"] == f"{kc.url}/realms/demo"
        assert policy["resourceMetadata"]["resource"] == resource
        client = kc.realms["demo"].client_by_client_id("mcp-client")
        assert client.secret is None and client.redirect_uris == ["http://localhost:*", "http://127.0.0.1:*"]
        # pasted under a route, it is a valid config
        route = {"matches": [{"path": {"exact": "/mcp"}}], "policies": {"mcpAuthentication": policy},
                 "backends": [{"mcp": {"targets": [{"name": "a", "mcp": {"host": "http://127.0.0.1:1/mcp"}}]}}]}
        parse_config(yaml.safe_dump({"binds": [{"port": 3000, "listeners": [{"routes": [route]}]}]}))
        # a second run reuses what the first made
        again = await trio.to_thread.run_sync(lambda: run_cli(
            "idp", "setup", "--idp-url", kc.url, "--realm", "demo", "--admin-user", "admin", "--admin-password",
            "admin", "--client-id", "gateway", "--mcp-resource", resource, "-o", "json"))
        assert again.returncode == 0, again.stderr
        out = json.loads(again.stdout)
        assert out["mcp"] == {"clientId": "mcp-client", "clientUuid": client.id, "resource": resource}
        assert [m["name"] for m in client.mappers] == ["mcp-resource-audience", "group"]


async def test_the_example_runs_as_its_readme_says(nursery):
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    async with open_keycloak() as kc, mcp_servers("math", "text") as (math, text):
        result = await prepared(kc, resource)
        config = (ROOT / "examples" / "mcp-auth" / "config.yaml").read_text()
        for fixed, actual in (("127.0.0.1:8080", f"127.0.0.1:{kc.port}"), ("127.0.0.1:3000", f"127.0.0.1:{port}"),
                              ("port: 3000", f"port: {port}"), ("http://127.0.0.1:8001/mcp", math.url),
                              ("http://127.0.0.1:8002/mcp", text.url)):
            assert fixed in config
            config = config.replace(fixed, actual)
        await start_gateway(nursery, config.replace("{", "{{").replace("}", "}}"))
        alice = await password_token(result.token_endpoint, "mcp-client", "alice", "pw-a")
        bob = await password_token(result.token_endpoint, "mcp-client", "bob", "pw-b")
        async with mcp_client(resource, {"authorization": f"Bearer {bob}"}) as session:
            assert [t.name for t in (await session.list_tools()).tools] == ["text_echo", "text_shout"]
        async with mcp_client(resource, {"authorization": f"Bearer {alice}"}) as session:
            assert len((await session.list_tools()).tools) == 4
            text.kill()
            assert (await session.call_tool("math_add", {"a": 2, "b": 3})).structured_content == {"result": 5}
            assert [t.name for t in (await session.list_tools()).tools] == ["math_add", "math_slow_count"]
            with pytest.raises(MCPError) as raised:
                await session.call_tool("text_echo", {"text": "x"})
            assert raised.value.error.message.startswith("MCP target 'text' failed: unreachable")
