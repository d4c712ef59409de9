import pytest
import trio
import trio.testing

from trioproxy.policies.ratelimit_local import (
    Decision,
    LocalRateLimiter,
    LocalRateLimitSpec,
    TokenBucket,
    most_constrained,
)


def requests_spec(n, per=None, interval=1.0):
    return LocalRateLimitSpec(n, per or n, interval, "requests")


def tokens_spec(n, per=None, interval=60.0):
    return LocalRateLimitSpec(n, per or n, interval, "tokens")


# --- spec ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (dict(requests=10, burst=5, unit="Seconds"), LocalRateLimitSpec(15, 10, 1.0, "requests")),
        (dict(requests=3, unit="Minutes"), LocalRateLimitSpec(3, 3, 60.0, "requests")),
        (dict(tokens=5000, unit="Hours"), LocalRateLimitSpec(5000, 5000, 3600.0, "tokens")),
    ],
)
def test_from_policy_maps_contract(kwargs, expected):
    assert LocalRateLimitSpec.from_policy(**kwargs) == expected


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(unit="Seconds"), "local"),
        (dict(requests=1, tokens=1, unit="Seconds"), "local"),
        (dict(tokens=10, burst=1, unit="Seconds"), "burst"),
        (dict(requests=10, unit="Days"), "unit"),
        (dict(requests=0, unit="Seconds"), "requests"),
        (dict(tokens=True, unit="Seconds"), "tokens"),
        (dict(requests=1, burst=-1, unit="Seconds"), "burst"),
    ],
)
def test_from_policy_rejects_with_field_name(kwargs, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        LocalRateLimitSpec.from_policy(**kwargs)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((0, 1, 1.0, "requests"), "maxTokens"),
        ((1, 0, 1.0, "requests"), "tokensPerFill"),
        ((1, 1, 0, "requests"), "fillInterval"),
        ((1, 1, 1.0, "bytes"), "type"),
        ((1, 2, 1.0, "requests"), "maxTokens"),
    ],
)
def test_spec_validation(args, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        LocalRateLimitSpec(*args)


# --- bucket -------------------------------------------------------------------------------


def test_bucket_starts_full_and_refuses_when_empty():
    b = TokenBucket(requests_spec(3), start=100.0)
    assert [b.try_acquire(100.0).remaining for _ in range(3)] == [2, 1, 0]
    assert b.try_acquire(100.5) == Decision(allowed=False, limit=3, remaining=0, reset_seconds=1)
    assert b.tokens == 0  # a refusal consumes nothing


def test_refill_is_discrete_and_aligned_to_start():
    b = TokenBucket(requests_spec(2, interval=10.0), start=5.0)
    b.try_acquire(5.0, cost=2)
    assert not b.try_acquire(14.999).allowed  # just before the first fill instant (15.0)
    d = b.try_acquire(15.0)  # a fill at start + 1 * interval
    assert d.allowed and d.remaining == 1
    # Fills happen at 25, 35, ... regardless of when requests arrive.
    assert b.peek(24.0).reset_seconds == 1
    assert b.peek(16.0).reset_seconds == 9


def test_refill_is_capped_at_max():
    b = TokenBucket(LocalRateLimitSpec(5, 2, 1.0, "requests"), start=0.0)
    b.try_acquire(0.0, cost=5)
    assert b.peek(1.0).remaining == 2
    assert b.peek(2.0).remaining == 4
    assert b.peek(1000.0).remaining == 5  # many intervals later: full, not 2000


def test_cost_above_balance_takes_nothing():
    b = TokenBucket(requests_spec(5), start=0.0)
    assert not b.try_acquire(0.0, cost=6).allowed
    assert b.tokens == 5


def test_overshoot_is_kept_until_refills_pay_it_back():
    b = TokenBucket(tokens_spec(100, interval=60.0), start=0.0)
    assert b.has_capacity(1.0).allowed
    d = b.charge(1.0, 250)  # one response crossing the budget is charged in full
    assert b.tokens == -150
    assert d == Decision(allowed=False, limit=100, remaining=0, reset_seconds=59)
    assert not b.has_capacity(59.0).allowed
    assert not b.has_capacity(60.0).allowed  # -150 + 100
    assert b.tokens == -50
    assert b.has_capacity(120.0) == Decision(allowed=True, limit=100, remaining=50, reset_seconds=60)


@pytest.mark.parametrize(
    ("now", "reset"),
    [(0.0, 60), (0.001, 60), (0.5, 60), (59.0, 1), (59.999, 1), (60.0, 60), (119.5, 1)],
)
def test_reset_is_whole_seconds_rounded_up(now, reset):
    b = TokenBucket(tokens_spec(10, interval=60.0), start=0.0)
    assert b.peek(now).reset_seconds == reset


def test_fractional_intervals_count_fills_despite_float_error():
    b = TokenBucket(LocalRateLimitSpec(1, 1, 0.1, "requests"), start=0.0)
    assert b.try_acquire(0.0).allowed
    # 0.1 * 3 == 0.30000000000000004 and 0.3 / 0.1 == 2.9999999999999996 in floats.
    for now in (0.1, 0.2, 0.1 * 3):
        assert b.try_acquire(now).allowed, now
        assert not b.try_acquire(now).allowed, now


# --- limiter ------------------------------------------------------------------------------


def test_entries_are_independent_and_all_must_pass():
    lim = LocalRateLimiter([requests_spec(2, interval=1.0), requests_spec(3, interval=60.0)], 0.0)
    assert [lim.admit(0.0).allowed for _ in range(3)] == [True, True, False]
    # The per-second entry refills, the per-minute one still has one left.
    assert lim.admit(1.0) == Decision(allowed=True, limit=3, remaining=0, reset_seconds=59)
    # Now the per-minute entry rejects even though the per-second one has room.
    d = lim.admit(1.5)
    assert d == Decision(allowed=False, limit=3, remaining=0, reset_seconds=59)


def test_rejection_consumes_from_no_entry():
    lim = LocalRateLimiter([requests_spec(5), requests_spec(1, interval=60.0)], 0.0)
    per_second, per_minute = lim.buckets
    assert lim.admit(0.0).allowed
    for _ in range(3):
        assert not lim.admit(0.0).allowed
    assert per_second.tokens == 4  # only the admitted request was counted
    assert per_minute.tokens == 0


def test_tokens_entry_admits_with_one_token_and_is_not_consumed_by_admission():
    lim = LocalRateLimiter([tokens_spec(10)], 0.0)
    for _ in range(50):
        d = lim.admit(0.0)
        assert d.allowed and d.remaining == 10
    lim.charge_tokens(0.0, 9)
    assert lim.admit(0.0).allowed  # one token left is enough
    lim.charge_tokens(0.0, 1)
    assert lim.admit(0.0) == Decision(allowed=False, limit=10, remaining=0, reset_seconds=60)


def test_charge_tokens_charges_every_tokens_entry_only():
    lim = LocalRateLimiter(
        [requests_spec(10), tokens_spec(100, interval=60.0), tokens_spec(1000, interval=3600.0)],
        0.0,
    )
    assert lim.counts_tokens
    lim.admit(0.0)
    d = lim.charge_tokens(0.0, 150)
    assert [b.tokens for b in lim.buckets] == [9, -50, 850]
    assert d == Decision(allowed=False, limit=100, remaining=0, reset_seconds=60)
    # The request that crossed the budget was delivered; the next ones are refused...
    assert not lim.admit(30.0).allowed
    assert lim.buckets[0].tokens == 10  # ...without consuming requests tokens.
    # -50 + 100 after the first minute: admitted again, no manual action.
    assert lim.admit(60.0).allowed


def test_charge_tokens_without_tokens_entries():
    lim = LocalRateLimiter([requests_spec(1)], 0.0)
    assert not lim.counts_tokens
    assert lim.charge_tokens(0.0, 1000) is None
    assert lim.buckets[0].tokens == 1


def test_most_constrained_entry_is_reported():
    lim = LocalRateLimiter([requests_spec(10, interval=1.0), requests_spec(10, interval=60.0)], 0.0)
    # Equal remaining after the first request: the later reset wins.
    assert lim.admit(0.0) == Decision(allowed=True, limit=10, remaining=9, reset_seconds=60)
    # Lowest remaining wins regardless of reset.
    lim2 = LocalRateLimiter([requests_spec(3, interval=60.0), requests_spec(10, interval=1.0)], 0.0)
    assert lim2.admit(0.0).limit == 3
    assert lim2.peek(0.0) == Decision(allowed=True, limit=3, remaining=2, reset_seconds=60)


def test_one_decision_is_its_own_most_constrained_and_two_are_ordered_as_ever():
    one = Decision(allowed=False, limit=5, remaining=0, reset_seconds=9)
    assert most_constrained([one]) is one
    other = Decision(allowed=True, limit=5, remaining=0, reset_seconds=9)
    assert most_constrained([other, one]) is one  # a rejection first
    assert most_constrained((Decision(True, 10, 4, 1), Decision(True, 10, 4, 7))).reset_seconds == 7


def test_limiter_needs_an_entry():
    with pytest.raises(ValueError):
        LocalRateLimiter([], 0.0)


def test_headers():
    ok = Decision(allowed=True, limit=15, remaining=14, reset_seconds=1)
    assert LocalRateLimiter.headers(ok) == [
        (b"x-ratelimit-limit", b"15"),
        (b"x-ratelimit-remaining", b"14"),
        (b"x-ratelimit-reset", b"1"),
    ]
    rejected = Decision(allowed=False, limit=100, remaining=0, reset_seconds=59)
    assert LocalRateLimiter.headers(rejected) == [
        (b"x-ratelimit-limit", b"100"),
        (b"x-ratelimit-remaining", b"0"),
        (b"x-ratelimit-reset", b"59"),
        (b"retry-after", b"59"),
    ]


# --- with trio's clock ----------------------------------------------------------------------


@pytest.fixture
def autojump():
    """pytest-trio runs the test under any Clock fixture it requests: trio.sleep jumps."""
    return trio.testing.MockClock(autojump_threshold=0)


async def test_window_through_trio_sleep_with_mock_clock(autojump):
    """An hour-long window passes in no real time; decisions use trio.current_time()."""
    lim = LocalRateLimiter(
        [LocalRateLimitSpec.from_policy(requests=2, burst=1, unit="Seconds"),
         LocalRateLimitSpec.from_policy(tokens=1000, unit="Hours")],
        trio.current_time(),
    )
    seen = []
    for _ in range(4):
        d = lim.admit(trio.current_time())
        seen.append((d.allowed, d.limit, d.remaining))
    assert seen == [(True, 3, 2), (True, 3, 1), (True, 3, 0), (False, 3, 0)]
    await trio.sleep(1)
    assert lim.admit(trio.current_time()).remaining == 1  # +2 tokens per fill, minus this one
    lim.charge_tokens(trio.current_time(), 1200)
    d = lim.admit(trio.current_time())
    assert (d.allowed, d.limit, d.reset_seconds) == (False, 1000, 3599)
    await trio.sleep(3598.5)
    assert not lim.admit(trio.current_time()).allowed
    await trio.sleep(0.5)  # the hourly fill: -200 + 1000
    d = lim.admit(trio.current_time())
    assert d.allowed
    assert lim.buckets[1].tokens == 800


async def test_concurrent_admissions_never_exceed_budget(autojump):
    lim = LocalRateLimiter([requests_spec(10, interval=60.0)], trio.current_time())
    admitted = 0

    async def client():
        nonlocal admitted
        await trio.sleep(0)  # all tasks interleave before deciding
        if lim.admit(trio.current_time()).allowed:
            admitted += 1

    async with trio.open_nursery() as nursery:
        for _ in range(200):
            nursery.start_soon(client)
    assert admitted == 10


async def test_a_reload_keeps_a_limiter_whose_entries_did_not_change():
    """Budgets survive a reload that leaves the entries alone; changed entries start afresh."""
    from trioproxy.config import parse_config
    from trioproxy.proxy.runtime import GatewayState

    def config(route_requests: int):
        return parse_config(f"""
binds:
- port: 3000
  listeners:
  - policies:
      localRateLimit: [{{maxTokens: 5, tokensPerFill: 5, fillInterval: 60s}}]
    routes:
    - name: r
      policies:
        localRateLimit: [{{maxTokens: {route_requests}, tokensPerFill: 1, fillInterval: 60s}}]
      backends: [{{host: "127.0.0.1:1"}}]
""", env={})

    first = GatewayState(config(3))
    (listener_key, route_key) = sorted(first.limiters, key=len)
    first.limiters[route_key][1].admit(trio.current_time())
    same = GatewayState(config(3), first)
    assert same.limiters[listener_key][1] is first.limiters[listener_key][1]
    assert same.limiters[route_key][1] is first.limiters[route_key][1]
    assert same.routes[route_key].limiter is first.limiters[route_key][1]
    changed = GatewayState(config(4), same)
    assert changed.limiters[listener_key][1] is first.limiters[listener_key][1]
    assert changed.limiters[route_key][1] is not first.limiters[route_key][1]
    assert changed.limiters[route_key][1].buckets[0].tokens == 4


# --- edges a mutation run found unguarded (docs/testing.md) ------------------------------


def test_validation_messages_and_a_zero_burst():
    with pytest.raises(ValueError, match="^fillInterval: must be finite$"):
        LocalRateLimitSpec(1, 1, float("inf"))
    with pytest.raises(ValueError, match="^localRateLimit: at least one entry is required$"):
        LocalRateLimiter([], 0.0)
    assert LocalRateLimitSpec.from_policy(requests=2, burst=0, unit="Seconds") == requests_spec(2)


def test_a_charge_leaving_one_token_still_admits_the_next_request():
    """``charge``'s ``allowed`` orders a limiter's token buckets (``most_constrained``)."""
    b = TokenBucket(tokens_spec(10), start=0.0)
    assert b.charge(0.0, 9) == Decision(allowed=True, limit=10, remaining=1, reset_seconds=60)
    assert b.charge(0.0, 1).allowed is False


def test_fills_due_at_an_exact_multiple_of_a_fractional_interval_are_counted():
    """0.3 / 0.1 is 2.9999999999999996 in floating point: three fills are due, not two."""
    b = TokenBucket(requests_spec(3, per=1, interval=0.1), start=100.0)
    b.try_acquire(100.0, cost=3)
    assert b.peek(100.3).remaining == 3
    watched = TokenBucket(requests_spec(3, per=1, interval=0.1), start=100.0)
    watched.try_acquire(100.0, cost=3)
    assert watched.observe(100.3) == (Decision(True, 3, 3, 1), 3)


def test_observe_reports_due_fills_without_crediting_them():
    """The admin API's view: what ``peek`` would say, but the bucket is not written."""
    b = TokenBucket(requests_spec(5, per=2, interval=10.0), start=100.0)
    b.try_acquire(100.0, cost=5)
    assert b.observe(100.0) == (Decision(False, 5, 0, 10), 0)
    assert b.observe(113.0) == (Decision(True, 5, 2, 7), 2)
    assert b.observe(125.0) == (Decision(True, 5, 4, 5), 4)
    assert b.observe(170.0) == (Decision(True, 5, 5, 10), 5)  # capped at maxTokens
    assert b.tokens == 0  # nothing credited
    assert b.peek(113.0) == Decision(True, 5, 2, 7)
    assert b.observe(113.0) == (Decision(True, 5, 2, 7), 2)  # fills already credited are not counted twice
    assert b.observe(125.0) == (Decision(True, 5, 4, 5), 4)  # only the fills due since
    t = TokenBucket(tokens_spec(10), start=0.0)
    t.charge(0.0, 25)
    assert t.observe(30.0) == (Decision(False, 10, 0, 30), -15)  # an overshoot: raw balance negative


def test_a_limiter_observes_each_of_its_entries():
    limiter = LocalRateLimiter([requests_spec(2, interval=10.0), tokens_spec(7)], 0.0)
    limiter.admit(0.0)
    assert limiter.observe(1.0) == ((Decision(True, 2, 1, 9), 1), (Decision(True, 7, 7, 59), 7))
