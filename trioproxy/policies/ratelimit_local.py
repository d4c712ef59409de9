"""Local (in-process) rate limiting: token buckets for requests and LLM tokens.

Pure decision objects, no I/O and no clock of their own: every method takes ``now``
(seconds, e.g. ``trio.current_time()``), so tests drive time explicitly or through
``trio.testing.MockClock``.

Concurrency: the gateway runs in one Trio thread and none of these methods awaits, so each
call is atomic with respect to other requests. ``LocalRateLimiter.admit`` checks every
bucket and then commits in the same synchronous call, which is what guarantees that many
concurrent requests never admit more than the budget. Do not put an ``await`` between a
check and its commit.

Semantics follow agentgateway's local limiter (a fork of the pelikan ``ratelimit`` crate,
itself modelled on Envoy's token bucket): the bucket starts full, and ``tokens_per_fill``
tokens are added at discrete instants ``start + k * fill_interval`` (not continuously),
capped at ``max_tokens``. One difference, required by the contract: charging LLM usage
after a response may drive a bucket below zero, and the overshoot is kept until refills
pay it back (agentgateway saturates at zero).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, NamedTuple

import attrs

__all__ = ["UNIT_SECONDS", "Decision", "LocalRateLimitSpec", "LocalRateLimiter", "TokenBucket", "most_constrained"]

Kind = Literal["requests", "tokens"]

#: ProxyPolicy ``local[].unit`` → fill interval in seconds (docs/configuration-schema.md).
UNIT_SECONDS: dict[str, float] = {"Seconds": 1.0, "Minutes": 60.0, "Hours": 3600.0}

# Float slack when converting elapsed time to a number of whole fill intervals, so that
# ``now == start + k * interval`` computed in floating point counts k fills, not k - 1.
_EPSILON = 1e-9


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive_int(name: str) -> Callable[[object, object, Any], None]:
    def check(_inst: object, _attr: object, value: Any) -> None:
        if not _is_int(value) or value < 1:
            raise ValueError(f"{name}: must be a positive integer, got {value!r}")

    return check


def _positive_interval(_inst: object, _attr: object, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"fillInterval: must be a positive duration, got {value!r}")
    if math.isinf(value):
        raise ValueError("fillInterval: must be finite")


def _kind(_inst: object, _attr: object, value: Any) -> None:
    if value not in ("requests", "tokens"):
        raise ValueError(f"type: expected requests or tokens, got {value!r}")


@attrs.frozen
class LocalRateLimitSpec:
    """One ``localRateLimit`` entry, validated at config load (messages use wire names)."""

    max_tokens: int = attrs.field(validator=_positive_int("maxTokens"))
    tokens_per_fill: int = attrs.field(validator=_positive_int("tokensPerFill"))
    fill_interval: float = attrs.field(converter=float, validator=_positive_interval)
    kind: Kind = attrs.field(default="requests", validator=_kind)
    #: a bucket per client address, before authentication (``ratelimit_client.py``)
    per_client_address: bool = False

    def __attrs_post_init__(self) -> None:
        if self.per_client_address and self.kind != "requests":
            raise ValueError("perClientAddress: only for type requests (tokens are known after authentication)")
        # Same rule as agentgateway: a fill larger than the bucket would be silently lost.
        if self.max_tokens < self.tokens_per_fill:
            raise ValueError(
                f"maxTokens: must be at least tokensPerFill ({self.tokens_per_fill}),"
                f" got {self.max_tokens}"
            )

    @classmethod
    def from_policy(
        cls,
        *,
        requests: int | None = None,
        tokens: int | None = None,
        unit: str,
        burst: int | None = None,
    ) -> LocalRateLimitSpec:
        """Map a ProxyPolicy ``traffic.rateLimit.local[]`` entry (docs/configuration-schema.md).

        ``maxTokens = n + burst``, ``tokensPerFill = n``, ``fillInterval`` = 1 s / 60 s / 1 h.
        Exactly one of ``requests``/``tokens``; ``burst`` only with ``requests``.
        """
        if (requests is None) == (tokens is None):
            raise ValueError("local: exactly one of requests or tokens is required")
        if unit not in UNIT_SECONDS:
            raise ValueError(f"unit: expected Seconds, Minutes or Hours, got {unit!r}")
        if burst is not None and tokens is not None:
            raise ValueError("burst: only allowed together with requests")
        kind: Kind = "requests" if requests is not None else "tokens"
        n = requests if requests is not None else tokens
        if n is None or not _is_int(n) or n < 1:
            raise ValueError(f"{kind}: must be a positive integer, got {n!r}")
        if burst is not None and (not _is_int(burst) or burst < 0):
            raise ValueError(f"burst: must be a non-negative integer, got {burst!r}")
        return cls(
            max_tokens=n + (burst or 0),
            tokens_per_fill=n,
            fill_interval=UNIT_SECONDS[unit],
            kind=kind,
        )


class Decision(NamedTuple):
    """Outcome of one check, with what the ``x-ratelimit-*`` headers report.

    ``remaining`` is never negative (an overshot bucket reports 0); ``reset_seconds`` is the
    time to the next refill rounded up to whole seconds, so a client that waits that long
    always sees the refill. A NamedTuple, not a frozen attrs class: one is built per request
    per entry, and the attrs version showed up in the token-limited profile (bench/README.md,
    "Where the extra CPU goes") before ``bench/policy_overhead.py`` brought it under budget.
    """

    allowed: bool
    limit: int
    remaining: int
    reset_seconds: int


class TokenBucket:
    """Runtime state of one spec: a bucket that starts full at ``start``."""

    __slots__ = ("_fills", "_start", "_tokens", "spec")

    def __init__(self, spec: LocalRateLimitSpec, start: float) -> None:
        self.spec = spec
        self._start = start
        self._fills = 0  # fill instants already credited
        self._tokens = spec.max_tokens  # may be negative after an overshooting charge

    @property
    def tokens(self) -> int:
        """Raw balance, negative while an overshoot is being paid back (for tests, traces)."""
        return self._tokens

    def _refill(self, now: float) -> None:
        spec = self.spec
        due = math.floor((now - self._start) / spec.fill_interval + _EPSILON)
        if due > self._fills:
            gained = (due - self._fills) * spec.tokens_per_fill
            self._tokens = min(spec.max_tokens, self._tokens + gained)
            self._fills = due

    def _decision(self, now: float, allowed: bool) -> Decision:
        spec = self.spec
        next_fill = self._start + (self._fills + 1) * spec.fill_interval
        tokens = self._tokens
        return Decision(allowed, spec.max_tokens, max(0, tokens),
                        max(0, math.ceil(next_fill - now - _EPSILON)))

    def try_acquire(self, now: float, cost: int = 1) -> Decision:
        """Take ``cost`` tokens if all are there; otherwise take none (requests limits)."""
        self._refill(now)
        allowed = self._tokens >= cost
        if allowed:
            self._tokens -= cost
        return self._decision(now, allowed)

    def peek(self, now: float) -> Decision:
        """Current state without consuming; ``allowed`` says whether a request would pass."""
        self._refill(now)
        return self._decision(now, self._tokens >= 1)

    def observe(self, now: float) -> tuple[Decision, int]:
        """(decision, raw balance) at ``now`` without touching the bucket: for the admin API.

        ``peek`` credits due fills into the bucket (harmless for admission, but a write);
        a dashboard polling every second must not write to the data plane's state at all.
        """
        spec = self.spec
        due = math.floor((now - self._start) / spec.fill_interval + _EPSILON)
        tokens, fills = self._tokens, self._fills
        if due > fills:
            tokens = min(spec.max_tokens, tokens + (due - fills) * spec.tokens_per_fill)
            fills = due
        next_fill = self._start + (fills + 1) * spec.fill_interval
        decision = Decision(tokens >= 1, spec.max_tokens, max(0, tokens),
                            max(0, math.ceil(next_fill - now - _EPSILON)))
        return decision, tokens

    def has_capacity(self, now: float) -> Decision:
        """Admission for tokens limits: the cost is unknown until the response, so admit
        while at least one token is left (agentgateway does the same)."""
        return self.peek(now)

    def charge(self, now: float, cost: int) -> Decision:
        """Charge a known cost after the fact; never refuses, may overshoot below zero.

        The returned ``allowed`` says whether the next request would still pass.
        """
        self._refill(now)
        self._tokens -= cost
        return self._decision(now, self._tokens >= 1)


def most_constrained(decisions: Sequence[Decision]) -> Decision:
    """Rejections first, then the lowest remaining, then the latest reset (a client that
    honours it will not come back before the constraining bucket has refilled), then the
    smallest limit, so the choice is deterministic. The one rule for ``x-ratelimit-*``: across
    the entries of one limiter and across the listener's and route's limiters alike. One
    decision (a request under one limiter, the common case) is itself, without the ``min``."""
    if len(decisions) == 1:
        return decisions[0]
    return min(decisions, key=lambda d: (d.allowed, d.remaining, -d.reset_seconds, d.limit))


class LocalRateLimiter:
    """The buckets of one ``localRateLimit`` list (a route's, or a listener's shared one).

    Entries are independent; a request must pass all of them. All methods are synchronous
    and therefore atomic within the gateway's single Trio thread (see the module docstring).
    """

    __slots__ = ("_single", "_token_buckets", "buckets")

    def __init__(self, specs: Iterable[LocalRateLimitSpec], now: float) -> None:
        self.buckets: tuple[TokenBucket, ...] = tuple(TokenBucket(s, now) for s in specs)
        if not self.buckets:
            raise ValueError("localRateLimit: at least one entry is required")
        self._token_buckets = tuple(b for b in self.buckets if b.spec.kind == "tokens")
        # The common case, one entry, needs no check-then-commit round and no comparison.
        self._single = self.buckets[0] if len(self.buckets) == 1 else None

    @property
    def counts_tokens(self) -> bool:
        """Whether responses must be read for ``usage`` (some entry limits tokens)."""
        return bool(self._token_buckets)

    def admit(self, now: float) -> Decision:
        """Admit one request or reject it without consuming anything.

        Requests buckets consume 1; tokens buckets only need one token left. Check all,
        then commit, so a rejection by one entry leaves every other entry untouched.
        """
        single = self._single
        if single is not None:
            return single.try_acquire(now) if single.spec.kind == "requests" else single.has_capacity(now)
        checks = [b.peek(now) for b in self.buckets]
        if not all(d.allowed for d in checks):
            return most_constrained(checks)
        return most_constrained([
            b.try_acquire(now) if b.spec.kind == "requests" else d
            for b, d in zip(self.buckets, checks, strict=True)
        ])

    def charge_tokens(self, now: float, total_tokens: int) -> Decision | None:
        """Charge an LLM response's ``usage.total_tokens`` to every tokens bucket.

        Returns the most constrained tokens bucket afterwards (for traces), or None when
        no entry limits tokens.
        """
        buckets = self._token_buckets
        if not buckets:
            return None
        if len(buckets) == 1:
            return buckets[0].charge(now, total_tokens)
        return most_constrained([b.charge(now, total_tokens) for b in buckets])

    def peek(self, now: float) -> Decision:
        """Most constrained entry right now, consuming nothing."""
        return most_constrained([b.peek(now) for b in self.buckets])

    def observe(self, now: float) -> tuple[tuple[Decision, int], ...]:
        """Each entry's (decision, raw balance) at ``now``; reads only (``TokenBucket.observe``)."""
        return tuple(b.observe(now) for b in self.buckets)

    def refusal(self, now: float) -> dict[str, Any]:
        """Why a request is refused now (read only; built only on a refusal): the entry that
        refuses (``index`` in the list, its ``limit``), what it has ``remaining`` and
        ``resetSeconds`` until its next refill; the most constrained one when several refuse."""
        observed = [(decision, i) for i, (decision, _) in enumerate(self.observe(now))]
        decision, index = min(observed, key=lambda o: (o[0].allowed, o[0].remaining, -o[0].reset_seconds, o[1]))
        spec = self.buckets[index].spec
        return {"policy": "localRateLimit", "index": index,
                "limit": {"maxTokens": spec.max_tokens, "tokensPerFill": spec.tokens_per_fill,
                          "fillInterval": spec.fill_interval, "type": spec.kind},
                "remaining": decision.remaining, "resetSeconds": decision.reset_seconds}

    @staticmethod
    def headers(decision: Decision) -> list[tuple[bytes, bytes]]:
        """``x-ratelimit-*`` response headers; a rejection also carries ``retry-after``."""
        reset = str(decision.reset_seconds).encode()
        headers = [
            (b"x-ratelimit-limit", str(decision.limit).encode()),
            (b"x-ratelimit-remaining", str(decision.remaining).encode()),
            (b"x-ratelimit-reset", reset),
        ]
        if not decision.allowed:
            headers.append((b"retry-after", reset))
        return headers
