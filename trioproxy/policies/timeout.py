"""``timeout``: ``requestTimeout`` (route, counted from arrival) and ``backendRequestTimeout`` (one
upstream call); the gateway applies them, no stage runs."""

from __future__ import annotations

from attrs import frozen


@frozen
class TimeoutPolicy:
    request_timeout: float | None = None
    backend_request_timeout: float | None = None
