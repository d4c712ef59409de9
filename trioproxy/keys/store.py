"""The key store: one SQL store over two engines, SQLite (stdlib ``sqlite3``) and PostgreSQL (psycopg 3).

Every method is synchronous and thread-safe; ``KeyService`` calls them in ``trio.to_thread.run_sync``
under a ``CapacityLimiter``. Any engine failure is raised as ``StoreError``.

Tables (created idempotently by ``setup``; several processes may open one store at once):

- ``teams``, ``keys``: the records (``keys.digest`` unique; ``previous_digest`` and
  ``previous_valid_until`` keep a rotated key's old secret valid for its grace period); each row has
  a ``seq`` from the ``meta`` counter, taken under its row lock, so ``changes(since)`` sees every
  write once and in commit order (replicas refresh their caches from it).
- ``counters (subject, metric, window, window_start, used, reserved)``: one row per limited subject
  (``key:<id>`` / ``team:<id>``) and calendar window.
- ``reservations (id, items, expires_at)``: estimates reserved and not yet settled; the items
  (JSON) say which counters hold them, so an expired reservation gives its amounts back.
- ``spend``: requests, input and output tokens and cost per day, key, team, user, model, provider.
- ``request_log``: one row per LLM request when enabled, pruned after its retention.

SQLite: WAL (set once at open), ``synchronous = NORMAL`` on every connection (a commit is not
fsynced: it survives the process being killed, and a power loss or kernel crash may undo the last
commits; the default FULL fsyncs each reservation: 0.5 ms of CPU and 7 ms of waiting per request,
bench/README.md "Runtime keys"), a busy timeout, ``BEGIN IMMEDIATE`` for every write transaction (the
write lock is taken first, so a check and its update cannot interleave with another process's).
PostgreSQL: a ``psycopg_pool.ConnectionPool`` (at most 8 connections), ``SELECT ... FOR UPDATE`` on
the counter rows a reservation touches (in one order, so two reservations cannot deadlock), schema
creation under an advisory lock.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from attrs import frozen

from .limits import Metric, Window, limits_from_json, limits_to_json
from .records import KeyRecord, Team

__all__ = [
    "GROUP_BY",
    "Changes",
    "CounterRow",
    "ReserveItem",
    "SettleEntry",
    "SpendRow",
    "Store",
    "StoreError",
    "open_store",
]

log = logging.getLogger("trioproxy.keys")
T = TypeVar("T")
GROUP_BY = ("key", "team", "model", "user", "day", "provider")
Engine = Literal["sqlite", "postgresql"]


class StoreError(Exception):
    """The store could not be read or written (the engine's error is the cause)."""


@frozen
class ReserveItem:
    """A reserved amount of one counter: ``amount`` of ``metric`` for ``subject`` in the window
    starting at ``window_start``, admitted while used + reserved < ``limit``."""

    subject: str  # key:<id> | team:<id>
    metric: Metric
    window: Window
    window_start: float
    amount: float
    limit: float


@frozen
class CounterRow:
    subject: str
    metric: Metric
    window: Window
    window_start: float
    used: float
    reserved: float


@frozen
class SpendRow:
    """One request's contribution to the ``spend`` aggregate."""

    day: float  # the UTC day's start (epoch seconds)
    key: str
    team: str | None
    user: str | None
    model: str | None
    provider: str | None
    requests: int = 1
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0


@frozen
class SettleEntry:
    """A settled request: its reservation (released if it has not expired), the real usage added to
    the counters of ``items`` (each item's metric: 1 request, ``tokens``, ``cost``), its spend and
    its request-log row (None: not logged)."""

    reservation_id: str | None
    items: tuple[ReserveItem, ...]
    tokens: float
    cost: float
    spend: SpendRow
    log: Mapping[str, Any] | None = None


@frozen
class Changes:
    """Records written since a cursor (``Store.changes``)."""

    keys: tuple[KeyRecord, ...]
    teams: tuple[Team, ...]
    deleted_teams: tuple[str, ...]
    cursor: int


def open_store(location: str, *, max_connections: int = 8) -> Store:
    """The store at ``location``: a ``postgresql://`` URL, else a SQLite file path. Nothing is
    opened until ``setup`` (called by ``KeyService`` on first use)."""
    return Store(location, max_connections=max_connections)


# --- SQL ------------------------------------------------------------------------------------------

def _schema(engine: Engine) -> list[str]:
    real = "DOUBLE PRECISION" if engine == "postgresql" else "REAL"
    serial = "BIGSERIAL PRIMARY KEY" if engine == "postgresql" else "INTEGER PRIMARY KEY AUTOINCREMENT"
    big = "BIGINT" if engine == "postgresql" else "INTEGER"
    return [
        "CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
        "INSERT INTO meta (name, value) VALUES ('seq', 0) ON CONFLICT (name) DO NOTHING",
        f"""CREATE TABLE IF NOT EXISTS teams (
            id TEXT PRIMARY KEY, name TEXT NOT NULL, metadata TEXT NOT NULL, limits TEXT NOT NULL,
            created_at {real} NOT NULL, deleted_at {real}, seq {big} NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS teams_seq ON teams (seq)",
        f"""CREATE TABLE IF NOT EXISTS keys (
            id TEXT PRIMARY KEY, name TEXT NOT NULL, prefix TEXT NOT NULL, digest TEXT NOT NULL UNIQUE,
            team TEXT, metadata TEXT NOT NULL, models TEXT NOT NULL, limits TEXT NOT NULL,
            expires_at {real}, created_at {real} NOT NULL, revoked_at {real}, rotated_at {real},
            previous_digest TEXT, previous_valid_until {real}, seq {big} NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS keys_previous_digest ON keys (previous_digest)",
        "CREATE INDEX IF NOT EXISTS keys_seq ON keys (seq)",
        "CREATE INDEX IF NOT EXISTS keys_team ON keys (team)",
        f"""CREATE TABLE IF NOT EXISTS counters (
            subject TEXT NOT NULL, metric TEXT NOT NULL, "window" TEXT NOT NULL, window_start {real} NOT NULL,
            used {real} NOT NULL DEFAULT 0, reserved {real} NOT NULL DEFAULT 0,
            PRIMARY KEY (subject, metric, "window", window_start))""",
        f"""CREATE TABLE IF NOT EXISTS reservations (
            id TEXT PRIMARY KEY, items TEXT NOT NULL, expires_at {real} NOT NULL)""",
        "CREATE INDEX IF NOT EXISTS reservations_expires ON reservations (expires_at)",
        f"""CREATE TABLE IF NOT EXISTS spend (
            day {real} NOT NULL, key TEXT NOT NULL, team TEXT NOT NULL, "user" TEXT NOT NULL,
            model TEXT NOT NULL, provider TEXT NOT NULL, requests {big} NOT NULL DEFAULT 0,
            input_tokens {big} NOT NULL DEFAULT 0, output_tokens {big} NOT NULL DEFAULT 0,
            cost {real} NOT NULL DEFAULT 0,
            PRIMARY KEY (day, key, team, "user", model, provider))""",
        f"""CREATE TABLE IF NOT EXISTS request_log (
            id {serial}, time {real} NOT NULL, key TEXT NOT NULL, team TEXT, "user" TEXT, model TEXT,
            provider TEXT, status INTEGER, latency_ms {real}, input_tokens {big}, output_tokens {big},
            cost {real}, request TEXT, response TEXT)""",
        "CREATE INDEX IF NOT EXISTS request_log_time ON request_log (time)",
    ]


_KEY_COLUMNS = ("id, name, prefix, digest, team, metadata, models, limits, expires_at, created_at, revoked_at, "
                "rotated_at, previous_digest, previous_valid_until")
_TEAM_COLUMNS = "id, name, metadata, limits, created_at"
_LOG_COLUMNS = ("id", "time", "key", "team", "user", "model", "provider", "status", "latency_ms",
                "input_tokens", "output_tokens", "cost", "request", "response")


def _key_row(record: KeyRecord) -> tuple[Any, ...]:
    return (record.id, record.name, record.prefix, record.digest, record.team, json.dumps(dict(record.metadata)),
            json.dumps(list(record.models)), json.dumps(limits_to_json(record.limits)), record.expires_at,
            record.created_at, record.revoked_at, record.rotated_at, record.previous_digest,
            record.previous_valid_until)


def _key_of(row: Sequence[Any]) -> KeyRecord:
    return KeyRecord(id=row[0], name=row[1], prefix=row[2], digest=row[3], team=row[4], metadata=json.loads(row[5]),
                     models=tuple(json.loads(row[6])), limits=limits_from_json(json.loads(row[7])),
                     expires_at=row[8], created_at=row[9], revoked_at=row[10], rotated_at=row[11],
                     previous_digest=row[12], previous_valid_until=row[13])


def _team_row(team: Team) -> tuple[Any, ...]:
    return (team.id, team.name, json.dumps(dict(team.metadata)), json.dumps(limits_to_json(team.limits)),
            team.created_at)


def _team_of(row: Sequence[Any]) -> Team:
    return Team(id=row[0], name=row[1], metadata=json.loads(row[2]), limits=limits_from_json(json.loads(row[3])),
                created_at=row[4])


def _items_json(items: Sequence[ReserveItem]) -> str:
    return json.dumps([[x.subject, x.metric, x.window, x.window_start, x.amount] for x in items])


def _items_of(text: str) -> list[tuple[str, str, str, float, float]]:
    return [(str(a), str(b), str(c), float(d), float(e)) for a, b, c, d, e in json.loads(text)]


CounterKey = tuple[str, str, str, float]  # (subject, metric, window, window_start)
_LOCK_ID = 0x7472696F6B657973  # "triokeys": the advisory lock PostgreSQL schema creation holds
_SQLITE_BUSY = ("database is locked", "database is busy", "database table is locked")
_ATTEMPTS = 50


class _Retry(Exception):
    """A transaction to run again (SQLite busy, PostgreSQL deadlock or serialization failure)."""


class _Tx:
    """One transaction's statements: ``?`` placeholders on both engines, rows as tuples."""

    def __init__(self, cursor: Any, engine: Engine) -> None:
        self.cursor = cursor
        self.engine = engine

    def run(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        if self.engine == "postgresql":
            sql = sql.replace("?", "%s")
        self.cursor.execute(sql, tuple(params))
        return [tuple(row) for row in self.cursor.fetchall()] if self.cursor.description else []

    def many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if not rows:
            return
        if self.engine == "postgresql":
            sql = sql.replace("?", "%s")
        self.cursor.executemany(sql, [tuple(row) for row in rows])

    @property
    def greatest(self) -> str:
        return "GREATEST" if self.engine == "postgresql" else "MAX"

    def next_seq(self) -> int:
        """The next change number; its row lock is held to the commit, so numbers commit in order."""
        return int(self.run("UPDATE meta SET value = value + 1 WHERE name = 'seq' RETURNING value")[0][0])


def _values(count: int, width: int) -> str:
    row = "(" + ", ".join("?" * width) + ")"
    return ", ".join([row] * count)


class Store:
    """One SQL store over SQLite or PostgreSQL (see the module docstring)."""

    def __init__(self, location: str, *, max_connections: int = 8, connect_timeout: float = 5.0,
                 busy_timeout: float = 30.0) -> None:
        self.location = location
        self.engine: Engine = "postgresql" if location.startswith(("postgresql://", "postgres://")) else "sqlite"
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._ready = False
        self._closed = False
        self._pool: Any = None  # psycopg_pool.ConnectionPool
        self._idle: queue.LifoQueue[sqlite3.Connection] = queue.LifoQueue()
        self._opened: list[sqlite3.Connection] = []
        self._slots = threading.BoundedSemaphore(max_connections)

    def __repr__(self) -> str:
        return f"Store({self.engine}: {self.describe()})"

    def describe(self) -> str:
        """Where the store is, without a password."""
        if self.engine == "sqlite":
            return self.location
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(self.location)
        if parts.password:
            return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")))
        return self.location

    # --- connections and transactions -------------------------------------------------------------

    def setup(self) -> None:
        """Open the store and create its tables if they are missing (idempotent, safe when several
        processes do it at once). Called by every other method on first use."""
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            if self._closed:
                raise StoreError("the key store is closed")
            try:
                if self.engine == "sqlite":
                    self._setup_sqlite()
                else:
                    self._setup_postgresql()
            except StoreError:
                raise
            except Exception as error:  # noqa: BLE001 - any engine failure is the store's
                raise StoreError(f"cannot open the key store {self.describe()}: {error}") from error
            self._ready = True

    def _sqlite_connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.location, timeout=self.busy_timeout, isolation_level=None,
                               check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout * 1000)}")
        # WAL with synchronous=NORMAL: a commit is not fsynced (a checkpoint is), so a crashed or
        # killed process loses nothing committed; a power cut may lose the last commits (docs/keys.md)
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    def _setup_sqlite(self) -> None:
        directory = os.path.dirname(self.location)
        if directory:
            os.makedirs(directory, exist_ok=True)

        def create() -> None:
            conn = self._sqlite_connect()
            try:
                # WAL once per file (it persists): readers never wait for the writer
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode = WAL")
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in _schema("sqlite"):
                        conn.execute(statement)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            finally:
                conn.close()

        self._with_retries(create)

    def _setup_postgresql(self) -> None:
        import psycopg_pool

        pool = psycopg_pool.ConnectionPool(
            self.location, min_size=1, max_size=self.max_connections, open=False, timeout=self.connect_timeout,
            kwargs={"connect_timeout": max(1, int(self.connect_timeout)), "application_name": "trioproxy-keys"},
            name="trioproxy-keys")
        pool.open(wait=False)
        try:
            with pool.connection(timeout=self.connect_timeout) as conn, conn.transaction():
                cursor = conn.cursor()
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_ID,))  # one creator at a time
                for statement in _schema("postgresql"):
                    cursor.execute(statement)
        except BaseException:
            pool.close()
            raise
        self._pool = pool

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._ready = False
            if self._pool is not None:
                self._pool.close()
                self._pool = None
            while self._opened:
                self._opened.pop().close()
            while not self._idle.empty():
                self._idle.get_nowait()

    def _with_retries(self, action: Callable[[], T]) -> T:
        """``action`` again while the engine says busy, deadlock or serialization failure."""
        delay = 0.002
        for attempt in range(_ATTEMPTS):
            try:
                return action()
            except _Retry:
                pass
            except sqlite3.OperationalError as error:
                if not any(text in str(error) for text in _SQLITE_BUSY) or attempt == _ATTEMPTS - 1:
                    raise
            except Exception as error:
                if not self._retryable(error) or attempt == _ATTEMPTS - 1:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.2)
        raise StoreError("the key store stayed busy")

    @staticmethod
    def _retryable(error: Exception) -> bool:
        try:
            import psycopg.errors
        except ImportError:  # pragma: no cover - psycopg is a dependency
            return False
        return isinstance(error, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure)

    @contextmanager
    def _sqlite_conn(self) -> Iterator[sqlite3.Connection]:
        self._slots.acquire()
        try:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                conn = self._sqlite_connect()
                with self._lock:
                    self._opened.append(conn)
            try:
                yield conn
            finally:
                if conn.in_transaction:  # an error left it open
                    try:
                        conn.execute("ROLLBACK")
                    except sqlite3.Error:
                        pass
                self._idle.put(conn)
        finally:
            self._slots.release()

    def _transaction(self, work: Callable[[_Tx], T], *, write: bool) -> T:
        """``work`` in one transaction (SQLite: ``BEGIN IMMEDIATE`` when it writes), retried when the
        engine is busy; any engine failure is a ``StoreError``."""
        self.setup()

        def sqlite_once() -> T:
            with self._sqlite_conn() as conn:
                conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                result = work(_Tx(conn.cursor(), "sqlite"))
                conn.execute("COMMIT")
                return result

        def postgresql_once() -> T:
            pool = self._pool
            if pool is None:
                raise StoreError("the key store is closed")
            with pool.connection(timeout=self.connect_timeout) as conn, conn.transaction():
                return work(_Tx(conn.cursor(), "postgresql"))

        try:
            return self._with_retries(sqlite_once if self.engine == "sqlite" else postgresql_once)
        except StoreError:
            raise
        except Exception as error:  # noqa: BLE001 - sqlite3.Error, psycopg.Error, PoolTimeout...
            raise StoreError(f"key store {self.describe()}: {type(error).__name__}: {error}") from error

    # --- keys and teams -----------------------------------------------------------------------------

    def insert_key(self, record: KeyRecord) -> None:
        def work(tx: _Tx) -> None:
            tx.run(f"INSERT INTO keys ({_KEY_COLUMNS}, seq) VALUES ({', '.join('?' * 15)})",
                   (*_key_row(record), tx.next_seq()))
        self._transaction(work, write=True)

    def update_key(self, record: KeyRecord) -> None:
        names = [name.strip() for name in _KEY_COLUMNS.split(",")][1:]

        def work(tx: _Tx) -> None:
            sets = ", ".join(f"{name} = ?" for name in names)
            tx.run(f"UPDATE keys SET {sets}, seq = ? WHERE id = ?", (*_key_row(record)[1:], tx.next_seq(), record.id))
        self._transaction(work, write=True)

    def get_key(self, key_id: str) -> KeyRecord | None:
        rows = self._transaction(lambda tx: tx.run(f"SELECT {_KEY_COLUMNS} FROM keys WHERE id = ?", (key_id,)),
                                 write=False)
        return _key_of(rows[0]) if rows else None

    def find_key(self, digest: str) -> KeyRecord | None:
        """The key whose current or previous digest is ``digest``."""
        rows = self._transaction(lambda tx: tx.run(
            f"SELECT {_KEY_COLUMNS} FROM keys WHERE digest = ? UNION ALL "
            f"SELECT {_KEY_COLUMNS} FROM keys WHERE previous_digest = ?", (digest, digest)), write=False)
        return _key_of(rows[0]) if rows else None

    def list_keys(self, team: str | None = None) -> list[KeyRecord]:
        where, params = ("WHERE team = ?", (team,)) if team is not None else ("", ())
        rows = self._transaction(lambda tx: tx.run(
            f"SELECT {_KEY_COLUMNS} FROM keys {where} ORDER BY created_at, id", params), write=False)
        return [_key_of(row) for row in rows]

    def insert_team(self, team: Team) -> None:
        def work(tx: _Tx) -> None:
            tx.run(f"INSERT INTO teams ({_TEAM_COLUMNS}, deleted_at, seq) VALUES (?, ?, ?, ?, ?, NULL, ?)",
                   (*_team_row(team), tx.next_seq()))
        self._transaction(work, write=True)

    def update_team(self, team: Team) -> None:
        def work(tx: _Tx) -> None:
            tx.run("UPDATE teams SET name = ?, metadata = ?, limits = ?, seq = ? WHERE id = ? AND deleted_at IS NULL",
                   (*_team_row(team)[1:4], tx.next_seq(), team.id))
        self._transaction(work, write=True)

    def delete_team(self, team_id: str, now: float) -> bool:
        def work(tx: _Tx) -> bool:
            found = tx.run("SELECT id FROM teams WHERE id = ? AND deleted_at IS NULL", (team_id,))
            if found:
                tx.run("UPDATE teams SET deleted_at = ?, seq = ? WHERE id = ?", (now, tx.next_seq(), team_id))
            return bool(found)
        return self._transaction(work, write=True)

    def get_team(self, team_id: str) -> Team | None:
        rows = self._transaction(lambda tx: tx.run(
            f"SELECT {_TEAM_COLUMNS} FROM teams WHERE id = ? AND deleted_at IS NULL", (team_id,)), write=False)
        return _team_of(rows[0]) if rows else None

    def list_teams(self) -> list[Team]:
        rows = self._transaction(lambda tx: tx.run(
            f"SELECT {_TEAM_COLUMNS} FROM teams WHERE deleted_at IS NULL ORDER BY created_at, id"), write=False)
        return [_team_of(row) for row in rows]

    def changes(self, since: int) -> Changes:
        """Keys and teams written after cursor ``since`` (0: all), and the cursor to ask from next."""
        def work(tx: _Tx) -> Changes:
            keys = tx.run(f"SELECT {_KEY_COLUMNS}, seq FROM keys WHERE seq > ? ORDER BY seq", (since,))
            teams = tx.run(f"SELECT {_TEAM_COLUMNS}, deleted_at, seq FROM teams WHERE seq > ? ORDER BY seq", (since,))
            cursor = max([since, *(int(row[-1]) for row in keys), *(int(row[-1]) for row in teams)])
            return Changes(keys=tuple(_key_of(row) for row in keys),
                           teams=tuple(_team_of(row) for row in teams if row[5] is None),
                           deleted_teams=tuple(row[0] for row in teams if row[5] is not None), cursor=cursor)
        return self._transaction(work, write=False)

    # --- budgets ------------------------------------------------------------------------------------

    def _expire(self, tx: _Tx, now: float, limit: int = 200) -> dict[CounterKey, float]:
        """Delete up to ``limit`` expired reservations; what they held, per counter."""
        lock = " FOR UPDATE SKIP LOCKED" if tx.engine == "postgresql" else ""
        rows = tx.run(f"SELECT id, items FROM reservations WHERE expires_at < ? ORDER BY expires_at LIMIT {limit}{lock}",
                      (now,))
        released: dict[CounterKey, float] = {}
        if not rows:
            return released
        tx.run(f"DELETE FROM reservations WHERE id IN ({', '.join('?' * len(rows))})", [row[0] for row in rows])
        for _, items in rows:
            for subject, metric, window, start, amount in _items_of(items):
                key = (subject, metric, window, start)
                released[key] = released.get(key, 0.0) + amount
        return released

    def _lock_counters(self, tx: _Tx, keys: Sequence[CounterKey]) -> dict[CounterKey, tuple[float, float]]:
        """Make sure the counter rows exist, lock them (PostgreSQL: ``FOR UPDATE``, in one order) and
        read (used, reserved) of each."""
        ordered = sorted(set(keys))
        flat = [value for key in ordered for value in key]
        tx.run(f'INSERT INTO counters (subject, metric, "window", window_start, used, reserved) VALUES '
               f'{", ".join(["(?, ?, ?, ?, 0, 0)"] * len(ordered))} ON CONFLICT DO NOTHING', flat)
        lock = " FOR UPDATE" if tx.engine == "postgresql" else ""
        rows = tx.run(f'SELECT subject, metric, "window", window_start, used, reserved FROM counters '
                      f'WHERE (subject, metric, "window", window_start) IN (VALUES {_values(len(ordered), 4)}) '
                      f'ORDER BY subject, metric, "window", window_start{lock}', flat)
        return {(r[0], r[1], r[2], float(r[3])): (float(r[4]), float(r[5])) for r in rows}

    @staticmethod
    def _add(tx: _Tx, deltas: dict[CounterKey, tuple[float, float]]) -> None:
        """used += du, reserved = max(reserved + dr, 0) per counter (rows locked already)."""
        rows = [(du, dr, *key) for key, (du, dr) in sorted(deltas.items()) if du or dr]
        tx.many(f'UPDATE counters SET used = used + ?, reserved = {tx.greatest}(reserved + ?, 0) '
                f'WHERE subject = ? AND metric = ? AND "window" = ? AND window_start = ?', rows)

    def reserve(self, reservation_id: str, items: Sequence[ReserveItem], expires_at: float,
                now: float) -> ReserveItem | None:
        """In one transaction: give back expired reservations, then reserve every item if each of
        their counters has used + reserved < limit. Returns None when reserved, else the first item
        over its limit (nothing reserved; the expired reservations are given back all the same)."""
        def work(tx: _Tx) -> ReserveItem | None:
            released = self._expire(tx, now)
            keys = [(x.subject, x.metric, x.window, x.window_start) for x in items]
            current = self._lock_counters(tx, [*keys, *released])
            deltas = {key: (0.0, -amount) for key, amount in released.items()}
            refused = None
            for item, key in zip(items, keys):
                used, reserved = current[key]
                reserved = max(reserved - released.get(key, 0.0), 0.0)
                if used + reserved >= item.limit:
                    refused = item
                    break
            if refused is None:
                for item, key in zip(items, keys):
                    du, dr = deltas.get(key, (0.0, 0.0))
                    deltas[key] = (du, dr + item.amount)
                tx.run("INSERT INTO reservations (id, items, expires_at) VALUES (?, ?, ?)",
                       (reservation_id, _items_json(items), expires_at))
            self._add(tx, deltas)
            return refused
        return self._transaction(work, write=True)

    def apply(self, entries: Sequence[SettleEntry], now: float) -> None:
        """Settle a batch in one transaction: used += real, reserved -= estimate (unless the
        reservation expired and gave it back already), spend and request-log rows."""
        if not entries:
            return

        def work(tx: _Tx) -> None:
            ids = [e.reservation_id for e in entries if e.reservation_id is not None]
            live: set[str] = set()
            for start in range(0, len(ids), 500):
                chunk = ids[start:start + 500]
                live.update(row[0] for row in tx.run(
                    f"DELETE FROM reservations WHERE id IN ({', '.join('?' * len(chunk))}) RETURNING id", chunk))
            deltas: dict[CounterKey, tuple[float, float]] = {}
            for entry in entries:
                release = entry.reservation_id in live
                for item in entry.items:
                    key = (item.subject, item.metric, item.window, item.window_start)
                    real = 1.0 if item.metric == "requests" else entry.tokens if item.metric == "tokens" else entry.cost
                    du, dr = deltas.get(key, (0.0, 0.0))
                    deltas[key] = (du + real, dr - (item.amount if release else 0.0))
            if deltas:
                self._lock_counters(tx, list(deltas))
                self._add(tx, deltas)
            spend: dict[tuple[Any, ...], list[float]] = {}
            for entry in entries:
                row = entry.spend
                group = (row.day, row.key, row.team or "", row.user or "", row.model or "", row.provider or "")
                sums = spend.setdefault(group, [0, 0, 0, 0.0])
                sums[0] += row.requests
                sums[1] += row.input_tokens
                sums[2] += row.output_tokens
                sums[3] += row.cost
            tx.many('INSERT INTO spend (day, key, team, "user", model, provider, requests, input_tokens, '
                    'output_tokens, cost) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) '
                    'ON CONFLICT (day, key, team, "user", model, provider) DO UPDATE SET '
                    'requests = spend.requests + excluded.requests, '
                    'input_tokens = spend.input_tokens + excluded.input_tokens, '
                    'output_tokens = spend.output_tokens + excluded.output_tokens, cost = spend.cost + excluded.cost',
                    [(*group, int(s[0]), int(s[1]), int(s[2]), float(s[3])) for group, s in sorted(spend.items())])
            logs = [entry.log for entry in entries if entry.log is not None]
            columns = _LOG_COLUMNS[1:]
            tx.many(f'INSERT INTO request_log ({", ".join(_quoted(c) for c in columns)}) '
                    f'VALUES ({", ".join("?" * len(columns))})',
                    [tuple(row.get(c) for c in columns) for row in logs])
        self._transaction(work, write=True)

    def expire_reservations(self, now: float) -> int:
        """Give back what expired reservations hold (a crashed process's); how many there were.
        Also drops counters of windows long past (nothing reserved, older than their window + 1 day)."""
        def work(tx: _Tx) -> int:
            released = self._expire(tx, now, limit=1000)
            if released:
                self._lock_counters(tx, list(released))
                self._add(tx, {key: (0.0, -amount) for key, amount in released.items()})
            for window, span in (("minute", 60), ("hour", 3600), ("day", 86400), ("week", 7 * 86400),
                                 ("month", 31 * 86400)):
                tx.run('DELETE FROM counters WHERE "window" = ? AND window_start < ? AND reserved <= 0',
                       (window, now - span - 86400))
            return len({key for key in released})
        return self._transaction(work, write=True)

    def counters(self, subjects: Sequence[str]) -> list[CounterRow]:
        if not subjects:
            return []
        rows = self._transaction(lambda tx: tx.run(
            f'SELECT subject, metric, "window", window_start, used, reserved FROM counters '
            f'WHERE subject IN ({", ".join("?" * len(subjects))})', list(subjects)), write=False)
        return [CounterRow(r[0], r[1], r[2], float(r[3]), float(r[4]), float(r[5])) for r in rows]

    def reservation_count(self) -> int:
        return int(self._transaction(lambda tx: tx.run("SELECT COUNT(*) FROM reservations"), write=False)[0][0])

    # --- spend and the request log ------------------------------------------------------------------

    def spend(self, group_by: str, start: float | None, end: float | None) -> list[dict[str, Any]]:
        """Rows ``{group, requests, inputTokens, outputTokens, totalTokens, cost}`` grouped by
        ``key``, ``team``, ``model``, ``user``, ``provider`` (most cost first) or ``day`` (in order),
        over the days holding ``start`` to ``end``."""
        if group_by not in GROUP_BY:
            raise ValueError(f"group_by: expected one of {', '.join(GROUP_BY)}, got {group_by!r}")
        column = _quoted(group_by)
        where: list[str] = []
        params: list[Any] = []
        if start is not None:
            where.append("day >= ?")
            params.append(float(int(start // 86400) * 86400))
        if end is not None:
            where.append("day <= ?")
            params.append(float(end))
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        order = "grp" if group_by == "day" else "cost DESC, grp"
        rows = self._transaction(lambda tx: tx.run(
            f"SELECT {column} AS grp, SUM(requests), SUM(input_tokens), SUM(output_tokens), SUM(cost) AS cost "
            f"FROM spend {clause} GROUP BY {column} ORDER BY {order}", params), write=False)
        out = []
        for group, requests, input_tokens, output_tokens, cost in rows:
            if group_by == "day":
                group = format_day(float(group))
            out.append({"group": group if group != "" else None, "requests": int(requests),
                        "inputTokens": int(input_tokens), "outputTokens": int(output_tokens),
                        "totalTokens": int(input_tokens) + int(output_tokens), "cost": float(cost)})
        return out

    def request_log(self, *, key: str | None = None, team: str | None = None, model: str | None = None,
                    status: int | None = None, since: float | None = None,
                    limit: int = 100) -> list[dict[str, Any]]:
        """The newest request-log rows matching every filter given (``limit`` at most)."""
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("key", key), ("team", team), ("model", model), ("status", status)):
            if value is not None:
                where.append(f"{_quoted(column)} = ?")
                params.append(value)
        if since is not None:
            where.append("time >= ?")
            params.append(since)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        rows = self._transaction(lambda tx: tx.run(
            f"SELECT {', '.join(_quoted(c) for c in _LOG_COLUMNS)} FROM request_log {clause} "
            f"ORDER BY time DESC, id DESC LIMIT ?", [*params, max(0, int(limit))]), write=False)
        return [dict(zip(_LOG_COLUMNS, row)) for row in rows]

    def prune_request_log(self, before: float) -> int:
        """Delete request-log rows older than ``before``; how many."""
        def work(tx: _Tx) -> int:
            count = int(tx.run("SELECT COUNT(*) FROM request_log WHERE time < ?", (before,))[0][0])
            if count:
                tx.run("DELETE FROM request_log WHERE time < ?", (before,))
            return count
        return self._transaction(work, write=True)


def _quoted(column: str) -> str:
    return f'"{column}"'


def format_day(day: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(day, datetime.UTC).strftime("%Y-%m-%d")
