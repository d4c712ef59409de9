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

SQLite: WAL (set once at open), a busy timeout, ``BEGIN IMMEDIATE`` for every write transaction (the
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

from .limits import Limit, Metric, Window, limits_from_json, limits_to_json, sort_limits
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


class _Retry(Exception):
    """A transaction to run again (SQLite busy, PostgreSQL deadlock or serialization failure)."""


class Store:
    """One SQL store over SQLite or PostgreSQL (see the module docstring)."""

    def __init__(self, location: str, *, max_connections: int = 8) -> None:
        self.location = location
        self.engine: Engine = "postgresql" if location.startswith(("postgresql://", "postgres://")) else "sqlite"
        self.max_connections = max_connections
        self._lock = threading.Lock()
        self._ready = False
        self._closed = False
        self._pool: Any = None  # psycopg_pool.ConnectionPool
        self._idle: queue.LifoQueue[sqlite3.Connection] = queue.LifoQueue()
        self._all: list[sqlite3.Connection] = []

    def __repr__(self) -> str:
        return f"Store({self.engine}: {self.describe()})"

    def describe(self) -> str:
        """Where the store is, without a password."""
        if self.engine == "sqlite":
            return self.location
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(self.location)
        if parts.password:
            netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
            return urlunsplit(parts._replace(netloc=netloc))
        return self.location

    # --- connections and transactions -------------------------------------------------------------

    def setup(self) -> None:
        """Open the store and create its tables if they are missing (idempotent, safe when several
        processes do it at once)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    # --- keys and teams -----------------------------------------------------------------------------

    def insert_key(self, record: KeyRecord) -> None:
        raise NotImplementedError

    def update_key(self, record: KeyRecord) -> None:
        raise NotImplementedError

    def get_key(self, key_id: str) -> KeyRecord | None:
        raise NotImplementedError

    def find_key(self, digest: str) -> KeyRecord | None:
        """The key whose current or previous digest is ``digest``."""
        raise NotImplementedError

    def list_keys(self, team: str | None = None) -> list[KeyRecord]:
        raise NotImplementedError

    def insert_team(self, team: Team) -> None:
        raise NotImplementedError

    def update_team(self, team: Team) -> None:
        raise NotImplementedError

    def delete_team(self, team_id: str, now: float) -> bool:
        raise NotImplementedError

    def get_team(self, team_id: str) -> Team | None:
        raise NotImplementedError

    def list_teams(self) -> list[Team]:
        raise NotImplementedError

    def changes(self, since: int) -> Changes:
        """Keys and teams written after cursor ``since`` (0: all), and the cursor to ask from next."""
        raise NotImplementedError

    # --- budgets ------------------------------------------------------------------------------------

    def reserve(self, reservation_id: str, items: Sequence[ReserveItem], expires_at: float,
                now: float) -> ReserveItem | None:
        """In one transaction: give back expired reservations, then reserve every item if each of
        their counters has used + reserved < limit. Returns None when reserved, else the first item
        over its limit (nothing reserved)."""
        raise NotImplementedError

    def apply(self, entries: Sequence[SettleEntry], now: float) -> None:
        """Settle a batch in one transaction: used += real, reserved -= estimate (unless the
        reservation expired), spend and request-log rows."""
        raise NotImplementedError

    def expire_reservations(self, now: float) -> int:
        raise NotImplementedError

    def counters(self, subjects: Sequence[str]) -> list[CounterRow]:
        raise NotImplementedError

    # --- spend and the request log ------------------------------------------------------------------

    def spend(self, group_by: str, start: float | None, end: float | None) -> list[dict[str, Any]]:
        raise NotImplementedError

    def request_log(self, *, key: str | None = None, team: str | None = None, model: str | None = None,
                    status: int | None = None, since: float | None = None,
                    limit: int = 100) -> list[dict[str, Any]]:
        raise NotImplementedError

    def prune_request_log(self, before: float) -> int:
        raise NotImplementedError


# keep names importable for type checkers and the service
_unused: tuple[Any, ...] = (Callable, Iterator, contextmanager, os, random, time, Limit, sort_limits)
