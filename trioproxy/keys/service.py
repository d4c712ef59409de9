"""``KeyService``: runtime keys on the request path (cache, reserve, settle) and their control plane.

Data plane: ``authenticate`` reads a cache of keys and teams by digest, refreshed from the store
every ``refreshInterval`` (only the records changed since the last refresh), so replicas see new,
changed and revoked keys within it; a miss reads the store once, and a miss there is remembered for
about ``refreshInterval``. ``reserve`` admits a request while used + reserved < limit in every
limited window of its key and team, reserving one request and its token/cost estimate in one store
transaction (a key and team without limits: no store I/O at all). ``settle`` queues the real usage
(no I/O); ``run`` writes the queue in one transaction per batch every ``flushInterval``.

Control plane (admin API, CLI): create/list/get/update/rotate/revoke keys, teams, spend and the
request log. Store failures are ``KeyStoreUnavailable``; the request-path stage applies
``failureMode``. docs/keys.md states the rules and their bounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import trio
from attrs import frozen

from ..config.model import KeysSettings
from ..errors import BudgetExceeded, KeyRefused, KeyStoreUnavailable
from .records import KeyRecord, Principal, Team
from .store import ReserveItem, Store

__all__ = ["KeyService", "Reservation"]


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


class KeyService:
    def __init__(self, store: Store, settings: KeysSettings, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        raise NotImplementedError

    async def authenticate(self, secret: str) -> Principal:
        raise NotImplementedError

    async def reserve(self, principal: Principal, *, tokens: int, cost: float | None) -> Reservation:
        raise NotImplementedError

    def settle(self, reservation: Reservation, *, tokens: int, cost: float, model: str | None,
               provider: str | None, status: int, log: dict[str, Any] | None = None,
               input_tokens: int | None = None, output_tokens: int | None = None) -> None:
        raise NotImplementedError

    async def create_key(self, **fields: Any) -> tuple[KeyRecord, str]:
        raise NotImplementedError

    async def list_keys(self, team: str | None = None) -> list[KeyRecord]:
        raise NotImplementedError

    async def get_key(self, key_id: str) -> KeyRecord | None:
        raise NotImplementedError

    async def update_key(self, key_id: str, **changes: Any) -> KeyRecord:
        raise NotImplementedError

    async def rotate_key(self, key_id: str, grace: float) -> tuple[KeyRecord, str]:
        raise NotImplementedError

    async def revoke_key(self, key_id: str) -> KeyRecord:
        raise NotImplementedError

    async def create_team(self, **fields: Any) -> Team:
        raise NotImplementedError

    async def list_teams(self) -> list[Team]:
        raise NotImplementedError

    async def get_team(self, team_id: str) -> Team | None:
        raise NotImplementedError

    async def update_team(self, team_id: str, **changes: Any) -> Team:
        raise NotImplementedError

    async def delete_team(self, team_id: str) -> bool:
        raise NotImplementedError

    async def spend(self, group_by: str, start: float | None = None, end: float | None = None) -> list[dict[str, Any]]:
        raise NotImplementedError

    async def request_log(self, *, key: str | None = None, team: str | None = None, model: str | None = None,
                          status: int | None = None, since: float | None = None,
                          limit: int = 100) -> list[dict[str, Any]]:
        raise NotImplementedError


_errors = (BudgetExceeded, KeyRefused, KeyStoreUnavailable)
