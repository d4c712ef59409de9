"""``delay``: fault injection, latency before the request goes upstream (agentgateway's ``delay``).

``duration`` is a duration (``2s``) or a CEL expression evaluated per request: a duration value
is used as is, a number is milliseconds (``random() < 0.1 ? 2000 : 0``), anything else or a
non-positive result adds nothing. The wait runs inside the request's deadline, so it counts
against ``requestTimeout`` like real latency (504 ``request timeout``).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

import trio
from attrs import frozen

from ..cel import compile_expression
from ..trace import activation
from .stage import Stage

if TYPE_CHECKING:
    from ..exchange import Exchange

__all__ = ["DelaySpec", "DelayStage", "delay_seconds"]


@frozen
class DelaySpec:
    source: str                    # as written
    seconds: float | None = None   # when ``source`` is a plain duration; otherwise CEL


def delay_seconds(value: Any) -> float:
    """Seconds to wait for an expression's result (0: none)."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = value / 1000
    else:
        return 0.0
    return seconds if seconds > 0 else 0.0


class DelayStage(Stage):
    kind = "delay"
    __slots__ = ("expression", "spec")

    def __init__(self, spec: DelaySpec) -> None:
        self.spec = spec
        self.expression = compile_expression(spec.source) if spec.seconds is None else None

    async def request(self, x: Exchange) -> None:
        if self.expression is None:
            assert self.spec.seconds is not None
            seconds = self.spec.seconds
        else:
            seconds = delay_seconds(self.expression.evaluate(activation(x)))
        if x.tracer.active:
            x.tracer.event("policy", kind="delay", result="delayed" if seconds else "no delay",
                           delay=f"{seconds * 1000:.0f}ms")
        if seconds:
            await trio.sleep(seconds)
