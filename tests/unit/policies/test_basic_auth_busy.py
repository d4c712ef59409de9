"""basicAuth's CPU guards in-process (issue 35): the busy limit on bcrypt checks and the dummy hash an
unknown user is checked against. ``test_basic_auth_cpu.py`` guards them end to end, which mutation
testing does not see; here the bcrypt thread is a gate the test opens, so the counts are exact."""

from __future__ import annotations

import bcrypt
import pytest
import trio
import trio.testing

from tests.e2e.test_basic_auth import ALICE, BOB, CAROL
from tests.unit.policies.test_basic_auth_rules import exchange
from tests.unit.proxy.test_header_stages import RecordingTracer
from trioproxy.errors import BasicAuthenticationBusy, BasicAuthenticationFailed
from trioproxy.policies import basic_auth
from trioproxy.policies.basic_auth import BasicAuthSpec
from trioproxy.proxy.stages import BasicAuthStage

LIMIT = basic_auth.BCRYPT_THREADS + basic_auth.BCRYPT_QUEUE


class Gate:
    def __init__(self) -> None:
        self.event = trio.Event()

    def close(self) -> None:
        self.event = trio.Event()

    def open(self) -> None:
        self.event.set()


@pytest.fixture
def gate(monkeypatch):
    """bcrypt checks wait for ``gate.open()`` (under the stage's limiter, as the real thread does)."""
    gate = Gate()

    async def gated(fn, *args, limiter=None, **kw):
        async with limiter:
            await gate.event.wait()
            return fn(*args)

    monkeypatch.setattr(trio.to_thread, "run_sync", gated)
    return gate


async def one_round(stage, credentials, outcomes, gate):
    """LIMIT checks admitted and waiting, the next refused at once with ``retry-after: 1``."""
    async def attempt():
        try:
            await stage.request(exchange(RecordingTracer(), credentials))
        except BasicAuthenticationFailed:
            outcomes.append(401)

    gate.close()
    with trio.fail_after(10):  # a mutant that loses count must fail, not hang
        async with trio.open_nursery() as nursery:
            for _ in range(LIMIT):
                nursery.start_soon(attempt)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(BasicAuthenticationBusy) as busy:
                await stage.request(exchange(RecordingTracer(), credentials))
            assert busy.value.status == 503 and busy.value.headers == [(b"retry-after", b"1")]
            assert busy.value.why == {"policy": "basicAuth", "check": "busy", "username": credentials.split(":")[0],
                                      "detail": f"{LIMIT} bcrypt password checks running or queued (at most {LIMIT})"}
            gate.open()


async def test_exactly_threads_plus_queue_checks_wait_then_503_and_the_count_comes_back(gate):
    assert (basic_auth.BCRYPT_THREADS, basic_auth.BCRYPT_QUEUE) == (2, 8)
    stage = BasicAuthStage(BasicAuthSpec((("alice", ALICE),)))
    outcomes: list[int] = []
    await one_round(stage, "alice:wrong", outcomes, gate)
    assert outcomes == [401] * LIMIT
    # every finished check gave its place back: a second round admits exactly as many again
    await one_round(stage, "alice:wrong", outcomes, gate)
    assert outcomes == [401] * (2 * LIMIT)
    assert stage.checks == 0
    x = exchange(RecordingTracer(), "alice:wonderland")
    await stage.request(x)
    assert x.basic_auth == {"username": "alice"}


async def test_an_unknown_user_counts_against_the_busy_limit_as_a_known_one_does(gate):
    stage = BasicAuthStage(BasicAuthSpec((("alice", ALICE),)))
    outcomes: list[int] = []
    await one_round(stage, "mallory:guess", outcomes, gate)  # a bcrypt check each, on the dummy hash
    assert outcomes == [401] * LIMIT


def test_the_dummy_hash_is_a_well_formed_hash_of_the_first_users_kind_and_cost():
    cost12 = "$2y$12$" + "a" * 53
    assert basic_auth.dummy_hash((("a", cost12), ("b", ALICE))) == "$2y$12$" + "." * 53
    assert basic_auth.dummy_hash((("a", ALICE),)) == ALICE[:7] + "." * 53
    assert basic_auth.dummy_hash((("c", CAROL),)) == "$apr1$........$" + "." * 22
    assert basic_auth.dummy_hash((("b", BOB),)) == "{SHA}" + "." * 28
    assert basic_auth.dummy_hash(()) == "{SHA}" + "." * 28
    dummy = basic_auth.dummy_hash((("a", ALICE),)).encode()
    assert len(dummy) == len(ALICE) == 60
    assert bcrypt.checkpw(b"wonderland", dummy) is False  # bcrypt computes it (a malformed one raises)


async def test_an_unknown_user_is_checked_against_the_dummy_of_the_users_kind(monkeypatch):
    checked = []
    real = basic_auth.verify_password
    monkeypatch.setattr(basic_auth, "verify_password", lambda h, p: checked.append(h) or real(h, p))
    for users, dummy in (((("c", CAROL),), "$apr1$........$" + "." * 22),
                         ((("b", BOB),), "{SHA}" + "." * 28),
                         ((("a", ALICE),), ALICE[:7] + "." * 53)):
        checked.clear()
        stage = BasicAuthStage(BasicAuthSpec(users))
        with pytest.raises(BasicAuthenticationFailed):
            await stage.request(exchange(RecordingTracer(), "mallory:password"))
        assert checked == [dummy]
