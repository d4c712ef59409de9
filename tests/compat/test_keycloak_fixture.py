"""The dev IdP against an independent client: python-keycloak's admin and OpenID calls (run in a
thread, it is synchronous) must work against it as they do against Keycloak."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import sys

import httpx
import pytest
import trio
from keycloak import KeycloakAdmin, KeycloakOpenID, KeycloakOpenIDConnection
from keycloak.exceptions import KeycloakError, KeycloakPostError

from fixtures.keycloak import REGISTRATION_POLICY_TYPE, open_keycloak
from tests.conftest import ROOT

GROUP_MAPPER = {
    "name": "group", "protocol": "openid-connect", "protocolMapper": "oidc-usermodel-attribute-mapper",
    "config": {"claim.name": "group", "jsonType.label": "String", "user.attribute": "group",
               "id.token.claim": "true", "access.token.claim": "true", "userinfo.token.claim": "true"},
}


def admin_for(url: str, realm: str = "demo") -> KeycloakAdmin:
    return KeycloakAdmin(connection=KeycloakOpenIDConnection(
        server_url=url, username="admin", password="admin", realm_name=realm, user_realm_name="master",
        client_id="admin-cli", verify=False))


def claims_of(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def python_keycloak_walkthrough(url: str) -> dict:
    """The setup sequence through python-keycloak; returns what a test checks."""
    admin = admin_for(url)
    initial = admin.create_initial_access_token(count=1, expiration=60)
    anonymous = KeycloakOpenID(server_url=url, realm_name="demo", client_id="unused")
    registered = anonymous.register_client(initial["token"], {"clientId": "gateway"})
    uuid = admin.get_client_id("gateway")
    admin.update_client(uuid, {"serviceAccountsEnabled": True, "directAccessGrantsEnabled": True,
                               "authorizationServicesEnabled": True, "redirectUris": ["*"]})
    admin.add_mapper_to_client(uuid, GROUP_MAPPER)
    with pytest.raises(KeycloakPostError) as duplicate_mapper:
        admin.add_mapper_to_client(uuid, GROUP_MAPPER)
    dropped_id = admin.create_user({"username": "early", "attributes": {"group": ["eng"]}})
    profile = admin.get_realm_users_profile()
    profile["attributes"].append({"name": "group", "displayName": "group",
                                  "permissions": {"view": ["admin"], "edit": ["admin"]}, "multivalued": False})
    admin.update_realm_users_profile(profile)
    user_id = admin.create_user({
        "username": "alice", "email": "alice@example.com", "firstName": "Alice", "lastName": "User",
        "enabled": True, "attributes": {"group": ["eng"]},
        "credentials": [{"type": "password", "value": "pw-alice", "temporary": False}]})
    with pytest.raises(KeycloakPostError) as duplicate_user:
        admin.create_user({"username": "alice"})
    admin.create_user({"username": "bare", "enabled": True,
                       "credentials": [{"type": "password", "value": "pw-bare", "temporary": False}]})
    policies = admin.get_components({"type": REGISTRATION_POLICY_TYPE})
    for component in policies:
        if component["providerId"] == "trusted-hosts" or (
                component["providerId"] == "allowed-client-templates" and component["subType"] == "anonymous"):
            admin.delete_component(component["id"])
    left = admin.get_components({"type": REGISTRATION_POLICY_TYPE})

    oidc = KeycloakOpenID(server_url=url, realm_name="demo", client_id="gateway",
                          client_secret_key=registered["secret"])
    tokens = oidc.token("alice", "pw-alice", scope="openid")
    decoded = oidc.decode_token(tokens["access_token"])  # verifies against the JWKS
    refreshed = oidc.refresh_token(tokens["refresh_token"])
    with pytest.raises(KeycloakError) as wrong_password:
        oidc.token("alice", "nope")
    with pytest.raises(KeycloakError) as not_set_up:
        oidc.token("bare", "pw-bare")
    service = oidc.token(grant_type="client_credentials")
    return {
        "registered": registered, "uuid": uuid, "client": admin.get_client(uuid),
        "mappers": admin.get_mappers_from_client(uuid), "duplicate_mapper": duplicate_mapper.value,
        "dropped": admin.get_user(dropped_id), "user": admin.get_user(user_id), "user_id": user_id,
        "duplicate_user": duplicate_user.value, "policies": policies, "left": left,
        "well_known": oidc.well_known(), "certs": oidc.certs(), "tokens": tokens, "decoded": decoded,
        "refreshed": refreshed, "wrong_password": wrong_password.value, "not_set_up": not_set_up.value,
        "service": service, "userinfo": oidc.userinfo(tokens["access_token"]),
    }


async def test_python_keycloak_admin_and_openid_calls_work_against_the_fixture():
    async with open_keycloak() as kc:
        seen = await trio.to_thread.run_sync(python_keycloak_walkthrough, kc.url)
    issuer = f"{kc.url}/realms/demo"
    assert seen["registered"]["clientId"] == "gateway" and seen["registered"]["secret"]
    assert seen["registered"]["id"] == seen["uuid"]
    client = seen["client"]
    assert (client["serviceAccountsEnabled"], client["directAccessGrantsEnabled"],
            client["authorizationServicesEnabled"], client["redirectUris"]) == (True, True, True, ["*"])
    assert [m["name"] for m in seen["mappers"]] == ["group"]
    assert seen["duplicate_mapper"].response_code == 409
    # Keycloak 24+: an attribute the user profile does not declare is silently dropped
    assert "attributes" not in seen["dropped"]
    assert seen["user"]["attributes"] == {"group": ["eng"]} and seen["user"]["enabled"] is True
    assert seen["duplicate_user"].response_code == 409
    assert json.loads(seen["duplicate_user"].error_message) == {"errorMessage": "User exists with same username"}
    assert {c["providerId"] for c in seen["policies"]} >= {"trusted-hosts", "allowed-client-templates"}
    assert not any(c["providerId"] == "trusted-hosts" for c in seen["left"])
    assert [c["subType"] for c in seen["left"] if c["providerId"] == "allowed-client-templates"] == ["authenticated"]
    assert seen["well_known"]["issuer"] == issuer
    assert seen["well_known"]["jwks_uri"] == f"{issuer}/protocol/openid-connect/certs"
    keys = {(k["alg"], k["use"]) for k in seen["certs"]["keys"]}
    assert keys == {("RS256", "sig"), ("RSA-OAEP", "enc")}
    decoded = seen["decoded"]
    assert (decoded["iss"], decoded["aud"], decoded["azp"], decoded["typ"]) == (issuer, "account", "gateway", "Bearer")
    assert (decoded["preferred_username"], decoded["group"], decoded["sub"]) == ("alice", "eng", seen["user_id"])
    assert claims_of(seen["tokens"]["id_token"])["group"] == "eng"
    assert claims_of(seen["refreshed"]["access_token"])["group"] == "eng"
    assert seen["tokens"]["token_type"] == "Bearer" and seen["tokens"]["expires_in"] == 300
    assert seen["wrong_password"].response_code == 400  # Keycloak 26.6+
    assert json.loads(seen["wrong_password"].error_message) == {
        "error": "invalid_grant", "error_description": "Invalid user credentials"}
    assert json.loads(seen["not_set_up"].error_message)["error_description"] == "Account is not fully set up"
    assert claims_of(seen["service"]["access_token"])["preferred_username"] == "service-account-gateway"
    assert "refresh_token" not in seen["service"]
    assert seen["userinfo"]["group"] == "eng"


@pytest.mark.parametrize(("version", "initial_status", "invalid_grant_status"),
                         [("24.0", 200, 401), ("25.0", 200, 401), ("26.6", 200, 400), ("26.7", 201, 400)])
async def test_version_switches_initial_access_and_invalid_grant_statuses(version, initial_status,
                                                                          invalid_grant_status):
    async with open_keycloak(version=version) as kc, httpx.AsyncClient(base_url=kc.url) as client:
        token = (await client.post("/realms/master/protocol/openid-connect/token", data={
            "client_id": "admin-cli", "grant_type": "password", "username": "admin", "password": "admin"})).json()
        r = await client.post("/admin/realms/demo/clients-initial-access", json={"count": 1, "expiration": 60},
                              headers={"authorization": f"Bearer {token['access_token']}"})
        assert r.status_code == initial_status
        assert r.json()["token"]
        assert ("location" in r.headers) == (initial_status == 201)
        wrong = await client.post("/realms/master/protocol/openid-connect/token", data={
            "client_id": "admin-cli", "grant_type": "password", "username": "admin", "password": "x"})
        assert wrong.status_code == invalid_grant_status
        assert wrong.json() == {"error": "invalid_grant", "error_description": "Invalid user credentials"}


async def test_admin_token_expiry_follows_the_clock_and_admin_errors_are_keycloaks():
    now = [1_000_000.0]
    async with open_keycloak(clock=lambda: now[0], admin_token_lifespan=60) as kc, \
            httpx.AsyncClient(base_url=kc.url) as client:
        token = (await client.post("/realms/master/protocol/openid-connect/token", data={
            "client_id": "admin-cli", "grant_type": "password", "username": "admin", "password": "admin"})).json()
        assert token["expires_in"] == 60
        auth = {"authorization": f"Bearer {token['access_token']}"}
        assert (await client.get("/admin/realms/demo/users", headers=auth)).status_code == 200
        now[0] += 61
        expired = await client.get("/admin/realms/demo/users", headers=auth)
        assert (expired.status_code, expired.json()) == (401, {"error": "HTTP 401 Unauthorized"})
        assert (await client.get("/admin/realms/demo/users")).status_code == 401
        missing = await client.get("/admin/realms/nope/users", headers={
            "authorization": "Bearer " + (await client.post("/realms/master/protocol/openid-connect/token", data={
                "client_id": "admin-cli", "grant_type": "password", "username": "admin",
                "password": "admin"})).json()["access_token"]})
        assert (missing.status_code, missing.json()) == (404, {"error": "Realm not found."})
        unknown_realm = await client.get("/realms/nope/.well-known/openid-configuration")
        assert (unknown_realm.status_code, unknown_realm.json()) == (404, {"error": "Realm does not exist"})
        no_grant = await client.post("/realms/demo/protocol/openid-connect/token", data={"client_id": "admin-cli"})
        assert no_grant.json() == {"error": "invalid_request", "error_description": "Missing form parameter: grant_type"}


async def test_registration_twice_is_client_identifier_in_use():
    async with open_keycloak() as kc, httpx.AsyncClient(base_url=kc.url) as client:
        token = (await client.post("/realms/master/protocol/openid-connect/token", data={
            "client_id": "admin-cli", "grant_type": "password", "username": "admin", "password": "admin"})).json()
        auth = {"authorization": f"Bearer {token['access_token']}"}
        answers = []
        for _ in range(2):
            initial = (await client.post("/admin/realms/demo/clients-initial-access",
                                         json={"count": 1, "expiration": 60}, headers=auth)).json()
            answers.append(await client.post("/realms/demo/clients-registrations/default", json={"clientId": "gw"},
                                             headers={"authorization": f"bearer {initial['token']}"}))
        assert answers[0].status_code == 201 and answers[0].json()["secret"]
        assert (answers[1].status_code, answers[1].json()) == (
            400, {"error": "invalid_client_metadata", "error_description": "Client Identifier in use"})
        bad = await client.post("/realms/demo/clients-registrations/default", json={"clientId": "x"},
                                headers={"authorization": "bearer not-a-token"})
        assert bad.status_code == 401


def test_standalone_prints_its_address_and_refuses_a_busy_port_in_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run([sys.executable, "-m", "fixtures.keycloak", "--port", str(port)], check=False, cwd=ROOT,
                                capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"keycloak: error: cannot listen on 127.0.0.1:{port}: Address already in use"]
    bad = subprocess.run([sys.executable, "-m", "fixtures.keycloak", "--version", "latest"], check=False, cwd=ROOT,
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--version" in bad.stderr
    with subprocess.Popen([sys.executable, "-m", "fixtures.keycloak", "--port", "0"], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True) as server:
        try:
            line = server.stdout.readline()
            assert line.startswith("keycloak listening on http://127.0.0.1:")
            url = line.split()[-1]
            assert httpx.get(f"{url}/realms/demo/.well-known/openid-configuration").json()["issuer"] == \
                f"{url}/realms/demo"
        finally:
            server.terminate()
