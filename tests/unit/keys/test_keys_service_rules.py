"""The rules of ``keys/service.py`` one by one (issue 35), in-process over a real SQLite store under
``tmp_path``: each control-plane field and refusal, what the cache holds after each change, the
request log's filters and the settlement's fields."""

from __future__ import annotations

import pytest

from trioproxy.config.model import KeysSettings
from trioproxy.errors import BudgetExceeded, KeyRefused, KeyStoreUnavailable
from trioproxy.keys import FieldError, KeyService, NotFound, StoreError, limits_from_json
from trioproxy.keys.records import format_time, key_digest

START = 1_795_046_400.0 + 3600  # 2026-11-19T01:00:00Z


class Clock:
    def __init__(self, now: float = START) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def svc(tmp_path, clock):  # type: ignore[no-untyped-def]
    service = KeyService.open(str(tmp_path / "keys.db"), KeysSettings(request_log_enabled=True), clock)
    yield service
    await service.aclose()


def other(tmp_path, clock) -> KeyService:  # type: ignore[no-untyped-def]
    """A second replica over the same store (its cache filled only from the store)."""
    return KeyService.open(str(tmp_path / "keys.db"), KeysSettings(), clock)


async def test_create_team_fields_and_cache(svc, clock):
    team = await svc.create_team(name="research", metadata={"cc": "42"}, limits={"requests": {"day": 5}})
    assert team.id.startswith("team_") and (team.name, dict(team.metadata), team.created_at) == ("research", {"cc": "42"}, START)
    assert team.limits == limits_from_json({"requests": {"day": 5}})
    assert svc.cached_teams() == [team] and await svc.get_team(team.id) == team
    plain = await svc.create_team(name="plain")
    assert dict(plain.metadata) == {} and plain.limits == ()
    with pytest.raises(FieldError, match="^name: required field is missing$"):
        await svc.create_team(metadata={})
    with pytest.raises(FieldError, match=r"^team: unknown field \(expected limits, metadata, name\)$"):
        await svc.create_team(name="x", team="t")


async def test_update_team_changes_the_store_and_the_cache(svc, clock):
    team = await svc.create_team(name="a")
    updated = await svc.update_team(team.id, name="b", limits=[*limits_from_json({"tokens": {"minute": 9}})])
    assert (updated.name, updated.limits) == ("b", limits_from_json({"tokens": {"minute": 9}}))
    assert type(updated.limits) is tuple
    assert svc.cached_teams() == [updated] and await svc.get_team(team.id) == updated
    renamed = await svc.update_team(team.id, metadata={"x": "y"})
    assert renamed.limits == updated.limits and dict(renamed.metadata) == {"x": "y"}  # the rest kept
    with pytest.raises(NotFound, match="^no team 'team_nope'$"):
        await svc.update_team("team_nope", name="c")


async def test_delete_team_only_without_live_keys_and_the_cache_forgets_it(svc, clock):
    team, spare = await svc.create_team(name="a"), await svc.create_team(name="spare")
    key, _ = await svc.create_key(name="k", team=team.id)
    await svc.create_key(name="elsewhere", team=spare.id)
    with pytest.raises(FieldError, match=f"^team {team.id} still has 1 key\\(s\\); move or revoke them first$"):
        await svc.delete_team(team.id)
    await svc.revoke_key(key.id)
    assert await svc.delete_team(team.id) is True
    assert svc.cached_teams() == [spare] and await svc.get_team(team.id) is None
    assert await svc.delete_team(team.id) is False  # no such team (any more)


