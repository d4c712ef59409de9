"""``configure_logging`` and the log's small rules, in-process: where the level and the format come
from (flag, then ``LOG_LEVEL``/``LOG_FORMAT``, then the config, then the defaults), the error that
names the source of a bad value, what the handler installed is, the OpenTelemetry SDK's records as
one gateway line, level names and the timestamp (docs/observability.md, "Logs")."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from trioproxy.telemetry import access_log
from trioproxy.telemetry.access_log import ACCESS_LOGGER, JsonFormatter, TextFormatter, configure_logging, parse_level


@pytest.fixture(autouse=True)
def restore_logging():
    loggers = [logging.getLogger("trioproxy"), logging.getLogger(ACCESS_LOGGER), logging.getLogger("opentelemetry")]
    saved = [(list(lg.handlers), list(lg.filters), lg.level, lg.propagate) for lg in loggers]
    flags = (logging.logThreads, logging.logProcesses, logging.logMultiprocessing)
    yield
    for lg, (handlers, filters, level, propagate) in zip(loggers, saved, strict=True):
        lg.handlers[:], lg.filters[:] = handlers, filters
        lg.setLevel(level)
        lg.propagate = propagate
    logging.logThreads, logging.logProcesses, logging.logMultiprocessing = flags


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("name, level", [
    ("trace", logging.DEBUG), ("debug", logging.DEBUG), ("info", logging.INFO), ("warn", logging.WARNING),
    ("warning", logging.WARNING), ("error", logging.ERROR), (" WARN ", logging.WARNING), ("Info", logging.INFO),
])
def test_level_names_are_agentgateways(name, level):
    assert parse_level(name) == level


def test_an_unknown_level_names_where_it_came_from():
    with pytest.raises(ValueError) as error:
        parse_level("loud", "LOG_LEVEL")
    assert str(error.value) == "LOG_LEVEL: unknown log level 'loud'; expected one of trace, debug, info, warn, error"
    with pytest.raises(ValueError, match="^--log-level: unknown log level 'critical'"):
        parse_level("critical")


@pytest.mark.parametrize("level, env, config_level, expected", [
    (None, {}, None, logging.INFO),                                   # the default
    (None, {}, "error", logging.ERROR),                               # config.logging.level
    (None, {"LOG_LEVEL": "warn"}, "error", logging.WARNING),          # the environment over the config
    (None, {"LOG_LEVEL": ""}, "debug", logging.DEBUG),                # an empty variable is not set
    ("debug", {"LOG_LEVEL": "warn"}, "error", logging.DEBUG),         # the flag over both
])
def test_the_level_comes_from_the_flag_then_the_environment_then_the_config(level, env, config_level, expected):
    configure_logging(level, "json", stream=io.StringIO(), env=env, config_level=config_level)
    assert logging.getLogger("trioproxy").level == expected
    assert logging.getLogger("opentelemetry").level == max(expected, logging.WARNING)  # the SDK: warnings and up


@pytest.mark.parametrize("fmt, env, config_format, stream, formatter", [
    (None, {}, None, io.StringIO(), JsonFormatter),                   # a pipe or a file: JSON lines
    (None, {}, None, Tty(), TextFormatter),                           # a terminal: text
    (None, {}, "text", io.StringIO(), TextFormatter),                 # config.logging.format
    (None, {"LOG_FORMAT": "json"}, "text", Tty(), JsonFormatter),     # the environment over the config
    (None, {"LOG_FORMAT": ""}, "json", Tty(), JsonFormatter),         # an empty variable is not set
    ("text", {"LOG_FORMAT": "json"}, "json", io.StringIO(), TextFormatter),  # the flag over both
])
def test_the_format_comes_from_the_flag_then_the_environment_then_the_config(fmt, env, config_format, stream,
                                                                           formatter):
    configure_logging("info", fmt, stream=stream, env=env, config_format=config_format)
    [handler] = logging.getLogger("trioproxy").handlers
    assert type(handler.formatter) is formatter and handler.stream is stream


@pytest.mark.parametrize("kwargs, env, message", [
    ({"fmt": "xml"}, {}, "--log-format: unknown log format 'xml'; expected text or json"),
    ({}, {"LOG_FORMAT": "yaml"}, "LOG_FORMAT: unknown log format 'yaml'; expected text or json"),
    ({"config_format": "csv"}, {}, "config.logging.format: unknown log format 'csv'; expected text or json"),
    ({"level": "loud"}, {}, "--log-level: unknown log level 'loud'"),
    ({}, {"LOG_LEVEL": "loud"}, "LOG_LEVEL: unknown log level 'loud'"),
    ({"config_level": "loud"}, {}, "config.logging.level: unknown log level 'loud'"),
])
def test_a_bad_level_or_format_names_its_source(kwargs, env, message):
    with pytest.raises(ValueError) as error:
        configure_logging(stream=io.StringIO(), env=env, **kwargs)
    assert str(error.value).startswith(message)


def test_the_handler_installed_replaces_the_last_and_is_the_only_way_out():
    configure_logging("info", "json", stream=io.StringIO(), env={})
    stream = io.StringIO()
    configure_logging("warn", "text", stream=stream, env={})
    root, otel = logging.getLogger("trioproxy"), logging.getLogger("opentelemetry")
    [handler] = root.handlers
    assert type(handler) is access_log._LineHandler and otel.handlers == [handler]
    assert handler.filters == [access_log._otel_one_line]
    assert not root.propagate and not otel.propagate
    assert (logging.logThreads, logging.logProcesses, logging.logMultiprocessing) == (False, False, False)
    logging.getLogger("trioproxy.test").warning("seen")
    logging.getLogger("trioproxy.test").info("not seen")
    assert stream.getvalue().endswith(" warn seen\n") and "not seen" not in stream.getvalue()


def test_the_default_stream_is_stderr_and_the_environment_is_the_processes(monkeypatch):
    monkeypatch.setenv("LOG_LEVEL", "error")
    monkeypatch.setenv("LOG_FORMAT", "text")
    configure_logging()
    [handler] = logging.getLogger("trioproxy").handlers
    assert handler.stream is sys.stderr and type(handler.formatter) is TextFormatter
    assert logging.getLogger("trioproxy").level == logging.ERROR


def test_an_opentelemetry_sdk_record_is_one_gateway_line():
    stream = io.StringIO()
    configure_logging("info", "text", stream=stream, env={})
    try:
        raise ConnectionError("refused\n  by peer")
    except ConnectionError:
        logging.getLogger("opentelemetry.exporter.otlp").exception("Failed to export  %s\nspans", "batch")
    line = stream.getvalue()
    assert line.count("\n") == 1 and "Traceback" not in line
    assert line.split(" ", 1)[1] == "error otlp exporter: Failed to export batch spans: refused by peer\n"
    record = logging.LogRecord("trioproxy.x", logging.INFO, "", 0, "kept %s", ("as is",), None)
    assert access_log._otel_one_line(record) and (record.name, record.getMessage()) == ("trioproxy.x", "kept as is")


def test_an_exception_is_shown_after_the_line_in_both_formats():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("trioproxy.x", logging.ERROR, "", 0, "failed %d", (3,), sys.exc_info())
    text = TextFormatter().format(record)
    first, rest = text.split("\n", 1)
    assert first.endswith(" error failed 3") and rest.startswith("Traceback") and rest.endswith("ValueError: boom")
    entry = JsonFormatter().format(record)
    assert '"level":"error","scope":"trioproxy.x","message":"failed 3"' in entry
    assert '"exception":"Traceback' in entry and entry.endswith('ValueError: boom"}')


@pytest.mark.parametrize("level, name", [
    (logging.DEBUG, "debug"), (logging.INFO, "info"), (logging.WARNING, "warn"), (logging.ERROR, "error"),
    (logging.CRITICAL, "critical"), (25, "level 25"),
])
def test_level_names_in_a_line(level, name):
    assert access_log.level_name(level) == name


def test_the_timestamp_is_utc_with_milliseconds_and_its_second_is_remembered():
    assert access_log._stamp(1_795_046_400.0, 7.9) == "2026-11-19T00:00:00.007Z"
    assert access_log._stamp(1_795_046_459.5, 999.0) == "2026-11-19T00:00:59.999Z"
    assert access_log._stamp(1_795_046_459.9, 0) == "2026-11-19T00:00:59.000Z"  # the same second, from the cache
