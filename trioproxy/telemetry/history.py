"""The request history: a summary of each of the last N finished requests, always on (docs/history.md).

Recording must cost next to nothing, since it runs for every request whether or not anyone looks:
one tuple of values the access log already computed, appended to a ``deque(maxlen=N)`` (the
oldest falls out, so memory stays bounded). No CEL, no JSON, no dict at record time: ``as_dict``
and the CEL activation are built only when the admin API reads the history.

``config.history.size`` sets N (default 1000; 0 turns it off). A reload that changes it keeps
the newest entries that still fit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

import trio

__all__ = ["DEFAULT_SIZE", "History", "Summary", "subject_of"]

DEFAULT_SIZE = 1000


class Summary(NamedTuple):
    """One finished request. ``reason``: the gateway's own error text (a 429's, a 404's ...)."""

    time: float  # unix seconds at the end of the request
    method: str
    path: str
    host: str
    route: str
    backend: str
    status: int
    duration_ms: float
    input_tokens: int | None
    output_tokens: int | None
    subject: str | None
    reason: str | None
    error_kind: str | None
    model: str | None
    cost: float | None = None  # USD (docs/pricing.md); None: no usage, or a model without a price
    #: why the gateway refused, or the attempts of a failover (``Exchange.why``: built only then; docs/history.md)
    why: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of ``/api/requests`` (camelCase, as the rest of the admin API)."""
        return {
            "time": self.time, "method": self.method, "path": self.path, "host": self.host,
            "route": self.route or None, "backend": self.backend or None, "status": self.status,
            "durationMs": round(self.duration_ms, 3), "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens, "model": self.model, "cost": self.cost, "subject": self.subject,
            "reason": self.reason, "errorKind": self.error_kind, "why": self.why,
        }

    def activation(self) -> dict[str, Any]:
        """CEL's view, with the trace filter's roots (cel.ALLOWED_ROOTS): ``request.method``,
        ``request.path``, ``request.route``, ``response.code``, ``response.reason``, ``response.why``
        (a map, empty without one: ``response.why.policy == "jwtAuth"``), ``backend.name``,
        ``llm.inputTokens``, ``llm.cost`` ... (docs/history.md)."""
        return {
            "request": {"method": self.method, "path": self.path.split("?", 1)[0], "pathAndQuery": self.path,
                        "host": self.host, "route": self.route, "subject": self.subject or "",
                        "time": self.time},
            "response": {"code": self.status, "durationMs": self.duration_ms, "reason": self.reason or "",
                         "errorKind": self.error_kind or "", "why": self.why or {}},
            "backend": {"name": self.backend},
            "llm": {k: v for k, v in (("inputTokens", self.input_tokens), ("outputTokens", self.output_tokens),
                                      ("requestModel", self.model), ("cost", self.cost)) if v is not None},
        }


def subject_of(jwt: Mapping[str, Any] | None, api_key: Mapping[str, Any] | None,
               basic_auth: Mapping[str, Any] | None) -> str | None:
    """Who made the request, when an authentication policy said so: the JWT's ``sub``, the Basic
    username, or an apiKey's metadata name (``apiKey`` alone when its metadata names nobody)."""
    if jwt is not None and isinstance(jwt.get("sub"), str):
        return str(jwt["sub"])
    if basic_auth is not None and isinstance(basic_auth.get("username"), str):
        return str(basic_auth["username"])
    if api_key is not None:
        for name in ("name", "user", "sub", "id", "owner"):
            value = api_key.get(name)
            if isinstance(value, str):
                return value
        return "apiKey"
    return None


class History:
    """The last ``size`` summaries; ``wait_new`` wakes followers (``/api/requests?follow=true``)."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.entries: deque[Summary] = deque(maxlen=size)
        self.size = size
        self.total = 0  # summaries recorded since start: a follower's cursor
        self.followers = 0
        self._new = trio.Event()

    def resize(self, size: int) -> None:
        if size != self.size:
            self.size = size
            self.entries = deque(self.entries, maxlen=size)

    def record(self, summary: Summary) -> None:
        self.entries.append(summary)
        self.total += 1
        if self.followers:
            self._new.set()
            self._new = trio.Event()

    def newest(self, limit: int | None = None,
               matches: Callable[[Summary], bool] | None = None) -> list[Summary]:
        """Newest first; at most ``limit`` of those ``matches`` accepts."""
        out: list[Summary] = []
        for summary in reversed(self.entries):
            if limit is not None and len(out) >= limit:
                break
            if matches is None or matches(summary):
                out.append(summary)
        return out

    def since(self, seen: int) -> Iterator[Summary]:
        """The summaries recorded after the ``seen``-th, oldest first (those still kept)."""
        count = min(self.total - seen, len(self.entries))
        if count > 0:
            entries = list(self.entries)
            yield from entries[len(entries) - count:]

    async def wait_new(self, seen: int) -> None:
        """Return once more than ``seen`` summaries have been recorded."""
        self.followers += 1
        try:
            while self.total <= seen:
                await self._new.wait()
        finally:
            self.followers -= 1
