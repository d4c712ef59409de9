"""``gateway._charge``: the ``finish`` hooks run even for a cancelled request (a client gone
mid-stream), once, and a hook that hangs (a remote limiter's call) cannot hold the request's end;
the answer is priced (``llm.cost``) before the hooks run, so they can read it."""

from __future__ import annotations

import trio

from trioproxy.llm.pricing import PriceCatalog
from trioproxy.llm.usage import Usage
from trioproxy.proxy import gateway
from trioproxy.telemetry.trace import NULL_TRACER

PRICES = PriceCatalog.bundled()


class Hook:
    def __init__(self, hang: bool) -> None:
        self.hang = hang
        self.calls = 0
        self.seen: Usage | None = None

    async def finish(self, x: object) -> None:
        self.calls += 1
        self.seen = getattr(x, "usage", None)
        self.cost = x.llm.get("cost") if getattr(x, "llm", None) else None  # type: ignore[attr-defined]
        if self.hang:
            await trio.sleep_forever()


class FakeExchange:
    usage: Usage | None = None
    tracer = NULL_TRACER

    def __init__(self) -> None:
        self.llm = {"provider": "openAI", "model": "gpt-4o-mini"}


USAGE = Usage(prompt_tokens=11, completion_tokens=19, total_tokens=30)


async def test_a_cancelled_request_still_charges_within_the_deadline(autojump_clock: trio.abc.Clock) -> None:
    hooks = [Hook(hang=True), Hook(hang=False)]
    x = FakeExchange()
    start = trio.current_time()
    with trio.CancelScope() as scope:
        scope.cancel()  # as a client gone mid-stream cancels the request
        try:
            await trio.lowlevel.checkpoint()
        finally:
            await gateway._charge(x, USAGE, hooks, PRICES)  # type: ignore[arg-type]
    assert trio.current_time() - start == gateway.FINISH_DEADLINE
    assert [h.calls for h in hooks] == [1, 0]  # the hung one took the whole deadline
    assert hooks[0].seen == USAGE and x.usage == USAGE
    assert hooks[0].cost == x.llm["cost"] == (11 * 0.15 + 19 * 0.6) / 1e6


async def test_no_usage_charges_nothing(autojump_clock: trio.abc.Clock) -> None:
    hook = Hook(hang=False)
    x = FakeExchange()
    await gateway._charge(x, None, [hook], PRICES)  # type: ignore[arg-type]
    assert hook.calls == 0 and "cost" not in x.llm
