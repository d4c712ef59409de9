"""``AccessLog.record``'s direct path: while the handler ``configure_logging`` installed is the access
logger's only way out, the line is formatted and written without a ``LogRecord``. These tests show
that line is the one the formatter writes for the record ``logging`` would build (text and JSON),
that it reaches a pipe's reader at once, and that anything else in the way (a filter, another
handler, a level) sends the record through ``logging`` as before."""

from __future__ import annotations

import io
import json
import logging
import os
import sys
import time

import pytest

from trioproxy.config.model import LogFieldsSpec, LoggingSpec
from trioproxy.telemetry.access_log import ACCESS_LOGGER, AccessLog, JsonFormatter, TextFormatter, configure_logging

FIELDS = {"bind": "127.0.0.1:8080", "route": "default/r", "http.method": "POST", "http.path": "/a b",
          "http.status": 200, "duration": "0.3ms", "why": {"policy": "x", "n": [1, None]}, "cost": 0.25,
          "ok": True, "empty": "", "quote": 'say "hi"', "eq": "a=b", "multi": "x\ny", "unicode": "héllo"}


@pytest.fixture
def restore_logging():
    loggers = [logging.getLogger("trioproxy"), logging.getLogger(ACCESS_LOGGER), logging.getLogger("opentelemetry")]
    saved = [(list(lg.handlers), list(lg.filters), lg.level, lg.propagate) for lg in loggers]
    yield
    for lg, (handlers, filters, level, propagate) in zip(loggers, saved, strict=True):
        lg.handlers[:], lg.filters[:] = handlers, filters
        lg.setLevel(level)
        lg.propagate = propagate


def _record(level: int = logging.INFO) -> logging.LogRecord:
    record = logging.LogRecord(ACCESS_LOGGER, level, "", 0, "request", (), None)
    record.fields = dict(FIELDS)
    return record


@pytest.mark.parametrize("fmt", ["json", "text"])
@pytest.mark.usefixtures("restore_logging")
def test_the_direct_line_is_the_formatters_line(fmt):
    stream = io.StringIO()
    configure_logging("info", fmt, stream=stream, env={})
    AccessLog().record(dict(FIELDS), 200, False)
    AccessLog().record(dict(FIELDS), 503, True)
    lines = stream.getvalue().split("\n")
    assert lines[-1] == "" and len(lines) == 3
    formatter = JsonFormatter() if fmt == "json" else TextFormatter()
    for line, level in zip(lines[:2], (logging.INFO, logging.WARNING), strict=True):
        expected = formatter.format(_record(level))
        if fmt == "json":  # the same object, key order included, but for the time
            got, want = json.loads(line), json.loads(expected)
            assert got.pop("time")[:4] == want.pop("time")[:4] and list(got.items()) == list(want.items())
            assert line.split('"level"', 1)[1] == expected.split('"level"', 1)[1]
        else:  # the same text after the time stamp
            assert line.split(" ", 1)[1] == expected.split(" ", 1)[1]
    assert ' warn request bind=127.0.0.1:8080 ' in lines[1] or '"level":"warn"' in lines[1]


@pytest.mark.usefixtures("restore_logging")
def test_each_line_reaches_a_pipes_reader_at_once():
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    with os.fdopen(write_end, "w") as stream, os.fdopen(read_end, "rb") as reader:  # a block-buffered stream
        configure_logging("info", "json", stream=stream, env={})
        AccessLog().record(dict(FIELDS), 200, False)
        first = reader.read()
        assert first.endswith(b"\n") and json.loads(first)["http.status"] == 200
        AccessLog().record({"http.status": 204}, 204, False)
        assert json.loads(reader.read())["http.status"] == 204


@pytest.mark.usefixtures("restore_logging")
def test_a_filter_or_another_handler_sends_the_record_through_logging():
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream, env={})
    access = logging.getLogger(ACCESS_LOGGER)
    access.addFilter(lambda r: r.fields["http.status"] != 404)  # type: ignore[attr-defined]
    log = AccessLog()
    log.record({"http.status": 404}, 404, False)
    log.record({"http.status": 200}, 200, False)
    assert [json.loads(line)["http.status"] for line in stream.getvalue().splitlines()] == [200]
    access.filters.clear()
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    access.addHandler(Keep())
    log.record({"http.status": 201}, 201, False)
    assert [r.fields for r in seen] == [{"http.status": 201}]  # type: ignore[attr-defined]
    assert json.loads(stream.getvalue().splitlines()[-1])["http.status"] == 201  # and on to the gateway's handler


