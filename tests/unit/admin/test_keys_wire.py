"""The keys API's request bodies, CSV export and the command's flag values, field by field."""

from __future__ import annotations

import csv
import io

import pytest

from trioproxy.admin import keys_wire as wire
from trioproxy.admin.keys_api import ApiError, instant, safe_cell, spend_csv
from trioproxy.cli import keys_cli
from trioproxy.cli.trace_cli import UsageError


def test_bodies_name_the_bad_field():
    fields = wire.key_fields({"name": " alice ", "team": "team_1", "models": ["gpt-4o", "openai/*"],
                              "metadata": {"owner": "alice"}, "limits": {"cost": {"day": 5}, "tokens": {"day": 10}},
                              "expiresAt": "2026-12-31T00:00:00Z"}, create=True)
    assert fields["name"] == "alice" and fields["team"] == "team_1" and fields["expires_at"] == 1798675200.0
    assert fields["models"] == ("gpt-4o", "openai/*") and len(fields["limits"]) == 2
    assert wire.key_fields({"team": "", "expiresAt": None}, create=False) == {"team": None, "expires_at": None}
    assert wire.key_fields({}, create=False) == {}
    for body, message in [
        ({}, "name: expected a non-empty string"),
        ({"name": "a", "limits": {"tokens": {"fortnight": 5}}}, "limits.tokens.fortnight: unknown window"),
        ({"name": "a", "limits": {"money": {"day": 5}}}, "limits.money: unknown metric"),
        ({"name": "a", "limits": {"requests": {"minute": 1.5}}}, "limits.requests.minute: expected a whole number"),
        ({"name": "a", "colour": "red"}, "colour: unknown field"),
        ({"name": "a", "models": "gpt-4o"}, "models: expected a list"),
        ({"name": "a", "models": ["ok", ""]}, "models[1]: expected a model name"),
        ({"name": "a", "expiresAt": "next tuesday"}, "expiresAt: expected a time"),
        ({"name": "a", "metadata": {"x": {"y": 1}}}, "metadata.x: expected a string"),
        ({"name": "a", "team": 7}, "team: expected a team id or null"),
    ]:
        with pytest.raises(ValueError) as caught:
            wire.key_fields(body, create=True)
        assert str(caught.value).startswith(message), (body, str(caught.value))
        assert wire.map_error(caught.value) == (400, str(caught.value))
    with pytest.raises(ValueError, match="^limits.cost.day: expected a number >= 0"):
        wire.team_fields({"name": "t", "limits": {"cost": {"day": -1}}}, create=True)


def test_errors_map_to_statuses():
    from trioproxy.errors import KeyStoreUnavailable
    from trioproxy.keys import StoreError

    assert wire.map_error(wire.NotFound("unknown key key_1")) == (404, "unknown key key_1")
    assert wire.map_error(KeyStoreUnavailable()) == (503, "key store unavailable")
    assert wire.map_error(StoreError("disk I/O error at /secret/path")) == (503, "key store unavailable")
    assert wire.map_error(RuntimeError("bug")) is None


def test_durations_and_instants():
    assert wire.duration("1h", "gracePeriod") == 3600
    assert wire.duration("1h30m", "gracePeriod") == 5400
    assert wire.duration(90, "gracePeriod") == 90
    assert wire.duration("0s", "gracePeriod") == 0
    for bad in ("", "1 hour", "h", -1, True, None):
        with pytest.raises(wire.WireError, match="^gracePeriod: "):
            wire.duration(bad, "gracePeriod")
    assert instant("2026-11-01", "from") == 1793491200.0
    assert instant("2026-11-01", "to", end_of_day=True) == pytest.approx(1793491200.0 + 86400, abs=1e-3)
    assert instant("1793491200", "from") == 1793491200.0
    assert instant("2026-11-01T12:00:00+01:00", "from") == 1793491200.0 + 11 * 3600
    assert instant("", "from") is None
    with pytest.raises(ApiError, match="^from: expected an ISO date"):
        instant("yesterday", "from")


@pytest.mark.parametrize("value", ["=HYPERLINK(\"http://evil\",\"x\")", "+1", "-2+3", "@SUM(A1)", "\tx", "\rx"])
def test_csv_cells_that_start_a_formula_are_quoted(value):
    assert safe_cell(value) == "'" + value


def test_spend_csv_is_safe_and_parses_back():
    rows = [{"group": "key_1", "key": "key_1", "name": "=cmd|' /C calc'!A0", "requests": 2, "inputTokens": 10,
             "outputTokens": 5, "totalTokens": 15, "cost": 0.000125}]
    text = spend_csv(["key"], rows)
    parsed = list(csv.reader(io.StringIO(text)))
    assert parsed[0] == ["key", "name", "requests", "inputTokens", "outputTokens", "totalTokens", "cost"]
    assert parsed[1] == ["key_1", "'=cmd|' /C calc'!A0", "2", "10", "5", "15", "0.000125"]
    assert safe_cell(None) == "" and safe_cell(3) == "3" and safe_cell("alice") == "alice"


def test_command_limits_metadata_and_times():
    assert keys_cli.parse_limits(["tokens/day=100000", "cost/month=50", "requests/minute=60"]) == {
        "tokens": {"day": 100000}, "cost": {"month": 50.0}, "requests": {"minute": 60}}
    merged = keys_cli.parse_limits(["tokens/day=none", "cost/day=1.5"], {"tokens": {"day": 5, "week": 9}})
    assert merged == {"tokens": {"week": 9}, "cost": {"day": 1.5}}
    for bad, flag in [("tokens/fortnight=5", "unknown window 'fortnight'"), ("money/day=5", "unknown metric"),
                      ("tokens=5", "expected METRIC/WINDOW=N"), ("tokens/day=many", "expected a number"),
                      ("tokens/day=1.5", "counted whole"), ("cost/day=-1", "0 or more")]:
        with pytest.raises(UsageError, match=f"^--limit.*{flag}"):
            keys_cli.parse_limits([bad])
    assert keys_cli.parse_metadata(["owner=alice", "x=a=b"], {"old": "1", "owner": "bob"}) == {
        "old": "1", "owner": "alice", "x": "a=b"}
    assert keys_cli.parse_metadata(["old="], {"old": "1"}) == {}
    with pytest.raises(UsageError, match="^--metadata"):
        keys_cli.parse_metadata(["owner"])
    assert keys_cli.parse_duration("1h30m", "--grace") == 5400
    with pytest.raises(UsageError, match="^--grace"):
        keys_cli.parse_duration("soon", "--grace")
    assert keys_cli.parse_expires("2026-12-31") == "2026-12-31T00:00:00Z"
    assert keys_cli.parse_expires("never") is None
    assert keys_cli.parse_expires("30d").endswith("Z")
    assert keys_cli.parse_time("2026-11-30", "--to", end_of_day=True) == "2026-11-30T23:59:59Z"
    with pytest.raises(UsageError, match="^--from"):
        keys_cli.parse_time("last week", "--from")


def test_command_tables_show_user_input_on_one_line():
    text = keys_cli.key_rows([{"id": "key_1", "name": "evil\nname\x1b[31m", "prefix": "sk-tp-ab", "team": None,
                               "status": "active", "models": [], "limits": {"tokens": {"day": 5}}, "expiresAt": None}])
    lines = text.splitlines()
    assert len(lines) == 2 and "evil\\nname\\x1b[31m" in lines[1] and "tokens/day=5" in lines[1]
    assert "\x1b" not in text
