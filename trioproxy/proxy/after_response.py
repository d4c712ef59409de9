"""Work that follows a response but must not hold up its connection (remote token charges).

A ``finish`` hook runs inside the ASGI call, after the body's end; hypercorn reads the next
request of a keep-alive connection only once that call returns. So a slow call made there (a
rate-limit service stalling on a token charge) would delay the client's *next* request by up to
the call's timeout. ``spawn`` runs such work in Trio's system nursery instead, which outlives the
request; each job must bound itself (the charge has its call timeout), and at most ``limit``
jobs are pending at once: past that, ``spawn`` refuses and the caller counts the job as failed
rather than queueing without bound.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

log = logging.getLogger("trioproxy.proxy.after_response")

DEFAULT_LIMIT = 1000


class AfterResponse:
    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self.limit = limit
        self.pending = 0

    def spawn(self, job: Callable[..., Awaitable[None]], *args: Any, name: str = "after-response") -> bool:
        """Start ``job(*args)`` outside the request; False (nothing started) when ``limit`` are pending."""
        if self.pending >= self.limit:
            return False
        self.pending += 1
        trio.lowlevel.spawn_system_task(self._run, job, args, name=name)
        return True

    async def _run(self, job: Callable[..., Awaitable[None]], args: tuple[Any, ...]) -> None:
        try:
            await job(*args)
        except Exception:  # a system task must not raise: that would end the whole Trio run
            log.exception("after-response job failed")
        finally:
            self.pending -= 1


#: the process's one runner (per-request work in every gateway of the process shares the bound)
AFTER_RESPONSE = AfterResponse()
