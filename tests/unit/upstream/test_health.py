"""Outlier detection's pure decision (upstream/health.py): when a target is ejected, for how long,
how it is probed back, and the retry-after rule. Times are given, so nothing depends on a clock."""

from __future__ import annotations

from trioproxy.policies.resilience import ActiveCheckSpec, HealthSpec
from trioproxy.upstream.health import HealthRegistry, TargetHealth, failed_status, retry_after_seconds

SPEC = HealthSpec(consecutive_failures=3, duration=30.0, max_duration=100.0, interval=10.0)


def fail(h: TargetHealth, now: float, n: int = 1, **kw: object) -> float | None:
    result = None
    for _ in range(n):
        result = h.record(now, True, **kw)  # type: ignore[arg-type]
    return result


def test_consecutive_failures_eject_and_a_success_between_resets_the_count():
    h = TargetHealth(SPEC)
    assert fail(h, 0.0, 2) is None
    h.record(0.0, False)
    assert fail(h, 0.0, 2) is None and h.admit(0.0) == "ok"
    assert fail(h, 0.0) == 30.0
    assert h.admit(29.9) == "ejected" and h.state(29.9) == "ejected"


def test_after_the_ejection_one_probe_goes_and_its_success_brings_the_target_back():
    h = TargetHealth(SPEC)
    fail(h, 0.0, 3)
    assert h.state(30.0) == "ejected"  # due, but no probe went yet
    assert h.admit(30.0) == "probe"
    assert h.admit(30.0) == "ejected"  # one probe at a time
    assert h.state(30.0) == "probing"
    h.record(31.0, False, probe=True)
    assert h.admit(31.0) == "ok" and h.state(31.0) == "healthy"


def test_a_failed_probe_ejects_again_for_base_times_the_number_of_ejections_capped():
    h = TargetHealth(SPEC)
    fail(h, 0.0, 3)
    assert h.admit(30.0) == "probe"
    assert h.record(30.0, True, probe=True) == 60.0  # 2nd ejection: 2 x 30 s
    assert h.admit(89.0) == "ejected" and h.admit(90.0) == "probe"
    assert h.record(90.0, True, probe=True) == 90.0
    assert h.admit(180.0) == "probe"
    assert h.record(180.0, True, probe=True) == 100.0  # 4 x 30 capped at maxDuration


def test_the_multiplier_decays_by_one_each_healthy_interval():
    h = TargetHealth(SPEC)
    fail(h, 0.0, 3)
    h.admit(30.0)
    h.record(30.0, True, probe=True)  # multiplier 2
    h.admit(90.0)
    h.record(90.0, False, probe=True)  # back at 90
    h.record(100.5, False)  # one healthy interval: multiplier 1
    assert h.ejections == 1
    assert fail(h, 101.0, 3) == 60.0  # 2 x 30 again, not 3 x 30


def test_a_cancelled_probe_frees_its_slot_and_a_forgotten_one_after_an_interval():
    h = TargetHealth(SPEC)
    fail(h, 0.0, 3)
    assert h.admit(30.0) == "probe"
    h.release_probe()
    assert h.admit(30.0) == "probe"
    assert h.admit(39.9) == "ejected" and h.admit(40.0) == "probe"


def test_retry_after_ejects_for_that_long_at_once_capped():
    h = TargetHealth(SPEC)
    assert h.record(0.0, True, retry_after=7.0) == 7.0
    assert h.admit(6.9) == "ejected" and h.admit(7.0) == "probe"
    h2 = TargetHealth(SPEC)
    assert h2.record(0.0, True, retry_after=1e6) == 100.0


def test_failures_of_calls_started_before_the_ejection_do_not_extend_it():
    h = TargetHealth(SPEC)
    fail(h, 0.0, 3)
    assert fail(h, 1.0, 5) is None and h.ejected_until == 30.0 and h.total_ejections == 1


def test_failure_percentage_over_the_window():
    spec = HealthSpec(consecutive_failures=1000, failure_percentage=50, minimum_requests=10, interval=10.0)
    h = TargetHealth(spec)
    for i in range(9):
        h.record(0.1 * i, i % 2 == 0)  # 5 failures in 9: below the volume
    assert h.ejected_until is None
    assert h.record(1.0, True) == 30.0  # 6 of 10


