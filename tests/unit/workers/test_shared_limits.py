"""Buckets in shared memory decide exactly as one process's ``LocalRateLimiter`` does."""

from __future__ import annotations

import random

from trioproxy.policies.ratelimit_local import LocalRateLimiter, LocalRateLimitSpec
from trioproxy.workers.shared_limits import SharedLimits

SPECS = (LocalRateLimitSpec(5, 2, 1.0), LocalRateLimitSpec(40, 40, 10.0, "tokens"))


def table() -> SharedLimits:
    shared = SharedLimits.create(capacity=16)
    shared.clock = lambda: 0.0  # limiters made at now=0 map now to the shared clock unchanged
    return shared


def test_two_processes_views_of_one_limiter_decide_as_one_limiter():
    shared = table()
    views = [shared.limiter(SPECS, "route", 0.0), shared.limiter(SPECS, "route", 0.0)]  # worker 0, worker 1
    alone = LocalRateLimiter(SPECS, 0.0)
    rng = random.Random(7)
    now = 0.0
    for _ in range(2000):
        now += rng.choice((0.0, 0.01, 0.2, 0.7))
        view = rng.choice(views)
        if rng.random() < 0.7:
            assert view.admit(now) == alone.admit(now)
        else:
            cost = rng.randrange(0, 30)
            assert view.charge_tokens(now, cost) == alone.charge_tokens(now, cost)
    assert views[0].observe(now) == views[1].observe(now) == alone.observe(now)


def test_a_reload_keeps_a_budget_and_a_changed_or_returning_limiter_starts_full():
    shared = table()
    specs = (LocalRateLimitSpec(3, 3, 60.0),)
    first = shared.limiter(specs, "route", 0.0)
    assert [first.admit(1.0).allowed for _ in range(3)] == [True, True, True]
    assert not shared.limiter(specs, "route", 0.0).admit(1.0).allowed  # same key and specs: same budget
    changed = (LocalRateLimitSpec(4, 3, 60.0),)
    assert shared.limiter(changed, "route", 0.0).admit(1.0).allowed  # new specs: a full bucket
    shared.retire_except(shared.digests({"route": (changed, first)}))  # a reload dropped the old specs
    assert shared.limiter(specs, "route", 0.0).admit(1.0).allowed  # ...and the next brought them back: full


def test_a_full_table_falls_back_to_a_process_local_limiter():
    shared = table()
    limiters = [shared.limiter((LocalRateLimitSpec(1, 1, 1.0),), f"route{i}", 0.0) for i in range(17)]
    assert type(limiters[-1]) is LocalRateLimiter
    assert all(limiter.admit(0.5).allowed for limiter in limiters)
