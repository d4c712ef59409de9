"""``ShouldRateLimit`` as a function of (limits config, counter store, now): no gRPC in here.

Behaviour follows envoyproxy/ratelimit: each request descriptor gets the limit of the most
specific configured descriptor (``limits.LimitsConfig.find``) and a counter per window
``<domain>_<key>_<value>[_<key>_<value>...]_<window start>`` (a key or value longer than 256
characters is its SHA-256 there: ``descriptor_text.py``); a descriptor without a limit is OK
with no current limit. ``hits_addend`` comes from the descriptor when set (0 = only look), else
from the request (0 there means 1, as the protocol says). OVER_LIMIT when any non-shadow counter
passes its limit. A matched limit named in another matched limit's ``replaces`` is dropped (not
counted, status OK with no current limit); an ``unlimited`` one is OK with ``UINT32_MAX`` remaining.
Response headers: ``x-ext-ratelimited: true`` when over the limit, and ``x-ratelimit-*`` of the
status with the fewest remaining only when asked (``headers``: upstream's
``LIMIT_RESPONSE_HEADERS_ENABLED``): a client that derives its own from the statuses (Envoy's
``enable_x_ratelimit_headers``, the gateway) would otherwise send each twice.

``Plan`` is the same in two halves, the counters to add and then the response from their new
values, so the server can give many requests one store round trip (``server.CheckBatcher``).
"""

from __future__ import annotations

from typing import Any

from .descriptor_text import MAX_DESCRIPTOR_TEXT, bounded
from .limits import UNIT_NUMBERS, Limit, LimitsConfig
from .protos import core_base_pb2, rls_pb2

OK = rls_pb2.RateLimitResponse.OK
OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT
UNLIMITED_REMAINING = 2**32 - 1  # what envoyproxy/ratelimit reports for an ``unlimited`` descriptor


class UnknownDomain(Exception):
    pass


def _hits(descriptor: Any, default: int) -> int:
    return descriptor.hits_addend.value if descriptor.HasField("hits_addend") else default


class Plan:
    """One request's counters to add, then its response from their new values: the two halves of
    ``should_rate_limit`` with the store round trip between them, so a server can put many
    requests' counters in one round trip."""

    __slots__ = ("config", "headers", "limited", "now_s", "request", "unlimited")

    def __init__(self, config: LimitsConfig, request: Any, now: float, *, headers: bool = False) -> None:
        if request.domain != config.domain:
            raise UnknownDomain(request.domain)
        self.config, self.request, self.headers = config, request, headers
        default_hits = request.hits_addend or 1
        self.now_s = now_s = int(now)
        self.limited: list[tuple[int, Limit, str, int]] = []  # (status index, limit, key, hits)
        self.unlimited: list[int] = []  # status indexes
        matched = []
        replaced: set[str] = set()
        for descriptor in request.descriptors:
            entries = [(e.key, e.value) for e in descriptor.entries]
            limit = config.find(entries)
            matched.append((entries, limit))
            if limit is not None:
                replaced.update(limit.replaces)
        for i, (descriptor, (entries, limit)) in enumerate(zip(request.descriptors, matched)):
            if limit is None:
                continue
            if limit.unlimited:
                self.unlimited.append(i)
                continue
            if limit.name and limit.name in replaced:
                continue
            window = now_s - now_s % limit.seconds
            key = "_".join([config.domain, *(f"{k}_{v}" if len(k) + len(v) <= MAX_DESCRIPTOR_TEXT
                                             else f"{bounded(k)}_{bounded(v)}" for k, v in entries), str(window)])
            self.limited.append((i, limit, key, _hits(descriptor, default_hits)))

    @property
    def items(self) -> list[tuple[str, int, int]]:
        """``(key, hits, ttl seconds)`` per limited descriptor, for ``store.incr``."""
        return [(key, hits, limit.seconds) for _, limit, key, hits in self.limited]

    def respond(self, counts: list[int]) -> tuple[Any, list[tuple[Limit, bool]]]:
        """The response given the counters' new values (one per ``items``), and (limit, over) per
        limited descriptor for the metrics."""
        now_s = self.now_s
        response = rls_pb2.RateLimitResponse(overall_code=OK)
        for _ in self.request.descriptors:
            response.statuses.add(code=OK)
        for i in self.unlimited:
            response.statuses[i].limit_remaining = UNLIMITED_REMAINING
        seen: list[tuple[Limit, bool]] = []
        if self.limited:
            for (i, limit, _, _), count in zip(self.limited, counts):
                status = response.statuses[i]
                status.current_limit.requests_per_unit = limit.requests_per_unit
                status.current_limit.unit = UNIT_NUMBERS[limit.unit]
                if limit.name:
                    status.current_limit.name = limit.name
                status.limit_remaining = max(0, limit.requests_per_unit - count)
                window_end = now_s - now_s % limit.seconds + limit.seconds
                status.duration_until_reset.seconds = max(0, window_end - now_s)
                over = count > limit.requests_per_unit
                seen.append((limit, over))
                if over and not limit.shadow_mode:
                    status.code = OVER_LIMIT
                    response.overall_code = OVER_LIMIT
            if self.headers:
                _ratelimit_headers(response, [(response.statuses[i], limit) for i, limit, _, _ in self.limited])
        if response.overall_code == OVER_LIMIT:
            response.response_headers_to_add.add(key="x-ext-ratelimited", value="true")
        return response, seen


def should_rate_limit(config: LimitsConfig, store: Any, request: Any, now: float, *,
                      headers: bool = False) -> tuple[Any, list[tuple[Limit, bool]]]:
    """The response, and (limit, over) per limited descriptor for the metrics. Raises
    ``UnknownDomain``, or ``store.StoreUnavailable`` when the counters cannot be reached."""
    plan = Plan(config, request, now, headers=headers)
    return plan.respond(store.incr(plan.items) if plan.limited else [])


def _ratelimit_headers(response: Any, statuses: list[tuple[Any, Limit]]) -> None:
    status, limit = min(statuses, key=lambda s: s[0].limit_remaining)
    add = response.response_headers_to_add.add
    n = limit.requests_per_unit
    add(key="x-ratelimit-limit", value=f"{n}, {n};w={limit.seconds}")
    add(key="x-ratelimit-remaining", value=str(status.limit_remaining))
    add(key="x-ratelimit-reset", value=str(status.duration_until_reset.seconds))


def header_value(key: str, value: str) -> Any:
    return core_base_pb2.HeaderValue(key=key, value=value)
