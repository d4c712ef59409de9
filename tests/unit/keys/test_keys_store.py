"""keys/store.py on both engines (real SQLite files, a real PostgreSQL server)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from trioproxy.keys.limits import Limit
from trioproxy.keys.records import KeyRecord, Team, key_digest, new_id, new_secret, secret_prefix
from trioproxy.keys.store import ReserveItem, SettleEntry, SpendRow, Store, StoreError

NOW = 1_795_000_000.0


def key(**fields) -> KeyRecord:
    secret = new_secret()
    return KeyRecord(**{"id": new_id("key"), "name": "k", "prefix": secret_prefix(secret),
                        "digest": key_digest(secret), "created_at": NOW, **fields})


def item(subject="key:a", metric="requests", limit=10.0, amount=1.0, window="day", start=0.0) -> ReserveItem:
    return ReserveItem(subject, metric, window, start, amount, limit)


def test_schema_is_created_once_and_reopening_keeps_the_data(store_location):
    first = Store(store_location)
    record = key(limits=(Limit("tokens", "day", 5.0),), metadata={"user": "u"}, models=("openai/*",))
    first.insert_key(record)
    first.close()
    second = Store(store_location)
    second.setup()
    second.setup()
    assert second.get_key(record.id) == record
    assert second.find_key(record.digest) == record
    second.close()


def test_several_processes_worth_of_stores_create_the_schema_at_once(store_location):
    stores = [Store(store_location) for _ in range(6)]
    errors: list[BaseException] = []

    def open_one(store: Store) -> None:
        try:
            store.setup()
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=open_one, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    stores[0].insert_key(key())
    assert len(stores[5].list_keys()) == 1
    for store in stores:
        store.close()


def test_changes_feed_sees_every_write_once(store_location):
    store = Store(store_location)
    a, b = key(name="a"), key(name="b")
    store.insert_key(a)
    team = Team(id=new_id("team"), name="t", created_at=NOW)
    store.insert_team(team)
    first = store.changes(0)
    assert [k.name for k in first.keys] == ["a"] and first.teams == (team,)
    store.insert_key(b)
    store.update_key(KeyRecord(**{**_fields(a), "revoked_at": NOW}))
    second = store.changes(first.cursor)
    assert sorted(k.name for k in second.keys) == ["a", "b"] and second.teams == ()
    assert next(k for k in second.keys if k.name == "a").revoked_at == NOW
    assert store.delete_team(team.id, NOW) is True
    third = store.changes(second.cursor)
    assert third.deleted_teams == (team.id,) and third.keys == ()
    assert store.changes(third.cursor).cursor == third.cursor
    assert store.get_team(team.id) is None and store.list_teams() == []
    assert store.delete_team(team.id, NOW) is False
    store.close()


def _fields(record: KeyRecord) -> dict:
    import attrs

    return attrs.asdict(record, recurse=False)


def test_a_rotated_keys_previous_digest_still_finds_it(store_location):
    store = Store(store_location)
    old = key()
    store.insert_key(old)
    new_digest = key_digest(new_secret())
    rotated = KeyRecord(**{**_fields(old), "digest": new_digest, "previous_digest": old.digest,
                           "previous_valid_until": NOW + 60, "rotated_at": NOW})
    store.update_key(rotated)
    assert store.find_key(old.digest) == rotated
    assert store.find_key(new_digest) == rotated
    assert store.find_key(key_digest("nope")) is None
    store.close()


def test_reserve_admits_while_used_plus_reserved_is_under_the_limit(store_location):
    store = Store(store_location)
    limit = [item(limit=3)]
    results = [store.reserve(f"r{i}", limit, NOW + 60, NOW) for i in range(4)]
    assert results[:3] == [None, None, None] and results[3] == limit[0]
    # settling one releases its reservation and counts it as used: still full
    store.apply([SettleEntry("r0", tuple(limit), 10, 0.0, SpendRow(0.0, "a", None, None, None, None))], NOW)
    assert store.reserve("r4", limit, NOW + 60, NOW) == limit[0]
    [row] = store.counters(["key:a"])
    assert (row.used, row.reserved) == (1.0, 2.0)
    store.close()


def test_sqlite_commits_without_an_fsync_and_a_killed_process_keeps_them(tmp_path):
    """synchronous = NORMAL (WAL): a reservation costs no fsync (bench/README.md, "Runtime keys":
    it was 0.5 ms of CPU and 7 ms per request), and what a process committed before SIGKILL is there."""
    path = tmp_path / "keys.db"
    store = Store(str(path))
    store.setup()
    with store._sqlite_conn() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL (FULL is 2)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    child = subprocess.Popen([sys.executable, "-c", (
        "import os, signal, sys\n"
        "from trioproxy.keys.store import ReserveItem, Store\n"
        "s = Store(sys.argv[1])\n"
        f"assert s.reserve('r1', [ReserveItem('key:a', 'requests', 'day', 0.0, 1.0, 10.0)], {NOW + 60}, {NOW}) is None\n"
        "print('reserved', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"), str(path)], stdout=subprocess.PIPE, text=True)
    out, _ = child.communicate(timeout=60)
    assert out.strip() == "reserved" and child.returncode == -signal.SIGKILL
    [row] = store.counters(["key:a"])
    assert row.reserved == 1.0 and store.reservation_count() == 1
    store.close()


def test_a_refusal_reserves_nothing_in_any_counter(store_location):
    store = Store(store_location)
    team_full = [item("key:a", limit=5), item("team:t", limit=1)]
    assert store.reserve("r1", team_full, NOW + 60, NOW) is None
    assert store.reserve("r2", team_full, NOW + 60, NOW) == team_full[1]
    rows = {r.subject: r.reserved for r in store.counters(["key:a", "team:t"])}
    assert rows == {"key:a": 1.0, "team:t": 1.0}
    assert store.reservation_count() == 1
    store.close()


def test_expired_reservations_are_given_back(store_location):
    store = Store(store_location)
    limit = [item(limit=2, start=NOW - 100)]
    assert store.reserve("crashed1", limit, NOW + 10, NOW) is None
    assert store.reserve("crashed2", limit, NOW + 10, NOW) is None
    assert store.reserve("r3", limit, NOW + 10, NOW) == limit[0]
    # past their expiry, the next reservation gives them back first
    assert store.reserve("r4", limit, NOW + 100, NOW + 11) is None
    [row] = store.counters(["key:a"])
    assert (row.used, row.reserved) == (0.0, 1.0)
    # settling an expired reservation counts its use and releases nothing twice
    store.apply([SettleEntry("crashed1", tuple(limit), 0, 0.0, SpendRow(0.0, "a", None, None, None, None))], NOW + 12)
    [row] = store.counters(["key:a"])
    assert (row.used, row.reserved) == (1.0, 1.0)
    assert store.expire_reservations(NOW + 200) == 1
    [row] = store.counters(["key:a"])
    assert (row.used, row.reserved) == (1.0, 0.0)
    store.close()


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_200_threads_over_4_stores_admit_exactly_the_limit(engine, tmp_path, request):
    location = str(tmp_path / "keys.db") if engine == "sqlite" else request.getfixturevalue("postgres_url")
    stores = [Store(location) for _ in range(4)]
    for store in stores:
        store.setup()
    limit = [item("key:race", limit=10), item("team:race", limit=1000, metric="tokens", amount=7)]
    admitted: list[str] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(200)

    def one(n: int) -> None:
        try:
            barrier.wait()
            rid = uuid.uuid4().hex
            if stores[n % 4].reserve(rid, limit, NOW + 60, NOW) is None:
                admitted.append(rid)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(admitted) == 10
    rows = {(r.subject, r.metric): r.reserved for r in stores[0].counters(["key:race", "team:race"])}
    assert rows == {("key:race", "requests"): 10.0, ("team:race", "tokens"): 70.0}
    for store in stores:
        store.close()


def test_apply_aggregates_spend_and_writes_the_request_log(store_location):
    store = Store(store_location)
    day = 1_795_046_400.0  # a UTC midnight
    entries = [
        SettleEntry(None, (), 30, 0.5, SpendRow(day, "k1", "t1", "alice", "gpt-4o", "openAI", 1, 10, 20, 0.5),
                    {"time": day + 5, "key": "k1", "team": "t1", "user": "alice", "model": "gpt-4o",
                     "provider": "openAI", "status": 200, "latency_ms": 12.5, "input_tokens": 10,
                     "output_tokens": 20, "cost": 0.5, "request": '{"x": 1}', "response": None}),
        SettleEntry(None, (), 3, 0.25, SpendRow(day, "k1", "t1", "alice", "gpt-4o", "openAI", 1, 1, 2, 0.25)),
        SettleEntry(None, (), 5, 1.0, SpendRow(day + 86400, "k2", None, None, "claude", "anthropic", 1, 4, 1, 1.0)),
    ]
    store.apply(entries, day)
    assert store.spend("key", None, None) == [
        {"group": "k2", "requests": 1, "inputTokens": 4, "outputTokens": 1, "totalTokens": 5, "cost": 1.0},
        {"group": "k1", "requests": 2, "inputTokens": 11, "outputTokens": 22, "totalTokens": 33, "cost": 0.75}]
    assert [r["group"] for r in store.spend("day", None, None)] == ["2026-11-19", "2026-11-20"]
    assert [r["group"] for r in store.spend("team", None, None)] == [None, "t1"]
    assert [r["group"] for r in store.spend("model", day + 86400, None)] == ["claude"]
    assert [r["group"] for r in store.spend("provider", None, day + 100)] == ["openAI"]
    [logged] = store.request_log()
    assert logged["key"] == "k1" and logged["latency_ms"] == 12.5 and logged["request"] == '{"x": 1}'
    assert store.request_log(model="claude") == [] and store.request_log(status=200, key="k1") == [logged]
    with pytest.raises(ValueError, match="group_by: expected one of"):
        store.spend("color", None, None)
    store.close()


def test_request_log_retention_prunes_old_rows(store_location):
    store = Store(store_location)
    rows = [SettleEntry(None, (), 1, 0.0, SpendRow(0.0, "k", None, None, None, None),
                        {"time": NOW - age, "key": "k", "status": 200}) for age in (10, 100, 1000)]
    store.apply(rows, NOW)
    assert store.prune_request_log(NOW - 50) == 2
    assert [r["time"] for r in store.request_log()] == [NOW - 10]
    assert store.request_log(since=NOW - 5) == []
    store.close()


def test_an_unreachable_store_is_a_store_error(tmp_path):
    from tests.conftest import free_port

    down = Store(f"postgresql://postgres@127.0.0.1:{free_port()}/none", connect_timeout=1.0)
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot open the key store"):
        down.list_keys()
    assert time.monotonic() - started < 10
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(StoreError):
        Store(str(tmp_path / "dir.db")).list_keys()


RACER = """
import sys, threading, uuid
from trioproxy.keys.store import ReserveItem, Store
location, n = sys.argv[1], int(sys.argv[2])
store = Store(location)
item = ReserveItem("key:procs", "requests", "day", 0.0, 1.0, 10.0)
sys.stdin.readline()  # every process starts together, schema creation included
admitted = []
def one():
    if store.reserve(uuid.uuid4().hex, [item], 2e9, 1.0) is None:
        admitted.append(1)
threads = [threading.Thread(target=one) for _ in range(n)]
[t.start() for t in threads]
[t.join() for t in threads]
store.close()
print(len(admitted))
"""


def test_four_processes_create_the_schema_together_and_share_one_limit(store_location):
    import subprocess
    import sys

    from tests.conftest import ROOT

    procs = [subprocess.Popen([sys.executable, "-c", RACER, store_location, "50"], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    results = [proc.communicate(timeout=120) for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), [err for _, err in results]
    assert sum(int(out) for out, _ in results) == 10


def test_bench_keys_store_runs(postgres_url):
    """bench/keys_store.py on a few requests, both engines: it keeps working."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-m", "bench.keys_store", "--requests", "64", "--concurrency", "8",
                           "--postgres", postgres_url], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "sqlite: 64 requests" in done.stdout and "postgresql: 64 requests" in done.stdout
    assert done.stdout.count("reserve (1 transaction)") == 2
