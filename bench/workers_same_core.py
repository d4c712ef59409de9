#!/usr/bin/env python3
"""Does a ``--workers`` worker spend more CPU per request than one process? Pin both to one core.

    python -m bench.workers_same_core [--duration 5] [--rounds 2]

``trioproxy`` and ``trioproxy --workers 2`` both run on core 1 (taskset is inherited by the
workers), wrk and the nginx backend on core 0; the two are measured interleaved ``--rounds``
times at 50 connections (bench/harness.py's processes, wrk runner and /proc CPU accounting). The
CPU per request compares what a worker's request path costs, free of the cross-core effects of
an oversubscribed machine; req/s on one shared core compares nothing useful (two processes get
two shares of a contended core).
"""

from __future__ import annotations

import argparse

from bench import harness as pc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    pc.install_signal_handlers()
    with pc.workspace("workers_same_core-", keep=False) as (tmp, procs):
        backend_port = pc.free_port()
        backend = pc.start_nginx(procs, tmp, "backend", pc.nginx_backend_conf(tmp, backend_port), backend_port, 0)
        targets = [("1 process", *pc.start_trioproxy(procs, tmp, backend_port, 1, name="w1")),
                   ("2 workers", *pc.start_trioproxy(procs, tmp, backend_port, 1, name="w2", workers=2))]
        for _ in range(args.rounds):
            for name, proc, port in targets:
                row = pc.measure(name, port, proc.pid, backend.pid, 50, args.duration, 1.0, 0)
                print(f"{name:<10} on core 1: {row.rps:>7,.0f} req/s  {row.cpu_ms_per_req:.3f} ms CPU/request",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
