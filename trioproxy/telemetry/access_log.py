"""One access-log line per request, and the process's log format and level.

Field names follow agentgateway's request log and OpenTelemetry's semantic conventions
(``http.method``, ``src.addr``, ``gen_ai.usage.input_tokens`` ...), so the lines can be searched
with the same queries. Lines go through the stdlib ``logging`` package, logger
``trioproxy.access``: the record carries the fields as a dict and the formatter renders them,
``key=value`` text for a terminal or one JSON object per line, never by string concatenation.

A request is logged when it finishes, at ``info``; answers the gateway makes itself with a 5xx
(no backend, a timeout, a failed rate-limit service) are logged at ``warning``, so that
``--log-level warning`` still shows every failure with its reason. An optional CEL filter
(``config.logging.filter``) decides which requests are logged at all.
"""

from __future__ import annotations

import json
import logging
import os
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
        line = f"{_stamp(record.created, record.msecs)} {level_name(record.levelno)} {record.getMessage()}"
        fields: Mapping[str, Any] | None = getattr(record, "fields", None)
        if fields:
            line += " " + " ".join(f"{k}={_text_value(v)}" for k, v in fields.items())
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def _text_value(value: Any) -> str:
    if isinstance(value, (dict, list)):  # a structured field (``why``): one JSON value, quoted as text is
        value = json.dumps(value, separators=(",", ":"), default=str)
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        return json.dumps(text)
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``time``, ``level``, ``message`` (or ``scope``), then the fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _stamp(record.created, record.msecs),
            "level": level_name(record.levelno),
            "scope": record.name,
            "message": record.msg if not record.args else record.getMessage(),
        }
        fields: Mapping[str, Any] | None = getattr(record, "fields", None)
        if fields:
            entry.update(fields)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, separators=(",", ":"), default=str)


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
    handler = logging.StreamHandler(stream)
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
        # makeRecord + handle: the same record logger.log builds, without its caller lookup
        # (a stack walk nobody reads: neither format shows file or line).
        logger = self.logger
        logger.handle(logger.makeRecord(logger.name, level, "", 0, "request", (), None, extra={"fields": fields}))
