"""basicAuth is no CPU lever and no user oracle (issue 27): ~25 wrong passwords a second kept both
cores busy and queued a real user's first login 2.6 s behind 64 attackers; an unknown user
answered in 1.2 ms and a known one with a wrong password in 93 ms. Hash checks are counted here
(not timed): each unknown user costs one check against a dummy hash of the users' bcrypt cost, and
past ``BCRYPT_THREADS + BCRYPT_QUEUE`` checks in flight a request gets 503 at once."""

from __future__ import annotations

import base64
import threading

import bcrypt
import trio

from tests.conftest import free_port, start_routes
from trioproxy.policies import basic_auth
from trioproxy.proxy import stages

ALICE = bcrypt.hashpw(b"wonderland", bcrypt.gensalt(5)).decode().replace("$2b$", "$2y$", 1)
ROUTES = """
- policies:
    basicAuth: {{mode: strict, htpasswd: "alice:{alice}"}}
  backends: [{{host: "127.0.0.1:{backend}"}}]
"""


def basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


class CountingChecks:
    """Stands in for ``verify_password``: records each hash checked, holds bcrypt checks until released."""

    def __init__(self) -> None:
        self.hashes: list[str] = []
        self.release = threading.Event()
        self._real = basic_auth.verify_password

    def __call__(self, hashed: str, password: bytes) -> bool:
        self.hashes.append(hashed)
        if hashed.startswith("$2"):
            self.release.wait(30)
        return self._real(hashed, password)


async def test_an_unknown_user_costs_one_check_of_the_users_bcrypt_cost(nursery, backend, monkeypatch):
    checks = CountingChecks()
    checks.release.set()
    monkeypatch.setattr(basic_auth, "verify_password", checks)
    gw = await start_routes(nursery, ROUTES, port=free_port(), alice=ALICE, backend=backend.port)
    async with gw.client() as client:
        unknown = await client.get("/", headers=basic("mallory", "x"))
        wrong = await client.get("/", headers=basic("alice", "x"))
        right = await client.get("/", headers=basic("alice", "wonderland"))
    assert (unknown.status_code, wrong.status_code, right.status_code) == (401, 401, 200)
    assert unknown.text == wrong.text  # the same answer
    assert len(checks.hashes) == 3  # one each: the unknown user's too
    assert [h[:7] for h in checks.hashes] == ["$2y$05$"] * 3  # the same cost: the same time
    assert checks.hashes[0] != ALICE


async def test_past_the_bound_on_waiting_checks_a_request_gets_503_at_once(nursery, backend, monkeypatch):
    checks = CountingChecks()
    monkeypatch.setattr(basic_auth, "verify_password", checks)
    built: list[stages.BasicAuthStage] = []
    init = stages.BasicAuthStage.__init__

    def recording_init(self, spec):
        init(self, spec)
        built.append(self)

    monkeypatch.setattr(stages.BasicAuthStage, "__init__", recording_init)
    gw = await start_routes(nursery, ROUTES, port=free_port(), alice=ALICE, backend=backend.port)
    bound = basic_auth.BCRYPT_THREADS + basic_auth.BCRYPT_QUEUE
    statuses: list[int] = []
    try:
        async with gw.client() as client, trio.open_nursery() as attackers:
            async def attack(i: int) -> None:
                statuses.append((await client.get("/", headers=basic("alice" if i % 2 else f"u{i}", "x"))).status_code)

            for i in range(bound):
                attackers.start_soon(attack, i)
            with trio.fail_after(10):  # every attacker's check running (two) or waiting for a thread
                while built[-1].checks < bound or len(checks.hashes) < basic_auth.BCRYPT_THREADS:
                    await trio.sleep(0.01)
            with trio.fail_after(5):  # not queued: answered while every check is still held
                extra = [await client.get("/", headers=basic(who, "x")) for who in ("alice", "mallory")]
            assert [r.status_code for r in extra] == [503, 503]
            assert extra[0].text == "basic authentication busy" and extra[0].headers["retry-after"] == "1"
            assert statuses == []
            checks.release.set()
        assert statuses == [401] * bound
        async with gw.client() as client:
            assert (await client.get("/", headers=basic("alice", "wonderland"))).status_code == 200
    finally:
        checks.release.set()