async def test_update_key_checks_the_team_and_keeps_tuples(svc, tmp_path, clock):
    team = await svc.create_team(name="t")
    key, secret = await svc.create_key(name="k")
    with pytest.raises(FieldError, match="^team: no team 'team_nope'$"):
        await svc.update_key(key.id, team="team_nope")
    moved = await svc.update_key(key.id, team=team.id, models=["a", "b/*"],
                                 limits=[*limits_from_json({"requests": {"minute": 2}})])
    assert (moved.team, moved.models, moved.limits) == (team.id, ("a", "b/*"), limits_from_json({"requests": {"minute": 2}}))
    assert type(moved.models) is tuple and type(moved.limits) is tuple
    assert await svc.get_key(key.id) == moved
    assert (await svc.authenticate(secret)).key == moved  # the cache holds the change at once
    renamed = await svc.update_key(key.id, name="k2")
    assert (renamed.name, renamed.team, renamed.models, renamed.limits) == ("k2", team.id, moved.models, moved.limits)
    with pytest.raises(NotFound, match="^no key 'key_nope'$"):
        await svc.update_key("key_nope", name="x")
    assert (await svc.update_key(key.id, team=None)).team is None  # out of its team


async def test_rotate_key_grace_and_refusals(svc, clock):
    key, old = await svc.create_key(name="k")
    with pytest.raises(FieldError, match=r"^grace: expected seconds >= 0, got -1$"):
        await svc.rotate_key(key.id, -1)
    rotated, new = await svc.rotate_key(key.id, 0)  # no grace: the old secret is refused at once
    assert new != old and rotated.prefix == new[:10] and rotated.digest == key_digest(new)
    assert (rotated.previous_digest, rotated.previous_valid_until, rotated.rotated_at) == (key.digest, START, START)
    with pytest.raises(KeyRefused, match="key rotated"):
        await svc.authenticate(old)
    again, newer = await svc.rotate_key(key.id, 0.5)
    assert again.previous_valid_until == START + 0.5 and again.previous_digest == key_digest(new)
    assert (await svc.authenticate(new)).key == again  # within its grace
    await svc.revoke_key(key.id)
    with pytest.raises(FieldError, match=f"^key {key.id} is revoked$"):
        await svc.rotate_key(key.id, 1)
    with pytest.raises(NotFound):
        await svc.rotate_key("key_nope", 1)


async def test_revoking_twice_keeps_the_first_time(svc, clock):
    key, _ = await svc.create_key(name="k")
    first = await svc.revoke_key(key.id)
    clock.now += 10
    assert (await svc.revoke_key(key.id)).revoked_at == first.revoked_at == START


async def test_cached_keys_are_the_active_ones_each_once(svc, clock):
    a, _ = await svc.create_key(name="a")
    b, _ = await svc.create_key(name="b", expires_at="2026-11-19T02:00:00Z")
    c, _ = await svc.create_key(name="c")
    rotated, _ = await svc.rotate_key(a.id, 60)  # under two digests
    await svc.revoke_key(c.id)
    assert sorted(k.name for k in svc.cached_keys()) == ["a", "b"]
    assert [k for k in svc.cached_keys() if k.id == a.id] == [rotated]
    clock.now += 7200  # b expired
    assert [k.name for k in svc.cached_keys()] == ["a"]


async def test_the_request_log_filters_each_field_and_limits(svc, clock):
    team = await svc.create_team(name="t")
    k1, s1 = await svc.create_key(name="k1", team=team.id)
    k2, s2 = await svc.create_key(name="k2")
    p1, p2 = await svc.authenticate(s1), await svc.authenticate(s2)
    for i in range(3):
        clock.now += 1
        svc.settle(await svc.reserve(p1, tokens=1, cost=None), tokens=1, cost=0.0, model="m1", provider="p",
                   status=200)
        svc.settle(await svc.reserve(p2, tokens=1, cost=None), tokens=1, cost=0.0, model="m2", provider="p",
                   status=500 + i)
    await svc.flush()
    assert len(await svc.request_log()) == 6
    assert {r["key"] for r in await svc.request_log(key=k1.id)} == {k1.id}
    assert {r["key"] for r in await svc.request_log(team=team.id)} == {k1.id}
    assert {r["model"] for r in await svc.request_log(model="m2")} == {"m2"}
    assert [r["status"] for r in await svc.request_log(status=501)] == [501]
    assert len(await svc.request_log(since=START + 3)) == 2
    newest = await svc.request_log(limit=1)
    assert len(newest) == 1 and newest[0]["time"] == format_time(START + 3)


