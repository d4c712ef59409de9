"""basicAuth (trioproxy/policies/basic_auth.py): htpasswd hashes, and the policy through a gateway on 127.0.0.1."""

from __future__ import annotations

import base64
import hashlib

import bcrypt
import pytest

from tests.conftest import LOOPBACK_SERVERS, free_port, start_routes
from tests.e2e.test_trace import watch
from trioproxy.config import ConfigError, parse_config
from trioproxy.policies import basic_auth
from trioproxy.policies.basic_auth import HtpasswdError, apr1, parse_htpasswd, verify_password

ALICE = bcrypt.hashpw(b"wonderland", bcrypt.gensalt(4)).decode().replace("$2b$", "$2y$", 1)  # as htpasswd -B
BOB = "{SHA}" + base64.b64encode(hashlib.sha1(b"builder").digest()).decode()  # htpasswd -s
CAROL = "$apr1$abcdefgh$" + "FBwExRW4dCc8aL.OvjpIE1"  # htpasswd -m / openssl passwd -apr1 of "password"


def basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


#: ``openssl passwd -apr1 -salt SALT PASSWORD`` (an independent implementation): passwords around
#: the 16-byte blocks of the algorithm, a salt openssl cuts at 8 bytes, non-ASCII bytes.
OPENSSL_APR1 = [
    (b"", b"s4lt", "$apr1$s4lt$yMHKmfqpUfreKF1UNrNuP1"),
    (b"", b"abcdefghi", "$apr1$abcdefgh$L.PT565ESX4Tp2bqNs7Ie."),
    (b"a", b"s4lt", "$apr1$s4lt$d.FMY5pb9xqYIFr25KZpM1"),
    (b"0123456789abcdef", b"s4lt", "$apr1$s4lt$mucAWy0YIzuNlAvZ43O9b/"),
    (b"0123456789abcdefg", b"s4lt", "$apr1$s4lt$xN5jMKDa.Pb5/94B0KubE."),
    (b"0123456789abcdefg", b"abcdefghi", "$apr1$abcdefgh$1EmOoQBtUQ/xoE6y2eLUr/"),
    (b"0123456789abcdef0123456789abcdefX", b"s4lt", "$apr1$s4lt$fbtgJVvZsXSiCPN3gOKOT1"),
    (b"p\xc3\xa4ss:word", b"s4lt", "$apr1$s4lt$36GQFfcUqXo7y9UJ63CJp."),
    (b"password", b"abcdefgh", CAROL),
]


@pytest.mark.parametrize(("password", "salt", "expected"), OPENSSL_APR1)
def test_apr1_is_apaches_md5_crypt(password, salt, expected):
    assert apr1(password, salt) == expected
    assert verify_password(expected, password) and not verify_password(expected, password + b"x")


@pytest.mark.parametrize(("hashed", "password", "ok"), [
    (ALICE, b"wonderland", True), (ALICE, b"wonderlanD", False),
    (ALICE.replace("$2y$", "$2b$"), b"wonderland", True),
    (BOB, b"builder", True), (BOB, b"builder ", False),
    (CAROL, b"password", True), (CAROL, b"passwore", False),
    ("$2y$04$broken", b"x", False),  # malformed bcrypt: no match, no exception
    ("plaintext", b"plaintext", False),  # not a hash trioproxy reads (the config refuses it)
])
def test_each_hash_verifies_its_password_only(hashed, password, ok):
    assert verify_password(hashed, password) is ok


@pytest.mark.parametrize(("text", "message"), [
    ("alice", "line 1: expected user:hash"),
    ("# users\n\nbob:plain", "line 3: user 'bob' has an unsupported hash (supported: bcrypt $2y$, $apr1$, {SHA}"),
    (f"bob:{BOB}\nbob:{BOB}", "line 2: user 'bob' is listed twice"),
    (f":{BOB}", "line 1: expected user:hash"),
    ("bob:", "line 1: expected user:hash"),
])
def test_htpasswd_problems_name_the_line(text, message):
    with pytest.raises(HtpasswdError, match=message.replace("$", r"\$").replace("{", r"\{").replace("(", r"\(")):
        parse_htpasswd(text)


def users_yaml() -> str:
    return "|\n" + "".join(f"                  {line}\n" for line in (f"alice:{ALICE}", f"bob:{BOB}", f"carol:{CAROL}"))


