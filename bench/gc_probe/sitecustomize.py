"""Loaded by a gateway that ``bench/llm_load.py --gateway-gc`` starts (this directory is put first
on its PYTHONPATH): how its cyclic garbage collector runs, and what its pauses were.

``TRIOPROXY_BENCH_GC``: ``periodic`` leaves ``trioproxy/frontend/gc_tuning.py`` as shipped (off, a full
collection every 5 minutes); ``automatic`` freezes the startup objects but leaves CPython's
collector running by allocation counts (what the gateway did before); ``off`` never collects.
``TRIOPROXY_BENCH_GC_LOG``: a JSON file rewritten after each collection, per generation
``[collections, total ms, longest ms]``. With it, SIGUSR2 (sent by ``llm_load.py`` after each load)
runs one full collection and writes what it walked and freed, and how long it took, to
``<TRIOPROXY_BENCH_GC_LOG>.full``: the evidence that a request leaves no cyclic garbage.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import time

import trio

from trioproxy.frontend import gc_tuning

MODE = os.environ.get("TRIOPROXY_BENCH_GC", "periodic")
LOG = os.environ.get("TRIOPROXY_BENCH_GC_LOG")


async def _never() -> None:
    await trio.sleep_forever()


if MODE == "automatic":
    def _freeze_only() -> None:
        gc.collect()
        gc.freeze()

    gc_tuning.after_startup = _freeze_only  # type: ignore[assignment]
    gc_tuning.collect_periodically = _never  # type: ignore[assignment]
elif MODE == "off":
    gc_tuning.collect_periodically = _never  # type: ignore[assignment]

if LOG:
    _started: dict[int, float] = {}
    _pauses: dict[int, list[float]] = {}

    def _record(phase: str, info: dict) -> None:
        generation = info["generation"]
        if phase == "start":
            _started[generation] = time.perf_counter()
            return
        ms = (time.perf_counter() - _started.pop(generation, time.perf_counter())) * 1000
        seen = _pauses.setdefault(generation, [0, 0.0, 0.0])
        seen[0] += 1
        seen[1] = round(seen[1] + ms, 1)
        seen[2] = round(max(seen[2], ms), 1)
        with open(LOG, "w") as f:  # json.dumps: json.dump's pure-Python encoder leaves reference cycles
            f.write(json.dumps({str(g): v for g, v in sorted(_pauses.items())}))

    gc.callbacks.append(_record)

    def _full_collection(signum: int, frame: object) -> None:
        walked = len(gc.get_objects())  # every tracked object but the frozen (startup) ones
        start = time.perf_counter()
        freed = gc.collect()
        ms = round((time.perf_counter() - start) * 1000, 1)
        with open(LOG + ".full", "w") as f:
            f.write(json.dumps({"walked": walked, "freed": freed, "ms": ms}))

    signal.signal(signal.SIGUSR2, _full_collection)