async def test_the_request_log_default_limit_is_100(svc, clock):
    key, secret = await svc.create_key(name="k")
    principal = await svc.authenticate(secret)
    for _ in range(101):
        svc.settle(await svc.reserve(principal, tokens=1, cost=None), tokens=1, cost=0.0, model="m", provider="p",
                   status=200)
    await svc.flush()
    assert len(await svc.request_log()) == 100


async def test_a_request_log_row_holds_every_field_of_its_settlement(svc, clock):
    team = await svc.create_team(name="t")
    key, secret = await svc.create_key(name="k", team=team.id, metadata={"user": "ann"})
    reservation = await svc.reserve(await svc.authenticate(secret), tokens=9, cost=None)
    svc.settle(reservation, tokens=9, cost=0.25, model="m", provider="openai", status=201,
               log={"time": START - 5, "latency_ms": 12, "request": "req", "response": "resp"},
               input_tokens=7, output_tokens=2)
    await svc.flush()
    (row,) = await svc.request_log()
    del row["id"]
    assert row == {"time": format_time(START - 5), "key": key.id, "team": team.id, "user": "ann", "model": "m",
                   "provider": "openai", "status": 201, "latency_ms": 12, "input_tokens": 7, "output_tokens": 2,
                   "cost": 0.25, "request": "req", "response": "resp"}
    svc.settle(reservation, tokens=4, cost=0.0, model=None, provider=None, status=200)
    await svc.flush()
    newest = (await svc.request_log())[0]
    assert (newest["time"], newest["latency_ms"], newest["request"], newest["response"]) == (format_time(START), None, None, None)


@pytest.mark.parametrize("tokens, input_tokens, output_tokens, spent", [
    (10, None, None, (10, 0)),      # only a total: all of it is input
    (10, None, 4, (6, 4)),          # the input is what the output leaves
    (3, None, 5, (0, 5)),           # never below zero
    (10, 8, None, (8, 0)),          # as given
    (10, -2, -3, (0, 0)),           # clamped
])
async def test_settled_tokens_split_into_input_and_output(svc, clock, tokens, input_tokens, output_tokens, spent):
    _, secret = await svc.create_key(name="k")
    reservation = await svc.reserve(await svc.authenticate(secret), tokens=1, cost=None)
    svc.settle(reservation, tokens=tokens, cost=0.5, model="m", provider="p", status=200,
               input_tokens=input_tokens, output_tokens=output_tokens)
    await svc.flush()
    (row,) = await svc.request_log()
    assert (row["input_tokens"], row["output_tokens"]) == spent
    (spend,) = await svc.spend("model")
    assert (spend["inputTokens"], spend["outputTokens"], spend["requests"], spend["cost"]) == (*spent, 1, 0.5)


async def test_usage_numbers_are_integers_except_cost(svc, clock):
    limits = {"requests": {"day": 5}, "tokens": {"day": 100}, "cost": {"day": 2}}
    key, secret = await svc.create_key(name="k", limits=limits)
    reservation = await svc.reserve(await svc.authenticate(secret), tokens=40, cost=1.0)
    (shown,) = await svc.keys_json([key])
    usage = shown["usage"]
    assert usage["requests"]["day"] == {"used": 0, "reserved": 1, "limit": 5, "resetsAt": "2026-11-20T00:00:00Z"}
    assert [type(usage["requests"]["day"][f]) for f in ("used", "reserved", "limit")] == [int, int, int]
    assert usage["tokens"]["day"]["reserved"] == 40 and type(usage["tokens"]["day"]["reserved"]) is int
    cost = usage["cost"]["day"]
    assert (cost["used"], cost["reserved"], cost["limit"]) == (0.0, 1.0, 2.0)
    assert [type(cost[f]) for f in ("used", "reserved", "limit")] == [float, float, float]
    svc.settle(reservation, tokens=41, cost=1.5, model="m", provider="p", status=200)
    await svc.flush()
    (shown,) = await svc.keys_json([key])
    assert shown["usage"]["tokens"]["day"] == {"used": 41, "reserved": 0, "limit": 100, "resetsAt": "2026-11-20T00:00:00Z"}
    assert shown["usage"]["cost"]["day"]["used"] == 1.5


