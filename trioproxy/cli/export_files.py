"""Exports written by the commands (docs/export.md): ``trioproxy trace ... --har FILE`` / ``--curl``
and ``trioproxy requests ... --har FILE``.

Each traced request (a live trace, ``--follow``, or a saved one with ``--file``) is exported as it
finishes: HAR 1.2 rewritten whole to FILE after each request (so Ctrl-C during ``--follow`` keeps
what was traced; written to a temporary name then renamed), or one ``curl`` line on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

from ..telemetry.export import Exchange, ExportError, curl, exchange_from_trace, har, har_from_history
from .trace_client import Event


class ExportFailed(Exception):
    """A file that cannot be read or written, nothing to export, or an admin server that refused:
    one ``trioproxy: error:`` line, exit 1."""


# -- trace --har / --curl

def write_text(name: str, text: str, flag: str) -> None:
    """``text`` to the file ``name`` (``-``: stdout), written whole then renamed into place."""
    if name == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    temporary = f"{name}.tmp{os.getpid()}"
    try:
        with open(temporary, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, name)
    except OSError as exc:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise ExportFailed(f"{flag} {name}: cannot write: {exc.strerror}") from None


class TraceExport:
    """Collects a trace stream's requests and exports each as it finishes."""

    def __init__(self, har_file: str | None, curl_lines: bool) -> None:
        self.har_file = har_file
        self.curl_lines = curl_lines
        self.exchanges: list[Exchange] = []
        self.failed = False
        self._events: list[Event] = []
        self._started: float | None = None

    def add(self, event: Event, *, live: bool) -> None:
        if not self._events and live:
            self._started = time.time()  # the first event arrives as the request does
        self._events.append(event)
        message = event.get("message")
        if isinstance(message, dict) and message.get("type") == "requestFinished":
            events, self._events = self._events, []
            self._finished(events)

    def _finished(self, events: list[Event]) -> None:
        exchange = exchange_from_trace(events, started=self._started)
        self.exchanges.append(exchange)
        if self.curl_lines:
            try:
                sys.stdout.write(curl(exchange) + "\n")
                sys.stdout.flush()
            except ExportError as error:
                print(f"trioproxy: error: --curl: {exchange.method} {exchange.target}: {error}", file=sys.stderr)
                self.failed = True
        if self.har_file is not None:
            write_text(self.har_file, json.dumps(har(self.exchanges), indent=2, ensure_ascii=False) + "\n", "--har")

    def end(self) -> int:
        if self._events:  # a saved trace cut before its requestFinished: export what it holds
            events, self._events = self._events, []
            self._finished(events)
        if not self.exchanges:
            raise ExportFailed("no traced request to export")
        if self.har_file not in (None, "-"):
            print(f"trioproxy: wrote {len(self.exchanges)} request(s) to {self.har_file}", file=sys.stderr)
        return 1 if self.failed else 0


async def export_stream(events: AsyncIterator[Event] | Iterable[Event], args: argparse.Namespace, *,
                        live: bool, raw: Any = None) -> int:
    """Export every request of ``events`` (``raw``: also print each event, as ``--raw`` does)."""
    export = TraceExport(args.har, args.curl)
    if isinstance(events, AsyncIterator):
        async for event in events:
            if raw is not None:
                raw(event)
            export.add(event, live=live)
    else:
        for event in events:
            if raw is not None:
                raw(event)
            export.add(event, live=live)
    return export.end()


# -- requests --har

def write_history_har(entries: Sequence[dict[str, Any]], name: str) -> None:
    write_text(name, json.dumps(har_from_history(entries), indent=2, ensure_ascii=False) + "\n", "--har")
    if name != "-":
        print(f"trioproxy: wrote {len(entries)} request(s) to {name}", file=sys.stderr)