@pytest.mark.usefixtures("restore_logging")
def test_levels_and_the_removed_and_added_fields_hold_on_the_direct_path():
    stream = io.StringIO()
    configure_logging("warn", "json", stream=stream, env={})
    log = AccessLog()
    log.record({"http.status": 200}, 200, False)
    log.record({"http.status": 502}, 502, False)  # the backend's 5xx: info
    log.record({"http.status": 503}, 503, True)  # the gateway's own: warning
    assert [json.loads(line)["http.status"] for line in stream.getvalue().splitlines()] == [503]
    logging.getLogger("trioproxy").handlers[0].setLevel(logging.ERROR)  # the handler's own level
    log.record({"http.status": 504}, 504, True)
    assert len(stream.getvalue().splitlines()) == 1
    log.remove = frozenset({"secret"})
    logging.getLogger("trioproxy").handlers[0].setLevel(logging.NOTSET)
    log.record({"http.status": 500, "secret": "s"}, 500, True)
    last = json.loads(stream.getvalue().splitlines()[-1])
    assert "secret" not in last and last["http.status"] == 500  # only the removed field goes


@pytest.mark.usefixtures("restore_logging")
def test_a_stream_that_fails_is_reported_not_raised(capsys):
    class Broken(io.StringIO):
        def write(self, text: str) -> int:
            raise OSError("disk full")

    configure_logging("info", "json", stream=Broken(), env={})
    AccessLog().record({"http.status": 200}, 200, False)  # no exception
    err = capsys.readouterr().err  # as logging reports a handler's failure: the record's message and arguments
    assert "--- Logging error ---" in err and "OSError: disk full" in err
    assert "Message: 'request'\nArguments: ()" in err


class _Opaque:
    def __str__(self) -> str:
        return "opaque é"


_VALUES = [
    {"b": 1, "a": [1, 2.5, None, True, False], "c": {"z": "é\u2028\x01\"\\", "y": -0.0}},  # key order kept
    {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")},
    {3: "int key", 2.5: "float key", None: "none key", False: "bool key"},
    {"object": _Opaque(), "nested": [{"o": _Opaque()}]},  # default=str
    ["a list", {"x": 1}], "a string é", 12, None,
]


@pytest.mark.parametrize("value", _VALUES, ids=range(len(_VALUES)))
def test_the_json_encoder_made_once_writes_what_json_dumps_writes(value):
    from trioproxy.telemetry import access_log

    assert access_log._json(value) == json.dumps(value, separators=(",", ":"), default=str)


def test_the_json_encoder_refuses_a_key_json_dumps_refuses():
    from trioproxy.telemetry import access_log

    with pytest.raises(TypeError):
        json.dumps({(1, 2): "a tuple key"}, separators=(",", ":"), default=str)
    with pytest.raises(TypeError):
        access_log._json({(1, 2): "a tuple key"})


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_line_is_exactly_what_the_stdlib_would_write(fmt, restore_logging):
    """Not only the direct path against the formatter (they share the encoder): against ``json``
    itself and the text rules, field by field."""
    stream = io.StringIO()
    configure_logging("info", fmt, stream=stream, env={})
    AccessLog().record(dict(FIELDS), 200, False)
    line = stream.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1
    if fmt == "json":
        entry = json.loads(line)
        assert list(entry)[:4] == ["time", "level", "scope", "message"]
        assert (entry["level"], entry["scope"], entry["message"]) == ("info", ACCESS_LOGGER, "request")
        assert line[:-1] == json.dumps({**{k: entry[k] for k in ("time", "level", "scope", "message")}, **FIELDS},
                                       separators=(",", ":"), default=str)
    else:
        stamp, level, message, rest = line[:-1].split(" ", 3)
        assert (level, message) == ("info", "request") and stamp.endswith("Z") and len(stamp) == 24
        assert rest == ('bind=127.0.0.1:8080 route=default/r http.method=POST http.path="/a b" http.status=200 '
                        'duration=0.3ms why="{\\"policy\\":\\"x\\",\\"n\\":[1,null]}" cost=0.25 ok=True empty="" '
                        'quote="say \\"hi\\"" eq="a=b" multi="x\\ny" unicode=héllo')


class _Expression:
    """A compiled CEL expression's stand-in: what ``evaluate`` got, and a value from it."""

    def __init__(self, key: str) -> None:
        self.key = key

    def evaluate(self, values: dict) -> object:
        return values[self.key]


@pytest.mark.parametrize("path", ["direct", "stdlib"])
@pytest.mark.usefixtures("restore_logging")
def test_the_level_the_filter_and_the_added_fields_on_either_path(path):
    """The same decisions whichever way the line goes out: warning for the gateway's own 5xx from
    500 up (not 499, not the backend's), the CEL filter over the request's activation (kept when it
    cannot decide; not applied without an activation), added fields evaluated over it."""
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream, env={})
    if path == "stdlib":
        logging.getLogger(ACCESS_LOGGER).addFilter(lambda record: True)  # anything in the way: through logging
    log = AccessLog()

    def lines() -> list[dict]:
        return [json.loads(line) for line in stream.getvalue().splitlines()]

    for status, own in ((499, True), (500, False), (500, True), (501, True)):
        log.record({"http.status": status}, status, own)
    assert [(e["http.status"], e["level"]) for e in lines()] == [(499, "info"), (500, "info"), (500, "warn"),
                                                                 (501, "warn")]
    assert {e["message"] for e in lines()} == {"request"} and {e["scope"] for e in lines()} == {ACCESS_LOGGER}
    stream.seek(0)
    stream.truncate()

    activation = {"tenant": "t1", "keep": False}
    decided: list[dict] = []

    def keep(values: dict) -> bool:
        decided.append(values)
        if values.get("broken"):
            raise ValueError("cannot decide")
        return bool(values["keep"])

    log.filter = keep
    log.add = (("tenant", _Expression("tenant")),)
    log.record({"n": 1}, 200, False, lambda: activation)  # filtered out
    log.record({"n": 2}, 200, False, lambda: {**activation, "keep": True})
    log.record({"n": 3}, 200, False, lambda: {**activation, "broken": True})  # a filter that fails: logged
    log.record({"n": 4}, 200, False)  # no activation: neither filtered nor added to
    assert [(e["n"], e.get("tenant")) for e in lines()] == [(2, "t1"), (3, "t1"), (4, None)]
    assert len(decided) == 3