async def test_a_second_rotation_forgets_the_first_secret_and_the_grace_is_served_from_the_cache(svc, clock):
    key, first = await svc.create_key(name="k")
    _, second = await svc.rotate_key(key.id, 60)
    latest, third = await svc.rotate_key(key.id, 60)
    assert (await svc.authenticate(second)).key == latest  # the previous secret, within its grace
    assert (await svc.authenticate(third)).key == latest
    with pytest.raises(KeyRefused, match="invalid api key"):  # two rotations back: unknown
        await svc.authenticate(first)

    def down(*args):  # type: ignore[no-untyped-def]
        raise AssertionError("the cache should have answered")
    svc.store.find_key = down
    assert (await svc.authenticate(second)).key == latest  # both digests are cached
    assert (await svc.authenticate(third)).key == latest


async def test_a_replica_learns_a_rotation_on_refresh(svc, tmp_path, clock):
    key, first = await svc.create_key(name="k")
    replica = other(tmp_path, clock)
    await replica.authenticate(first)
    _, second = await svc.rotate_key(key.id, 60)
    _, third = await svc.rotate_key(key.id, 0)
    await replica.refresh()
    with pytest.raises(KeyRefused, match="key rotated"):  # the second, without grace
        await replica.authenticate(second)
    with pytest.raises(KeyRefused, match="invalid api key"):
        await replica.authenticate(first)
    assert (await replica.authenticate(third)).key.id == key.id
    await replica.aclose()


async def test_reservations_carry_the_estimate(svc, clock):
    _, free = await svc.create_key(name="free")
    _, limited = await svc.create_key(name="limited", limits={"cost": {"day": 2}})
    for secret in (free, limited):
        reservation = await svc.reserve(await svc.authenticate(secret), tokens=40, cost=0.5)
        assert (reservation.tokens, reservation.cost, reservation.created_at) == (40, 0.5, START)
    unknown = await svc.reserve(await svc.authenticate(limited), tokens=40, cost=None)
    assert unknown.cost is None and [i.amount for i in unknown.items] == [0.0]  # an unknown cost reserves nothing


async def test_aclose_closes_the_store_it_opened(tmp_path, clock):
    from trioproxy.keys import Store

    opened = KeyService.open(str(tmp_path / "a.db"), KeysSettings(), clock)
    await opened.aclose()
    assert opened.store._closed
    store = Store(str(tmp_path / "b.db"))
    given = KeyService(store, KeysSettings(), clock)
    await given.aclose()
    assert not store._closed  # given: its owner closes it
    store.close()


async def test_settlements_ask_for_an_early_flush_at_exactly_eager_flush(svc, clock, monkeypatch):
    from trioproxy.keys import service as service_module

    monkeypatch.setattr(service_module, "EAGER_FLUSH", 3)
    _, secret = await svc.create_key(name="k")
    reservation = await svc.reserve(await svc.authenticate(secret), tokens=1, cost=None)
    for _ in range(2):
        svc.settle(reservation, tokens=1, cost=0.0, model="m", provider="p", status=200)
    assert not svc._flush_now.is_set()
    svc.settle(reservation, tokens=1, cost=0.0, model="m", provider="p", status=200)
    assert svc._flush_now.is_set()


async def test_dropped_settlements_are_logged_at_the_first_and_every_10000th(svc, clock, monkeypatch, caplog):
    from trioproxy.keys import service as service_module

    monkeypatch.setattr(service_module, "MAX_PENDING", 1)
    _, secret = await svc.create_key(name="k")
    reservation = await svc.reserve(await svc.authenticate(secret), tokens=1, cost=None)
    for _ in range(20_002):
        svc.settle(reservation, tokens=1, cost=0.0, model="m", provider="p", status=200)
    assert svc.dropped == 20_001
    assert [r.getMessage() for r in caplog.records if r.name == "trioproxy.keys"] == [
        f"key store {svc.store.describe()}: unreachable; {n} settlements dropped so far (more than 1 queued)"
        for n in (1, 10_000, 20_000)]
    svc._pending.clear()


