"""Global rate limiting: what a remoteRateLimit costs the gateway, and what the server sustains.

    python -m bench.global_ratelimit            # all sections (~1 min)
    python -m bench.global_ratelimit --quick    # smoke: few requests per section
    python -m bench.global_ratelimit --only gateway [--callgrind]   # one section; + instruction counts

Sections (one redis-server and one `trioproxy ratelimit-server --redis` started here, free ports):

1. ``server``: ShouldRateLimit checks per second, the server pinned to one core (taskset -c 0) with
   Redis and the load generator on the other; beside ``redis-benchmark -t incr`` (Redis's own ceiling
   for one INCR per request, 50 clients).
2. ``client``: the gateway-side clients, sequential calls from a Trio task: (a) grpcio's future
   API bridged into Trio (``bench/rls_grpcio_client.RlsClient``), (b) the gRPC unary client on the ``h2`` library over
   a Trio stream (``bench/rls_h2_client.H2RlsClient``), (c) gRPC framed by hand on HTTP/2 over a Trio stream
   (``wire_client.WireRlsClient``, what the gateway uses). Wall time per call (latency) and this
   process's CPU per call (all threads: grpcio's C core works on its own).
3. ``gateway``: a gateway process with two routes answering ``directResponse`` (no backend noise), one
   with a remoteRateLimit: p50/p99 per request from a sequential client, the added latency, and the
   gateway's CPU per request (from /proc) for each route; the difference is the CPU of one check.
   With ``--callgrind``, the same routes again with the gateway under valgrind: instructions per
   request, which other jobs on a shared machine do not change.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import trio

from bench.harness import callgrind_command, callgrind_count, callgrind_on
from bench.rls_grpcio_client import RlsClient
from bench.rls_h2_client import H2RlsClient
from tests.rls_helpers import _accepts, _wait, free_port, ratelimit_server, redis_server
from trioproxy.rls.protos import rls_pb2
from trioproxy.rls.wire_client import METHOD, WireRlsClient

ROOT = Path(__file__).resolve().parent.parent

RLS = """
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000000000}
"""


def cpu_seconds(pid: int) -> float:
    """CPU time of all of ``pid``'s threads: nanoseconds from each thread's schedstat (clock
    ticks, 10 ms, would need thousands of requests per reading), else /proc's ticks."""
    if Path(f"/proc/{pid}/schedstat").exists():
        total = 0
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                total += int(Path(f"/proc/{pid}/task/{t}/schedstat").read_text().split()[0])
            except FileNotFoundError:  # a thread that just ended
                pass
        return total / 1e9
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_section(target: str, pid: int, seconds: float, concurrency: int) -> dict:
    channel = grpc.insecure_channel(target)
    call = channel.unary_unary(METHOD, request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
                               response_deserializer=rls_pb2.RateLimitResponse.FromString)
    req = rls_pb2.RateLimitRequest(domain="bench")
    req.descriptors.add().entries.add(key="user", value="u1")
    call(req, timeout=5)
    done = 0
    inflight = []
    cpu0, t0 = cpu_seconds(pid), time.perf_counter()
    end = t0 + seconds
    while time.perf_counter() < end:
        while len(inflight) < concurrency:
            inflight.append(call.future(req, timeout=5))
        inflight.pop(0).result()
        done += 1
    for f in inflight:
        f.result()
        done += 1
    wall, cpu = time.perf_counter() - t0, cpu_seconds(pid) - cpu0
    return {"checks_per_s": done / wall, "server_cpu_ms_per_check": cpu / done * 1000,
            "checks_per_server_cpu_s": done / cpu if cpu else 0.0}


def redis_benchmark(port: int, n: int) -> float:
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-t", "incr", "-n", str(n), "-q", "-c", "50"],
                         capture_output=True, text=True, check=True).stdout
    m = re.search(r"INCR: ([\d.]+) requests per second", out.replace("\r", "\n"))
    return float(m.group(1)) if m else 0.0