@pytest.mark.usefixtures("restore_logging")
def test_the_line_time_has_the_milliseconds_of_now(monkeypatch):
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream, env={})
    for fraction, shown in ((0.375, "375"), (1023 / 1024, "999")):  # exact in binary; the last just under a second
        monkeypatch.setattr(time, "time", lambda fraction=fraction: 1_795_046_400 + fraction)
        AccessLog().record({"n": 1}, 200, False)
        assert json.loads(stream.getvalue().splitlines()[-1])["time"] == f"2026-11-19T00:00:00.{shown}Z"


@pytest.mark.usefixtures("restore_logging")
def test_a_record_through_logging_is_the_request_with_its_fields():
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    configure_logging("info", "json", stream=io.StringIO(), env={})
    logging.getLogger(ACCESS_LOGGER).addHandler(Keep())
    AccessLog().record({"n": 1}, 503, True)
    [record] = seen
    assert (record.msg, record.args, record.levelno, record.name) == ("request", (), logging.WARNING, ACCESS_LOGGER)
    assert (record.pathname, record.lineno, record.fields) == ("", 0, {"n": 1})  # type: ignore[attr-defined]


@pytest.mark.usefixtures("restore_logging")
def test_an_opentelemetry_record_without_an_exception_keeps_its_message_as_the_gateways():
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream, env={})
    logging.getLogger("opentelemetry.sdk").warning("queue  full,\ndropping %d spans", 3)
    entry = json.loads(stream.getvalue())
    assert (entry["scope"], entry["level"], entry["message"]) == (
        "trioproxy.telemetry.otel", "warn", "otlp exporter: queue full, dropping 3 spans")


def test_a_json_record_with_an_exception_keeps_its_fields_after_the_four_first():
    try:
        raise KeyError("k")
    except KeyError:
        record = logging.LogRecord("trioproxy.x", logging.ERROR, "", 0, "failed", (), sys.exc_info())
    record.fields = {"route": "r", "n": 2}
    entry = json.loads(JsonFormatter().format(record))
    assert list(entry) == ["time", "level", "scope", "message", "route", "n", "exception"]
    assert entry["exception"].endswith("KeyError: 'k'")
    plain = logging.LogRecord("trioproxy.x", logging.INFO, "", 0, "%d%%", (5,), None)
    assert json.loads(JsonFormatter().format(plain))["message"] == "5%"  # args applied
    unformatted = logging.LogRecord("trioproxy.x", logging.INFO, "", 0, "50%", (), None)
    assert json.loads(JsonFormatter().format(unformatted))["message"] == "50%"


@pytest.mark.usefixtures("restore_logging")
def test_enabled_asks_the_level_a_line_would_have():
    configure_logging("warn", "json", stream=io.StringIO(), env={})
    log = AccessLog()
    assert (log.enabled(200), log.enabled(499), log.enabled(500), log.enabled(503)) == (False, False, True, True)
    configure_logging("info", "json", stream=io.StringIO(), env={})
    assert log.enabled(200) and log.enabled(500)
    configure_logging("error", "json", stream=io.StringIO(), env={})
    assert not log.enabled(500)


def test_configure_compiles_the_filter_and_the_fields_once_and_none_clears_them():
    log = AccessLog()
    spec = LoggingSpec(filter="response.code >= 400",
                       fields=LogFieldsSpec(add=(("tenant", 'request.headers["x-tenant"]'),), remove=("src.addr",)))
    log.configure(spec)
    assert log.spec is spec and log.remove == frozenset({"src.addr"}) and [name for name, _ in log.add] == ["tenant"]
    assert log.filter is not None and log.filter({"response": {"code": 404}}) and not log.filter({"response": {"code": 200}})
    assert log.add[0][1].evaluate({"request": {"headers": {"x-tenant": "t1"}}}) == "t1"
    compiled = (log.filter, log.add)
    log.configure(LoggingSpec(filter="response.code >= 400", fields=spec.fields))  # equal: kept as compiled
    assert (log.filter, log.add) == compiled
    log.configure(LoggingSpec(level="debug"))  # no filter, no fields
    assert (log.filter, log.add, log.remove) == (None, (), frozenset())
    log.configure(None)
    assert (log.spec, log.filter, log.add, log.remove) == (None, None, (), frozenset())
