"""``trioproxy idp setup`` against the dev IdP (fixtures/keycloak.py) answering as Keycloak 24–26."""

from __future__ import annotations

import base64
import json
import shlex
import subprocess

import httpx
import pytest
import trio
import yaml

from fixtures.keycloak import open_keycloak
from tests.conftest import free_port, run_cli
from trioproxy.cli.main import main
from trioproxy.idp.keycloak_setup import SetupFailed, SetupRequest, UserSpec, run_setup

USERS = (UserSpec.parse("alice:pw-alice:eng"), UserSpec.parse("bob:pw:sales:bob@corp.example"))


def request_for(url: str, **changes) -> SetupRequest:
    fields = {"idp_url": url, "realm": "demo", "admin_user": "admin", "admin_password": "admin",
              "client_id": "gateway", "users": USERS, **changes}
    return SetupRequest(**fields)


def claims_of(token: str) -> dict:
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


async def user_token(url: str, result, username: str, password: str) -> httpx.Response:
    async with httpx.AsyncClient() as client:
        return await client.post(result.token_endpoint, data={
            "grant_type": "password", "client_id": result.client_id, "client_secret": result.client_secret,
            "username": username, "password": password})


async def setup_with_progress(request: SetupRequest) -> tuple:
    lines: list[tuple[int, str]] = []
    result = await run_setup(request, progress=lambda step, text: lines.append((step, text)))
    return result, lines


def test_user_spec_parsing():
    assert UserSpec.parse("alice:pw:eng") == UserSpec("alice", "pw", "eng", "alice@example.com")
    assert UserSpec.parse("Bob:p:w:sales:bob@corp.example") == UserSpec("bob", "p:w", "sales", "bob@corp.example")
    for bad in ("bob", "bob:pw", "bob::eng", ":pw:eng", "bob:pw:"):
        with pytest.raises(ValueError, match="NAME:PASSWORD:GROUP"):
            UserSpec.parse(bad)


async def test_setup_prepares_a_realm_whose_user_tokens_carry_the_group_claim():
    async with open_keycloak() as kc:
        result, lines = await setup_with_progress(request_for(kc.url))
        assert [step for step, _ in lines] == list(range(1, 10))
        issuer = f"{kc.url}/realms/demo"
        assert result.to_json() == {
            "issuer": issuer, "jwksUri": f"{issuer}/protocol/openid-connect/certs",
            "jwksPath": "/realms/demo/protocol/openid-connect/certs", "clientId": "gateway",
            "clientUuid": result.client_uuid, "clientSecret": result.client_secret,
            "users": [{"username": "alice", "email": "alice@example.com", "group": "eng", "id": result.users[0]["id"]},
                      {"username": "bob", "email": "bob@corp.example", "group": "sales", "id": result.users[1]["id"]}],
        }
        realm = kc.realms["demo"]
        client = realm.clients[result.client_uuid]
        assert (client.service_accounts, client.direct_access, client.authorization, client.redirect_uris) == (
            True, True, True, ["*"])
        assert client.secret == result.client_secret
        assert {c["providerId"] + "/" + c["subType"] for c in realm.components}.isdisjoint(
            {"trusted-hosts/anonymous", "allowed-client-templates/anonymous"})
        for name, password, group in (("alice", "pw-alice", "eng"), ("bob", "pw", "sales")):
            r = await user_token(kc.url, result, name, password)
            assert r.status_code == 200, r.text
            claims = claims_of(r.json()["access_token"])
            assert (claims["iss"], claims["aud"], claims["azp"], claims["preferred_username"], claims["group"]) == (
                issuer, "account", "gateway", name, group)


async def test_second_run_on_the_same_realm_reuses_and_updates_everything():
    async with open_keycloak() as kc:
        first = await run_setup(request_for(kc.url))
        moved = (UserSpec.parse("alice:new-password:ops"), USERS[1])
        second, lines = await setup_with_progress(request_for(kc.url, users=moved))
        assert (second.client_uuid, second.client_secret) == (first.client_uuid, first.client_secret)
        assert [u["id"] for u in second.users] == [u["id"] for u in first.users]
        texts = dict(lines)
        assert "exists: reusing it" in texts[3]
        assert "existed, updated" in texts[5]
        assert texts[7] == "alice (ops) existed, updated, bob (sales) existed, updated"
        realm = kc.realms["demo"]
        assert len(realm.clients[first.client_uuid].mappers) == 1
        assert sum(c.client_id == "gateway" for c in realm.clients.values()) == 1
        assert (await user_token(kc.url, second, "alice", "pw-alice")).status_code == 400
        r = await user_token(kc.url, second, "alice", "new-password")
        assert claims_of(r.json()["access_token"])["group"] == "ops"