async def client_section(port: int, n: int, rounds: int = 6) -> dict:
    """Interleaved rounds (A B A B ...), so load from other jobs hits both alike; per client the
    median round's CPU per call and the pooled latencies."""
    clients = {"grpcio future bridged": RlsClient(f"127.0.0.1:{port}"),
               "h2 over Trio": H2RlsClient(f"127.0.0.1:{port}"),
               "hand-framed over Trio": WireRlsClient(f"127.0.0.1:{port}")}
    descriptors = [([("user", "u2")], None)]
    lat: dict[str, list[float]] = {name: [] for name in clients}
    cpu: dict[str, list[float]] = {name: [] for name in clients}
    wall: dict[str, float] = dict.fromkeys(clients, 0.0)
    for client in clients.values():
        for _ in range(20):
            await client.should_rate_limit("bench", descriptors, 5)
    per_round = max(1, n // rounds)
    for _ in range(rounds):
        for name, client in clients.items():
            cpu0, t0 = time.process_time(), time.perf_counter()
            for _ in range(per_round):
                s = time.perf_counter()
                await client.should_rate_limit("bench", descriptors, 5)
                lat[name].append(time.perf_counter() - s)
            cpu[name].append((time.process_time() - cpu0) / per_round)
            wall[name] += time.perf_counter() - t0
    results = {}
    for name, client in clients.items():
        client.close()
        r = _summary(lat[name], 0.0, wall[name], len(lat[name]))
        r["cpu_ms_per_call"] = statistics.median(cpu[name]) * 1000
        results[name] = r
    return results


def _summary(lat: list[float], cpu: float, wall: float, n: int) -> dict:
    lat.sort()
    return {"p50_ms": lat[len(lat) // 2] * 1000, "p99_ms": lat[int(len(lat) * 0.99)] * 1000,
            "cpu_ms_per_call": cpu / n * 1000, "calls_per_s": n / wall}


GATEWAY = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: limited
      matches: [{{path: {{pathPrefix: /limited}}}}]
      policies:
        remoteRateLimit:
          host: "127.0.0.1:{rls}"
          domain: bench
          descriptors: [{{entries: [{{key: user, value: 'request.headers["x-user"]'}}]}}]
        directResponse: {{status: 200, body: ok}}
    - name: plain
      policies:
        directResponse: {{status: 200, body: ok}}
"""


def gateway_section(rls_port: int, n: int, tmp: Path) -> dict:
    import httpx

    port = free_port()
    config = tmp / "gw.yaml"
    config.write_text(GATEWAY.format(port=port, rls=rls_port))
    env = {**os.environ, "ADMIN_ADDR": "127.0.0.1:0", "STATS_ADDR": "127.0.0.1:0", "READINESS_ADDR": "127.0.0.1:0",
           "TRIOPROXY_RUNTIME_DIR": str(tmp / "run")}
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "--config", str(config), "--log-level", "error"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(lambda: _accepts(port), "gateway")
        out = {}
        paths = ("/plain", "/limited")
        lat: dict[str, list[float]] = {p: [] for p in paths}
        cpu: dict[str, list[float]] = {p: [] for p in paths}
        rounds = 6
        per_round = max(1, n // rounds)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            for path in paths:
                for _ in range(max(50, n // 10)):  # warm up
                    client.get(path, headers={"x-user": "u4"})
            for _ in range(rounds):  # interleaved, so other jobs' load hits both routes alike
                for path in paths:
                    cpu0 = cpu_seconds(proc.pid)
                    for _ in range(per_round):
                        s = time.perf_counter()
                        r = client.get(path, headers={"x-user": "u4"})
                        lat[path].append(time.perf_counter() - s)
                        assert r.status_code == 200, r.text
                    cpu[path].append((cpu_seconds(proc.pid) - cpu0) / per_round)
        for path in paths:
            values = sorted(lat[path])
            out[path] = {"p50_ms": values[len(values) // 2] * 1000, "p99_ms": values[int(len(values) * 0.99)] * 1000,
                         "gateway_cpu_ms_per_request": statistics.median(cpu[path]) * 1000}
        out["added"] = {k: out["/limited"][k] - out["/plain"][k] for k in out["/plain"]}
        return out
    finally:
        proc.terminate()
        proc.wait(10)


def gateway_instructions(rls_port: int, n: int, tmp: Path) -> dict:
    """The gateway under callgrind: instructions per request on each route (two rounds each,
    interleaved, the lower kept), counted from after a warm-up. Instruction counts do not depend
    on the other jobs on the machine, so small changes show; kernel time (syscalls) is not in
    them, so the CPU figures above stay the ones to quote."""
    import httpx

    port = free_port()
    config = tmp / "gw-cg.yaml"
    config.write_text(GATEWAY.format(port=port, rls=rls_port))
    out = tmp / "callgrind.out"
    env = {**os.environ, "ADMIN_ADDR": "127.0.0.1:0", "STATS_ADDR": "127.0.0.1:0", "READINESS_ADDR": "127.0.0.1:0",
           "TRIOPROXY_RUNTIME_DIR": str(tmp / "run-cg")}
    proc = subprocess.Popen([*callgrind_command(out),
                             sys.executable, "-m", "trioproxy", "--config", str(config), "--log-level", "error"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    counts: dict[str, list[float]] = {"/plain": [], "/limited": []}
    try:
        _wait(lambda: _accepts(port), "gateway under callgrind", 300)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            for path in counts:
                for _ in range(30):
                    client.get(path, headers={"x-user": "u4"})
            callgrind_on(proc.pid)
            for path in ("/plain", "/limited", "/plain", "/limited"):
                def work(path: str = path) -> None:
                    for _ in range(n):
                        assert client.get(path, headers={"x-user": "u4"}).status_code == 200
                counts[path].append(callgrind_count(proc.pid, out, work) / n)
    finally:
        proc.terminate()
        proc.wait(60)
    result = {path: min(values) for path, values in counts.items()}
    result["added"] = result["/limited"] - result["/plain"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=("server", "client", "gateway"), action="append",
                        help="run only these sections (repeatable; default: all)")
    parser.add_argument("--callgrind", action="store_true",
                        help="also count the gateway's instructions per request under valgrind (slow, ~2 min)")
    args = parser.parse_args()
    only = set(args.only or ("server", "client", "gateway"))
    n = 200 if args.quick else 3000
    seconds = 1.0 if args.quick else 8.0
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        (tmp / "rls.yaml").write_text(RLS)
        with redis_server(tmp) as redis, ratelimit_server(tmp / "rls.yaml", "--redis", redis.url) as rls:
            pinned = subprocess.run(["taskset", "-cp", "0", str(rls.proc.pid)], capture_output=True,
                                    check=False).returncode == 0
            for t in os.listdir(f"/proc/{rls.proc.pid}/task"):
                subprocess.run(["taskset", "-cp", "0", t], capture_output=True, check=False)
            print(f"# machine: {os.cpu_count()} cores, shared with other jobs; one run, figures are noisy")
            if "server" in only:
                server_and_redis(rls, redis, pinned, seconds, args.quick)
            if "client" in only:
                for name, r in trio.run(client_section, rls.port, n).items():
                    print(f"client {name}: p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms, "
                          f"{r['cpu_ms_per_call']:.3f} ms CPU/call, {r['calls_per_s']:.0f} calls/s")
            if "gateway" in only:
                g = gateway_section(rls.port, n, tmp)
                for path in ("/plain", "/limited", "added"):
                    r = g[path]
                    print(f"gateway {path}: p50 {r['p50_ms']:.3f} ms, p99 {r['p99_ms']:.3f} ms, "
                          f"gateway CPU {r['gateway_cpu_ms_per_request']:.3f} ms/request")
                if args.callgrind:
                    ir = gateway_instructions(rls.port, 20 if args.quick else 100, tmp)
                    print("gateway instructions per request (callgrind): " + ", ".join(
                        f"{path} {value / 1000:.0f}k" for path, value in ir.items()))


def server_and_redis(rls, redis, pinned: bool, seconds: float, quick: bool) -> None:  # noqa: ANN001
    s = server_section(rls.target, rls.proc.pid, seconds, 32)
    print(f"server (pinned to core 0: {pinned}): {s['checks_per_s']:.0f} checks/s, "
          f"{s['server_cpu_ms_per_check']:.3f} ms server CPU/check "
          f"= {s['checks_per_server_cpu_s']:.0f} checks per server-CPU-second")
    print(f"redis-benchmark -t incr -c 50: {redis_benchmark(redis.port, 20000 if quick else 200000):.0f} INCR/s")


if __name__ == "__main__":
    main()
