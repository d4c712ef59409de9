#!/usr/bin/env python3
"""CPU per proxied request with TLS to the backend, beside plain HTTP, for trioproxy and nginx, one run.

    python bench/tls_compare.py [--duration 10] [--connections 50] [--quick]

One nginx instance is the backend, serving the same small body over plain HTTP and over HTTPS
(a certificate from a CA this script makes with ``cryptography``, tests/tls_helpers.py). Each
proxy is measured with wrk at N connections and at 1 connection:

* ``trioproxy-plain`` / ``trioproxy-tls`` - wrk -> trioproxy -> backend over HTTP / over HTTPS
  (``backendTLS: {root, hostname}``: verified, pooled keep-alive connections)
* ``nginx-plain`` / ``nginx-tls``         - wrk -> nginx (upstream keepalive) -> backend over
  HTTP / over HTTPS (``proxy_ssl_verify on``, session reuse)

wrk talks plain HTTP to the proxies: the figures are the cost of TLS *to the backend*. With
keep-alive the handshake is paid once per pooled connection, so the per-request difference is
the record encryption and the TLS layer's own overhead. CPU time of the proxy is read from
/proc (utime+stime) around each measured run (shared harness: bench/harness.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.harness import (
    BODY,
    NGINX_COMMON,
    BenchError,
    Row,
    check_tools_and_cores,
    connection_counts,
    free_port,
    measure,
    render,
    run_main,
    run_parser,
    start_nginx,
    start_trioproxy,
    trioproxy_conf,
    workspace,
    write_table_report,
)

RESULTS = Path(__file__).resolve().parent / "results" / "tls_compare.json"
TARGETS = ("trioproxy-plain", "trioproxy-tls", "nginx-plain", "nginx-tls")


def backend_conf(tmp: Path, plain_port: int, tls_port: int, cert: tuple[str, str]) -> str:
    body = f"""\
    server {{
        listen 127.0.0.1:{plain_port} backlog=4096;
        listen 127.0.0.1:{tls_port} ssl backlog=4096;
        ssl_certificate {cert[0]};
        ssl_certificate_key {cert[1]};
        ssl_session_cache shared:SSL:1m;
        location / {{
            default_type text/plain;
            return 200 {json.dumps(BODY)};
        }}
    }}"""
    return NGINX_COMMON.format(tmp=tmp, name="backend", body=body)


def nginx_proxy_conf(tmp: Path, name: str, port: int, upstream: str, ca: Path | None) -> str:
    tls = f"""
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate {ca};
            proxy_ssl_name localhost;
            proxy_ssl_server_name on;
            proxy_ssl_session_reuse on;""" if ca is not None else ""
    body = f"""\
    upstream backend {{
        server {upstream};
        keepalive 64;
        keepalive_requests 1000000;
    }}
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            proxy_pass {"https" if ca is not None else "http"}://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;{tls}
        }}
    }}"""
    return NGINX_COMMON.format(tmp=tmp, name=name, body=body)


def trioproxy_tls_conf(tls_port: int, ca: Path) -> str:
    return trioproxy_conf(tls_port).replace(
        f"- host: 127.0.0.1:{tls_port}",
        f"- host: 127.0.0.1:{tls_port}\n        policies:\n"
        f"          backendTLS: {{root: {ca}, hostname: localhost}}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = run_parser(__doc__, results=RESULTS, quick_help="smoke run: 1 s per run, 1 s warm-up, trioproxy only")
    parser.add_argument("--connections", type=int, default=50,
                        help="concurrent connections (default 50); every target is also measured at 1")
    parser.add_argument("--targets", default=",".join(TARGETS), help=f"comma-separated subset of {','.join(TARGETS)}")
    args = parser.parse_args(argv)
    if args.quick:
        args.duration, args.warmup = 1.0, 1.0
        if args.targets == parser.get_default("targets"):
            args.targets = "trioproxy-plain,trioproxy-tls"
    args.targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if unknown := set(args.targets) - set(TARGETS):
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    return args


def run(args: argparse.Namespace) -> int:
    try:
        from tests.tls_helpers import Pki
    except ImportError as error:  # cryptography is a test dependency
        raise BenchError(f"cannot make certificates: {error}") from None
    proxy_cpu, client_cpu = check_tools_and_cores(args)
    conn_counts = connection_counts(args.connections)
    rows: list[Row] = []
    with workspace("tls_compare-", keep=args.keep_tmp) as (tmp, procs):
        pki = Pki(tmp)
        cert = pki.issue("backend", dns=["localhost"], ips=["127.0.0.1"])
        plain_port, tls_port = free_port(), free_port()
        backend = start_nginx(procs, tmp, "backend", backend_conf(tmp, plain_port, tls_port, cert), plain_port,
                              client_cpu)
        for name in args.targets:
            print(f"== {name}", file=sys.stderr, flush=True)
            tls = name.endswith("-tls")
            upstream_port = tls_port if tls else plain_port
            if name.startswith("nginx"):
                port = free_port()
                proc = start_nginx(procs, tmp, name, nginx_proxy_conf(tmp, name, port, f"127.0.0.1:{upstream_port}",
                                                                      pki.ca_file if tls else None), port, proxy_cpu)
            else:
                conf = trioproxy_tls_conf(tls_port, pki.ca_file) if tls else trioproxy_conf(plain_port)
                proc, port = start_trioproxy(procs, tmp, upstream_port, proxy_cpu, conf=conf, name=name)
            try:
                for conns in conn_counts:
                    row = measure(name, port, proc.pid, backend.pid, conns, args.duration, args.warmup, client_cpu)
                    proc.check_alive()
                    if row.errors:
                        raise BenchError(f"{name}: {row.errors} errors in wrk's run; log {proc.log}")
                    rows.append(row)
                    print(f"   {conns:>3} conns: {row.rps:,.0f} req/s, {row.cpu_ms_per_req:.3f} ms CPU/req",
                          file=sys.stderr, flush=True)
            finally:
                procs.stop(proc)

    rows.sort(key=lambda r: (-r.connections, args.targets.index(r.target)))
    print()
    print(f"wrk -t1 (plain HTTP to the proxy), {args.duration:g} s per run after {args.warmup:g} s warm-up; "
          f"proxy on core {proxy_cpu}, wrk and backend on core {client_cpu}")
    print(render(rows))
    print()
    by = {(r.target, r.connections): r for r in rows}
    lines = []
    for proxy in ("trioproxy", "nginx"):
        for conns in conn_counts:
            plain, tls = by.get((f"{proxy}-plain", conns)), by.get((f"{proxy}-tls", conns))
            if plain and tls and plain.cpu_ms_per_req > 0:
                lines.append(f"{proxy} @{conns} conns: TLS to the backend costs {tls.cpu_ms_per_req:.3f} ms CPU/req vs "
                             f"{plain.cpu_ms_per_req:.3f} plain (+{tls.cpu_ms_per_req - plain.cpu_ms_per_req:.3f} ms, "
                             f"{tls.cpu_ms_per_req / plain.cpu_ms_per_req:.2f}x)")
    for conns in conn_counts:
        t, n = by.get(("trioproxy-tls", conns)), by.get(("nginx-tls", conns))
        if t and n and n.cpu_ms_per_req > 0:
            lines.append(f"trioproxy vs nginx, TLS @{conns} conns: {t.cpu_ms_per_req / n.cpu_ms_per_req:.0f}x the CPU "
                         "per request")
    write_table_report(args, lines, [], rows, proxy_cpu, client_cpu)
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(parse_args, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
