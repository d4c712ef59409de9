"""keys/records.py: secrets, the wire shape, statuses, model patterns and what clients send."""

from __future__ import annotations

import re

import pytest

from trioproxy.keys.limits import Limit
from trioproxy.keys.records import (
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
    parse_time,
    secret_prefix,
)
from trioproxy.policies.api_key import key_digest as policy_digest

T0 = 1_795_046_400.0  # 2026-11-19T00:00:00Z


def test_secrets_ids_and_digests():
    secret = new_secret()
    assert re.fullmatch(r"sk-tp-[A-Za-z0-9_-]{43}", secret)
    assert new_secret() != secret
    assert secret_prefix(secret) == secret[:10]
    assert key_digest(secret) == policy_digest(secret) and len(key_digest(secret)) == 64
    assert re.fullmatch(r"key_[0-9a-f]{12}", new_id("key")) and re.fullmatch(r"team_[0-9a-f]{12}", new_id("team"))


def test_times_are_rfc3339_utc_both_ways():
    assert format_time(T0) == "2026-11-19T00:00:00Z"
    assert format_time(T0 + 1.5) == "2026-11-19T00:00:01.500Z"
    assert format_time(None) is None
    assert parse_time("2026-11-19T00:00:00Z", "x") == T0
    assert parse_time("2026-11-19T01:00:00+01:00", "x") == T0
    assert parse_time("2026-11-19", "x") == T0
    assert parse_time(T0, "x") == T0 and parse_time(None, "x") is None
    with pytest.raises(FieldError, match=r"^expiresAt: expected a time such as 2026-12-31T00:00:00Z, got 'soon'$"):
        parse_time("soon", "expiresAt")
    with pytest.raises(FieldError, match="expiresAt: expected a time"):
        parse_time(True, "expiresAt")


def record(**fields) -> KeyRecord:
    return KeyRecord(**{"id": "key_1", "name": "alice-laptop", "prefix": "sk-tp-abcd", "digest": "d" * 64,
                        "created_at": T0, **fields})


def test_status_follows_revocation_then_expiry():
    assert record().status(T0) == "active"
    assert record(expires_at=T0 + 10).status(T0 + 9.9) == "active"
    assert record(expires_at=T0 + 10).status(T0 + 10) == "expired"
    assert record(expires_at=T0 + 10, revoked_at=T0 + 5).status(T0 + 20) == "revoked"
    assert record(revoked_at=T0 + 5).status(T0 + 4) == "active"


@pytest.mark.parametrize(("models", "model", "allowed"), [
    ((), "anything", True),
    ((), None, True),
    (("gpt-4o-mini",), "gpt-4o-mini", True),
    (("gpt-4o-mini",), "gpt-4o", False),
    (("openai/*",), "openai/gpt-4o", True),
    (("openai/*",), "openai", False),
    (("openai/*",), "anthropic/claude", False),
    (("*",), "x", True),
    (("gpt-4o",), None, False),
])
def test_models_are_names_or_prefixes(models, model, allowed):
    assert record(models=models).allows_model(model) is allowed


def test_wire_shape_of_a_key_and_a_team():
    key = record(team="team_1", metadata={"owner": "alice"}, models=("openai/*",),
                 limits=(Limit("tokens", "day", 1e6), Limit("cost", "total", 500.0)), expires_at=T0 + 86400,
                 rotated_at=T0 + 1, previous_digest="e" * 64, previous_valid_until=T0 + 61)
    wire = key.to_json(T0, usage={"tokens": {}})
    assert wire == {"id": "key_1", "name": "alice-laptop", "prefix": "sk-tp-abcd", "team": "team_1",
                    "metadata": {"owner": "alice"}, "models": ["openai/*"],
                    "limits": {"tokens": {"day": 1000000}, "cost": {"total": 500.0}},
                    "expiresAt": "2026-11-20T00:00:00Z", "createdAt": "2026-11-19T00:00:00Z", "revokedAt": None,
                    "rotatedAt": "2026-11-19T00:00:01Z", "previousValidUntil": "2026-11-19T00:01:01Z",
                    "status": "active", "usage": {"tokens": {}}}
    assert "d" * 64 not in str(wire) and "e" * 64 not in str(wire) and "d" * 64 not in repr(key)
    assert "usage" not in key.to_json(T0)
    assert key.user == "alice" and record(metadata={"user": "u", "owner": "o"}).user == "u"
    team = Team(id="team_1", name="research", metadata={"cc": "1"}, limits=(Limit("requests", "minute", 5.0),),
                created_at=T0)
    assert team.to_json() == {"id": "team_1", "name": "research", "metadata": {"cc": "1"},
                              "limits": {"requests": {"minute": 5}}, "createdAt": "2026-11-19T00:00:00Z"}
    principal = Principal(key, team)
    assert principal.cel() == {"key": {"id": "key_1", "name": "alice-laptop", "prefix": "sk-tp-abcd",
                                       "team": "team_1", "metadata": {"owner": "alice"}, "models": ["openai/*"]},
                               "team": {"id": "team_1", "name": "research", "metadata": {"cc": "1"}}}
    assert [(s, label, x.metric) for s, label, x in principal.subjects()] == [
        ("key:key_1", "key alice-laptop", "tokens"), ("key:key_1", "key alice-laptop", "cost"),
        ("team:team_1", "team research", "requests")]
    assert principal.limited and not Principal(record()).limited
    assert Principal(record()).cel()["team"] is None


