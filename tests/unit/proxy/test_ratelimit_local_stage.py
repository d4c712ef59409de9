"""``localRateLimit`` as a stage on one exchange: the metric it counts, the trace events it
emits, and which stage class a limiter gets (proxy/ratelimit_local_stage.py).

The end-to-end tests check the 429 and its headers; a mutation run found the metric labels and
the trace's ``severity`` unguarded by the in-process tests.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio.testing

from trioproxy.errors import RateLimited
from trioproxy.llm.usage import Usage
from trioproxy.policies.ratelimit_local import LocalRateLimiter, LocalRateLimitSpec
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.ratelimit_local_stage import LocalRateLimitStage, TokenRateLimitStage, local_rate_limit_stage

SCOPE: dict[str, Any] = {"type": "http", "method": "GET", "path": "/", "headers": [(b"host", b"h")]}


class RecordingTracer:
    active = True

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def event(self, message_type: str, **fields: Any) -> None:
        self.events.append((message_type, fields))

    def snapshot(self, stage: str, x: Exchange, **_: Any) -> None:
        self.events.append(("requestSnapshot", {"stage": stage}))


def exchange() -> tuple[Exchange, RecordingTracer]:
    x = Exchange(dict(SCOPE), None, None, 0.0)  # type: ignore[arg-type]
    x.tracer = tracer = RecordingTracer()  # type: ignore[assignment]
    return x, tracer


def test_only_a_limiter_counting_tokens_gets_a_finish_hook():
    requests = LocalRateLimiter([LocalRateLimitSpec(1, 1, 60.0, "requests")], 0.0)
    tokens = LocalRateLimiter([LocalRateLimitSpec(10, 10, 60.0, "tokens")], 0.0)
    assert type(local_rate_limit_stage(requests, "k", print)) is LocalRateLimitStage
    stage = local_rate_limit_stage(tokens, "route/k", print)
    assert type(stage) is TokenRateLimitStage and stage.key == "route/k"


async def test_admission_is_counted_and_traced_then_a_rejection_too():
    counted: list[tuple[str, str, str]] = []
    limiter = LocalRateLimiter([LocalRateLimitSpec(1, 1, 60.0, "requests")], trio.current_time())
    stage = local_rate_limit_stage(limiter, "gw/route/r", lambda *labels: counted.append(labels))
    x, tracer = exchange()
    await stage.request(x)
    assert tracer.events == [
        ("policy", {"severity": "info", "kind": "localRateLimit", "result": "allowed", "limit": 1, "remaining": 0,
                    "reset": 60}),
        ("requestSnapshot", {"stage": "localRateLimit"}),
    ]
    assert x.limits == [(limiter, (True, 1, 0, 60))]
    y, tracer = exchange()
    with pytest.raises(RateLimited) as raised:
        await stage.request(y)
    assert tracer.events == [("policy", {"severity": "warn", "kind": "localRateLimit", "result": "rejected",
                                         "limit": 1, "remaining": 0, "reset": 60})]
    assert (b"retry-after", b"60") in raised.value.headers
    assert counted == [("localRateLimit", "gw/route/r", "allowed"), ("localRateLimit", "gw/route/r", "rejected")]


async def test_a_tokens_limiter_charges_the_usage_after_the_response():
    limiter = LocalRateLimiter([LocalRateLimitSpec(10, 10, 60.0, "tokens")], trio.current_time())
    stage = local_rate_limit_stage(limiter, "k", lambda *labels: None)
    x, tracer = exchange()
    stage.finish(x)  # no usage read: nothing charged
    x.usage = Usage(3, 4, 7)
    stage.finish(x)
    assert tracer.events == [("policy", {"kind": "localRateLimit", "result": "charged", "tokens": 7, "limit": 10,
                                         "remaining": 3, "reset": 60})]