def test_failure_percentage_window_restarts_after_the_interval():
    spec = HealthSpec(consecutive_failures=1000, failure_percentage=50, minimum_requests=4, interval=10.0)
    h = TargetHealth(spec)
    h.record(0.0, True)
    h.record(0.0, True)
    h.record(0.0, False)
    h.record(11.0, False)  # new window
    h.record(11.0, False)
    h.record(11.0, True)
    assert h.ejected_until is None


def test_failed_status_and_retry_after_parsing():
    assert failed_status(SPEC, 503) and failed_status(SPEC, 429) and not failed_status(SPEC, 404)
    assert not failed_status(HealthSpec(failure_statuses="5xx"), 429)
    assert retry_after_seconds(b"12", 0.0) == 12.0
    assert retry_after_seconds(b"Thu, 01 Jan 1970 00:01:40 GMT", 40.0) == 60.0
    assert retry_after_seconds(b"soon", 0.0) is None and retry_after_seconds(None, 0.0) is None


def test_registry_tells_each_ejection_and_keeps_state_across_spec_changes():
    seen: list[tuple[str, str]] = []
    registry = HealthRegistry(lambda key, reason: seen.append((key, reason)))
    for _ in range(3):
        registry.record("a", SPEC, 0.0, True)
    assert seen == [("a", "consecutiveFailures")]
    wider = HealthSpec(consecutive_failures=10)
    assert registry.get("a", wider).spec == wider and registry.get("a", wider).total_ejections == 1
    assert [key for key, _ in registry] == ["a"]


def test_active_checks_take_the_target_out_after_the_unhealthy_threshold_and_back_after_the_healthy_one():
    h = TargetHealth(HealthSpec(check=ActiveCheckSpec(unhealthy_threshold=2, healthy_threshold=3)))
    assert h.checked(False) is False and h.available(0.0)
    h.checked(True)  # a pass between resets the count
    assert h.checked(False) is False
    assert h.checked(False) is True and not h.available(0.0) and h.admit(0.0) == "ejected"
    assert h.state(0.0) == "ejected" and h.last_reason == "activeCheck"
    h.checked(True)
    h.checked(True)
    assert not h.available(0.0)
    h.checked(True)
    assert h.available(0.0) and h.state(0.0) == "healthy"
    assert TargetHealth(SPEC).checked(False) is False  # no check configured: nothing changes


def test_available_says_what_admit_would_without_taking_the_probe():
    h = TargetHealth(SPEC)
    assert h.available(0.0)
    fail(h, 0.0, 3)
    assert not h.available(29.9) and h.available(30.0)
    assert h.available(30.0) and h.admit(30.0) == "probe"  # available() took nothing
    assert not h.available(30.0) and not h.available(39.9) and h.available(40.0)


def test_snapshot_shows_state_time_left_and_reason():
    h = TargetHealth(SPEC)
    assert h.snapshot(0.0) == {"state": "healthy", "ejections": 0, "multiplier": 0, "consecutiveFailures": 0,
                               "ejectedFor": None, "reason": None}
    fail(h, 0.0, 2)
    assert h.snapshot(0.0)["consecutiveFailures"] == 2
    fail(h, 0.0)
    assert h.snapshot(10.0) == {"state": "ejected", "ejections": 1, "multiplier": 1, "consecutiveFailures": 0,
                                "ejectedFor": 20.0, "reason": "consecutiveFailures"}
    h.admit(30.0)
    assert h.snapshot(30.5)["state"] == "probing" and h.snapshot(30.5)["ejectedFor"] == 0.0


def test_each_ejection_names_its_reason():
    h = TargetHealth(SPEC)
    fail(h, 0.0, 3)
    assert h.last_reason == "consecutiveFailures"
    h.admit(30.0)
    h.record(30.0, True, probe=True)
    assert h.last_reason == "probeFailed"
    h2 = TargetHealth(SPEC)
    h2.record(0.0, True, retry_after=5.0)
    assert h2.last_reason == "retryAfter"
    rate = TargetHealth(HealthSpec(consecutive_failures=100, failure_percentage=50, minimum_requests=2))
    rate.record(0.0, False)
    rate.record(0.0, True)
    assert rate.last_reason == "failurePercentage"
    assert TargetHealth(SPEC).record(0.0, True, retry_after=1.0, reason="custom") == 1.0


