"""keys/limits.py: calendar windows in UTC and the limits' JSON shape."""

from __future__ import annotations

import calendar

import pytest

from trioproxy.errors import BudgetExceeded, error_response
from trioproxy.keys.limits import (
    WINDOWS,
    Limit,
    LimitsError,
    limits_from_json,
    limits_to_json,
    resets_at,
    window_start,
)


def t(*parts: int) -> float:
    """UTC time from (year, month, day, hour, minute, second)."""
    return float(calendar.timegm((*parts, *(0,) * (6 - len(parts)))))


# 2026-11-28 is a Saturday
NOW = t(2026, 11, 28, 13, 47, 31) + 0.25


@pytest.mark.parametrize(("window", "start", "end"), [
    ("minute", t(2026, 11, 28, 13, 47), t(2026, 11, 28, 13, 48)),
    ("hour", t(2026, 11, 28, 13), t(2026, 11, 28, 14)),
    ("day", t(2026, 11, 28), t(2026, 11, 29)),
    ("week", t(2026, 11, 23), t(2026, 11, 30)),  # Monday 23rd to Monday 30th
    ("month", t(2026, 11, 1), t(2026, 12, 1)),
    ("total", 0.0, None),
])
def test_windows_are_calendar_windows_in_utc(window, start, end):
    assert window_start(window, NOW) == start
    assert resets_at(window, NOW) == end


def test_a_window_starts_at_its_own_first_instant():
    monday = t(2026, 11, 30)
    assert window_start("week", monday) == monday
    assert window_start("week", monday - 0.001) == t(2026, 11, 23)
    assert window_start("month", t(2026, 12, 1)) == t(2026, 12, 1)
    assert window_start("day", t(2026, 12, 1) - 0.001) == t(2026, 11, 30)


def test_month_ends_roll_over_years_and_february():
    assert resets_at("month", t(2026, 12, 31, 23, 59, 59)) == t(2027, 1, 1)
    assert resets_at("month", t(2028, 2, 29, 12)) == t(2028, 3, 1)
    assert window_start("month", t(2028, 2, 29, 12)) == t(2028, 2, 1)


def test_a_week_crossing_a_month_starts_on_the_monday_before():
    assert window_start("week", t(2027, 1, 1, 5)) == t(2026, 12, 28)  # a Friday; the Monday is in December
    assert resets_at("week", t(2027, 1, 1, 5)) == t(2027, 1, 4)


def test_every_window_holds_now():
    for window in WINDOWS:
        if window != "total":
            assert window_start(window, NOW) <= NOW < resets_at(window, NOW)


def test_json_round_trip_in_one_order():
    wire = {"cost": {"total": 500, "day": 5.5}, "requests": {"minute": 60}, "tokens": {"day": 1e6, "week": 5000000}}
    limits = limits_from_json(wire)
    assert limits == (Limit("requests", "minute", 60.0), Limit("tokens", "day", 1e6), Limit("tokens", "week", 5e6),
                      Limit("cost", "day", 5.5), Limit("cost", "total", 500.0))
    back = limits_to_json(limits)
    assert back == {"requests": {"minute": 60}, "tokens": {"day": 1000000, "week": 5000000},
                    "cost": {"day": 5.5, "total": 500.0}}
    assert isinstance(back["tokens"]["day"], int) and isinstance(back["cost"]["total"], float)
    assert limits_from_json(back) == limits


def test_null_entries_and_empty_documents_are_no_limits():
    assert limits_from_json(None) == ()
    assert limits_from_json({}) == ()
    assert limits_from_json({"tokens": None, "requests": {"day": None, "hour": 5}}) == (Limit("requests", "hour", 5.0),)


@pytest.mark.parametrize(("value", "message"), [
    ({"tokens": {"fortnight": 5}}, "limits.tokens.fortnight: unknown window (expected one of minute, hour, day, week, month, total)"),
    ({"dollars": {"day": 5}}, "limits.dollars: unknown metric (expected one of requests, tokens, cost)"),
    ({"tokens": {"day": "lots"}}, "limits.tokens.day: expected a number, got 'lots'"),
    ({"tokens": {"day": True}}, "limits.tokens.day: expected a number, got True"),
    ({"tokens": {"day": -1}}, "limits.tokens.day: expected a number >= 0, got -1"),
    ({"requests": {"day": 1.5}}, "limits.requests.day: expected a whole number of requests, got 1.5"),
    ({"cost": {"day": float("nan")}}, "limits.cost.day: expected a number >= 0, got nan"),
    ({"tokens": [1]}, "limits.tokens: expected an object of window: limit, got [1]"),
    ([1], "limits: expected an object such as {\"tokens\": {\"day\": 1000}}, got [1]"),
])
def test_bad_limits_name_the_field(value, message):
    with pytest.raises(LimitsError) as info:
        limits_from_json(value)
    assert str(info.value) == message


def test_the_field_name_is_the_callers():
    with pytest.raises(LimitsError, match=r"^team\.limits\.cost\.year: unknown window"):
        limits_from_json({"cost": {"year": 1}}, "team.limits")


def test_budget_exceeded_names_the_subject_metric_window_limit_and_reset():
    error = BudgetExceeded("key alice-laptop", "tokens", "day", 1e6, t(2026, 11, 29), now=t(2026, 11, 28, 23, 59, 30))
    status, headers, body = error_response(error)
    assert status == 429
    assert body == b"budget exceeded: key alice-laptop's tokens per day (1000000); resets at 2026-11-29T00:00:00Z"
    assert (b"retry-after", b"30") in headers
    total = BudgetExceeded("team research", "cost", "total", 2.5, None)
    assert total.message == "budget exceeded: team research's cost in total (2.5); it does not reset"
    assert not any(name == b"retry-after" for name, _ in total.headers)
    assert b'"type": "rate_limit_error"' in error_response(error, "openai")[2]


def test_windows_do_not_depend_on_the_local_time_zone(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Pacific/Honolulu")  # UTC-10: a UTC midnight is the day before here
    time.tzset()
    try:
        assert window_start("week", t(2026, 11, 30, 1)) == t(2026, 11, 30)
        assert window_start("month", t(2026, 12, 1, 1)) == t(2026, 12, 1)
        assert resets_at("month", t(2026, 11, 30, 23)) == t(2026, 12, 1)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_an_unknown_window_is_named():
    with pytest.raises(ValueError, match="^unknown window 'fortnight'$"):
        window_start("fortnight", NOW)  # type: ignore[arg-type]


def test_zero_and_fractional_cost_limits_are_limits():
    assert limits_from_json({"requests": {"day": 0}, "cost": {"day": 0.5}}) == (
        Limit("requests", "day", 0.0), Limit("cost", "day", 0.5))
