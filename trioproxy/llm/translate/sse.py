"""A small incremental text/event-stream reader and writer for the stream translators."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["SseReader", "sse"]


class SseReader:
    """Feed bytes as they arrive; get back the complete ``(event, data)`` pairs. Comments, ``id:`` and
    ``retry:`` lines are of no use to a translator and are skipped."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        buf = self._buf + chunk
        hold = b"\r" if buf.endswith(b"\r") else b""  # maybe the first half of a CRLF
        if hold:
            buf = buf[:-1]
        buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        *blocks, rest = buf.split(b"\n\n")
        self._buf = rest + hold
        return [e for e in map(_event, blocks) if e is not None]

    def finish(self) -> list[tuple[str, str]]:
        """A last event not followed by a blank line (a server that closed without one)."""
        rest, self._buf = self._buf, b""
        event = _event(rest.replace(b"\r\n", b"\n")) if rest.strip() else None
        return [event] if event is not None else []


def _event(block: bytes) -> tuple[str, str] | None:
    name = "message"
    data: list[str] = []
    for raw in block.split(b"\n"):
        line = raw.decode("utf-8", "replace")
        if line.startswith("data:"):
            data.append(line[6:] if line[5:6] == " " else line[5:])
        elif line.startswith("event:"):
            name = line[6:].strip()
    return (name, "\n".join(data)) if data else None


def sse(obj: Any, event: str | None = None) -> bytes:
    """One SSE frame carrying ``obj`` as compact JSON (named ``event`` when given)."""
    data = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event}\ndata: {data}\n\n".encode() if event else f"data: {data}\n\n".encode()