def logged(caplog) -> list[str]:  # type: ignore[no-untyped-def]
    """The service's warnings so far."""
    return [r.getMessage() for r in caplog.records if r.name == "trioproxy.keys" and r.levelname == "WARNING"]


async def until(condition) -> None:  # type: ignore[no-untyped-def]
    """Virtual time passes (autojump) until ``condition`` holds: store calls run in threads, so how
    much virtual time one takes is not fixed; what the loops log is."""
    import trio

    with trio.fail_after(300):
        while not condition():
            await trio.sleep(0.05)


async def test_each_background_loop_logs_its_failure_once_and_its_recovery(autojump_clock, svc, clock, caplog):
    import trio

    from trioproxy.keys.store import StoreError

    calls = {"changes": svc.store.changes, "expire_reservations": svc.store.expire_reservations}

    def failing(*args):  # type: ignore[no-untyped-def]
        raise StoreError("boom")
    svc.store.changes = failing
    svc.store.expire_reservations = failing
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        await until(lambda: len(logged(caplog)) == 2)  # refreshes and one maintenance failed
        svc.store.changes = calls["changes"]
        svc.store.expire_reservations = calls["expire_reservations"]
        await until(lambda: len(logged(caplog)) == 4)  # both work again
        await trio.sleep(120)  # and nothing more is said
        nursery.cancel_scope.cancel()
    where = svc.store.describe()
    lines = logged(caplog)
    assert len(lines) == 4
    for loop in ("refresh", "maintenance"):  # the two loops may wake at the same (virtual) moment
        assert [line for line in lines if line.startswith(f"key store {where}: {loop} ")] == [
            f"key store {where}: {loop} failed: boom (retrying)", f"key store {where}: {loop} works again"]


async def test_the_flush_loop_logs_its_failure_and_recovery_and_a_bug_is_logged_each_time(
        autojump_clock, svc, clock, caplog):
    import trio

    from trioproxy.keys.store import StoreError

    _, secret = await svc.create_key(name="k")
    reservation = await svc.reserve(await svc.authenticate(secret), tokens=1, cost=None)
    svc.settle(reservation, tokens=1, cost=0.0, model="m", provider="p", status=200)
    apply, changes = svc.store.apply, svc.store.changes

    def failing(*args):  # type: ignore[no-untyped-def]
        raise StoreError("boom")

    calls = []

    def bug(*args):  # type: ignore[no-untyped-def]
        calls.append(args)
        raise RuntimeError("bug")
    svc.store.apply = failing
    async with trio.open_nursery() as nursery:
        await nursery.start(svc.run)
        await until(lambda: len(logged(caplog)) == 1)
        svc.store.apply = apply
        await until(lambda: len(logged(caplog)) == 2)
        svc.store.changes = bug
        await until(lambda: sum(r.levelname == "ERROR" for r in caplog.records) >= 2)
        svc.store.changes = changes
        nursery.cancel_scope.cancel()
    where = svc.store.describe()
    assert logged(caplog) == [f"key store {where}: flush failed: boom (retrying)", f"key store {where}: flush works again"]
    bugs = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(calls) >= len(bugs) >= 2  # not once per outage: each is a bug
    assert {r.getMessage() for r in bugs} == {f"key store {where}: refresh failed"} and bugs[0].exc_info is not None
    assert svc.pending == 0