async def test_an_admin_token_expiring_mid_setup_is_renewed_and_the_call_repeated():
    now = [1_700_000_000.0]
    expired_once = []

    def expire_on_the_mapper_call(request):
        if request.path.endswith("/protocol-mappers/models") and request.method == "POST" and not expired_once:
            expired_once.append(True)
            now[0] += 61  # master admin tokens live 60 s

    async with open_keycloak(clock=lambda: now[0]) as kc:
        kc.on_request = expire_on_the_mapper_call
        result, lines = await setup_with_progress(request_for(kc.url))
        admin_tokens = [r for r in kc.requests if r.path == "/realms/master/protocol/openid-connect/token"]
        mapper_posts = [r for r in kc.requests if r.path.endswith("/protocol-mappers/models") and r.method == "POST"]
        assert len(admin_tokens) == 2 and len(mapper_posts) == 2
        assert (1, "admin token refused (expired?): getting a new one and repeating the call") in lines
        assert len(kc.realms["demo"].clients[result.client_uuid].mappers) == 1
        assert [step for step, _ in lines if step != 1] == list(range(2, 10))


async def test_an_admin_token_refused_twice_fails_the_step():
    async with open_keycloak(admin_token_lifespan=0) as kc:
        with pytest.raises(SetupFailed) as failed:
            await run_setup(request_for(kc.url))
    assert str(failed.value) == ("step 2/9 (initial access): create an initial access token: "
                                 "Keycloak answered 401 HTTP 401 Unauthorized")


@pytest.mark.parametrize(("version", "status"), [("24.0", 200), ("25.0", 200), ("26.6", 200), ("26.7", 201)])
async def test_initial_access_answered_200_or_201(version, status):
    async with open_keycloak(version=version) as kc:
        result, lines = await setup_with_progress(request_for(kc.url))
        assert dict(lines)[2] == f"initial access token ({status})"
        assert result.client_secret


@pytest.mark.parametrize(("version", "status"), [("25.0", 401), ("26.6", 400)])
async def test_wrong_admin_password_is_one_line_with_keycloaks_message(version, status):
    async with open_keycloak(version=version) as kc:
        with pytest.raises(SetupFailed) as failed:
            await run_setup(request_for(kc.url, admin_password="wrong"))
    assert str(failed.value) == (f"step 1/9 (admin token): admin token for 'admin' in realm 'master': "
                                 f"Keycloak answered {status} invalid_grant: Invalid user credentials")


async def test_unreachable_idp_and_missing_realm_name_their_step():
    port = free_port()
    with pytest.raises(SetupFailed) as unreachable:
        await run_setup(request_for(f"http://127.0.0.1:{port}"))
    assert str(unreachable.value) == f"step 1/9 (admin token): cannot reach http://127.0.0.1:{port}: connection refused"
    async with open_keycloak() as kc:
        with pytest.raises(SetupFailed) as failed:
            await run_setup(request_for(kc.url, realm="nope"))
    assert str(failed.value) == ("step 2/9 (initial access): create an initial access token: "
                                 "Keycloak answered 404 Realm not found.")


async def test_a_server_that_is_not_keycloak(backend):
    with pytest.raises(SetupFailed) as failed:
        await run_setup(request_for(f"http://127.0.0.1:{backend.port}"))
    assert str(failed.value) == (
        "step 1/9 (admin token): POST /realms/master/protocol/openid-connect/token answered 200 without an "
        f"access_token; is http://127.0.0.1:{backend.port} a Keycloak?")


async def test_admin_of_the_realm_itself_with_admin_realm():
    async with open_keycloak() as kc:
        kc.add_user("demo", "realm-admin", "ra-pw", admin=True)
        result = await run_setup(request_for(kc.url, admin_realm="demo", admin_user="realm-admin",
                                             admin_password="ra-pw"))
        assert result.client_secret
        tokens = [r for r in kc.requests if r.path.endswith("/protocol/openid-connect/token")]
        assert tokens[0].path == "/realms/demo/protocol/openid-connect/token"


async def test_user_profile_left_alone_when_unmanaged_attributes_are_enabled_and_email_conflicts_fail():
    async with open_keycloak() as kc:
        kc.realms["demo"].profile["unmanagedAttributePolicy"] = "ENABLED"
        kc.add_user("demo", "carol", "x", email="alice@example.com", first_name="C", last_name="D")
        with pytest.raises(SetupFailed) as failed:
            await run_setup(request_for(kc.url))
        assert str(failed.value) == ("step 7/9 (users): create user alice: "
                                     "Keycloak answered 409 User exists with same email")
        assert [a["name"] for a in kc.realms["demo"].profile["attributes"]] == [
            "username", "email", "firstName", "lastName"]


