"""One access-log line per request, and the process's log format and level.

Field names follow agentgateway's request log and OpenTelemetry's semantic conventions
(``http.method``, ``src.addr``, ``gen_ai.usage.input_tokens`` ...), so the lines can be searched
with the same queries. Lines go through the stdlib ``logging`` package, logger
``trioproxy.access``: the record carries the fields as a dict and the formatter renders them,
``key=value`` text for a terminal or one JSON object per line, never by string concatenation.
While the handler ``configure_logging`` installed is the only place such a record would go (no
filter, no other handler: a test's ``caplog`` or an embedding program's handler turn this off),
``AccessLog.record`` asks that handler's formatter for the same line and writes it (and flushes)
itself, skipping the ``LogRecord`` and ``Logger.handle``: about a third of the line's cost.

A request is logged when it finishes, at ``info``; answers the gateway makes itself with a 5xx
(no backend, a timeout, a failed rate-limit service) are logged at ``warning``, so that
``--log-level warning`` still shows every failure with its reason. An optional CEL filter
(``config.logging.filter``) decides which requests are logged at all.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO

ACCESS_LOGGER = "trioproxy.access"
LEVELS = ("trace", "debug", "info", "warn", "warning", "error")

__all__ = ["ACCESS_LOGGER", "AccessLog", "JsonFormatter", "TextFormatter", "configure_logging", "parse_level"]


def parse_level(name: str, where: str = "--log-level") -> int:
    """``info``/``warn``/... (agentgateway's names, ``trace`` = debug) → a logging level."""
    value = name.strip().lower()
    if value not in LEVELS:
        raise ValueError(f"{where}: unknown log level {name!r}; expected one of trace, debug, info, warn, error")
    return {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
            "warning": logging.WARNING, "error": logging.ERROR}[value]


_LEVEL_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warn", logging.ERROR: "error"}


def level_name(level: int) -> str:
    return _LEVEL_NAMES.get(level) or logging.getLevelName(level).lower()


def _stamp(created: float, msecs: float, _cache: dict[int, str] = {}) -> str:  # noqa: B006 - a per-second cache
    """ISO 8601 UTC with milliseconds; ``strftime`` runs once per second, not once per line."""
    second = int(created)
    prefix = _cache.get(second)
    if prefix is None:
        _cache.clear()
        prefix = _cache[second] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{prefix}.{int(msecs):03d}Z"


class TextFormatter(logging.Formatter):
    """``2026-11-23T08:00:00.123Z info request http.method=GET ... duration=1.2ms``."""

    def format(self, record: logging.LogRecord) -> str:
        line = self.line(record.created, record.msecs, record.levelno, record.name, record.getMessage(),
                         getattr(record, "fields", None))
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line

    def line(self, created: float, msecs: float, levelno: int, name: str, message: str,
             fields: Mapping[str, Any] | None) -> str:
        """The line of a record without exception (``AccessLog.record`` writes it without a record)."""
        line = f"{_stamp(created, msecs)} {level_name(levelno)} {message}"
        if fields:
            line += " " + " ".join([f"{k}={_text_value(v)}" for k, v in fields.items()])
        return line


_QUOTED = re.compile('[ "=\n]').search


def _text_value(value: Any) -> str:
    if type(value) is int:  # most fields (status, tokens): never quoted
        return str(value)
    if isinstance(value, (dict, list)):  # a structured field (``why``): one JSON value, quoted as text is
        value = _json(value)
    text = str(value)
    if not text or _QUOTED(text):
        return json.dumps(text)
    return text


def _one_shot_encoder() -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"), default=str)`` without building an encoder per call."""
    make = getattr(json.encoder, "c_make_encoder", None)
    encoder = json.JSONEncoder(separators=(",", ":"), default=str)
    if make is None:  # no C accelerator
        return encoder.encode
    # json.dumps's own C encoder, made once: no circular check (a line's fields come from the
    # gateway and from CEL values, never cyclic), the rest as json.dumps's defaults.
    c_encode = make(None, str, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)

    def encode(value: Any) -> str:
        if isinstance(value, dict):
            return "".join(c_encode(value, 0))
        return encoder.encode(value)

    return encode


_json = _one_shot_encoder()


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``message`` (or ``scope``), then the fields."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.msg if not record.args else record.getMessage()
        if not record.exc_info:
            return self.line(record.created, record.msecs, record.levelno, record.name, message,
                             getattr(record, "fields", None))
        entry: dict[str, Any] = {
            "time": _stamp(record.created, record.msecs),
            "level": level_name(record.levelno),
            "scope": record.name,
            "message": message,
        }
        fields: Mapping[str, Any] | None = getattr(record, "fields", None)
        if fields:
            entry.update(fields)
        entry["exception"] = self.formatException(record.exc_info)
        return _json(entry)

    def line(self, created: float, msecs: float, levelno: int, name: str, message: Any,
             fields: Mapping[str, Any] | None) -> str:
        """The line of a record without exception (``AccessLog.record`` writes it without a record)."""
        entry: dict[str, Any] = {"time": _stamp(created, msecs), "level": level_name(levelno), "scope": name,
                                 "message": message}
        if fields:
            entry.update(fields)
        return _json(entry)


class _LineHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler ``configure_logging`` installs: ``AccessLog.record`` knows it and, while it is the
    access logger's only way out, writes the formatted line to its stream itself."""

    formatter: TextFormatter | JsonFormatter


def configure_logging(level: str | None = None, fmt: str | None = None, *, stream: TextIO | None = None,
                      env: Mapping[str, str] | None = None, config_level: str | None = None,
                      config_format: str | None = None) -> None:
    """Set the ``trioproxy`` logger's level and format: flag, then ``LOG_LEVEL``/``LOG_FORMAT``, then config.

    The default format is text on a terminal and JSON lines otherwise (a collector reading a pipe).
    Raises ``ValueError`` naming the flag or variable for an unknown level or format.
    """
    env = os.environ if env is None else env
    stream = stream if stream is not None else sys.stderr
    where = "--log-level"
    if level is None and env.get("LOG_LEVEL"):
        level, where = env["LOG_LEVEL"], "LOG_LEVEL"
    if level is None and config_level:
        level, where = config_level, "config.logging.level"
    resolved_level = parse_level(level or "info", where)
    fmt_where = "--log-format"
    if fmt is None and env.get("LOG_FORMAT"):
        fmt, fmt_where = env["LOG_FORMAT"], "LOG_FORMAT"
    if fmt is None and config_format:
        fmt, fmt_where = config_format, "config.logging.format"
    if fmt is None:
        fmt = "text" if stream.isatty() else "json"
    if fmt not in ("text", "json"):
        raise ValueError(f"{fmt_where}: unknown log format {fmt!r}; expected text or json")
    # Neither format shows thread or process names: do not compute them for every line.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    handler = _LineHandler(stream)
    handler.setFormatter(TextFormatter() if fmt == "text" else JsonFormatter())
    root = logging.getLogger("trioproxy")
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(resolved_level)
    root.propagate = False
    # The OpenTelemetry SDK logs export failures on its own loggers, which had no handler: Python
    # printed its raw text (and tracebacks) between the gateway's JSON lines.
    otel = logging.getLogger("opentelemetry")
    for old in list(otel.handlers):
        otel.removeHandler(old)
    otel.addHandler(handler)
    otel.setLevel(max(resolved_level, logging.WARNING))
    otel.propagate = False
    handler.addFilter(_otel_one_line)


def _otel_one_line(record: logging.LogRecord) -> bool:
    """An OpenTelemetry SDK record as one gateway line: ``otlp exporter: <what failed>``, no traceback."""
    if not record.name.startswith("opentelemetry"):
        return True
    message = record.getMessage()
    if record.exc_info and record.exc_info[1] is not None:
        message = f"{message}: {record.exc_info[1]}"
    message = " ".join(message.split())
    record.msg, record.args, record.exc_info, record.exc_text = f"otlp exporter: {message}", None, None, None
    record.name = "trioproxy.telemetry.otel"
    return True


class AccessLog:
    """Builds and writes the per-request line; ``filter`` (a compiled CEL predicate) may drop it."""

    def __init__(self, filter: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.logger = logging.getLogger(ACCESS_LOGGER)
        self.filter = filter
        self.add: tuple[tuple[str, Any], ...] = ()  # (field name, compiled CEL expression)
        self.remove: frozenset[str] = frozenset()
        self.spec: Any = None

    def configure(self, spec: Any) -> None:
        """Apply ``config.logging`` (a ``LoggingSpec`` or None): filter and added/removed fields."""
        if spec == self.spec:
            return
        from ..cel import compile_expression

        self.spec = spec
        self.filter = compile_expression(spec.filter).matches if spec is not None and spec.filter else None
        self.add = tuple((name, compile_expression(source)) for name, source in spec.fields.add) if spec else ()
        self.remove = frozenset(spec.fields.remove) if spec else frozenset()

    def _wanted(self, activation: Callable[[], dict[str, Any]]) -> bool:
        assert self.filter is not None
        try:
            return bool(self.filter(activation()))
        except Exception:  # noqa: BLE001 - a filter that cannot decide logs the request
            return True

    def enabled(self, status: int) -> bool:
        return self.logger.isEnabledFor(logging.WARNING if status >= 500 else logging.INFO)

    def record(self, fields: dict[str, Any], status: int, own_error: bool,
               activation: Callable[[], dict[str, Any]] | None = None) -> None:
        """Write the line for a finished request (``own_error``: the gateway made the answer)."""
        level = logging.WARNING if own_error and status >= 500 else logging.INFO
        if not self.logger.isEnabledFor(level):
            return
        if self.filter is not None and activation is not None and not self._wanted(activation):
            return
        if self.add and activation is not None:
            values = activation()
            for name, expression in self.add:
                fields[name] = expression.evaluate(values)
        if self.remove:
            fields = {k: v for k, v in fields.items() if k not in self.remove}
        logger = self.logger
        handler = _direct_handler(logger, level)
        if handler is None:
            # makeRecord + handle: the same record logger.log builds, without its caller lookup
            # (a stack walk nobody reads: neither format shows file or line).
            logger.handle(logger.makeRecord(logger.name, level, "", 0, "request", (), None, extra={"fields": fields}))
            return
        # The line the handler would write for that record, without the record and the logging
        # machinery around it (Logger.handle, callHandlers, filters, Handler.handle): ~2x cheaper.
        created = time.time()
        try:
            line = handler.formatter.line(created, (created - int(created)) * 1000, level, logger.name, "request",
                                          fields)
            with handler.lock:  # type: ignore[union-attr] # a thread (the OTLP exporter) may log meanwhile
                stream = handler.stream
                stream.write(line + handler.terminator)
                stream.flush()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - as StreamHandler.emit: reported on stderr, never raised
            handler.handleError(logger.makeRecord(logger.name, level, "", 0, "request", (), None,
                                                  extra={"fields": fields}))


def _direct_handler(logger: logging.Logger, level: int) -> _LineHandler | None:
    """The handler a record of ``logger`` at ``level`` would go to, and only to, when that is the
    one ``configure_logging`` installed, with nothing (filters, other handlers) in the way: then
    ``AccessLog.record`` may write its line itself. None otherwise (a test's ``caplog``, a handler
    added by an embedding program): the record goes through ``logging``."""
    if logger.handlers or logger.filters or logger.disabled or not logger.propagate:
        return None
    parent = logger.parent
    if parent is None or parent.filters or parent.disabled or parent.propagate:
        return None
    handlers = parent.handlers
    if len(handlers) != 1:
        return None
    handler = handlers[0]
    if type(handler) is not _LineHandler or level < handler.level or handler.filters != [_otel_one_line]:
        return None
    return handler