async def test_an_unknown_key_is_remembered_until_exactly_refresh_interval(svc, clock, monkeypatch):
    import attrs

    secret = "sk-tp-" + "a" * 43
    with pytest.raises(KeyRefused, match="invalid api key"):
        await svc.authenticate(secret)
    key, _ = await svc.create_key(name="k")
    svc.store.update_key(attrs.evolve(key, digest=key_digest(secret)))  # now in the store, not in the cache
    clock.now = START + 0.4999
    with pytest.raises(KeyRefused, match="invalid api key"):
        await svc.authenticate(secret)
    clock.now = START + 0.5  # refreshInterval later: the store is read again
    assert (await svc.authenticate(secret)).key.id == key.id


async def test_the_unknown_keys_memory_is_bounded(svc, clock, monkeypatch):
    from trioproxy.keys import service as service_module

    monkeypatch.setattr(service_module, "NEGATIVE_MAX", 2)
    for n in range(2):
        with pytest.raises(KeyRefused):
            await svc.authenticate(f"sk-tp-{n}")
    assert len(svc._negative) == 2
    with pytest.raises(KeyRefused):
        await svc.authenticate("sk-tp-2")
    assert list(svc._negative) == [key_digest("sk-tp-2")]  # full: forgotten, then this one


async def test_a_key_found_in_the_store_reads_its_team_only_when_not_cached(svc, tmp_path, clock):
    team = await svc.create_team(name="t")
    _, loner = await svc.create_key(name="loner")
    _, member = await svc.create_key(name="member", team=team.id)
    replica = other(tmp_path, clock)
    reads = []
    get_team = replica.store.get_team

    def counted(team_id):  # type: ignore[no-untyped-def]
        reads.append(team_id)
        return get_team(team_id)
    replica.store.get_team = counted
    assert (await replica.authenticate(loner)).team is None and reads == []
    assert (await replica.authenticate(member)).team == team and reads == [team.id]
    _, second = await svc.create_key(name="member2", team=team.id)
    assert (await replica.authenticate(second)).team == team and reads == [team.id]  # cached by then
    await replica.aclose()


async def test_a_replica_learns_team_changes_and_deletions_on_refresh(svc, tmp_path, clock):
    kept, gone = await svc.create_team(name="kept"), await svc.create_team(name="gone")
    replica = other(tmp_path, clock)
    await replica.refresh()
    assert sorted(t.name for t in replica.cached_teams()) == ["gone", "kept"]
    renamed = await svc.update_team(kept.id, name="renamed")
    await svc.delete_team(gone.id)
    await replica.refresh()
    assert replica.cached_teams() == [renamed]
    fresh = other(tmp_path, clock)  # never saw the deleted team
    await fresh.refresh()
    assert fresh.cached_teams() == [renamed]
    await replica.aclose()
    await fresh.aclose()


async def test_aclose_tries_three_times_then_says_how_many_settlements_are_lost(autojump_clock, svc, clock, caplog):
    from trioproxy.keys.store import StoreError

    _, secret = await svc.create_key(name="k")
    reservation = await svc.reserve(await svc.authenticate(secret), tokens=1, cost=None)
    for _ in range(2):
        svc.settle(reservation, tokens=1, cost=0.0, model="m", provider="p", status=200)
    tries = []

    def failing(*args):  # type: ignore[no-untyped-def]
        tries.append(args)
        raise StoreError("boom")
    svc.store.apply = failing
    await svc.aclose()
    assert len(tries) == 3
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"key store {svc.store.describe()}: 2 settlements lost at shutdown: boom"]


async def test_create_key_fields(svc, clock):
    key, secret = await svc.create_key(name="k", metadata={"owner": "bob"}, models=["m"],
                                       expires_at="2026-12-01T00:00:00Z")
    assert key.id.startswith("key_") and (key.name, key.created_at, key.team) == ("k", START, None)
    assert (dict(key.metadata), key.models, key.expires_at) == ({"owner": "bob"}, ("m",), 1_796_083_200.0)
    assert key.prefix == secret[:10] and key.digest == key_digest(secret)
    with pytest.raises(FieldError, match="^name: required field is missing$"):
        await svc.create_key(models=["m"])


