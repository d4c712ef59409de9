"""``history.py`` in-process (issue 35): a summary's JSON and CEL shapes field by field, who the
subject is when several policies say, and the ``History`` ring (resize keeping the newest, ``newest``
with a limit and a filter, ``since`` a follower's cursor, ``wait_new`` waking followers only)."""

from __future__ import annotations

import trio
import trio.testing

from trioproxy.telemetry.history import DEFAULT_SIZE, History, Summary, subject_of


def summary(n: int = 0, **fields) -> Summary:
    values = dict(time=1700000000.0 + n, method="POST", path="/v1/chat?x=1", host="h", route="r", backend="b",
                  status=200 + n, duration_ms=1.23456, input_tokens=3, output_tokens=4, subject="alice",
                  reason="why", error_kind="kind", model="m", cost=0.0125)
    values.update(fields)
    return Summary(**values)


def test_as_dict_is_the_admin_api_shape():
    assert summary().as_dict() == {
        "time": 1700000000.0, "method": "POST", "path": "/v1/chat?x=1", "host": "h", "route": "r", "backend": "b",
        "status": 200, "durationMs": 1.235, "inputTokens": 3, "outputTokens": 4, "model": "m", "cost": 0.0125,
        "subject": "alice", "reason": "why", "errorKind": "kind", "why": None}
    refused = {"policy": "localRateLimit", "index": 0, "remaining": 0, "resetSeconds": 7}
    assert summary(why=refused).as_dict()["why"] == refused
    empty = summary(route="", backend="", input_tokens=None, output_tokens=None, model=None, subject=None,
                    reason=None, error_kind=None, cost=None).as_dict()
    assert (empty["route"], empty["backend"], empty["inputTokens"], empty["model"], empty["reason"], empty["cost"]) == (
        None, None, None, None, None, None)
    # a summary made without a cost (older callers) has none
    assert Summary(*tuple(summary())[:14]).cost is None
    assert Summary(*tuple(summary())[:15]).why is None  # nor a why


def test_activation_is_the_cel_view():
    assert summary().activation() == {
        "request": {"method": "POST", "path": "/v1/chat", "pathAndQuery": "/v1/chat?x=1", "host": "h", "route": "r",
                    "subject": "alice", "time": 1700000000.0},
        "response": {"code": 200, "durationMs": 1.23456, "reason": "why", "errorKind": "kind", "why": {}},
        "backend": {"name": "b"},
        "llm": {"inputTokens": 3, "outputTokens": 4, "requestModel": "m", "cost": 0.0125}}
    bare = summary(path="/a?b?c", subject=None, reason=None, error_kind=None, input_tokens=None, output_tokens=0,
                   model=None, cost=None).activation()
    assert bare["request"]["path"] == "/a" and bare["request"]["subject"] == ""
    assert bare["response"]["reason"] == "" and bare["response"]["errorKind"] == ""
    assert bare["llm"] == {"outputTokens": 0}
    assert summary(why={"policy": "jwtAuth"}).activation()["response"]["why"] == {"policy": "jwtAuth"}


def test_the_subject_is_the_jwt_then_basic_then_api_key_metadata():
    assert subject_of({"sub": "j"}, {"name": "k"}, {"username": "u"}) == "j"
    assert subject_of({"sub": 7}, {"name": "k"}, {"username": "u"}) == "u"  # a sub that is not a string
    assert subject_of({}, {"name": "k"}, {"username": 7}) == "k"
    for name in ("name", "user", "sub", "id", "owner"):
        assert subject_of(None, {name: "who", "other": "x"}, None) == "who"
    assert subject_of(None, {"user": "first", "owner": "last"}, None) == "first"
    assert subject_of(None, {"name": 1, "owner": "o"}, None) == "o"
    assert subject_of(None, {}, None) == "apiKey"
    assert subject_of({"sub": None}, None, {}) is None


def test_resize_keeps_the_newest_that_fit_and_newest_filters_then_limits():
    assert DEFAULT_SIZE == 1000 and History().size == 1000 and History().entries.maxlen == 1000
    history = History(3)
    for n in range(5):
        history.record(summary(n))
    assert [s.status for s in history.newest()] == [204, 203, 202] and history.total == 5
    history.resize(3)
    assert history.entries.maxlen == 3
    history.resize(2)
    assert history.size == 2 and [s.status for s in history.newest()] == [204, 203]
    history.resize(4)
    for n in range(5, 8):
        history.record(summary(n))
    assert [s.status for s in history.newest()] == [207, 206, 205, 204]
    assert [s.status for s in history.newest(2)] == [207, 206]
    assert history.newest(0) == []
    odd = [s.status for s in history.newest(2, lambda s: s.status % 2 == 1)]
    assert odd == [207, 205]
    assert [s.status for s in history.newest(None, lambda s: s.status % 2 == 0)] == [206, 204]


def test_since_gives_what_a_cursor_has_not_seen_oldest_first():
    history = History(3)
    for n in range(5):
        history.record(summary(n))
    assert [s.status for s in history.since(3)] == [203, 204]
    assert [s.status for s in history.since(0)] == [202, 203, 204]  # only what is still kept
    assert list(history.since(5)) == [] and list(history.since(6)) == []


async def test_wait_new_wakes_on_the_next_record_and_counts_followers():
    history = History(3)
    history.record(summary(0))
    with trio.fail_after(1):
        await history.wait_new(0)  # already more than 0: returns at once
    woke = []

    async def follower():
        await history.wait_new(1)
        woke.append(history.total)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follower)
        nursery.start_soon(follower)
        await trio.testing.wait_all_tasks_blocked()
        assert history.followers == 2 and woke == []
        history.record(summary(1))
    assert woke == [2, 2] and history.followers == 0
    event = history._new
    history.record(summary(2))  # nobody follows: the event is left alone
    assert history._new is event and not event.is_set()
