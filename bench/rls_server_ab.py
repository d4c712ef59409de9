"""ratelimit-server before/after: checks per server CPU-second, two servers on one Redis, interleaved.

    git archive 61a9d69 | (mkdir -p /tmp/rls-before && tar -x -C /tmp/rls-before)   # grpcio's server
    python -m bench.rls_server_ab --before /tmp/rls-before [--rounds 3] [--seconds 3]

``--before`` is a source tree of another version of trioproxy (61a9d69: the last one with grpcio's
sync server and the thread group commit); "after" is this tree. Both servers run on the same
redis-server, pinned to core 0 (``taskset``, every thread), and take turns (A B A B ...) under the
same load as bench/global_ratelimit.py's ``server`` section: a grpcio client with 32 calls in
flight. Figures are CPU time from /proc (the whole process, and per thread for "after": the main
Trio thread and the redis-py worker thread), so a shared machine slows the rounds but does not
move them much.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.global_ratelimit import RLS, server_section
from tests.rls_helpers import redis_server

ROOT = Path(__file__).resolve().parent.parent


def start(root: Path, config: Path, url: str) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "ratelimit-server", "--config", str(config),
                             "--addr", "127.0.0.1:0", "--redis", url], cwd=root, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    m = re.search(r"listening on 127\.0\.0\.1:(\d+)", proc.stdout.readline())
    if not m:
        proc.kill()
        raise SystemExit(f"ratelimit-server in {root} did not start")
    return proc, int(m.group(1))


def pin(pid: int) -> None:
    for task in os.listdir(f"/proc/{pid}/task"):
        subprocess.run(["taskset", "-cp", "0", task], capture_output=True, check=False)


def thread_cpu(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for task in os.listdir(f"/proc/{pid}/task"):
        fields = Path(f"/proc/{pid}/task/{task}/stat").read_text().rsplit(")", 1)[1].split()
        out[task] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, required=True, help="source tree of the version to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0, help="per server per round")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "rls.yaml").write_text(RLS)
        with redis_server(tmp) as redis:
            servers = {"before": start(args.before.resolve(), tmp / "rls.yaml", redis.url),
                       "after": start(ROOT, tmp / "rls.yaml", redis.url)}
            results: dict[str, list[float]] = {name: [] for name in servers}
            try:
                for proc, _ in servers.values():
                    pin(proc.pid)
                for proc, port in servers.values():  # warm up
                    server_section(f"127.0.0.1:{port}", proc.pid, 0.5, 32)
                print(f"# {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start; CPU time from /proc")
                for _ in range(args.rounds):
                    for name, (proc, port) in servers.items():
                        threads0 = thread_cpu(proc.pid)
                        s = server_section(f"127.0.0.1:{port}", proc.pid, args.seconds, 32)
                        threads1 = thread_cpu(proc.pid)
                        checks = s["checks_per_s"] * args.seconds
                        busy = sorted((threads1[t] - threads0.get(t, 0.0) for t in threads1), reverse=True)
                        per_thread = ", ".join(f"{c / checks * 1e6:.0f}" for c in busy if c > 0.01)
                        results[name].append(s["checks_per_server_cpu_s"])
                        print(f"{name}: {s['checks_per_server_cpu_s']:.0f} checks per server CPU-second "
                              f"({s['server_cpu_ms_per_check'] * 1000:.0f} µs CPU/check; busiest threads µs/check: "
                              f"{per_thread}), {s['checks_per_s']:.0f} checks/s wall", flush=True)
            finally:
                for proc, _ in servers.values():
                    proc.terminate()
                    proc.wait(10)
            for name, values in results.items():
                print(f"{name}: median {statistics.median(values):.0f} checks per server CPU-second")


if __name__ == "__main__":
    main()