async def test_a_failed_batch_goes_back_in_front_of_the_rest_in_order(svc, clock, monkeypatch):
    from trioproxy.errors import KeyStoreUnavailable
    from trioproxy.keys import service as service_module
    from trioproxy.keys.store import StoreError

    monkeypatch.setattr(service_module, "BATCH", 2)
    _, secret = await svc.create_key(name="k")
    reservation = await svc.reserve(await svc.authenticate(secret), tokens=1, cost=None)
    for tokens in (1, 2, 3):
        svc.settle(reservation, tokens=tokens, cost=0.0, model="m", provider="p", status=200)
    apply, seen = svc.store.apply, []

    def failing(batch, now):  # type: ignore[no-untyped-def]
        seen.append((len(batch), svc.pending))  # the batch being written counts as pending
        raise StoreError("boom")
    svc.store.apply = failing
    with pytest.raises(KeyStoreUnavailable):
        await svc.flush()
    assert seen == [(2, 3)] and svc.pending == 3
    assert [e.tokens for e in svc._pending] == [1.0, 2.0, 3.0]
    svc.store.apply = apply
    await svc.flush()
    assert svc.pending == 0 and [r["input_tokens"] for r in await svc.request_log()] == [3, 2, 1]


async def test_keyword_fields_use_python_names_not_the_wires(svc, clock):
    # _checked refuses the wire's spelling before renaming expires_at to it for the parser
    with pytest.raises(FieldError, match=r"^expiresAt: unknown field \(expected expires_at, limits, metadata, models, "
                                         r"name, team\)$"):
        await svc.create_key(name="k", expiresAt="2026-12-01T00:00:00Z")


async def test_a_settlement_not_yet_flushed_no_longer_holds_its_estimate(svc, clock, monkeypatch):
    """One client's requests one after the other, each estimated at 1,000 tokens against 1,000 in
    all: the second is refused on the first one's estimate, still reserved, so the settlement
    queued on that counter is written and the check made once more: admitted. No flush ran."""
    key, secret = await svc.create_key(name="k", limits={"tokens": {"total": 1000}})
    principal = await svc.authenticate(secret)
    first = await svc.reserve(principal, tokens=1000, cost=None)
    svc.settle(first, tokens=30, cost=0.0, model="m", provider="p", status=200)
    assert svc.pending == 1
    second = await svc.reserve(principal, tokens=1000, cost=None)
    assert svc.pending == 0  # written because the first check refused
    (shown,) = await svc.keys_json([key])
    assert shown["usage"]["tokens"]["total"] == {"used": 30, "reserved": 1000, "limit": 1000, "resetsAt": None}
    svc.settle(second, tokens=980, cost=0.0, model="m", provider="p", status=200)
    with pytest.raises(BudgetExceeded):  # refused, written, refused again on the real use
        await svc.reserve(principal, tokens=1, cost=None)
    (shown,) = await svc.keys_json([key])
    assert shown["usage"]["tokens"]["total"] == {"used": 1010, "reserved": 0, "limit": 1000, "resetsAt": None}
    assert [row["input_tokens"] for row in await svc.request_log()] == [980, 30]


