#!/usr/bin/env python3
"""System calls per proxied request, and the gateway's user and system CPU per request.

    python -m bench.syscalls_per_request [--variant ai|plain] [--duration 5]

proxy_compare.py's set-up (nginx backend and wrk on core 0, trioproxy on core 1; ``ai``: its
``trioproxy-ai`` route with a token limit). Two wrk runs: one with ``strace -c -f`` attached to the
gateway (the count of each system call per request; strace slows the process, so read only the
counts), one without, for utime and stime per request from /proc. Needs strace (``apt-get install
strace``). bench/README.md quotes it for the disconnect monitor's ``epoll_ctl``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time

from bench import harness
from bench.proxy_compare import CHAT_LOCATION, CHAT_PATH, chat_script, check_chat, trioproxy_ai_conf


def cpu(pid: int) -> tuple[float, float]:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def requests_of(output: str) -> float:
    return float(re.search(r"(\d+) requests in", output).group(1))  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=["ai", "plain"], default="ai")
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args(argv)
    if shutil.which("strace") is None:
        print("strace not found (apt-get install strace)", file=sys.stderr)
        return 2
    ai = args.variant == "ai"
    with harness.workspace("syscalls", keep=False) as (tmp, procs):
        backend = harness.free_port()
        harness.start_nginx(procs, tmp, "backend", harness.nginx_backend_conf(tmp, backend, CHAT_LOCATION), backend, 0)
        proc, port = harness.start_trioproxy(procs, tmp, backend, 1, conf=trioproxy_ai_conf(backend) if ai else None)
        if ai:
            check_chat(port)
        wrk = {"path": CHAT_PATH, "script": chat_script(tmp)} if ai else {}
        user0, sys0 = cpu(proc.pid)
        _, output = harness.run_wrk(port, 50, args.duration, 0, **wrk)  # type: ignore[arg-type]
        user1, sys1 = cpu(proc.pid)
        n = requests_of(output)
        print(f"{args.variant}: {n / args.duration:,.0f} req/s, user {1e3 * (user1 - user0) / n:.4f} ms, "
              f"system {1e3 * (sys1 - sys0) / n:.4f} ms of CPU per request (50 connections, no strace)")
        counts = tmp / "strace.txt"
        tracer = subprocess.Popen(["strace", "-c", "-f", "-p", str(proc.pid), "-o", str(counts)])
        time.sleep(1)
        _, output = harness.run_wrk(port, 50, args.duration, 0, **wrk)  # type: ignore[arg-type]
        tracer.terminate()
        tracer.wait()
        n = requests_of(output)
        print("system calls per request (under strace):")
        for line in counts.read_text().splitlines():
            if m := re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line):
                calls, name = int(m.group(1)), m.group(2)
                if calls / n >= 0.05 or name == "total":
                    print(f"  {name:<12} {calls / n:6.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
