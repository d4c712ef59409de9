"""The ``date`` header of data-plane answers: exactly one, the backend's when it sent one.

hypercorn appends its own ``date`` to every response, so a proxied answer carried two (the
backend's and hypercorn's). Data-plane binds turn hypercorn's off (``FrontDoor.sets_date_header``,
read by ``server.serve_app``) and the gateway adds one only where none is present: its own answers
(errors, directResponse, rate limits) and backends that sent none (RFC 9110 §6.6.1).
"""

from __future__ import annotations

import time
from email.utils import formatdate

from .asgi import Header

__all__ = ["http_date", "with_date"]

_cached: tuple[int, bytes] = (0, b"")


def http_date(now: float | None = None) -> bytes:
    """IMF-fixdate of ``now`` (default: the wall clock), formatted once per second."""
    global _cached
    second = int(time.time() if now is None else now)
    if _cached[0] != second:
        _cached = (second, formatdate(second, usegmt=True).encode("ascii"))
    return _cached[1]


def with_date(headers: list[Header]) -> list[Header]:
    """``headers`` unchanged when they carry a ``date``, else with one appended (a new list)."""
    for name, _ in headers:
        if name == b"date":
            return headers
    return [*headers, (b"date", http_date())]
