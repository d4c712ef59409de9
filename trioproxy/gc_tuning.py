"""The cyclic garbage collector's settings for a serving process (docs/reliability.md, "Pauses").

A gateway process holds ~100,000 objects from its imports and config that live as long as it
does, and under LLM load (requests waiting 1.5 s on a provider) tens of thousands more per second
that live for the length of a request. With CPython's defaults those request objects survive two
young collections, reach the oldest generation, and make full collections frequent; each full
collection walks every object, the startup ones included: 60-180 ms of CPU in one pause at
500 req/s (bench/llm_load.py), which is the request latency's p99.

What ``after_startup`` does, once the binds listen:

- ``gc.freeze()``: the objects alive now (imports, the compiled config, the servers) move to the
  permanent generation, so no collection walks them again (about 100,000 objects: a full pause
  shrinks ~3×). A later reload's config is collected as usual.
- the oldest generation's threshold 10 → 100: a full collection at most every 100 middle ones
  instead of 10 (CPython also waits until a quarter of the old objects are new). Request objects
  are freed by reference counting when the request ends; what only a full collection frees is
  cyclic garbage that outlived two young collections, measured at ~10 objects/s at 500 req/s.

The young generations keep CPython's thresholds: a larger first threshold made each middle
collection longer (more objects per pause) without less work in total.
"""

from __future__ import annotations

import gc

OLDEST_THRESHOLD = 100  # CPython's default is 10


def after_startup() -> None:
    """Freeze what startup allocated and make full collections rarer (see the module docstring)."""
    gc.collect()  # startup's own cyclic garbage is freed, not frozen
    gc.freeze()
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, OLDEST_THRESHOLD)