def test_retry_after_does_not_raise_the_multiplier_and_needs_a_positive_time():
    h = TargetHealth(SPEC)
    assert h.record(0.0, True, retry_after=0.5) == 0.5  # under a second counts too
    assert h.ejections == 0
    h.record(0.5, False, probe=h.admit(0.5) == "probe")
    assert fail(h, 1.0, 3) == 30.0  # the first counted ejection: 1 x 30 s
    h3 = TargetHealth(SPEC)
    assert h3.record(0.0, True, retry_after=0.0) is None  # retry-after: 0 is no ejection


def test_a_failure_once_the_ejection_is_over_ejects_again_even_without_the_probe():
    h = TargetHealth(SPEC)
    fail(h, 0.0, 3)
    assert h.record(30.0, True) == 60.0  # exactly at the end: a panic-mode call failed


def test_the_registry_hands_on_retry_after_probe_and_reason():
    seen: list[tuple[str, str]] = []
    registry = HealthRegistry(lambda key, reason: seen.append((key, reason)))
    assert registry.record("a", SPEC, 0.0, True, retry_after=7.0) == 7.0
    health = registry.get("a", SPEC)
    assert health.admit(7.0) == "probe"
    assert registry.record("a", SPEC, 7.0, True, probe=True, reason="mine") == 30.0
    assert seen == [("a", "retryAfter"), ("a", "mine")] and health.probe_started is None
    registry.checked("b", HealthSpec(check=ActiveCheckSpec(unhealthy_threshold=1)), False)
    assert seen[-1] == ("b", "activeCheck")


def test_boundaries_of_statuses_dates_windows_and_the_decay():
    assert failed_status(SPEC, 500) and not failed_status(SPEC, 499)
    assert retry_after_seconds(b"Thu, 01 Jan 1970 00:00:10 GMT", 40.0) == 0.0  # a date past: at once
    spec = HealthSpec(consecutive_failures=1000, failure_percentage=50, minimum_requests=2, interval=10.0)
    h = TargetHealth(spec)
    h.record(0.0, True)
    h.record(10.0, False)  # exactly one interval later: a new window, counting this call only
    assert (h.window_start, h.window_requests, h.window_failures) == (10.0, 1, 0)
    assert h.record(10.0, False) is None  # 0 of 2 failed
    two = TargetHealth(HealthSpec(consecutive_failures=1000, failure_percentage=50, minimum_requests=4))
    for failed in (True, False, False):
        two.record(0.0, failed)
    assert two.record(0.0, False) is None  # 1 of 4 = 25 % < 50 %
    exact = TargetHealth(HealthSpec(consecutive_failures=1000, failure_percentage=50, minimum_requests=4))
    for failed in (False, True, False):
        exact.record(0.0, failed)
    assert exact.record(0.0, True) == 30.0  # 2 of 4 = 50 %: the threshold itself ejects (checked on a failure)
    assert (exact.window_requests, exact.window_failures) == (0, 0)  # an ejection starts a new window


def test_the_multiplier_decays_only_by_whole_intervals_and_not_below_zero():
    h = TargetHealth(SPEC)
    fail(h, 0.0, 3)
    h.admit(30.0)
    h.record(30.0, False, probe=True)  # back at 30, multiplier 1
    h.record(39.9, False)
    assert h.ejections == 1  # 9.9 s: no whole interval yet
    h.record(100.0, False)
    assert h.ejections == 0 and h.total_ejections == 1
    assert fail(h, 100.0, 3) == 30.0 and h.total_ejections == 2


def test_checks_count_ejections_and_a_pass_never_takes_out():
    h = TargetHealth(HealthSpec(check=ActiveCheckSpec(unhealthy_threshold=1, healthy_threshold=1)))
    fail(h, 0.0, 5)
    assert h.total_ejections == 1
    assert h.checked(True) is False
    assert h.checked(False) is True and h.total_ejections == 2
    assert h.checked(True) is False and h.checked_down is False


def test_late_windows_and_late_decay_count_from_their_own_start():
    spec = HealthSpec(consecutive_failures=1000, failure_percentage=50, minimum_requests=3, interval=10.0)
    h = TargetHealth(spec)
    h.record(100.0, True)
    h.record(101.0, False)
    assert h.record(102.0, True) == 30.0  # one window from 100: 2 of 3
    d = TargetHealth(SPEC)
    fail(d, 0.0, 3)
    d.admit(30.0)
    d.record(30.0, True, probe=True)  # multiplier 2, out until 90
    d.admit(90.0)
    d.record(90.0, False, probe=True)  # back at 90
    d.record(105.0, False)  # 1.5 intervals: one step, not 1.5
    assert d.ejections == 1 and d.healthy_since == 100.0
