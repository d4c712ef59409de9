"""Outlier detection: which targets are ejected, and when they come back (docs/resilience.md).

``TargetHealth`` is the pure decision for one target (times are passed in, nothing awaits):

- a failure is a connect error, a reset or broken answer, a timeout, a 5xx or a 429;
- ``consecutive_failures`` failures in a row eject the target (Envoy's ``consecutive_5xx``: 5);
- with ``failure_percentage`` set, a window of ``interval`` with at least ``minimum_requests`` calls
  whose failures reach that share ejects it too (Envoy's failure-percentage detection);
- a 429 or 503 with ``retry-after`` ejects it for that long (capped at ``max_duration``);
- an ejection lasts ``duration`` × the number of ejections, at most ``max_duration`` (Envoy's
  ``base_ejection_time`` 30 s, ``max_ejection_time`` 300 s); each ``interval`` the target stays
  healthy takes one off that number;
- when the time is up, one request is let through as a probe (others still avoid the target); its
  success brings the target back, its failure ejects it again, for longer. A probe whose outcome is
  never told (cancelled) frees the slot after ``interval``.

``HealthRegistry`` holds one ``TargetHealth`` per target key, across config reloads, and tells
``on_eject`` (metrics) of each ejection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Literal

from ..policies.resilience import DEFAULT_HEALTH, HealthSpec

__all__ = ["Admission", "HealthRegistry", "TargetHealth", "failed_status", "retry_after_seconds"]

Admission = Literal["ok", "probe", "ejected"]


def failed_status(spec: HealthSpec, status: int) -> bool:
    """A response status that counts as the target's failure."""
    return status >= 500 or (status == 429 and spec.failure_statuses == "5xx+429")


