"""The cyclic garbage collector of a serving process: off, and run on a clock (docs/reliability.md,
"Pauses").

Reference counting frees what a request allocates the moment the request ends; the cyclic
collector only matters for reference cycles, and a proxied request leaves none (a full collection
after 30 s at 500 req/s found 0 objects to free). Yet CPython runs it by allocation counts: under
LLM load (requests waiting 1.5 s on a provider, ~750 in flight at 500 req/s) its collections walk
the objects of every request in flight, and each pause, up to tens of milliseconds, is waited
through by every request then in the process. That was the p99 of ``bench/llm_load.py``: +54 to
+88 ms at 500 req/s with the collector on, +5 to +12 ms with it off (``python -m bench.llm_load
--gateway-gc automatic`` against ``periodic``, bench/README.md).

So, once the binds listen (``after_startup``):

- ``gc.collect()``, then ``gc.freeze()``: the objects alive now (imports, the compiled config, the
  servers, ~100,000) move to the permanent generation, never walked again;
- ``gc.disable()``: no collection is triggered by allocations;
- ``collect_periodically``: a full collection every ``INTERVAL`` seconds (at 500 req/s one pause of
  ~90 ms every 5 minutes), or at the next check once ``EARLY_COUNT`` more container objects are
  alive than at the last one: cyclic garbage from some other path (errors, WebSockets, a reload's
  old config) is freed, and a burst of it is bounded to some tens of MB.
"""

from __future__ import annotations

import gc

import trio

INTERVAL = 300.0  # seconds between full collections
EARLY_COUNT = 500_000  # net new container objects since the last collection that bring it forward
CHECK_EVERY = 1.0  # seconds between looks at that count


def after_startup() -> None:
    """Collect and freeze what startup allocated, then leave collections to ``collect_periodically``."""
    gc.collect()  # startup's own cyclic garbage is freed, not frozen
    gc.freeze()
    gc.disable()


async def collect_periodically(interval: float = INTERVAL, early_count: int = EARLY_COUNT) -> None:
    """Run for the life of the process: a full collection every ``interval`` seconds, or at the
    first check after ``early_count`` more container objects are alive than at the last one."""
    last = trio.current_time()
    while True:
        await trio.sleep(min(CHECK_EVERY, interval))
        now = trio.current_time()
        if now - last >= interval or gc.get_count()[0] >= early_count:
            gc.collect()
            last = now
