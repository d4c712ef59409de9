"""Runtime keys and teams as values, and their JSON wire shape (pure: no I/O).

A key is known by the SHA-256 of its secret (``policies.api_key.key_digest``); the secret itself
(``sk-tp-`` + 43 url-safe base64 characters, 32 random bytes) is shown once, by create and rotate.
A rotated key keeps its old digest as ``previous_digest`` until ``previous_valid_until``.

Wire shape (docs/keys.md): ``{"id", "name", "prefix", "team", "metadata", "models", "limits",
"expiresAt", "createdAt", "revokedAt", "rotatedAt", "previousValidUntil", "status"}`` plus ``usage``
in show/list; times are RFC 3339 UTC (``2026-12-31T00:00:00Z``). A team is ``{"id", "name",
"metadata", "limits", "createdAt"}``. ``parse_key_fields`` / ``parse_team_fields`` read what a client
sends (create or update) with errors naming the field.
"""

from __future__ import annotations

import base64
import datetime
import secrets
from collections.abc import Iterator, Mapping
from typing import Any, Literal

import attrs
from attrs import frozen

from ..policies.api_key import key_digest
from .limits import Limit, LimitsError, limits_from_json, limits_to_json

__all__ = [
    "SECRET_PREFIX",
    "FieldError",
    "KeyRecord",
    "Principal",
    "Status",
    "Team",
    "format_time",
    "key_digest",
    "new_id",
    "new_secret",
    "parse_key_fields",
    "parse_team_fields",
    "parse_time",
    "secret_prefix",
]

Status = Literal["active", "revoked", "expired"]
SECRET_PREFIX = "sk-tp-"
_NAME_MAX = 200


class FieldError(ValueError):
    """A key or team field a client sent that is not valid; the message names the field."""


def new_secret() -> str:
    """``sk-tp-`` + 43 url-safe base64 characters of 32 random bytes."""
    return SECRET_PREFIX + base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")


def secret_prefix(secret: str) -> str:
    """What a key is shown by: ``sk-tp-`` and the secret's next 4 characters."""
    return secret[:len(SECRET_PREFIX) + 4]


def new_id(kind: Literal["key", "team"]) -> str:
    """``key_3f9a0c1b2d4e`` / ``team_ab12cd34ef56`` (48 random bits)."""
    return f"{kind}_{secrets.token_hex(6)}"


def format_time(when: float | None) -> str | None:
    """Epoch seconds → ``2026-12-31T00:00:00Z`` (milliseconds when there are any)."""
    if when is None:
        return None
    moment = datetime.datetime.fromtimestamp(when, datetime.UTC)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    millis = moment.microsecond // 1000
    return f"{text}.{millis:03d}Z" if millis else f"{text}Z"


def parse_time(value: Any, field: str) -> float | None:
    """RFC 3339 text (``Z`` or an offset; a date alone is its midnight UTC) or epoch seconds → epoch seconds."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, str):
        raise FieldError(f"{field}: expected a time such as 2026-12-31T00:00:00Z, got {value!r}")
    try:
        moment = datetime.datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        raise FieldError(f"{field}: expected a time such as 2026-12-31T00:00:00Z, got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment.timestamp()


@frozen
class Team:
    """A group of keys whose limits are shared by all of them (and apply beside each key's own)."""

    id: str
    name: str
    metadata: Mapping[str, str] = attrs.field(factory=dict)
    limits: tuple[Limit, ...] = ()
    created_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "metadata": dict(self.metadata),
                "limits": limits_to_json(self.limits), "createdAt": format_time(self.created_at)}

    def cel(self) -> dict[str, Any]:
        """CEL's ``team``."""
        return {"id": self.id, "name": self.name, "metadata": dict(self.metadata)}


@frozen
class KeyRecord:
    """A runtime key as stored (never its secret: ``digest`` is its SHA-256 hex)."""

    id: str
    name: str
    prefix: str
    digest: str = attrs.field(repr=False)
    team: str | None = None
    metadata: Mapping[str, str] = attrs.field(factory=dict)
    models: tuple[str, ...] = ()  # () = every model; "openai/*" = a prefix
    limits: tuple[Limit, ...] = ()
    expires_at: float | None = None
    created_at: float = 0.0
    revoked_at: float | None = None
    rotated_at: float | None = None
    previous_digest: str | None = attrs.field(default=None, repr=False)
    previous_valid_until: float | None = None

    def status(self, now: float) -> Status:
        if self.revoked_at is not None and self.revoked_at <= now:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"

    def allows_model(self, model: str | None) -> bool:
        """Whether ``model`` is in ``models`` (names, ``prefix/*``, ``*``); every model when it is empty."""
        if not self.models:
            return True
        if model is None:
            return False
        return any(model == pattern or (pattern.endswith("*") and model.startswith(pattern[:-1]))
                   for pattern in self.models)

    @property
    def user(self) -> str | None:
        """The user spend is grouped by: ``metadata.user``, else ``metadata.owner``."""
        return self.metadata.get("user") or self.metadata.get("owner") or None

    def to_json(self, now: float, usage: Mapping[str, Any] | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id, "name": self.name, "prefix": self.prefix, "team": self.team,
            "metadata": dict(self.metadata), "models": list(self.models), "limits": limits_to_json(self.limits),
            "expiresAt": format_time(self.expires_at), "createdAt": format_time(self.created_at),
            "revokedAt": format_time(self.revoked_at), "rotatedAt": format_time(self.rotated_at),
            "previousValidUntil": format_time(self.previous_valid_until), "status": self.status(now)}
        if usage is not None:
            out["usage"] = dict(usage)
        return out

    def cel(self) -> dict[str, Any]:
        """CEL's ``key`` (never the digest)."""
        return {"id": self.id, "name": self.name, "prefix": self.prefix, "team": self.team,
                "metadata": dict(self.metadata), "models": list(self.models)}


