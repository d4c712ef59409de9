#!/usr/bin/env python3
"""What the Trio primitives of the request path cost, each on its own, in one process.

    python -m bench.trio_costs [--n 200000] [--quick]

Microseconds per operation (the best of five runs of ``--n``), inside one Trio run:

* ``CancelScope()`` entered and left, without and with a deadline: what a request paid per scope
  before ``trioproxy/fd_deadlines.py`` (three per proxied request, session 41);
* an entered scope's deadline set and reset to infinity: the alternative of one scope per
  connection with its deadline moved per request;
* ``FdDeadlines.arm`` and ``disarm``: what the keep-alive idle wait and a pooled backend call pay
  for their deadline instead (docs/reliability.md, "Limits and timeouts");
* ``trio.current_time()``: a clock read, for scale.

Instructions per request, for the same question through a whole gateway, are
``bench/llm_callgrind.py``'s (bench/README.md, "Session 42").
"""

from __future__ import annotations

import argparse
import math
import socket
import time
from collections.abc import Callable

import trio

from trioproxy.fd_deadlines import FdDeadlines


def _best(op: Callable[[], object], n: int) -> float:
    """Microseconds per call of ``op``, the best of five runs of ``n``."""
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            op()
        best = min(best, time.perf_counter() - start)
    return best / n * 1e6


async def measure(n: int) -> dict[str, float]:
    def scope() -> None:
        with trio.CancelScope():
            pass

    def scope_with_deadline() -> None:
        with trio.CancelScope(deadline=trio.current_time() + 60):
            pass

    moved = trio.CancelScope()

    def deadline_moved() -> None:
        moved.deadline = trio.current_time() + 60
        moved.deadline = math.inf

    deadlines = FdDeadlines()
    a, b = socket.socketpair()
    fd = a.fileno()

    def timer() -> None:
        deadlines.disarm(deadlines.arm(fd, trio.current_time() + 60))

    with a, b, moved:
        results = {
            "CancelScope() entered and left": _best(scope, n),
            "CancelScope(deadline=...) entered and left": _best(scope_with_deadline, n),
            "an entered scope's deadline set and reset": _best(deadline_moved, n),
            "FdDeadlines.arm + disarm": _best(timer, n),
            "trio.current_time()": _best(trio.current_time, n),
        }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200_000, help="calls per run (default 200,000)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2,000 calls per run")
    args = parser.parse_args(argv)
    results = trio.run(measure, 2_000 if args.quick else args.n)
    width = max(map(len, results))
    print(f"| {'operation':<{width}} | µs per call |")
    print(f"|{'-' * (width + 2)}|------------:|")
    for name, micros in results.items():
        print(f"| {name:<{width}} | {micros:11.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
