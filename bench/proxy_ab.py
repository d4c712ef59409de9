#!/usr/bin/env python3
"""proxy_compare's trioproxy and trioproxy-ai, for two checkouts side by side, interleaved.

    git archive REV | tar -x -C /tmp/old          # the tree to compare against
    python -m bench.proxy_ab --against /tmp/old [--rounds 3] [--duration 5]

One nginx backend (proxy_compare's, with the chat completion location); four gateways started
together, each pinned to the proxy core: this checkout's and ``--against``'s, each with the plain
route (``GET /``) and the ``ai`` route with a token limit (the chat POST). Each is measured in turn
for ``--duration`` seconds at ``--connections``, ``--rounds`` times, so the machine's drift falls on
all four alike; the table has every round's CPU per request and the median. On this noisy 2-core
VM one target moves by up to ±5% from run to run: a single proxy_compare run cannot show a 5% step.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench import proxy_compare as pc
from bench.harness import (
    ROOT,
    check_tools_and_cores,
    free_port,
    measure,
    nginx_backend_conf,
    run_main,
    run_parser,
    start_nginx,
    start_trioproxy,
    trioproxy_conf,
    workspace,
)

RESULTS = ROOT / "bench" / "results" / "proxy_ab.json"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = run_parser(__doc__, results=RESULTS, quick_help="smoke run: 1 round of 1 s, no warm-up")
    parser.add_argument("--against", type=Path, required=True, help="the other checkout's root (git archive REV)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.rounds = 1.0, 0.0, 1
    if not (args.against / "trioproxy" / "__init__.py").exists():
        parser.error(f"--against {args.against}: no trioproxy/ package there")
    return args


def run(args: argparse.Namespace) -> int:
    proxy_cpu, client_cpu = check_tools_and_cores(args)
    with workspace("proxy_ab-", keep=args.keep_tmp) as (tmp, procs):
        backend_port = free_port()
        backend = start_nginx(procs, tmp, "backend", nginx_backend_conf(tmp, backend_port, pc.CHAT_LOCATION),
                              backend_port, client_cpu)
        script = pc.chat_script(tmp)
        gateways = {}
        for tree, root in (("this", ROOT), ("against", args.against.resolve())):
            for kind in ("plain", "ai"):
                conf = pc.trioproxy_ai_conf(backend_port) if kind == "ai" else trioproxy_conf(backend_port)
                gateways[(tree, kind)] = start_trioproxy(procs, tmp, backend_port, proxy_cpu, conf=conf,
                                                         name=f"{tree}-{kind}", probe_path=None, root=root)
        cpu: dict[tuple[str, str], list[float]] = {key: [] for key in gateways}
        for _ in range(args.rounds):
            for (tree, kind), (proc, port) in gateways.items():
                path, sc = (pc.CHAT_PATH, script) if kind == "ai" else ("/", None)
                row = measure(f"{tree}-{kind}", port, proc.pid, backend.pid, args.connections, args.duration,
                              args.warmup, client_cpu, path=path, script=sc)
                proc.check_alive()
                cpu[(tree, kind)].append(row.cpu_ms_per_req)
    print(f"CPU ms per request, {args.rounds} interleaved rounds of {args.duration:g} s at {args.connections} "
          f"connections; this = {ROOT}, against = {args.against}")
    print("| route | this (median) | against (median) | this / against | this, per round | against, per round |")
    print("|---|---:|---:|---:|---|---|")
    for kind in ("plain", "ai"):
        this, other = cpu[("this", kind)], cpu[("against", kind)]
        print(f"| {kind} | {statistics.median(this):.3f} | {statistics.median(other):.3f} | "
              f"{statistics.median(this) / statistics.median(other):.3f} | "
              f"{' '.join(f'{v:.3f}' for v in this)} | {' '.join(f'{v:.3f}' for v in other)} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"against": str(args.against), "rounds": args.rounds, "duration": args.duration,
                                     "connections": args.connections,
                                     "cpu_ms_per_req": {f"{tree}-{kind}": v for (tree, kind), v in cpu.items()}},
                                    indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(parse_args, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