async def test_only_a_refusal_with_its_own_settlements_queued_writes_them(svc, clock, monkeypatch):
    """An admitted request, and a refused one whose counter has nothing queued here (a client
    hammering a spent budget), cost one store call as before; a write that fails leaves the 429."""
    _, secret = await svc.create_key(name="spent", limits={"requests": {"total": 1}})
    spent = await svc.authenticate(secret)
    _, other_secret = await svc.create_key(name="other", limits={"requests": {"total": 100}})
    other = await svc.authenticate(other_secret)
    applies: list[int] = []
    real_apply = svc.store.apply
    monkeypatch.setattr(svc.store, "apply", lambda batch, now: (applies.append(len(batch)), real_apply(batch, now)))
    svc.settle(await svc.reserve(spent, tokens=1, cost=None), tokens=1, cost=0.0, model="m", provider="p", status=200)
    await svc.flush()
    assert applies == [1]
    svc.settle(await svc.reserve(other, tokens=1, cost=None), tokens=1, cost=0.0, model="m", provider="p", status=200)
    for _ in range(3):  # another key's settlement is queued: not this counter's
        with pytest.raises(BudgetExceeded):
            await svc.reserve(spent, tokens=1, cost=None)
    assert applies == [1] and svc.pending == 1

    _, tight_secret = await svc.create_key(name="tight", limits={"requests": {"total": 1}})
    tight = await svc.authenticate(tight_secret)
    svc.settle(await svc.reserve(tight, tokens=1, cost=None), tokens=1, cost=0.0, model="m", provider="p",
               status=200)

    def down(batch: object, now: float) -> None:
        raise StoreError("disk on fire")

    monkeypatch.setattr(svc.store, "apply", down)
    with pytest.raises(BudgetExceeded):  # the write failed: the refusal stands, nothing is lost
        await svc.reserve(tight, tokens=1, cost=None)
    assert svc.pending == 2


async def test_a_store_error_says_why_and_the_next_request_fails_fast_saying_so(svc, clock, monkeypatch):
    _, secret = await svc.create_key(name="k", limits={"requests": {"day": 5}})
    principal = await svc.authenticate(secret)
    svc.settle(await svc.reserve(principal, tokens=1, cost=None), tokens=1, cost=0.0, model="m", provider="p",
               status=200)

    def down(*args: object) -> None:
        raise StoreError("disk on fire")

    monkeypatch.setattr(svc.store, "reserve", down)
    with pytest.raises(KeyStoreUnavailable) as info:
        await svc.reserve(principal, tokens=1, cost=None)
    assert info.value.why == {"policy": "keyStore", "store": svc.store.describe(), "detail": "disk on fire"}
    with pytest.raises(KeyStoreUnavailable) as fast:  # fails fast: the store is not called
        await svc.reserve(principal, tokens=1, cost=None)
    assert fast.value.why == {"policy": "keyStore", "store": svc.store.describe(), "detail":
                              "disk on fire (requests fail fast until the background refresh reaches the store)"}
    monkeypatch.undo()
    await svc.flush()
    assert svc.pending == 0 and len(await svc.request_log()) == 1


async def test_each_refused_key_says_which_key_and_since_when(svc, clock):
    """The ``why`` of a revoked, expired and rotated key (docs/history.md): the key by id and name,
    and how long ago it stopped being valid."""
    key, secret = await svc.create_key(name="gone")
    clock.now += 30
    await svc.revoke_key(key.id)
    clock.now += 125
    with pytest.raises(KeyRefused) as revoked:
        await svc.authenticate(secret)
    assert revoked.value.why == {"policy": "apiKey", "check": "revoked", "key": {"id": key.id, "name": "gone"},
                                 "detail": "revoked 2m5s ago"}
    old, old_secret = await svc.create_key(name="old", expires_at=clock.now + 10)
    clock.now += 3700
    with pytest.raises(KeyRefused) as expired:
        await svc.authenticate(old_secret)
    assert expired.value.why == {"policy": "apiKey", "check": "expired", "key": {"id": old.id, "name": "old"},
                                 "detail": "expired 1h1m30s ago"}
    rotated, first = await svc.create_key(name="rot")
    await svc.rotate_key(rotated.id, 60)
    clock.now += 61
    with pytest.raises(KeyRefused) as past_grace:
        await svc.authenticate(first)
    assert past_grace.value.why == {"policy": "apiKey", "check": "rotated", "key": {"id": rotated.id, "name": "rot"},
                                    "detail": "an old secret of a rotated key, its grace period ended 1s ago"}
    now_rotated, secret = await svc.create_key(name="now")
    await svc.rotate_key(now_rotated.id, 0)  # no grace period at all
    with pytest.raises(KeyRefused) as no_grace:
        await svc.authenticate(secret)
    assert no_grace.value.why["detail"] == "an old secret of a rotated key, its grace period ended 0s ago"  # type: ignore[index]