def retry_after_seconds(value: bytes | None, now_epoch: float) -> float | None:
    """``retry-after`` as seconds from now: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    text = value.decode("latin-1").strip()
    if text.isdigit():
        return float(text)
    try:
        from email.utils import parsedate_to_datetime

        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now_epoch)


class TargetHealth:
    """One target's outlier state; every method takes ``now`` (trio's clock)."""

    __slots__ = ("check_failures", "check_passes", "checked_down", "consecutive", "ejected_until", "ejections",
                 "healthy_since", "last_reason", "probe_started", "spec", "total_ejections", "window_failures",
                 "window_requests", "window_start")

    def __init__(self, spec: HealthSpec = DEFAULT_HEALTH) -> None:
        self.spec = spec
        self.consecutive = 0
        self.ejections = 0                    # the multiplier of the ejection time
        self.total_ejections = 0
        self.ejected_until: float | None = None
        self.probe_started: float | None = None
        self.healthy_since = 0.0              # when the multiplier last changed or the target came back
        self.last_reason: str | None = None
        self.window_start = 0.0
        self.window_requests = 0
        self.window_failures = 0
        self.checked_down = False  # active health checks took it out (``checked``)
        self.check_failures = 0
        self.check_passes = 0

    def checked(self, passed: bool) -> bool:
        """One active health check's result; True when it takes the target out (``spec.check``'s
        thresholds: that many failed checks in a row out, that many passed in a row back)."""
        check = self.spec.check
        if check is None:
            return False
        if passed:
            self.check_passes += 1
            self.check_failures = 0
            if self.checked_down and self.check_passes >= check.healthy_threshold:
                self.checked_down = False
            return False
        self.check_failures += 1
        self.check_passes = 0
        if not self.checked_down and self.check_failures >= check.unhealthy_threshold:
            self.checked_down = True
            self.total_ejections += 1
            self.last_reason = "activeCheck"
            return True
        return False

    def state(self, now: float) -> Literal["healthy", "ejected", "probing"]:
        if self.checked_down:
            return "ejected"
        if self.ejected_until is None:
            return "healthy"
        return "ejected" if now < self.ejected_until or self.probe_started is None else "probing"

    def admit(self, now: float) -> Admission:
        """May a request go to this target now: ``ok``, ``probe`` (the one request let through after
        an ejection; tell its outcome with ``probe=True``) or ``ejected``."""
        if self.checked_down:
            return "ejected"
        until = self.ejected_until
        if until is None:
            return "ok"
        if now < until:
            return "ejected"
        if self.probe_started is not None and now - self.probe_started < self.spec.interval:
            return "ejected"  # one probe at a time
        self.probe_started = now
        return "probe"

    def available(self, now: float) -> bool:
        """Would ``admit`` let a request through (without taking the probe slot)?"""
        if self.checked_down:
            return False
        until = self.ejected_until
        if until is None:
            return True
        return now >= until and (self.probe_started is None or now - self.probe_started >= self.spec.interval)

    def _decay(self, now: float) -> None:
        """Each whole ``interval`` healthy takes one off the ejection multiplier (Envoy)."""
        if self.ejections and self.ejected_until is None:
            steps = int((now - self.healthy_since) // self.spec.interval)
            if steps > 0:
                self.ejections = max(0, self.ejections - steps)
                self.healthy_since += steps * self.spec.interval

    def _count(self, now: float, failed: bool) -> None:
        if now - self.window_start >= self.spec.interval:
            self.window_start, self.window_requests, self.window_failures = now, 0, 0
        self.window_requests += 1
        self.window_failures += failed

    def _rate_exceeded(self) -> bool:
        spec = self.spec
        return (spec.failure_percentage is not None and self.window_requests >= spec.minimum_requests
                and self.window_failures * 100 >= spec.failure_percentage * self.window_requests)

    def record(self, now: float, failed: bool, *, retry_after: float | None = None, probe: bool = False,
               reason: str | None = None) -> float | None:
        """One call's outcome; the ejection's length when this ejects the target, else None."""
        if probe:
            self.probe_started = None
        self._decay(now)
        self._count(now, failed)
        if not failed:
            self.consecutive = 0
            if self.ejected_until is not None and now >= self.ejected_until:
                self.ejected_until = None  # back
                self.healthy_since = now
            return None
        self.consecutive += 1
        if self.ejected_until is not None and now < self.ejected_until and retry_after is None:
            return None  # a call that started before the ejection
        spec = self.spec
        if retry_after is not None and retry_after > 0:
            return self._eject(now, min(retry_after, spec.max_duration), reason or "retryAfter", multiply=False)
        if probe or (self.ejected_until is not None and now >= self.ejected_until):
            return self._eject(now, None, reason or "probeFailed")
        if self.consecutive >= spec.consecutive_failures:
            return self._eject(now, None, reason or "consecutiveFailures")
        if self._rate_exceeded():
            return self._eject(now, None, reason or "failurePercentage")
        return None

    def release_probe(self) -> None:
        """The probe's outcome will never be told (its request was cancelled): another may go."""
        self.probe_started = None

    def _eject(self, now: float, seconds: float | None, reason: str, *, multiply: bool = True) -> float:
        spec = self.spec
        if multiply or seconds is None:
            self.ejections += 1
            seconds = min(spec.duration * self.ejections, max(spec.duration, spec.max_duration))
        until = now + seconds
        self.ejected_until = max(until, self.ejected_until or 0.0)
        self.probe_started = None
        self.consecutive = 0
        self.total_ejections += 1
        self.last_reason = reason
        self.window_start, self.window_requests, self.window_failures = now, 0, 0
        return seconds

    def snapshot(self, now: float) -> dict[str, Any]:
        until = self.ejected_until
        return {"state": self.state(now), "ejections": self.total_ejections, "multiplier": self.ejections,
                "consecutiveFailures": self.consecutive,
                "ejectedFor": round(max(0.0, until - now), 3) if until is not None else None,
                "reason": self.last_reason}


class HealthRegistry:
    """``TargetHealth`` by target key, kept across reloads (a reload may change a target's spec)."""

    def __init__(self, on_eject: Callable[[str, str], None] = lambda key, reason: None) -> None:
        self.targets: dict[str, TargetHealth] = {}
        self.on_eject = on_eject

    def get(self, key: str, spec: HealthSpec) -> TargetHealth:
        health = self.targets.get(key)
        if health is None:
            health = self.targets[key] = TargetHealth(spec)
        elif health.spec is not spec and health.spec != spec:
            health.spec = spec
        return health

    def record(self, key: str, spec: HealthSpec, now: float, failed: bool, *, retry_after: float | None = None,
               probe: bool = False, reason: str | None = None) -> float | None:
        health = self.get(key, spec)
        ejected = health.record(now, failed, retry_after=retry_after, probe=probe, reason=reason)
        if ejected is not None:
            self.on_eject(key, health.last_reason or "")
        return ejected

    def checked(self, key: str, spec: HealthSpec, passed: bool) -> None:
        health = self.get(key, spec)
        if health.checked(passed):
            self.on_eject(key, "activeCheck")

    def __iter__(self) -> Iterator[tuple[str, TargetHealth]]:
        return iter(sorted(self.targets.items()))
