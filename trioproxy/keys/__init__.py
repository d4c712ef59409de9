"""Runtime API keys, teams, budgets and spend (issue 30; docs/keys.md).

A layer beside ``trioproxy.llm``: it imports config, policies, errors and the base only.

- ``limits``: metrics over calendar windows (pure);
- ``records``: keys, teams and principals, their JSON wire shape (pure);
- ``store``: the SQL store over SQLite or PostgreSQL;
- ``service``: ``KeyService``, the cache, reservations, batched settlement and the control plane.
"""

from __future__ import annotations

from ..config.model import KeysSettings
from ..errors import BudgetExceeded, KeyRefused, KeyStoreUnavailable, ModelNotAllowed
from .limits import METRICS, WINDOWS, Limit, LimitsError, limits_from_json, limits_to_json, resets_at, window_start
from .records import FieldError, KeyRecord, Principal, Team, new_secret, parse_key_fields, parse_team_fields
from .service import KeyService, NotFound, Reservation
from .store import GROUP_BY, Store, StoreError, open_store

__all__ = [
    "GROUP_BY",
    "METRICS",
    "WINDOWS",
    "BudgetExceeded",
    "FieldError",
    "KeyRecord",
    "KeyRefused",
    "KeyService",
    "KeyStoreUnavailable",
    "KeysSettings",
    "Limit",
    "LimitsError",
    "ModelNotAllowed",
    "NotFound",
    "Principal",
    "Reservation",
    "Store",
    "StoreError",
    "Team",
    "limits_from_json",
    "limits_to_json",
    "new_secret",
    "open_store",
    "parse_key_fields",
    "parse_team_fields",
    "resets_at",
    "window_start",
]