@frozen
class Principal:
    """Who a request is: its key and the key's team (None when it has none)."""

    key: KeyRecord
    team: Team | None = None

    def subjects(self) -> Iterator[tuple[str, str, Limit]]:
        """(counter subject, what a client reads, limit) of every limit that applies: the key's, then its team's."""
        for limit in self.key.limits:
            yield f"key:{self.key.id}", f"key {self.key.name}", limit
        if self.team is not None:
            for limit in self.team.limits:
                yield f"team:{self.team.id}", f"team {self.team.name}", limit

    @property
    def limited(self) -> bool:
        return bool(self.key.limits) or (self.team is not None and bool(self.team.limits))

    def cel(self) -> dict[str, Any]:
        """CEL variables ``key`` and ``team`` (``team`` is null without one)."""
        return {"key": self.key.cel(), "team": self.team.cel() if self.team is not None else None}


# --- what clients send --------------------------------------------------------------------------

_KEY_FIELDS = {"name", "team", "metadata", "models", "limits", "expiresAt"}
_TEAM_FIELDS = {"name", "metadata", "limits"}


def _name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise FieldError(f"{field}: expected a non-empty string, got {value!r}")
    if len(value) > _NAME_MAX:
        raise FieldError(f"{field}: longer than {_NAME_MAX} characters")
    return value.strip()


def _metadata(value: Any, field: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FieldError(f"{field}: expected an object of strings, got {value!r}")
    out = {}
    for name, item in value.items():
        if not isinstance(name, str) or not isinstance(item, str):
            raise FieldError(f"{field}.{name}: expected a string, got {item!r}")
        out[name] = item
    return out


def _models(value: Any, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise FieldError(f"{field}: expected a list of model names (`openai/*` for a prefix), got {value!r}")
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise FieldError(f"{field}[{index}]: expected a model name, got {item!r}")
        if "*" in item[:-1]:
            raise FieldError(f"{field}[{index}]: `*` may only end a model pattern, got {item!r}")
    return tuple(value)


def _limits(value: Any) -> tuple[Limit, ...]:
    try:
        return limits_from_json(value)
    except LimitsError as error:
        raise FieldError(str(error)) from None


def _unknown(value: Mapping[str, Any], allowed: set[str]) -> None:
    for name in value:
        if name not in allowed:
            raise FieldError(f"{name}: unknown field (expected {', '.join(sorted(allowed))})")


def parse_key_fields(value: Any, *, partial: bool = False) -> dict[str, Any]:
    """A create (``partial`` False: ``name`` required) or update body → keyword arguments of
    ``KeyService.create_key`` / ``update_key`` (``name``, ``team``, ``metadata``, ``models``,
    ``limits``, ``expires_at``); only the fields given are in the result."""
    if not isinstance(value, Mapping):
        raise FieldError(f"expected a JSON object, got {value!r}")
    _unknown(value, _KEY_FIELDS)
    out: dict[str, Any] = {}
    if "name" in value or not partial:
        out["name"] = _name(value.get("name"), "name")
    if "team" in value:
        team = value["team"]
        if team is not None and (not isinstance(team, str) or not team):
            raise FieldError(f"team: expected a team id or null, got {team!r}")
        out["team"] = team
    if "metadata" in value:
        out["metadata"] = _metadata(value["metadata"], "metadata")
    if "models" in value:
        out["models"] = _models(value["models"], "models")
    if "limits" in value:
        out["limits"] = _limits(value["limits"])
    if "expiresAt" in value:
        out["expires_at"] = parse_time(value["expiresAt"], "expiresAt")
    return out


def parse_team_fields(value: Any, *, partial: bool = False) -> dict[str, Any]:
    """A team create or update body → keyword arguments (``name``, ``metadata``, ``limits``)."""
    if not isinstance(value, Mapping):
        raise FieldError(f"expected a JSON object, got {value!r}")
    _unknown(value, _TEAM_FIELDS)
    out: dict[str, Any] = {}
    if "name" in value or not partial:
        out["name"] = _name(value.get("name"), "name")
    if "metadata" in value:
        out["metadata"] = _metadata(value["metadata"], "metadata")
    if "limits" in value:
        out["limits"] = _limits(value["limits"])
    return out