async def test_strict_mode_challenges_and_the_user_is_cel_basicauth(nursery, backend):
    gw = await start_routes(nursery, """
        - policies:
            basicAuth:
              mode: strict
              realm: staff
              htpasswd: {users}
            authorization: {{rules: ['basicAuth.username != "bob"']}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, users=users_yaml())
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        alice = await client.get("/", headers=basic("alice", "wonderland"))
        events = await reader.events()
        carol = await client.get("/", headers=basic("carol", "password"))
        bob = await client.get("/", headers=basic("bob", "builder"))
        none = await client.get("/")
        wrong = await client.get("/", headers=basic("alice", "nope"))
        stranger = await client.get("/", headers=basic("mallory", "x"))
        garbled = await client.get("/", headers={"authorization": "Basic !!!"})
        trailing = await client.get("/", headers={"authorization": basic("alice", "wonderland")["authorization"] + "!"})
    assert (alice.status_code, carol.status_code, bob.status_code) == (200, 200, 403)
    assert "authorization" not in dict(alice.json()["headers"])  # removed once verified
    assert (none.status_code, none.text) == (401, "basic authentication failure: no basic authentication credentials found")
    assert none.headers["www-authenticate"] == 'Basic realm="staff"'
    for answer in (wrong, stranger, garbled, trailing):  # base64 is read strictly
        assert (answer.status_code, answer.text) == (401, "basic authentication failure: invalid credentials")
        assert answer.headers["www-authenticate"] == 'Basic realm="staff"'
    decision = next(e for e in events if e["message"].get("kind") == "basicAuth")
    assert (decision["message"]["type"], decision["severity"], decision["message"]["result"],
            decision["message"]["username"]) == ("policy", "success", "authenticated", "alice")
    snapshot = next(e["message"] for e in events if e["message"].get("stage") == "basicAuth")
    assert snapshot["requestState"]["basicAuth"] == {"username": "alice"}
    assert "wonderland" not in str(events) and ALICE not in str(events)


async def test_optional_mode_lets_requests_without_credentials_pass(nursery, backend):
    gw = await start_routes(nursery, """
        - policies:
            basicAuth: {{htpasswd: "bob:{bob}"}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, bob=BOB)
    async with gw.client() as client:
        assert (await client.get("/")).status_code == 200
        wrong = await client.get("/", headers=basic("bob", "x"))
    assert (wrong.status_code, wrong.headers["www-authenticate"]) == (401, 'Basic realm="Restricted"')


async def test_a_verified_bcrypt_password_is_checked_once_per_cache_period(nursery, backend, mock_clock, monkeypatch):
    import threading

    calls: list[str] = []
    threads: set[bool] = set()
    real = basic_auth.verify_password

    def counting(hashed: str, password: bytes) -> bool:
        calls.append(hashed[:4])
        threads.add(threading.current_thread() is threading.main_thread())
        return real(hashed, password)

    monkeypatch.setattr(basic_auth, "verify_password", counting)
    gw = await start_routes(nursery, """
        - policies:
            basicAuth: {{mode: strict, htpasswd: "alice:{alice}"}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, alice=ALICE)
    async with gw.client() as client:
        statuses = [(await client.get("/", headers=basic("alice", "wonderland"))).status_code for _ in range(3)]
        assert (await client.get("/", headers=basic("alice", "wrong"))).status_code == 401  # never cached
        assert len(calls) == 2
    mock_clock.jump(basic_auth.CACHE_SECONDS + 1)
    async with gw.client() as client:  # a new connection: the old one idled past http1IdleTimeout
        statuses.append((await client.get("/", headers=basic("alice", "wonderland"))).status_code)
    assert statuses == [200] * 4 and calls == ["$2y$"] * 3  # checked again after the period
    assert threads == {False}  # bcrypt ran in worker threads, never on the event loop


async def test_a_password_may_contain_colons_and_the_cache_evicts_the_oldest(nursery, backend, monkeypatch):
    calls: list[str] = []
    real = basic_auth.verify_password

    def counting(hashed: str, password: bytes) -> bool:
        calls.append(password.decode())
        return real(hashed, password)

    monkeypatch.setattr(basic_auth, "verify_password", counting)
    monkeypatch.setattr(basic_auth, "CACHE_SIZE", 1)
    dave = "{SHA}" + base64.b64encode(hashlib.sha1(b"a:b:c").digest()).decode()
    gw = await start_routes(nursery, """
        - policies:
            basicAuth: {{mode: strict, htpasswd: "alice:{alice}\\ndave:{dave}"}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, alice=ALICE, dave=dave)
    async with gw.client() as client:
        statuses = [(await client.get("/", headers=basic(user, password))).status_code for user, password in (
            ("alice", "wonderland"), ("alice", "wonderland"),  # the second from the cache
            ("dave", "a:b:c"),  # the user ends at the first colon (RFC 7617); the oldest entry leaves
            ("alice", "wonderland"))]  # checked again
    assert statuses == [200] * 4
    assert calls == ["wonderland", "a:b:c", "wonderland"]


def test_htpasswd_from_a_file_and_its_problems_name_the_place(tmp_path):
    good = tmp_path / "users"
    good.write_text(f"# staff\nbob:{BOB}\n")
    bad = tmp_path / "bad"
    bad.write_text("bob:secret\n")

    def load(htpasswd: str) -> list[str]:
        text = f"binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {{basicAuth: {{htpasswd: {htpasswd}}}}}\n"
        try:
            config = parse_config(text, env=LOOPBACK_SERVERS)
        except ConfigError as error:
            return list(error.problems)
        return [str(config.binds[0].listeners[0].routes[0].policies.basic_auth.users[0][0])]

    assert load(f"{{file: '{good}'}}") == ["bob"]
    (problem,) = load(f"{{file: '{bad}'}}")
    assert "policies.basicAuth.htpasswd.file: line 1: user 'bob' has an unsupported hash" in problem
    (problem,) = load(f"{{file: '{tmp_path / 'none'}'}}")
    assert "policies.basicAuth.htpasswd.file: cannot read" in problem


def test_config_dump_hides_the_users_and_their_hashes():
    import json

    from trioproxy.config.dump import config_dump

    text = ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies:\n"
            f"        basicAuth: {{realm: staff, htpasswd: 'bob:{BOB}'}}\n")
    dumped = json.dumps(config_dump(parse_config(text, env=LOOPBACK_SERVERS)))
    assert '"users": "<redacted>"' in dumped and '"realm": "staff"' in dumped
    assert BOB[5:] not in dumped and "bob" not in dumped
