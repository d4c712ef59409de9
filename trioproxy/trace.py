"""Per-request tracing: event records, the tracer of one request, and the watcher registry.

A watcher is someone reading ``/debug/trace``: it waits (first come, first served among
those whose expression matches) for the next request, which it claims for itself — one-shot,
so a keep-alive sibling of the traced request is not traced too. While no watcher waits, a
request pays one truthiness check of ``TraceHub.watchers``.

Events travel from the request to the reader over a bounded Trio memory channel. The request
never waits on it: when the reader stalls and the buffer is full, events are dropped and
counted (``Tracer.dropped``, reported by the endpoint and in metrics), except the closing
``requestFinished``, for which a slot is kept free so every stream ends properly.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import trio

Header = tuple[bytes, bytes]
REDACTED = "<redacted>"
CREDENTIAL_HEADERS = frozenset({b"authorization", b"proxy-authorization", b"cookie", b"set-cookie", b"x-api-key"})
DEFAULT_BODY_LIMIT = 2 * 1024 * 1024  # env TRIOPROXY_TRACE_BODY_LIMIT (bytes) overrides
DEFAULT_BUFFER = 256
KEEPALIVE_SECONDS = 1.0


def body_limit_from_env() -> int:
    """``TRIOPROXY_TRACE_BODY_LIMIT``: bytes of each body a trace keeps (default 2 MiB)."""
    raw = os.environ.get("TRIOPROXY_TRACE_BODY_LIMIT", "")
    return int(raw) if raw.strip().isdigit() else DEFAULT_BODY_LIMIT


def headers_map(headers: Iterable[Header]) -> dict[str, str]:
    """Headers as a name → value map (repeats joined with ", "), credentials redacted."""
    out: dict[str, str] = {}
    for name, value in headers:
        text = REDACTED if name in CREDENTIAL_HEADERS else value.decode("latin-1")
        key = name.decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def duration_string(seconds: float) -> str:
    """Duration text as agentgateway prints it: ``"1.234ms"``, ``"2.500s"``, ``"87µs"``."""
    if seconds >= 1:
        return f"{seconds:.3f}s"
    if seconds >= 0.001:
        return f"{seconds * 1000:.3f}ms"
    return f"{seconds * 1_000_000:.0f}µs"


class BodyCapture:
    """Keeps the first ``limit`` bytes of a body that passes through unchanged."""

    __slots__ = ("limit", "parts", "size", "truncated")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        room = self.limit - self.size
        if room <= 0:
            self.truncated = self.truncated or bool(chunk)
            return
        piece = chunk[:room]
        self.parts.append(piece)
        self.size += len(piece)
        if len(chunk) > room:
            self.truncated = True

    def encoded(self) -> str:
        return base64.b64encode(b"".join(self.parts)).decode("ascii")


class Tracer:
    """Records the events of one request into its watcher's channel."""

    def __init__(self, watcher: "Watcher", arrival: float, body_limit: int) -> None:
        self.watcher = watcher
        self.arrival = arrival
        self.body_limit = body_limit
        self.dropped = 0
        self._last = 0
        self._finished = False

    def _micros(self, at: float | None = None) -> int:
        value = int(((trio.current_time() if at is None else at) - self.arrival) * 1_000_000)
        # eventEnd never decreases along a trace, whatever the clock's resolution did.
        self._last = max(self._last, value)
        return self._last

    def event(self, message_type: str, *, start: float | None = None, severity: str = "info",
              scope: list[str] | None = None, **fields: Any) -> None:
        if self._finished:
            return
        record: dict[str, Any] = {
            "eventStart": None if start is None else max(0, int((start - self.arrival) * 1_000_000)),
            "eventEnd": self._micros(),
            "severity": severity,
        }
        if scope:
            record["scope"] = scope
        record["message"] = {"type": message_type, **fields}
        self._put(record)

    def finish(self, status: int, error: str | None) -> None:
        """The last event; closes the stream."""
        if self._finished:
            return
        severity = "error" if status >= 500 or error and status == 0 else ("warn" if status >= 400 else "success")
        self.event("requestFinished", severity=severity, status=status, error=error)
        self._finished = True
        self.watcher.close(self.dropped)

    def _put(self, record: dict[str, Any]) -> None:
        send = self.watcher.send
        # Keep one slot for requestFinished: drop ordinary events when only one slot is left.
        stats = send.statistics()
        is_last = record["message"]["type"] == "requestFinished"
        if not is_last and stats.current_buffer_used >= stats.max_buffer_size - 1:
            self.dropped += 1
            return
        try:
            send.send_nowait(record)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self.dropped += 1

    def body(self, stage: str, capture: BodyCapture) -> None:
        if capture.size or capture.truncated:
            fields: dict[str, Any] = {"stage": stage, "body": capture.encoded()}
            if capture.truncated:
                fields["truncated"] = True
            self.event("bodySnapshot", **fields)


class Watcher:
    """One reader of ``/debug/trace`` waiting for (then reading) one request's events."""

    def __init__(self, matches: Callable[[Mapping[str, Any]], bool] | None, buffer: int) -> None:
        self.matches = matches
        self.send, self.receive = trio.open_memory_channel[dict[str, Any]](buffer)
        self.dropped = 0

    def close(self, dropped: int) -> None:
        self.dropped = dropped
        self.send.close()


class TraceHub:
    """The watchers waiting for a request, oldest first."""

    def __init__(self, *, body_limit: int | None = None, buffer: int = DEFAULT_BUFFER,
                 keepalive: float = KEEPALIVE_SECONDS) -> None:
        self.watchers: list[Watcher] = []
        self.keepalive = keepalive
        self.body_limit = body_limit if body_limit is not None else body_limit_from_env()
        self.buffer = buffer
        self.traced = 0

    def watch(self, matches: Callable[[Mapping[str, Any]], bool] | None = None) -> Watcher:
        watcher = Watcher(matches, self.buffer)
        self.watchers.append(watcher)
        return watcher

    def forget(self, watcher: Watcher) -> None:
        """A reader went away: stop offering it requests (a claimed trace just loses its reader)."""
        if watcher in self.watchers:
            self.watchers.remove(watcher)
        watcher.receive.close()

    def claim(self, arrival: float, activation: Callable[[], Mapping[str, Any]]) -> Tracer | None:
        """Give the request to the first waiting watcher that wants it, if any."""
        context = None
        for watcher in self.watchers:
            if watcher.matches is not None:
                if context is None:
                    context = activation()
                if not watcher.matches(context):
                    continue
            self.watchers.remove(watcher)
            self.traced += 1
            return Tracer(watcher, arrival, self.body_limit)
        return None
