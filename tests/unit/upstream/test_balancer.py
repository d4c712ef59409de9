"""The balancer's picks (upstream/balancer.py) with a seeded random source: weights, power of two
choices over in-flight requests and latency, and the latency average that fades when unused."""

from __future__ import annotations

import math
import random
from collections import Counter

from trioproxy.upstream.balancer import Balancer, TargetLoad


def test_weighted_picks_follow_the_weights_and_skip_weight_zero():
    b = Balancer(random.Random(7))
    counts = Counter(b.pick(["a", "b", "c"], [3, 1, 0], "weighted", 0.0) for _ in range(4000))
    assert counts[2] == 0
    assert 2700 < counts[0] < 3300 and 700 < counts[1] < 1300


def test_least_request_prefers_fewer_requests_in_flight():
    b = Balancer(random.Random(1))
    for _ in range(5):
        b.start("a")
    picks = Counter(b.pick(["a", "b"], [1, 1], "leastRequest", 0.0) for _ in range(100))
    assert picks == {1: 100}  # two candidates: P2C always compares both


def test_least_request_prefers_the_faster_target_then_tries_it_again_once_its_latency_fades():
    b = Balancer(random.Random(3))
    slow, fast = b.load("slow"), b.load("fast")
    slow.observe(0.0, 2.0, 10.0)
    fast.observe(0.0, 0.05, 10.0)
    assert b.pick(["slow", "fast"], [1, 1], "leastRequest", 0.0) == 1
    # the fast target keeps being fed; the slow one is not: after ~40 s its average is below the fast one's
    fast.observe(40.0, 0.05, 10.0)
    assert slow.latency(40.0, 10.0) == 2.0 * math.exp(-4.0) < 0.05
    assert b.pick(["slow", "fast"], [1, 1], "leastRequest", 40.0) == 0


def test_peak_ewma_jumps_up_and_decays_down():
    load = TargetLoad()
    load.observe(0.0, 1.0, 10.0)
    assert load.ewma == 1.0
    load.observe(0.0, 0.1, 10.0)  # no time passed: w = 1, unchanged
    assert load.ewma == 1.0
    load.observe(10.0, 0.1, 10.0)
    expected = 1.0 * math.exp(-1.0)
    expected = expected * math.exp(-1.0) + 0.1 * (1 - math.exp(-1.0))
    assert math.isclose(load.ewma, expected)


def test_p2c_draws_two_distinct_targets_so_the_worst_of_three_is_never_chosen():
    b = Balancer(random.Random(11))
    for _ in range(10):
        b.start("busy")
    picks = Counter(b.pick(["x", "busy", "y"], [1, 1, 1], "leastRequest", 0.0) for _ in range(3000))
    assert picks[1] == 0 and picks[0] > 1000 and picks[2] > 1000


def test_finish_takes_the_request_off_and_feeds_the_latency():
    b = Balancer(random.Random(0))
    load = b.start("a")
    Balancer.finish(load, 5.0, 0.2)
    assert load.in_flight == 0 and load.ewma == 0.2 and load.stamp == 5.0


def test_the_injected_source_decides_every_pick():
    picks = [Balancer(random.Random(42)).pick(["a", "b", "c"], [1, 1, 1], "weighted", 0.0) for _ in range(3)]
    assert len(set(picks)) == 1  # the same seed, the same first pick
    rng = random.Random(42)
    expected = random.Random(42)
    b = Balancer(rng)
    assert [b.pick(["a", "b"], [1, 1], "weighted", 0.0) for _ in range(20)] == [
        int(expected.randrange(2) >= 1) for _ in range(20)]


def test_all_weights_zero_pick_uniformly_and_never_the_excluded_one():
    b = Balancer(random.Random(3))
    counts = Counter(b.pick(["a", "b"], [0, 0], "weighted", 0.0) for _ in range(400))
    assert 150 < counts[0] < 250 and 150 < counts[1] < 250
    assert {b._by_weight([0, 0, 0], exclude=1) for _ in range(100)} == {0, 2}
    assert {b._by_weight([1, 1], exclude=0) for _ in range(50)} == {1}  # the one left: total 1


def test_cost_is_latency_plus_floor_times_requests_in_flight_plus_one_and_ties_keep_the_first_draw():
    b = Balancer(random.Random(0))
    load = b.start("a")
    b.start("a")
    assert load.in_flight == 2
    load.observe(0.0, 0.009, 10.0)
    assert math.isclose(load.cost(0.0, 10.0), (0.009 + 0.001) * 3)
    for seed in range(10):  # equal costs (both unused): the first draw stays, as a weighted pick would take it
        tie = Balancer(random.Random(seed)).pick(["x", "y"], [1, 1], "leastRequest", 0.0)
        assert tie == Balancer(random.Random(seed)).pick(["x", "y"], [1, 1], "weighted", 0.0)


def test_latency_reads_unfaded_at_or_before_its_last_sample_and_feeds_from_its_stamp():
    load = TargetLoad()
    load.observe(100.0, 1.0, 10.0)
    assert load.latency(100.0, 10.0) == 1.0 and load.latency(99.0, 10.0) == 1.0
    assert math.isclose(load.latency(100.5, 10.0), math.exp(-0.05))
    load.observe(110.0, 0.1, 10.0)  # 10 s after the stamp at 100, not 210
    faded = math.exp(-1.0)
    assert math.isclose(load.ewma, faded * faded + 0.1 * (1 - faded))
    same = TargetLoad()
    same.observe(0.0, 0.2, 10.0)
    same.observe(0.0, 0.2, 10.0)  # equal to the average: taken as the peak, unchanged
    assert same.ewma == 0.2 and same.stamp == 0.0
