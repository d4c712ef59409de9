"""Limits of runtime keys and teams: a metric counted over a calendar window (pure functions).

A ``Limit`` is (metric, window, limit): ``requests``, ``tokens`` or ``cost`` (USD) counted over a
calendar window in UTC: ``minute``, ``hour``, ``day``, ``week`` (from Monday 00:00), ``month`` (from
the 1st 00:00) or ``total`` (never resets). A window is known by its start (epoch seconds; 0 for
``total``), which is how the store keys its counters.

The wire shape (admin API, CLI, UI) is ``{"tokens": {"day": 1000, "month": 20000}, "cost": {"total": 5}}``;
``limits_from_json`` reads it with errors naming the field (``limits.tokens.fortnight: unknown window``).
"""

from __future__ import annotations

import calendar
import datetime
import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal, cast

from attrs import frozen

__all__ = [
    "METRICS",
    "WINDOWS",
    "Limit",
    "LimitsError",
    "Metric",
    "Window",
    "limits_from_json",
    "limits_to_json",
    "resets_at",
    "window_start",
]

Metric = Literal["requests", "tokens", "cost"]
Window = Literal["minute", "hour", "day", "week", "month", "total"]
METRICS: tuple[Metric, ...] = ("requests", "tokens", "cost")
WINDOWS: tuple[Window, ...] = ("minute", "hour", "day", "week", "month", "total")
_UTC = datetime.UTC


class LimitsError(ValueError):
    """A limits document that is not valid; the message names the field (``limits.tokens.day: ...``)."""


@frozen
class Limit:
    """At most ``limit`` of ``metric`` per ``window`` (requests and tokens are whole numbers; cost is USD)."""

    metric: Metric
    window: Window
    limit: float


def window_start(window: Window, now: float) -> float:
    """The start (epoch seconds, UTC) of the ``window`` that holds ``now``; 0 for ``total``."""
    if window == "total":
        return 0.0
    if window == "minute":
        return float(math.floor(now / 60) * 60)
    if window == "hour":
        return float(math.floor(now / 3600) * 3600)
    day = math.floor(now / 86400) * 86400
    if window == "day":
        return float(day)
    moment = datetime.datetime.fromtimestamp(day, _UTC)
    if window == "week":
        return float(day - moment.weekday() * 86400)  # Monday is 0
    if window == "month":
        return float(calendar.timegm((moment.year, moment.month, 1, 0, 0, 0)))
    raise ValueError(f"unknown window {window!r}")


def resets_at(window: Window, now: float) -> float | None:
    """When the ``window`` holding ``now`` ends (the next one starts); None for ``total``."""
    if window == "total":
        return None
    start = window_start(window, now)
    if window == "minute":
        return start + 60
    if window == "hour":
        return start + 3600
    if window == "day":
        return start + 86400
    if window == "week":
        return start + 7 * 86400
    moment = datetime.datetime.fromtimestamp(start, _UTC)
    year, month = (moment.year + 1, 1) if moment.month == 12 else (moment.year, moment.month + 1)
    return float(calendar.timegm((year, month, 1, 0, 0, 0)))


def _amount(value: Any, metric: str, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise LimitsError(f"{where}: expected a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise LimitsError(f"{where}: expected a number >= 0, got {value!r}")
    if metric != "cost" and not float(value).is_integer():
        raise LimitsError(f"{where}: expected a whole number of {metric}, got {value!r}")
    return float(value)


def limits_from_json(value: Any, field: str = "limits") -> tuple[Limit, ...]:
    """``{"tokens": {"day": 1000}}`` → ``(Limit("tokens", "day", 1000.0),)``; null/absent entries are
    left out (so an update can remove one). Raises ``LimitsError`` naming ``field.metric.window``."""
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise LimitsError(f"{field}: expected an object such as {{\"tokens\": {{\"day\": 1000}}}}, got {value!r}")
    out: list[Limit] = []
    for metric, windows in value.items():
        where = f"{field}.{metric}"
        if metric not in METRICS:
            raise LimitsError(f"{where}: unknown metric (expected one of {', '.join(METRICS)})")
        if windows is None:
            continue
        if not isinstance(windows, Mapping):
            raise LimitsError(f"{where}: expected an object of window: limit, got {windows!r}")
        for window, amount in windows.items():
            if window not in WINDOWS:
                raise LimitsError(f"{where}.{window}: unknown window (expected one of {', '.join(WINDOWS)})")
            if amount is None:
                continue
            out.append(Limit(cast(Metric, metric), cast(Window, window), _amount(amount, metric, f"{where}.{window}")))
    return sort_limits(out)


def sort_limits(limits: Iterable[Limit]) -> tuple[Limit, ...]:
    """Limits in the one order they are shown and checked in (metrics, then windows, as listed above)."""
    return tuple(sorted(limits, key=lambda x: (METRICS.index(x.metric), WINDOWS.index(x.window))))


def _wire_number(metric: str, value: float) -> int | float:
    return int(value) if metric != "cost" and float(value).is_integer() else value


def limits_to_json(limits: Iterable[Limit]) -> dict[str, dict[str, int | float]]:
    """The wire shape of ``limits`` (requests and tokens as integers)."""
    out: dict[str, dict[str, int | float]] = {}
    for limit in sort_limits(limits):
        out.setdefault(limit.metric, {})[limit.window] = _wire_number(limit.metric, limit.limit)
    return out
