#!/usr/bin/env python3
"""Where does trioproxy spend CPU per request? Sample it with py-spy under wrk load.

    pip install py-spy
    python -m bench.profile_trioproxy [--duration 10] [--connections 50] [--raw bench/results/profile.txt]
    python -m bench.profile_trioproxy --variant token-limited   # a policy_overhead.py variant
    python -m bench.profile_trioproxy --variant ai              # proxy_compare.py's trioproxy-ai

Same set-up as proxy_compare.py (nginx backend and wrk on core 0, trioproxy on core 1). py-spy
samples the gateway from outside (no instrumentation inside the process) and the script prints
the functions with the most self time, the most inclusive time, and self time grouped by package.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from bench import harness

PACKAGES = [
    ("trioproxy/", "trioproxy"), ("hypercorn/", "hypercorn"), ("h11/", "h11"), ("trio/", "trio"),
    ("prometheus_client/", "prometheus_client"), ("attr", "attrs"), ("logging/", "logging"),
    ("socket.py", "stdlib socket"), ("selectors.py", "stdlib"), ("/lib/python3", "stdlib"),
]


def package_of(frame: str) -> str:
    for needle, name in PACKAGES:
        if needle in frame:
            return name
    return "other"


def short(frame: str) -> str:
    # py-spy raw frames look like "function (path/to/file.py:123)"; drop line numbers and site-packages
    frame = re.sub(r":\d+\)$", ")", frame)
    return re.sub(r"\(.*?(site-packages/|lib/python3\.\d+/|/work/[^/]+/[^/]+/)", "(", frame)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--variant", choices=["default", "ai", "plain", "limited", "token-limited", "tracing-idle"],
                        default="default", help="default: proxy_compare.py's gateway (GET /, text body); "
                        "ai: proxy_compare.py's trioproxy-ai (a chat completion POSTed to an ai route with a token limit); "
                        "the others: bench/policy_overhead.py's variants (GET /usage, JSON body with usage)")
    parser.add_argument("--raw", type=Path, default=harness.ROOT / "bench" / "results" / "profile.txt",
                        help="keep py-spy's collapsed stacks here (flamegraph.pl / speedscope can read them)")
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        print("error: py-spy not installed (pip install py-spy)", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="profile_trioproxy-"))
    procs = harness.Processes(tmp)
    watcher = None
    try:
        backend_port = harness.free_port()
        path = "/"
        script = None
        if args.variant == "default":
            backend = harness.start_nginx(procs, tmp, "backend", harness.nginx_backend_conf(tmp, backend_port), backend_port, 0)
            proxy, port = harness.start_trioproxy(procs, tmp, backend_port, 1)
        elif args.variant == "ai":
            from bench import proxy_compare as pc
            backend = harness.start_nginx(procs, tmp, "backend", harness.nginx_backend_conf(tmp, backend_port, pc.CHAT_LOCATION),
                                          backend_port, 0)
            proxy, port = harness.start_trioproxy(procs, tmp, backend_port, 1, conf=pc.trioproxy_ai_conf(backend_port),
                                                  probe_path=None)
            pc.check_chat(port)
            path, script = pc.CHAT_PATH, pc.chat_script(tmp)
        else:
            import policy_overhead as po
            path = po.USAGE_PATH
            backend = harness.start_nginx(procs, tmp, "backend", harness.nginx_backend_conf(tmp, backend_port, po.USAGE_LOCATION),
                                     backend_port, 0)
            policies = {"limited": po.LIMIT_REQUESTS, "token-limited": po.LIMIT_TOKENS}.get(args.variant, "")
            admin_port = harness.free_port()
            proxy, port = harness.start_trioproxy(procs, tmp, backend_port, 1, conf=harness.trioproxy_conf(backend_port, policies),
                                             admin_port=admin_port, probe_path=path)
            if args.variant == "tracing-idle":  # hypercorn's read_timeout ends it after 60 s of reader silence
                watcher = po.TraceWatcher(admin_port, po.NEVER)
                watcher.start()
        harness.run_wrk(port, args.connections, 2, 0, path=path, script=script)  # warm-up
        raw = tmp / "profile.txt"
        spy = subprocess.Popen(["taskset", "-c", "0", "py-spy", "record", "-p", str(proxy.pid), "-r", str(args.rate),
                                "-d", str(args.duration + 1), "-f", "raw", "-o", str(raw)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        result: dict = {}
        worker = threading.Thread(target=lambda: result.update(
            cpu=(lambda b: (harness.run_wrk(port, args.connections, args.duration, 0, path=path, script=script),
                            harness.tree_cpu_seconds(proxy.pid) - b))(
                harness.tree_cpu_seconds(proxy.pid))))
        worker.start()
        worker.join()
        _, stderr = spy.communicate(timeout=60)
        args.raw.parent.mkdir(parents=True, exist_ok=True)
        if raw.exists():
            shutil.copy(raw, args.raw)
        (wrk, _), cpu = result["cpu"]
        print(f"under py-spy: {wrk.rps:,.0f} req/s, {cpu * 1e3 / max(wrk.requests, 1):.3f} ms CPU/request "
              f"(py-spy pauses the process per sample: inflated), p50 {wrk.p50_ms:.2f} ms")
        if not raw.exists():
            print(f"error: py-spy wrote nothing: {stderr.decode(errors='replace')}", file=sys.stderr)
            return 1
        self_t: collections.Counter[str] = collections.Counter()
        incl: collections.Counter[str] = collections.Counter()
        pkgs: collections.Counter[str] = collections.Counter()
        total = 0
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            frames = [short(f) for f in stack.split(";")]
            frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
            if not frames:
                continue
            total += n
            self_t[frames[-1]] += n
            pkgs[package_of(stack.split(";")[-1])] += n
            for f in set(frames):
                incl[f] += n
        ms_per_req = cpu * 1e3 / max(wrk.requests, 1)
        print(f"\n{total} samples (active stacks only; idle waits in epoll count under trio)\n")
        print(f"self time by package (share, ~ms per request of {ms_per_req:.3f}):")
        for name, n in pkgs.most_common():
            print(f"  {100 * n / total:5.1f}%  {ms_per_req * n / total:.3f}  {name}")
        print(f"\ntop {args.top} functions by self time:")
        for f, n in self_t.most_common(args.top):
            print(f"  {100 * n / total:5.1f}%  {f}")
        print(f"\ntop {args.top} functions by inclusive time:")
        for f, n in incl.most_common(args.top + 10):
            print(f"  {100 * n / total:5.1f}%  {f}")
        print("\ntrioproxy functions, self time (share, ~ms per request):")
        for f, n in self_t.most_common():
            if "(trioproxy/" in f:
                print(f"  {100 * n / total:5.1f}%  {ms_per_req * n / total:.4f}  {f}")
        print(f"\nkept py-spy's collapsed stacks in {args.raw}")
        del backend
    finally:
        if watcher is not None:
            watcher.close()
        procs.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
