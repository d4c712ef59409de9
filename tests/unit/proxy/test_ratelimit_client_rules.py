"""``localRateLimit`` with ``perClientAddress`` in-process (issue 35): the stage on one ``Exchange``
per request, on ``MockClock``, so mutation testing sees its bucket per address, the least recently
seen address dropped past ``MAX_CLIENTS``, the 429's headers, the counter and the trace event."""

from __future__ import annotations

import pytest

from tests.unit.proxy.test_header_stages import RecordingTracer
from trioproxy.errors import RateLimited
from trioproxy.policies.ratelimit_local import LocalRateLimitSpec
from trioproxy.proxy import ratelimit_client
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.ratelimit_client import ClientRateLimitStage

SPEC = LocalRateLimitSpec(max_tokens=2, tokens_per_fill=2, fill_interval=60.0, per_client_address=True)


def exchange(address: str | None) -> tuple[Exchange, RecordingTracer]:
    scope = {"type": "http", "method": "GET", "path": "/", "query_string": b"", "headers": [(b"host", b"h")]}
    if address is not None:
        scope["client"] = (address, 40000)
    x = Exchange(scope, None, None, 0.0)  # type: ignore[arg-type]
    tracer = RecordingTracer()
    x.tracer = tracer  # type: ignore[assignment]
    return x, tracer


@pytest.fixture
def stage():
    counted: list[tuple[str, str, str]] = []
    stage = ClientRateLimitStage((SPEC,), "route/r", lambda *labels: counted.append(labels))
    stage.counted = counted  # type: ignore[attr-defined]
    return stage


async def admit(stage: ClientRateLimitStage, address: str | None) -> int:
    try:
        await stage.request(exchange(address)[0])
    except RateLimited:
        return 429
    return 200


async def test_each_address_has_its_budget_and_the_429_says_when_it_refills(stage, mock_clock):
    assert [await admit(stage, "10.0.0.1") for _ in range(3)] == [200, 200, 429]
    assert await admit(stage, "10.0.0.2") == 200  # another address: its own bucket
    x, tracer = exchange("10.0.0.1")
    with pytest.raises(RateLimited) as raised:
        await stage.request(x)
    assert raised.value.headers == [(b"x-ratelimit-limit", b"2"), (b"x-ratelimit-remaining", b"0"),
                                    (b"x-ratelimit-reset", b"60"), (b"retry-after", b"60")]
    assert tracer.events == [("policy", {"severity": "warn", "kind": "localRateLimit", "result": "rejected",
                                         "perClientAddress": "10.0.0.1", "limit": 2, "remaining": 0, "reset": 60})]
    assert stage.counted == [("localRateLimit", "route/r", "allowed")] * 2 + [
        ("localRateLimit", "route/r", "rejected"), ("localRateLimit", "route/r", "allowed"),
        ("localRateLimit", "route/r", "rejected")]
    mock_clock.jump(59)
    x, tracer = exchange("10.0.0.1")
    with pytest.raises(RateLimited) as raised:
        await stage.request(x)
    assert (b"retry-after", b"1") in raised.value.headers
    mock_clock.jump(1)  # the stage reads the clock: the bucket refilled
    x, tracer = exchange("10.0.0.1")
    await stage.request(x)
    assert tracer.events == [("policy", {"severity": "info", "kind": "localRateLimit", "result": "allowed",
                                         "perClientAddress": "10.0.0.1", "limit": 2, "remaining": 1, "reset": 60})]


async def test_a_request_without_a_client_address_shares_the_empty_address(stage, mock_clock):
    assert [await admit(stage, None) for _ in range(3)] == [200, 200, 429]
    assert list(stage.limiters) == [""]


async def test_the_least_recently_seen_address_is_dropped_past_max_clients(stage, mock_clock, monkeypatch):
    assert ratelimit_client.MAX_CLIENTS == 10_000
    monkeypatch.setattr(ratelimit_client, "MAX_CLIENTS", 2)
    for address in ("a", "a", "b"):
        await admit(stage, address)
    assert await admit(stage, "a") == 429  # a seen again: the most recent
    assert await admit(stage, "c") == 200  # b, the least recently seen, is dropped
    assert list(stage.limiters) == ["a", "c"]
    assert await admit(stage, "a") == 429  # a kept its spent bucket
    assert [await admit(stage, "b") for _ in range(3)] == [200, 200, 429]  # b starts full again
    assert list(stage.limiters) == ["a", "b"]
