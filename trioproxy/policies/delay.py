"""``delay``: fault injection, latency before the request goes upstream (agentgateway's ``delay``).

``duration`` is a duration (``2s``) or a CEL expression evaluated per request: a duration value
is used as is, a number is milliseconds (``random() < 0.1 ? 2000 : 0``), anything else or a
non-positive result adds nothing. The wait runs inside the request's deadline, so it counts
against ``requestTimeout`` like real latency (504 ``request timeout``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from attrs import frozen

__all__ = ["DelaySpec", "delay_seconds"]


@frozen
class DelaySpec:
    source: str                    # as written
    seconds: float | None = None   # when ``source`` is a plain duration; otherwise CEL


def delay_seconds(value: Any) -> float:
    """Seconds to wait for an expression's result (0: none)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1000
    else:
        return 0.0
    return seconds if seconds > 0 else 0.0