# --- the command as users run it -----------------------------------------------------------------


def setup_cli(url: str, *extra: str) -> subprocess.CompletedProcess:
    return run_cli("idp", "setup", "--idp-url", url, "--realm", "demo", "--admin-user", "admin",
                   "--admin-password", "admin", "--client-id", "gateway", *extra)


async def test_cli_json_output():
    async with open_keycloak() as kc:
        result = await trio.to_thread.run_sync(setup_cli, kc.url + "/", "--user", "alice:pw:eng", "-o", "json")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = json.loads(result.stdout)
    assert set(out) == {"issuer", "jwksUri", "jwksPath", "clientId", "clientUuid", "clientSecret", "users"}
    assert out["issuer"] == f"{kc.url}/realms/demo"
    assert [u["username"] for u in out["users"]] == ["alice"]


async def test_cli_text_output_has_progress_a_jwt_auth_policy_and_a_working_curl():
    async with open_keycloak() as kc:
        result = await trio.to_thread.run_sync(setup_cli, kc.url, "--user", "alice:pw:eng")
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        assert [line.split("]")[0] + "]" for line in lines[:9]] == [f"[{n}/9]" for n in range(1, 10)]
        policy = result.stdout.split("policies):\n\n", 1)[1].split("\n\n", 1)[0]
        issuer = f"{kc.url}/realms/demo"
        assert yaml.safe_load(policy) == {"jwtAuth": {
            "mode": "strict", "issuer": issuer, "audiences": ["account"],
            "jwks": {"url": f"{issuer}/protocol/openid-connect/certs"}}}
        curl = lines[-1]
        assert curl.startswith("curl ")
        fetched = await trio.to_thread.run_sync(lambda: subprocess.run(
            shlex.split(curl), check=False, capture_output=True, text=True, timeout=30))
        assert claims_of(json.loads(fetched.stdout)["access_token"])["group"] == "eng"


async def test_cli_failures_are_one_line_without_traceback():
    async with open_keycloak() as kc:
        wrong = await trio.to_thread.run_sync(lambda: run_cli(
            "idp", "setup", "--idp-url", kc.url, "--realm", "demo", "--admin-user", "admin",
            "--admin-password", "nope", "--client-id", "gateway"))
    assert wrong.returncode == 1
    assert wrong.stderr.splitlines() == [("trioproxy: error: step 1/9 (admin token): admin token for 'admin' in realm 'master': "
                                          "Keycloak answered 400 invalid_grant: Invalid user credentials")]


def cli_in_process(capsys, *args: str) -> tuple[int, str]:
    """The command's own parser and run, without a subprocess (argparse exits with SystemExit)."""
    try:
        status = main(list(args))
    except SystemExit as exit_:
        status = exit_.code
    return status, capsys.readouterr().err


SETUP = ("idp", "setup", "--idp-url", "http://127.0.0.1:8080", "--realm", "demo", "--admin-user", "admin",
         "--admin-password", "admin", "--client-id", "gateway")


def test_cli_unreachable_idp(capsys):
    args = list(SETUP)
    args[3] = f"http://127.0.0.1:{free_port()}"
    status, err = cli_in_process(capsys, *args)
    assert status == 1
    assert len(err.splitlines()) == 1 and err.startswith("trioproxy: error: step 1/9 (admin token): cannot reach ")


@pytest.mark.parametrize(("flags", "message"), [
    (["--user", "bob"], "argument --user: expected NAME:PASSWORD:GROUP[:EMAIL], got 'bob'"),
    (["--user", "a:p:g", "--user", "A:q:h"], "argument --user: user 'a' given twice"),
    (["-o", "yaml"], "argument -o/--output: invalid choice: 'yaml' (choose from 'text', 'json')"),
    (["--idp-url", "localhost:8080"],
     "argument --idp-url: expected http(s)://HOST[:PORT][/PATH], got 'localhost:8080'"),
])
def test_cli_bad_flags_are_one_line_naming_the_flag(capsys, flags, message):
    assert cli_in_process(capsys, *SETUP, *flags) == (2, f"trioproxy: error: idp setup: {message}\n")


def test_cli_missing_flags(capsys):
    assert cli_in_process(capsys, "idp", "setup", "--realm", "demo") == (
        2, ("trioproxy: error: idp setup: the following arguments are required: "
            "--idp-url, --admin-user, --admin-password, --client-id\n"))