def test_what_clients_send_is_read_with_errors_naming_the_field():
    assert parse_key_fields({"name": " a ", "team": None, "models": ["x/*"], "limits": {"requests": {"day": 3}},
                             "expiresAt": "2026-11-19T00:00:00Z", "metadata": {"user": "u"}}) == {
        "name": "a", "team": None, "models": ("x/*",), "limits": (Limit("requests", "day", 3.0),),
        "expires_at": T0, "metadata": {"user": "u"}}
    assert parse_key_fields({"models": []}, partial=True) == {"models": ()}
    assert parse_team_fields({"name": "t"}) == {"name": "t"}
    for body, message in [
        ({}, "name: expected a non-empty string, got None"),
        ({"name": ""}, "name: expected a non-empty string, got ''"),
        ({"name": "x" * 201}, "name: longer than 200 characters"),
        ({"name": "a", "models": "gpt"}, "models: expected a list of model names"),
        ({"name": "a", "models": ["a*b"]}, "models[0]: `*` may only end a model pattern, got 'a*b'"),
        ({"name": "a", "models": [3]}, "models[0]: expected a model name, got 3"),
        ({"name": "a", "metadata": {"n": 1}}, "metadata.n: expected a string, got 1"),
        ({"name": "a", "metadata": [1]}, "metadata: expected an object of strings"),
        ({"name": "a", "limits": {"tokens": {"fortnight": 1}}}, "limits.tokens.fortnight: unknown window"),
        ({"name": "a", "team": 5}, "team: expected a team id or null, got 5"),
        ({"name": "a", "secret": "x"}, "secret: unknown field"),
        ([1], "expected a JSON object"),
    ]:
        with pytest.raises(FieldError) as info:
            parse_key_fields(body)
        assert str(info.value).startswith(message), (body, str(info.value))
    with pytest.raises(FieldError, match="models: unknown field"):
        parse_team_fields({"name": "t", "models": []})


def test_every_secret_is_43_characters_after_the_prefix():
    for _ in range(300):
        secret = new_secret()
        assert len(secret) == 49 and "=" not in secret


def test_times_do_not_depend_on_the_local_time_zone(monkeypatch):
    import time

    monkeypatch.setenv("TZ", "Pacific/Honolulu")
    time.tzset()
    try:
        assert format_time(T0) == "2026-11-19T00:00:00Z"
        assert parse_time("2026-11-19T00:00:00", "x") == T0  # no offset: UTC
        assert parse_time("2026-11-19t00:00:00z", "x") == T0  # lower-case letters, as RFC 3339 allows
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_revocation_counts_from_its_instant():
    revoked = record(revoked_at=T0 + 5)
    assert revoked.status(T0 + 5) == "revoked"
    assert revoked.to_json(T0 + 6)["revokedAt"] == "2026-11-19T00:00:05Z"


def test_key_fields_edges():
    assert parse_key_fields({"name": "x" * 200})["name"] == "x" * 200
    assert parse_key_fields({"team": "team_1"}, partial=True) == {"team": "team_1"}
    assert parse_key_fields({"models": ("a", "b/*")}, partial=True) == {"models": ("a", "b/*")}
    for body, message in [
        ({"team": ""}, "team: expected a team id or null, got ''"),
        ({"models": "gpt-4o"}, "models: expected a list of model names"),
        ({"expiresAt": "later"}, "expiresAt: expected a time"),
        ({"nam": "x"}, "nam: unknown field (expected expiresAt, limits, metadata, models, name, team)"),
    ]:
        with pytest.raises(FieldError) as info:
            parse_key_fields(body, partial=True)
        assert str(info.value).startswith(message), (body, str(info.value))


def test_team_fields_are_read_like_a_keys():
    assert parse_team_fields({"name": " research ", "metadata": {"cc": "42"}, "limits": {"cost": {"month": 50}}}) == {
        "name": "research", "metadata": {"cc": "42"}, "limits": (Limit("cost", "month", 50.0),)}
    assert parse_team_fields({"limits": None}, partial=True) == {"limits": ()}
    assert parse_team_fields({}, partial=True) == {}
    for body, partial, message in [
        ({}, False, "name: expected a non-empty string, got None"),
        ({"name": ""}, True, "name: expected a non-empty string, got ''"),
        ({"name": "t", "metadata": {"cc": 42}}, False, "metadata.cc: expected a string, got 42"),
        ({"name": "t", "limits": {"cost": {"year": 1}}}, False, "limits.cost.year: unknown window"),
        ("t", False, "expected a JSON object, got 't'"),
    ]:
        with pytest.raises(FieldError) as info:
            parse_team_fields(body, partial=partial)
        assert str(info.value).startswith(message), (body, str(info.value))


def test_partial_updates_read_only_what_is_given():
    assert parse_key_fields({"name": " n "}, partial=True) == {"name": "n"}
    assert parse_team_fields({"name": "t"}, partial=True) == {"name": "t"}
    with pytest.raises(FieldError, match="^name: expected a non-empty string, got None$"):
        parse_team_fields({"metadata": {}})  # a create needs a name
    with pytest.raises(FieldError, match="^models: expected a list of model names"):
        parse_key_fields({"models": 5}, partial=True)
