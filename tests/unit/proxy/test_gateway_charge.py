"""``gateway._charge``: the ``finish`` hooks run even for a cancelled request (a client gone
mid-stream), once each; they are plain functions, so none can hold the request's end or be
cancelled half-way; the answer is priced (``llm.cost``) before the hooks run, so they can read it."""

from __future__ import annotations

import inspect

import pytest
import trio

from trioproxy.llm.pricing import PriceCatalog
from trioproxy.llm.usage import Usage
from trioproxy.proxy import gateway, ratelimit_local_stage, stage, stages
from trioproxy.telemetry.trace import NULL_TRACER

PRICES = PriceCatalog.bundled()


class Hook:
    def __init__(self) -> None:
        self.calls = 0
        self.seen: Usage | None = None
        self.cost: float | None = None

    def finish(self, x: object) -> None:
        self.calls += 1
        self.seen = getattr(x, "usage", None)
        self.cost = x.llm.get("cost") if getattr(x, "llm", None) else None  # type: ignore[attr-defined]


class FakeExchange:
    usage: Usage | None = None
    tracer = NULL_TRACER

    def __init__(self) -> None:
        self.llm = {"provider": "openAI", "model": "gpt-4o-mini"}


USAGE = Usage(prompt_tokens=11, completion_tokens=19, total_tokens=30)


async def test_a_cancelled_request_still_charges_every_hook_once_at_once(autojump_clock: trio.abc.Clock) -> None:
    hooks = [Hook(), Hook()]
    x = FakeExchange()
    start = trio.current_time()
    with trio.CancelScope() as scope:
        scope.cancel()  # as a client gone mid-stream cancels the request
        try:
            await trio.lowlevel.checkpoint()
        finally:
            gateway._charge(x, USAGE, hooks, PRICES)  # type: ignore[arg-type]
    assert scope.cancelled_caught and trio.current_time() == start
    assert [h.calls for h in hooks] == [1, 1]
    assert hooks[0].seen == USAGE and x.usage == USAGE
    assert hooks[1].cost == x.llm["cost"] == (11 * 0.15 + 19 * 0.6) / 1e6


async def test_no_usage_charges_nothing() -> None:
    hook = Hook()
    x = FakeExchange()
    gateway._charge(x, None, [hook], PRICES)  # type: ignore[arg-type]
    assert hook.calls == 0 and "cost" not in x.llm


@pytest.mark.parametrize("cls", [stage.Stage, ratelimit_local_stage.TokenRateLimitStage,
                                 ratelimit_local_stage.TargetTokens, stages.RemoteTokenRateLimitStage])
def test_every_finish_hook_is_a_plain_function(cls: type) -> None:
    """A coroutine here would be called and never awaited: its charge silently lost."""
    assert not inspect.iscoroutinefunction(cls.finish)
