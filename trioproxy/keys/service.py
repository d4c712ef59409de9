"""``KeyService``: runtime keys on the request path (cache, reserve, settle) and their control plane.

Data plane: ``authenticate`` reads a cache of keys and teams by digest, refreshed from the store
every ``refreshInterval`` (only the records changed since the last refresh), so replicas see new,
changed and revoked keys within it; a miss reads the store once, and a miss there is remembered for
``refreshInterval``. ``reserve`` admits a request while used + reserved < limit in every limited
window of its key and team, reserving one request and its token/cost estimate in one store
transaction (a key and team without limits: no store I/O at all). ``settle`` queues the real usage
(no I/O); ``run`` writes the queue in one transaction per batch every ``flushInterval``.

Control plane (admin API, CLI): create/list/get/update/rotate/revoke keys, teams, usage, spend and
the request log. Store failures are ``KeyStoreUnavailable`` (the request-path stage applies
``failureMode``); unknown ids are ``NotFound``; bad fields ``FieldError``. docs/keys.md states the
rules and their bounds.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, TypeVar

import attrs
import trio
from attrs import frozen

from ..config.model import KeysSettings
from ..errors import BudgetExceeded, KeyRefused, KeyStoreUnavailable, duration_text
from .limits import Limit, resets_at, window_start
from .records import (
    FieldError,
    KeyRecord,
    Principal,
    Team,
    format_time,
    key_digest,
    new_id,
    new_secret,
    parse_key_fields,
    parse_team_fields,
    secret_prefix,
)
from .store import CounterRow, ReserveItem, SettleEntry, SpendRow, Store, StoreError, open_store

__all__ = ["KeyService", "NotFound", "Reservation"]

_log = logging.getLogger("trioproxy.keys")
T = TypeVar("T")
#: most settlements written in one transaction
BATCH = 2000
#: settlements queued past which a flush starts at once (not waiting for flushInterval)
EAGER_FLUSH = 1000
#: digests remembered as unknown, at most (a flood of bad keys cannot grow memory)
NEGATIVE_MAX = 10_000
#: most settlements kept while the store cannot be written (an outage with failureMode open); past
#: it the oldest are dropped, and said so, rather than growing memory without bound
MAX_PENDING = 200_000
#: seconds request-path store calls fail at once after a store failure (at least refreshInterval)
FAIL_FAST = 1.0
#: how often expired reservations, old counters and old request-log rows are cleaned up (seconds)
MAINTENANCE_INTERVAL = 60.0


class NotFound(LookupError):
    """No key or team of that id."""


@frozen
class Reservation:
    """What ``reserve`` admitted: settle it once with the real usage. ``id`` is None when nothing
    was reserved in the store (no limits apply)."""

    id: str | None
    principal: Principal
    items: tuple[ReserveItem, ...]
    tokens: int
    cost: float | None
    created_at: float


_KEY_CHANGES = frozenset({"name", "team", "metadata", "models", "limits", "expires_at"})
_TEAM_CHANGES = frozenset({"name", "metadata", "limits"})


class KeyService:
    """Runtime keys over one ``Store`` (see the module docstring). ``clock`` is wall time (epoch
    seconds): windows, expiry, rotation grace and reservation TTL are read from it; the loops of
    ``run`` sleep with Trio's clock."""

    def __init__(self, store: Store, settings: KeysSettings, clock: Callable[[], float] = time.time,
                 *, owns_store: bool = False) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self._owns_store = owns_store
        self._limiter = trio.CapacityLimiter(store.max_connections)
        self._by_digest: dict[str, KeyRecord] = {}
        self._by_id: dict[str, KeyRecord] = {}
        self._teams: dict[str, Team] = {}
        self._negative: dict[str, float] = {}
        self._cursor = 0
        self._refresh_lock = trio.Lock()
        self._flush_lock = trio.Lock()
        self._pending: list[SettleEntry] = []
        self._batch: list[SettleEntry] = []  # the settlements a flush is writing
        self._down_until = 0.0  # time.monotonic() until which request-path calls fail fast
        self._store_error = ""  # the last store error, for the fail-fast refusals' why
        self._flush_now = trio.Event()
        self._failing: set[str] = set()  # loops whose last attempt failed (logged once per outage)
        #: settlements dropped because the store stayed unreachable with MAX_PENDING queued
        self.dropped = 0

    @classmethod
    def open(cls, location: str, settings: KeysSettings, clock: Callable[[], float] = time.time) -> KeyService:
        """A service over the store at ``location`` (``Config.store``), which ``aclose`` closes."""
        return cls(open_store(location), settings, clock, owns_store=True)

    # --- store calls ---------------------------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            result = await trio.to_thread.run_sync(partial(fn, *args), limiter=self._limiter)
        except StoreError as error:
            # requests fail fast for a while instead of each waiting for the store's timeout
            self._down_until = time.monotonic() + max(FAIL_FAST, self.settings.refresh_interval)
            self._store_error = str(error)
            raise KeyStoreUnavailable(why=self._unavailable(self._store_error)) from error
        self._down_until = 0.0
        return result

    def _unavailable(self, detail: str) -> dict[str, Any]:
        """The ``why`` of a 503 ``key store unavailable`` (docs/history.md): the store (no
        password) and its error."""
        return {"policy": "keyStore", "store": self.store.describe(), "detail": detail}

    async def _request_call(self, fn: Callable[..., T], *args: Any) -> T:
        """A store call on the request path: refused at once while the store was just found down
        (the background refresh keeps trying and ends that as soon as the store answers)."""
        if self._down_until and time.monotonic() < self._down_until:
            raise KeyStoreUnavailable(why=self._unavailable(
                f"{self._store_error} (requests fail fast until the background refresh reaches the store)"))
        return await self._call(fn, *args)

    # --- background work -----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Refresh the cache every refreshInterval and flush settlements every flushInterval (and
        clean up expired reservations and old request-log rows) until cancelled. Store errors are
        logged and retried; they never end it."""
        await self._guarded("refresh", self.refresh)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._every, "refresh", self.settings.refresh_interval, self.refresh)
            nursery.start_soon(self._flush_loop)
            nursery.start_soon(self._every, "maintenance", MAINTENANCE_INTERVAL, self.maintenance)
            task_status.started()

    async def _guarded(self, name: str, work: Callable[[], Any]) -> None:
        try:
            await work()
        except KeyStoreUnavailable as error:
            if name not in self._failing:
                self._failing.add(name)
                _log.warning("key store %s: %s failed: %s (retrying)", self.store.describe(), name, error.__cause__)
        except Exception:  # noqa: BLE001 - a loop never dies
            _log.exception("key store %s: %s failed", self.store.describe(), name)
        else:
            if name in self._failing:
                self._failing.discard(name)
                _log.warning("key store %s: %s works again", self.store.describe(), name)

    async def _every(self, name: str, interval: float, work: Callable[[], Any]) -> None:
        while True:
            await trio.sleep(interval)
            await self._guarded(name, work)

    async def _flush_loop(self) -> None:
        while True:
            with trio.move_on_after(self.settings.flush_interval):
                await self._flush_now.wait()
            self._flush_now = trio.Event()
            await self._guarded("flush", self.flush)

    async def aclose(self) -> None:
        """Write every pending settlement (a few tries), then close the store if this service opened
        it. Settlements made after it are written by nobody: stop the request path first."""
        for attempt in range(3):
            try:
                await self.flush()
                break
            except KeyStoreUnavailable as error:
                if attempt == 2:
                    _log.error("key store %s: %d settlements lost at shutdown: %s", self.store.describe(),
                              len(self._pending), error.__cause__)
                else:
                    await trio.sleep(self.settings.flush_interval)
        if self._owns_store:
            await trio.to_thread.run_sync(self.store.close)

    async def refresh(self) -> None:
        """Bring the cache up to date with the store (only what changed since the last refresh)."""
        async with self._refresh_lock:
            changes = await self._call(self.store.changes, self._cursor)
            for team in changes.teams:
                self._teams[team.id] = team
            for team_id in changes.deleted_teams:
                self._teams.pop(team_id, None)
            for record in changes.keys:
                self._remember(record)
            self._cursor = changes.cursor

    async def flush(self) -> None:
        """Write the pending settlements now, in transactions of at most BATCH (the ones not written
        stay queued, in order, and the error is raised)."""
        async with self._flush_lock:
            while self._pending:
                batch = self._batch = self._pending[:BATCH]
                del self._pending[:BATCH]
                try:
                    await self._call(self.store.apply, batch, self.clock())
                except BaseException:
                    self._pending[:0] = batch
                    raise
                finally:
                    self._batch = []

    def _queued_for(self, item: ReserveItem) -> bool:
        """Whether a settlement on ``item``'s counter is queued or being written by this process."""
        key = (item.subject, item.metric, item.window, item.window_start)
        return any((i.subject, i.metric, i.window, i.window_start) == key
                   for entry in (*self._pending, *self._batch) for i in entry.items)

    async def maintenance(self) -> None:
        """Give back expired reservations, drop old counters and request-log rows past retention."""
        now = self.clock()
        await self._call(self.store.expire_reservations, now)
        if self.settings.request_log_enabled:
            await self._call(self.store.prune_request_log, now - self.settings.request_log_retention)

    @property
    def pending(self) -> int:
        """Settlements not yet written (queued, or in a batch being written)."""
        return len(self._pending) + len(self._batch)

    # --- the cache -----------------------------------------------------------------------------------

    def _remember(self, record: KeyRecord) -> None:
        old = self._by_id.get(record.id)
        if old is not None:
            for digest in (old.digest, old.previous_digest):
                if digest is not None and self._by_digest.get(digest) is old:
                    del self._by_digest[digest]
        self._by_id[record.id] = record
        self._by_digest[record.digest] = record
        self._negative.pop(record.digest, None)
        if record.previous_digest is not None:
            self._by_digest[record.previous_digest] = record
            self._negative.pop(record.previous_digest, None)

    async def _lookup(self, digest: str, now: float) -> KeyRecord | None:
        record = self._by_digest.get(digest)
        if record is not None:
            return record
        until = self._negative.get(digest)
        if until is not None and until > now:
            return None
        record = await self._request_call(self.store.find_key, digest)
        if record is None:
            if len(self._negative) >= NEGATIVE_MAX:
                self._negative.clear()
            self._negative[digest] = now + self.settings.refresh_interval
            return None
        self._remember(record)
        if record.team is not None and record.team not in self._teams:
            team = await self._request_call(self.store.get_team, record.team)
            if team is not None:
                self._teams[team.id] = team
        return record

    # --- data plane ----------------------------------------------------------------------------------

    async def authenticate(self, secret: str) -> Principal:
        """The principal of ``secret``: from the cache, or one store read on a miss (a miss there is
        remembered for refreshInterval). Raises ``KeyRefused`` (``invalid api key``, ``key revoked``,
        ``key expired``, ``key rotated``) or ``KeyStoreUnavailable``."""
        now = self.clock()
        digest = key_digest(secret)
        record = await self._lookup(digest, now)
        if record is None:
            raise KeyRefused("invalid api key")
        status = record.status(now)
        key = (record.id, record.name)
        if status == "revoked":
            raise KeyRefused("key revoked", key=key, detail=f"revoked {duration_text(now - (record.revoked_at or now))} ago")
        if status == "expired":
            raise KeyRefused("key expired", key=key, detail=f"expired {duration_text(now - (record.expires_at or now))} ago")
        if digest != record.digest and (record.previous_valid_until is None or record.previous_valid_until <= now):
            grace = record.previous_valid_until
            raise KeyRefused("key rotated", key=key, detail="an old secret of a rotated key" + (
                f", its grace period ended {duration_text(now - grace)} ago" if grace is not None else ""))
        team = self._teams.get(record.team) if record.team is not None else None
        return Principal(record, team)

    def items(self, principal: Principal, *, tokens: int, cost: float | None, now: float) -> tuple[ReserveItem, ...]:
        """What a request reserves: one request and its estimate in every limited window of its key and team."""
        out = []
        for subject, _, limit in principal.subjects():
            amount = 1.0 if limit.metric == "requests" else float(tokens) if limit.metric == "tokens" else cost or 0.0
            out.append(ReserveItem(subject, limit.metric, limit.window, window_start(limit.window, now), amount,
                                   limit.limit))
        return tuple(out)

    async def reserve(self, principal: Principal, *, tokens: int, cost: float | None) -> Reservation:
        """Admit one request estimated at ``tokens`` (and ``cost`` USD, None when unknown), or raise
        ``BudgetExceeded`` naming the first limit reached. The check and the reservation are one
        store transaction; without limits nothing touches the store."""
        now = self.clock()
        items = self.items(principal, tokens=tokens, cost=cost, now=now)
        if not items:
            return Reservation(None, principal, (), tokens, cost, now)
        reservation_id = uuid.uuid4().hex
        expires_at = now + self.settings.reservation_ttl
        refused = await self._request_call(self.store.reserve, reservation_id, items, expires_at, now)
        if refused is not None and self._queued_for(refused):
            # Settlements queued here on the refusing counter may free it: until written, an ended
            # request still holds its estimate, and a client's next request must not be refused on
            # that. Write them and check once more: only then (a refusal with its own settlements
            # waiting), so the common path and a client hammering a spent budget cost no more.
            try:
                await self.flush()
            except KeyStoreUnavailable:
                pass  # the refusal stands
            else:
                refused = await self._request_call(self.store.reserve, reservation_id, items, expires_at, now)
        if refused is not None:
            label = next(label for subject, label, limit in principal.subjects()
                         if subject == refused.subject and limit.metric == refused.metric
                         and limit.window == refused.window)
            raise BudgetExceeded(label, refused.metric, refused.window, refused.limit,
                                 resets_at(refused.window, now), now=now)
        return Reservation(reservation_id, principal, items, tokens, cost, now)

    def settle(self, reservation: Reservation, *, tokens: int, cost: float, model: str | None,
               provider: str | None, status: int, log: dict[str, Any] | None = None,
               input_tokens: int | None = None, output_tokens: int | None = None) -> None:
        """Queue the real usage of a reserved request (no I/O): ``tokens`` in all (``input_tokens`` /
        ``output_tokens`` when known, for spend), ``cost`` USD. ``log``: the request-log row's other
        fields (``latency_ms``, ``request``, ``response`` payload text), written when the request
        log is enabled. Settle each reservation once."""
        now = self.clock()
        key = reservation.principal.key
        output = max(0, int(output_tokens)) if output_tokens is not None else 0
        inputs = max(0, int(input_tokens)) if input_tokens is not None else max(0, int(tokens) - output)
        row = None
        if self.settings.request_log_enabled:
            extra = log or {}
            row = {"time": extra.get("time", now), "key": key.id, "team": key.team, "user": key.user,
                   "model": model, "provider": provider, "status": status, "latency_ms": extra.get("latency_ms"),
                   "input_tokens": inputs, "output_tokens": output, "cost": cost,
                   "request": extra.get("request"), "response": extra.get("response")}
        spend = SpendRow(window_start("day", now), key.id, key.team, key.user, model, provider, 1, inputs, output,
                         float(cost))
        self._pending.append(SettleEntry(reservation.id, reservation.items, float(tokens), float(cost), spend, row))
        if len(self._pending) >= EAGER_FLUSH:
            self._flush_now.set()
        if len(self._pending) > MAX_PENDING:
            dropped = len(self._pending) - MAX_PENDING
            del self._pending[:dropped]
            self.dropped += dropped
            if self.dropped == dropped or self.dropped % 10_000 < dropped:
                _log.error("key store %s: unreachable; %d settlements dropped so far (more than %d queued)",
                           self.store.describe(), self.dropped, MAX_PENDING)

    # --- control plane: keys ---------------------------------------------------------------------------

    async def _team_exists(self, team: str | None) -> None:
        if team is not None and await self._call(self.store.get_team, team) is None:
            raise FieldError(f"team: no team {team!r}")

    async def create_key(self, **fields: Any) -> tuple[KeyRecord, str]:
        """A new key from ``name`` (required), ``team``, ``metadata``, ``models``, ``limits`` (a
        tuple of ``Limit`` or the JSON shape), ``expires_at``; returns it and its secret (shown once)."""
        fields = _checked(fields, _KEY_CHANGES, required=("name",))
        await self._team_exists(fields.get("team"))
        secret = new_secret()
        now = self.clock()
        record = KeyRecord(id=new_id("key"), name=fields["name"], prefix=secret_prefix(secret),
                           digest=key_digest(secret), team=fields.get("team"), metadata=fields.get("metadata", {}),
                           models=tuple(fields.get("models", ())), limits=tuple(fields.get("limits", ())),
                           expires_at=fields.get("expires_at"), created_at=now)
        async with self._refresh_lock:  # a refresh read before this write cannot overwrite it
            await self._call(self.store.insert_key, record)
            self._remember(record)
        return record, secret

    async def list_keys(self, team: str | None = None) -> list[KeyRecord]:
        return await self._call(self.store.list_keys, team)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        return await self._call(self.store.get_key, key_id)

    async def _key(self, key_id: str) -> KeyRecord:
        record = await self.get_key(key_id)
        if record is None:
            raise NotFound(f"no key {key_id!r}")
        return record

    async def _save_key(self, record: KeyRecord) -> KeyRecord:
        async with self._refresh_lock:  # a refresh read before this write cannot undo it (a revocation)
            await self._call(self.store.update_key, record)
            self._remember(record)
        return record

    async def update_key(self, key_id: str, **changes: Any) -> KeyRecord:
        """Change ``name``, ``team``, ``metadata``, ``models``, ``limits`` or ``expires_at``."""
        changes = _checked(changes, _KEY_CHANGES)
        record = await self._key(key_id)
        if "team" in changes:
            await self._team_exists(changes["team"])
        return await self._save_key(attrs.evolve(record, **changes))  # _checked gave tuples

    async def rotate_key(self, key_id: str, grace: float) -> tuple[KeyRecord, str]:
        """A new secret for the key; the old one stays valid ``grace`` seconds (0: not at all)."""
        if grace < 0:
            raise FieldError(f"grace: expected seconds >= 0, got {grace!r}")
        record = await self._key(key_id)
        now = self.clock()
        if record.status(now) == "revoked":
            raise FieldError(f"key {key_id} is revoked")
        secret = new_secret()
        rotated = attrs.evolve(record, digest=key_digest(secret), prefix=secret_prefix(secret),
                               previous_digest=record.digest, previous_valid_until=now + grace, rotated_at=now)
        return await self._save_key(rotated), secret

    async def revoke_key(self, key_id: str) -> KeyRecord:
        """Refuse the key from now on (this process at once; replicas within refreshInterval)."""
        record = await self._key(key_id)
        if record.revoked_at is not None:
            return record
        return await self._save_key(attrs.evolve(record, revoked_at=self.clock()))

    # --- control plane: teams ----------------------------------------------------------------------

    async def create_team(self, **fields: Any) -> Team:
        fields = _checked(fields, _TEAM_CHANGES, required=("name",))
        team = Team(id=new_id("team"), name=fields["name"], metadata=fields.get("metadata", {}),
                    limits=tuple(fields.get("limits", ())), created_at=self.clock())
        async with self._refresh_lock:
            await self._call(self.store.insert_team, team)
            self._teams[team.id] = team
        return team

    async def list_teams(self) -> list[Team]:
        return await self._call(self.store.list_teams)

    async def get_team(self, team_id: str) -> Team | None:
        return await self._call(self.store.get_team, team_id)

    async def update_team(self, team_id: str, **changes: Any) -> Team:
        changes = _checked(changes, _TEAM_CHANGES)
        team = await self.get_team(team_id)
        if team is None:
            raise NotFound(f"no team {team_id!r}")
        team = attrs.evolve(team, **changes)  # _checked gave tuples
        async with self._refresh_lock:
            await self._call(self.store.update_team, team)
            self._teams[team.id] = team
        return team

    async def delete_team(self, team_id: str) -> bool:
        """Delete a team that has no keys left but revoked ones (False: there was no such team)."""
        now = self.clock()
        members = [k for k in await self.list_keys(team_id) if k.status(now) != "revoked"]
        if members:
            raise FieldError(f"team {team_id} still has {len(members)} key(s); move or revoke them first")
        async with self._refresh_lock:
            deleted = await self._call(self.store.delete_team, team_id, now)
            self._teams.pop(team_id, None)
        return deleted

    # --- usage, spend, the request log ------------------------------------------------------------------

    def cached_keys(self) -> list[KeyRecord]:
        """The active keys the cache holds (each once: a rotated key is there under two digests)."""
        now = self.clock()
        unique = {record.id: record for record in self._by_digest.values()}
        return [record for record in unique.values() if record.status(now) == "active"]

    def cached_teams(self) -> list[Team]:
        return list(self._teams.values())

    async def usage(self, subjects: Iterable[tuple[str, Sequence[Limit]]]) -> list[dict[str, Any]]:
        """For each (subject, its limits): ``{metric: {window: {used, reserved, limit, resetsAt}}}`` in
        the current windows (one store read for all)."""
        wanted = list(subjects)
        now = self.clock()
        rows = await self._call(self.store.counters, [subject for subject, _ in wanted])
        by_key: dict[tuple[str, str, str, float], CounterRow] = {
            (r.subject, r.metric, r.window, r.window_start): r for r in rows}
        out = []
        for subject, limits in wanted:
            usage: dict[str, Any] = {}
            for limit in limits:
                row = by_key.get((subject, limit.metric, limit.window, window_start(limit.window, now)))
                usage.setdefault(limit.metric, {})[limit.window] = {
                    "used": _number(limit.metric, row.used if row else 0.0),
                    "reserved": _number(limit.metric, row.reserved if row else 0.0),
                    "limit": _number(limit.metric, limit.limit),
                    "resetsAt": format_time(resets_at(limit.window, now))}
            out.append(usage)
        return out

    async def keys_json(self, records: Sequence[KeyRecord]) -> list[dict[str, Any]]:
        """The wire shape of ``records`` with their ``usage`` (show and list)."""
        usages = await self.usage((f"key:{r.id}", r.limits) for r in records)
        now = self.clock()
        return [r.to_json(now, usage) for r, usage in zip(records, usages)]

    async def teams_json(self, teams: Sequence[Team]) -> list[dict[str, Any]]:
        usages = await self.usage((f"team:{t.id}", t.limits) for t in teams)
        return [{**t.to_json(), "usage": usage} for t, usage in zip(teams, usages)]

    async def spend(self, group_by: str, start: float | None = None, end: float | None = None) -> list[dict[str, Any]]:
        """Rows ``{group, requests, inputTokens, outputTokens, totalTokens, cost}`` by ``key``,
        ``team``, ``model``, ``user``, ``day`` or ``provider`` over [start, end] (settled spend:
        what is still queued is written within flushInterval)."""
        from .store import GROUP_BY

        if group_by not in GROUP_BY:
            raise FieldError(f"group_by: expected one of {', '.join(GROUP_BY)}, got {group_by!r}")
        return await self._call(self.store.spend, group_by, start, end)

    async def request_log(self, *, key: str | None = None, team: str | None = None, model: str | None = None,
                          status: int | None = None, since: float | None = None,
                          limit: int = 100) -> list[dict[str, Any]]:
        """The newest request-log rows matching the filters, times as RFC 3339."""
        rows = await self._call(partial(self.store.request_log, key=key, team=team, model=model, status=status,
                                        since=since, limit=limit))
        return [{**row, "time": format_time(row["time"])} for row in rows]


def _number(metric: str, value: float) -> int | float:
    return int(value) if metric != "cost" and float(value).is_integer() else value


def _checked(fields: dict[str, Any], allowed: frozenset[str], required: tuple[str, ...] = ()) -> dict[str, Any]:
    """Keyword fields checked as the wire would be (limits may be ``Limit`` tuples or the JSON shape)."""
    unknown = set(fields) - allowed
    if unknown:
        raise FieldError(f"{sorted(unknown)[0]}: unknown field (expected {', '.join(sorted(allowed))})")
    for name in required:
        if name not in fields:
            raise FieldError(f"{name}: required field is missing")
    wire = {("expiresAt" if name == "expires_at" else name): value for name, value in fields.items()}
    limits = wire.pop("limits", None) if _are_limits(fields.get("limits")) else None
    parsed = (parse_team_fields if "team" not in allowed else parse_key_fields)(wire, partial=True)
    if limits is not None:
        parsed["limits"] = tuple(limits)
    return parsed


def _are_limits(value: Any) -> bool:
    return isinstance(value, tuple | list) and all(isinstance(x, Limit) for x in value)

