"""The keys API's wire shapes: request bodies checked field by field (each problem names its
field, ``limits.tokens.fortnight: unknown window``), records and usage as JSON, and the
service's errors as (status, message). Pure functions over the ``KeyService``'s records; the
routes are in ``keys_api.py``."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from typing import Any

METRICS = ("requests", "tokens", "cost")
WINDOWS = ("minute", "hour", "day", "week", "month", "total")
KEY_FIELDS = ("name", "team", "metadata", "models", "limits", "expiresAt")
TEAM_FIELDS = ("name", "metadata", "limits")
MAX_NAME = 200
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class WireError(ValueError):
    """A request body field that is not right: 400 with ``field: problem``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


# -- request bodies --------------------------------------------------------------------------------

def limits(value: Any, field: str = "limits") -> dict[str, dict[str, float | int]]:
    """``{"tokens": {"day": 100000}, "cost": {"month": 50}}``; requests and tokens whole numbers."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WireError(field, "expected an object of metrics (requests, tokens, cost)")
    out: dict[str, dict[str, float | int]] = {}
    for metric, windows in value.items():
        where = f"{field}.{metric}"
        if metric not in METRICS:
            raise WireError(where, f"unknown metric (expected {'|'.join(METRICS)})")
        if windows is None:
            continue
        if not isinstance(windows, dict):
            raise WireError(where, f"expected an object of windows ({'|'.join(WINDOWS)})")
        for window, amount in windows.items():
            at = f"{where}.{window}"
            if window not in WINDOWS:
                raise WireError(at, f"unknown window (expected {'|'.join(WINDOWS)})")
            if amount is None:
                continue
            if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount) or amount < 0:
                raise WireError(at, "expected a number of 0 or more")
            if metric != "cost":
                if float(amount) != int(amount):
                    raise WireError(at, f"expected a whole number of {metric}")
                amount = int(amount)
            out.setdefault(metric, {})[window] = amount
    return out


def metadata(value: Any, field: str = "metadata") -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise WireError(field, "expected an object of strings")
    for k, v in value.items():
        if not isinstance(v, (str, int, float, bool)) or v is None:
            raise WireError(f"{field}.{k}", "expected a string")
    return {str(k): v if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def name(value: Any, field: str = "name") -> str:
    if not isinstance(value, str) or not value.strip():
        raise WireError(field, "expected a non-empty string")
    if len(value) > MAX_NAME:
        raise WireError(field, f"longer than {MAX_NAME} characters")
    return value.strip()


def models(value: Any, field: str = "models") -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise WireError(field, "expected a list of model names (a name, or prefix/*); [] allows every model")
    out = []
    for i, model in enumerate(value):
        if not isinstance(model, str) or not model.strip():
            raise WireError(f"{field}[{i}]", "expected a model name")
        out.append(model.strip())
    return out


def timestamp(value: Any, field: str) -> float | None:
    """An instant: ISO 8601 (UTC unless it says otherwise) or unix seconds; null for none."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise WireError(field, "expected an ISO date-time or unix seconds")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(r"\d+(\.\d+)?", text):
            return float(text)
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return moment.timestamp()
    raise WireError(field, f"expected an ISO date-time (2026-12-31T00:00:00Z) or unix seconds, got {value!r}")


def duration(value: Any, field: str) -> float:
    """``"1h"``, ``"30m"``, ``"90s"``, ``"1h30m"`` or a number of seconds."""
    if isinstance(value, bool):
        raise WireError(field, "expected a duration such as 1h")
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value < 0:
            raise WireError(field, "expected a duration of 0 or more")
        return float(value)
    if isinstance(value, str):
        text, pos, total = value.strip(), 0, 0.0
        while text and pos < len(text):
            match = _DURATION.match(text, pos)
            if match is None:
                break
            total += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        else:
            if text:
                return total
    raise WireError(field, f"expected a duration such as 30m, 1h or 1h30m, got {value!r}")


def _unknown(body: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for field in body:
        if field not in allowed:
            raise WireError(str(field), f"unknown field (expected {', '.join(allowed)})")


def key_fields(body: dict[str, Any], *, create: bool) -> dict[str, Any]:
    """A create or update body as the service's keyword arguments (update: only the fields given).

    ``team`` null or "" removes the key from its team; ``expiresAt`` null: never expires."""
    _unknown(body, KEY_FIELDS)
    fields: dict[str, Any] = {}
    if create or "name" in body:
        fields["name"] = name(body.get("name"))
    if "team" in body:
        team = body["team"]
        if team is not None and not isinstance(team, str):
            raise WireError("team", "expected a team id or null")
        fields["team"] = team or None
    if "metadata" in body:
        fields["metadata"] = metadata(body["metadata"])
    if "models" in body:
        fields["models"] = models(body["models"])
    if "limits" in body:
        fields["limits"] = limits(body["limits"])
    if "expiresAt" in body:
        fields["expires_at"] = timestamp(body["expiresAt"], "expiresAt")
    return fields


def team_fields(body: dict[str, Any], *, create: bool) -> dict[str, Any]:
    _unknown(body, TEAM_FIELDS)
    fields: dict[str, Any] = {}
    if create or "name" in body:
        fields["name"] = name(body.get("name"))
    if "metadata" in body:
        fields["metadata"] = metadata(body["metadata"])
    if "limits" in body:
        fields["limits"] = limits(body["limits"])
    return fields


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
