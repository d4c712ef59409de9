"""The keys API's wire shapes over the ``KeyService`` (``keys_api.py`` has the routes): request
bodies read by the records' own parsers (``trioproxy/keys/records.py``: each problem names its
field, ``limits.tokens.fortnight: unknown window``), records with their usage as JSON, spend rows
in one or two dimensions, and the service's errors as (status, message)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..errors import KeyStoreUnavailable
from ..keys import FieldError, KeyService, LimitsError, StoreError, parse_key_fields, parse_team_fields
from ..keys.records import format_time

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class WireError(ValueError):
    """A request field that is not right: 400 with ``field: problem``."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field


class NotFound(LookupError):
    """An unknown key or team id: 404."""


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


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- request bodies --------------------------------------------------------------------------------

def key_fields(body: Any, *, create: bool) -> dict[str, Any]:
    """A create or update body as ``create_key``/``update_key`` keyword arguments (only the fields
    given when updating); ``team: ""`` is taken as null (no team)."""
    if isinstance(body, dict) and body.get("team") == "":
        body = {**body, "team": None}
    return parse_key_fields(body, partial=not create)


def team_fields(body: Any, *, create: bool) -> dict[str, Any]:
    return parse_team_fields(body, partial=not create)


# -- spend and the request log ---------------------------------------------------------------------

async def spend_rows(service: KeyService, groups: Sequence[str], start: float | None,
                     end: float | None) -> list[dict[str, Any]]:
    """Spend rows by one dimension, or by two (``day,model``): the first dimension's rows, each
    split by the second within that group's days (two dimensions are asked day by day, so at
    most one query per day that has any spend)."""
    if len(groups) == 1:
        rows = await service.spend(groups[0], start, end)
        return [{**row, groups[0]: row.get("group")} for row in rows]
    first, second = groups
    if "day" not in groups:
        raise WireError("group_by", "two dimensions need day as one of them (day,model)")
    other = second if first == "day" else first
    out = []
    for day_row in await service.spend("day", start, end):
        day = str(day_row.get("group"))
        day_start = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()
        low = day_start if start is None else max(start, day_start)
        high = day_start + 86400 - 1e-6 if end is None else min(end, day_start + 86400 - 1e-6)
        for row in await service.spend(other, low, high):
            values = {"day": day, other: row.get("group")}
            out.append({**row, "group": " / ".join(str(values[g]) for g in groups), **values})
    return out


_LOG_NAMES = {"latency_ms": "latencyMs", "input_tokens": "inputTokens", "output_tokens": "outputTokens"}


def log_entry(row: dict[str, Any]) -> dict[str, Any]:
    """A request-log row on the wire: camelCase names, the time as RFC 3339 (and ``timestamp``)."""
    out = {_LOG_NAMES.get(name, name): value for name, value in row.items()}
    if isinstance(out.get("time"), int | float):
        out["timestamp"] = out["time"]
        out["time"] = format_time(out["time"])
    return out


async def log_entries(service: KeyService, **query: Any) -> list[dict[str, Any]]:
    status = query.pop("status", None)
    if isinstance(status, str):  # a class (5xx): filtered here, the store matches exact codes
        limit = query.pop("limit")
        rows = await service.request_log(**query, limit=min(10 * limit, 10_000))
        first = status[0]
        return [log_entry(e) for e in rows if str(e.get("status", ""))[:1] == first][:limit]
    return [log_entry(e) for e in await service.request_log(**query, status=status)]


# -- errors ----------------------------------------------------------------------------------------

def map_error(error: Exception) -> tuple[int, str] | None:
    """The service's errors as (status, message); None: not one of them (a bug: 500)."""
    if isinstance(error, (FieldError, LimitsError, WireError)):
        return 400, str(error)
    if isinstance(error, NotFound):
        return 404, str(error.args[0]) if error.args else "not found"
    if isinstance(error, KeyStoreUnavailable | StoreError):
        return 503, KeyStoreUnavailable.default_message
    if isinstance(error, LookupError):  # the service's "no such key/team"
        return 404, str(error.args[0]) if error.args and isinstance(error.args[0], str) else "not found"
    return None
