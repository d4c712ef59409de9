"""Open-loop LLM gateway load: a mock provider answering after 1.5 s, a fixed arrival rate.

The scenario LLM-gateway benchmarks publish: chat completions arrive at ``--rate`` per second for
``--duration`` seconds whether or not earlier ones finished (open loop: a slow gateway cannot slow
the offered load); the mock answers each after 1.5 s. Reports, per target and rate, the success
rate, p50/p99 added latency (latency minus the mock's 1.5 s), the gateway's RSS (at the end and
its peak) and the CPU time per request of the gateway and of the two peers.

The peers are cheap so that the gateway is what is measured (published benchmarks use a Go mock
and a Go load generator): the mock is ``bench/llm_mock.py`` (asyncio Protocol, a pre-built answer,
keep-alive), and the load generator here is an asyncio Protocol client with a keep-alive connection
pool (about rate × 1.5 s connections in flight; a new one is opened whenever none is idle). Arrival
times are fixed in advance; each request's latency runs from its *scheduled* send time, so any
queueing in the generator counts against it. A request not answered within ``--timeout`` (30 s) of
its scheduled time is a failure. With two or more cores the gateway is pinned to one core
(``--gateway-cpu``, default 1) and the mock and generator to another (``--peer-cpu``, default 0)
with ``taskset``, so "one core carries the rate" is literal.

    python -m bench.llm_load --rate 250 500 --duration 60 --compare litellm direct --litellm-bin /tmp/litellm-venv/bin/litellm
    python -m bench.llm_load --find-max --duration 20           # highest rate trioproxy holds at 100%
    python -m bench.llm_load --idle 10000                       # RSS per idle keep-alive connection
    python -m bench.llm_load --sse 2000                         # RSS per concurrent SSE stream

``--gateway direct`` is the baseline (generator → mock, no gateway); ``--gateway litellm`` runs
LiteLLM's proxy (``pip install 'litellm[proxy]'``, one worker). ``--idle``/``--sse`` use the
tests' full mock (``fixtures/mock_openai.py``), which streams.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
DELAY_MS = 1500
BODY = json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "hello"}]}).encode()
REQUEST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
           b"Content-Length: " + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
CHUNKED = re.compile(rb"\r\ntransfer-encoding:[^\r]*chunked", re.IGNORECASE)
CONNECTION_CLOSE = re.compile(rb"\r\nconnection:[ \t]*close", re.IGNORECASE)


# --- processes --------------------------------------------------------------------------------

def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of ``pid``, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a ``--workers`` supervisor and its workers)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):  # children of every thread, not only the main one
                todo += [int(c) for c in Path(f"/proc/{p}/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return out


def tree_rss_mb(pid: int, field: str = "VmRSS") -> tuple[float, float]:
    """(largest, sum) of the tree's per-process RSS: the target is per process."""
    values = []
    for p in process_tree(pid):
        try:
            values.append(rss_mb(p, field))
        except OSError:
            pass
    return max(values, default=0.0), sum(values)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid``'s tree (each process and its waited-for children) so far."""
    total = 0
    for p in process_tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15])
    return total / os.sysconf("SC_CLK_TCK")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def start(cmd: list[str], pattern: str, env: dict[str, str] | None = None, timeout: float = 60,
          cpu: int | None = None) -> tuple[subprocess.Popen, re.Match]:
    """Start a process (pinned to ``cpu`` with taskset, which execs: the pid is the command's) and
    wait for an output line matching ``pattern``."""
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if m := re.search(pattern, line):
            # Keep reading its output: a child whose log fills the pipe blocks on its next write
            # (the earlier runs' "70% success" was the gateway and the mock stalled on stdout).
            lines: list[str] = []
            proc.output_lines = lines  # type: ignore[attr-defined]  # read by soak.py for tracebacks
            threading.Thread(target=_drain, args=(proc.stdout, lines), daemon=True).start()
            return proc, m
    proc.kill()
    raise SystemExit(f"{cmd[0]}: did not start ({pattern!r} not seen)")


def _drain(pipe: Any, lines: list[str]) -> None:
    for line in pipe:
        lines.append(line)


def start_mock() -> tuple[subprocess.Popen, int]:
    """The tests' full mock (streams, control headers): for ``--idle``/``--sse`` and bench/soak.py."""
    proc, m = start([sys.executable, "-m", "fixtures.mock_openai", "--port", "0"], r"listening on http://[^:]+:(\d+)")
    return proc, int(m.group(1))


def start_bench_mock(cpu: int | None, delay_ms: float = DELAY_MS) -> tuple[subprocess.Popen, int]:
    """The cheap mock (bench/llm_mock.py) for the rate runs."""
    proc, m = start([sys.executable, "-m", "bench.llm_mock", "--port", "0", "--delay-ms", str(delay_ms)],
                    r"listening on http://[^:]+:(\d+)", cpu=cpu)
    return proc, int(m.group(1))


def gateway_config(mock_port: int, port: int) -> str:
    # maxConnections: the default (10,000 or what RLIMIT_NOFILE allows, 9,872 at a 20,000 limit)
    # would refuse the last of --idle 10000; maxConnectionsPerClient: the generator is one client
    # address, and the default (1,000) answered a third of a 1,000 req/s run (~1,500 connections) 503.
    return f"""frontendPolicies: {{http: {{maxConnections: 12000, maxConnectionsPerClient: 12000}}}}
binds:
- port: {port}
  listeners:
  - routes:
    - name: llm
      backends:
      - ai:
          name: mock
          provider: {{openAI: {{model: mock-model}}}}
          hostOverride: 127.0.0.1:{mock_port}
"""


def start_trioproxy(mock_port: int, port: int, tmp: Path, cpu: int | None = None, workers: int = 1,
                    gc_mode: str | None = None) -> subprocess.Popen:
    """``gc_mode``: run the gateway's collector as ``bench/gc_probe`` says, and log its pauses."""
    path = tmp / "gw.yaml"
    path.write_text(gateway_config(mock_port, port))
    env = {"ADMIN_ADDR": "127.0.0.1:0", "STATS_ADDR": "127.0.0.1:0", "READINESS_ADDR": "127.0.0.1:0",
           "TRIOPROXY_RUNTIME_DIR": str(tmp / "rt"), "LOG_LEVEL": "error"}
    gc_log = tmp / "gc-pauses.json"
    if gc_mode is not None:
        env.update(TRIOPROXY_BENCH_GC=gc_mode, TRIOPROXY_BENCH_GC_LOG=str(gc_log),
                   PYTHONPATH=os.pathsep.join([str(ROOT / "bench" / "gc_probe"), str(ROOT)]))
    extra = ["--workers", str(workers)] if workers > 1 else []
    proc, _ = start([sys.executable, "-m", "trioproxy", "--config", str(path), *extra], r"bind \d+ listening", env=env,
                    cpu=cpu)
    if gc_mode is not None:
        proc.gc_log = gc_log  # type: ignore[attr-defined]  # read by measure()
        proc.gc_full = workers == 1  # type: ignore[attr-defined]  # the signal would reach the supervisor only
    return proc


def start_litellm(binary: str, mock_port: int, port: int, tmp: Path, cpu: int | None = None) -> subprocess.Popen:
    path = tmp / "litellm.yaml"
    path.write_text(f"""model_list:
- model_name: mock-model
  litellm_params:
    model: openai/mock-model
    api_base: http://127.0.0.1:{mock_port}/v1
    api_key: unused
""")
    # LiteLLM >= 1.10x refuses to start without a master key; the bench's generator sends none (as
    # trioproxy's route needs none), so the local-only switch keeps both gateways doing the same work.
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR",
           "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true"}
    # Readiness by polling its health endpoint, not by a log line: recent versions print nothing at
    # LITELLM_LOG=ERROR, and a blocked readline never reached the timeout.
    cmd = [binary, "--config", str(path), "--port", str(port), "--num_workers", "1"]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **env})
    lines: list[str] = []
    proc.output_lines = lines  # type: ignore[attr-defined]
    threading.Thread(target=_drain, args=(proc.stdout, lines), daemon=True).start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/liveliness", timeout=2) as answer:
                if answer.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit(f"{binary}: did not start within 120 s: {''.join(lines[-20:])}")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the open-loop load generator ---------------------------------------------------------------

class _ClientConnection(asyncio.Protocol):
    """One keep-alive connection of the generator; one request at a time."""

    __slots__ = ("buffer", "load", "scheduled", "transport")

    def __init__(self, load: OpenLoop) -> None:
        self.load = load
        self.transport: asyncio.Transport | None = None
        self.scheduled: float | None = None  # the in-flight request's scheduled send time
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def send(self, scheduled: float) -> None:
        assert self.transport is not None
        self.scheduled = scheduled
        self.buffer = b""
        self.transport.write(REQUEST)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer = self.buffer + data
        end = buffer.find(b"\r\n\r\n")
        if end < 0 or self.scheduled is None:
            return
        head = buffer[:end]
        if (length := CONTENT_LENGTH.search(head)) is not None:
            complete = len(buffer) - end - 4 >= int(length.group(1))
        elif CHUNKED.search(head) is not None:
            complete = buffer.endswith(b"0\r\n\r\n")
        else:
            return  # read to EOF: connection_lost ends it
        if complete:
            scheduled, self.scheduled = self.scheduled, None
            status = head[9:12].decode("latin-1")
            self.load.finished(self, scheduled, status, reusable=CONNECTION_CLOSE.search(head) is None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.scheduled is not None:
            scheduled, self.scheduled = self.scheduled, None
            self.load.finished(self, scheduled, "reset", reusable=False)
        self.load.lost(self)


class OpenLoop:
    """Sends requests on a fixed schedule, over idle pooled connections or new ones."""

    def __init__(self, port: int, timeout: float) -> None:
        self.loop = asyncio.get_running_loop()
        self.port = port
        self.timeout = timeout
        self.idle: list[_ClientConnection] = []
        self.connections: set[_ClientConnection] = set()
        self.latencies: list[tuple[float, float]] = []  # successful requests: (scheduled, seconds since)
        self.begin = 0.0
        self.ended = False  # past the deadline: what still comes in is not counted
        self.outcomes: Counter[str] = Counter()
        self.outstanding = 0
        self.opened = 0
        self.all_sent = False
        self.done = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    def fire(self, scheduled: float) -> None:
        self.outstanding += 1
        while self.idle:
            conn = self.idle.pop()
            if conn.transport is not None and not conn.transport.is_closing():
                conn.send(scheduled)
                return
        self.opened += 1
        task = self.loop.create_task(self._open_and_send(scheduled))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _open_and_send(self, scheduled: float) -> None:
        try:
            _, conn = await self.loop.create_connection(lambda: _ClientConnection(self), "127.0.0.1", self.port)
        except OSError:
            self._count(scheduled, "connect error")
            return
        self.connections.add(conn)
        conn.send(scheduled)

    def finished(self, conn: _ClientConnection, scheduled: float, status: str, *, reusable: bool) -> None:
        if self.ended:
            return
        if status == "200":
            self.latencies.append((scheduled - self.begin, self.loop.time() - scheduled))
        self._count(scheduled, status)
        if reusable:
            self.idle.append(conn)
        elif conn.transport is not None:
            conn.transport.close()

    def lost(self, conn: _ClientConnection) -> None:
        self.connections.discard(conn)

    def _count(self, scheduled: float, outcome: str) -> None:
        if self.ended:
            return
        self.outcomes[outcome] += 1
        self.outstanding -= 1
        if self.all_sent and self.outstanding == 0:
            self.done.set()

    async def run(self, rate: float, duration: float) -> None:
        n = int(rate * duration)
        loop = self.loop
        begin = self.begin = loop.time() + 0.05
        i = 0
        while i < n:
            now = loop.time()
            while i < n and begin + i / rate <= now:  # behind schedule: catch up, latency counts from schedule
                self.fire(begin + i / rate)
                i += 1
            if i < n:
                await asyncio.sleep(begin + i / rate - loop.time())
        self.all_sent = True
        if self.outstanding:
            try:
                await asyncio.wait_for(self.done.wait(), timeout=max(0.0, begin + (n - 1) / rate + self.timeout - loop.time()))
            except TimeoutError:
                pass
        self.ended = True
        if self.outstanding:
            self.outcomes["timeout"] += self.outstanding
        late = sum(1 for _, t in self.latencies if t > self.timeout)
        if late:
            self.outcomes["timeout"] += late
            self.outcomes["200"] -= late
            self.latencies = [(at, t) for at, t in self.latencies if t <= self.timeout]
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.sleep(0.2)  # let the closes go out before the next rate


STEADY_AFTER = 3.0


def _percentiles(values: list[float]) -> list[float | None]:
    """The 99 cut points (None when nothing succeeded: no latency to report)."""
    if len(values) >= 2:
        return [round(v, 1) for v in statistics.quantiles(values, n=100)]
    return [round(values[0], 1) if values else None] * 99


def mock_connections(mock: subprocess.Popen) -> int | None:
    """Connections the bench mock accepted so far (it prints them on SIGUSR1)."""
    lines: list[str] = getattr(mock, "output_lines", [])
    seen = len(lines)
    mock.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        for line in lines[seen:]:
            if line.startswith("llm-mock connections "):
                return int(line.split()[-1])
        time.sleep(0.01)
    return None


def measure(name: str, rate: float, duration: float, port: int, gateway: subprocess.Popen | None,
            mock: subprocess.Popen, timeout: float) -> dict[str, Any]:
    """One rate against one running target; the CPU figures are CPU time, not wall."""
    gw_cpu = cpu_seconds(gateway.pid) if gateway else 0.0
    mock_cpu = cpu_seconds(mock.pid)
    upstream_before = mock_connections(mock)
    own_cpu = time.process_time()

    async def go() -> OpenLoop:
        load = OpenLoop(port, timeout)
        await load.run(rate, duration)
        return load

    began = time.monotonic()
    load = asyncio.run(go())
    wall = time.monotonic() - began
    requests = sum(load.outcomes.values())
    ok = load.outcomes.get("200", 0)
    added = sorted((t - DELAY_MS / 1000) * 1000 for _, t in load.latencies)
    q = _percentiles(added)
    # Past the ramp (the first STEADY_AFTER s open ~rate × 1.5 s connections on both sides):
    steady = _percentiles(sorted((t - DELAY_MS / 1000) * 1000 for at, t in load.latencies if at >= STEADY_AFTER))
    line: dict[str, Any] = {
        "target": name, "rate": rate, "requests": requests, "success": round(ok / max(1, requests) * 100, 2),
        "p50_added_ms": q[49], "p99_added_ms": q[98],
        "p99_steady_added_ms": steady[98] if duration > STEADY_AFTER else None,
        "max_added_ms": round(added[-1], 1) if added else None,
        "outcomes": dict(load.outcomes), "client_connections": load.opened,
        "upstream_connections": (mock_connections(mock) or 0) - (upstream_before or 0),
        "mock_cpu_ms_per_request": round((cpu_seconds(mock.pid) - mock_cpu) * 1000 / max(1, requests), 3),
        "generator_cpu_ms_per_request": round((time.process_time() - own_cpu) * 1000 / max(1, requests), 3),
    }
    if gateway is not None:
        cpu = cpu_seconds(gateway.pid) - gw_cpu
        largest, total = tree_rss_mb(gateway.pid)
        line.update(rss_mb=round(largest, 1), peak_rss_mb=round(tree_rss_mb(gateway.pid, "VmHWM")[0], 1),
                    rss_all_processes_mb=round(total, 1),
                    gateway_cpu_ms_per_request=round(cpu * 1000 / max(1, requests), 3),
                    gateway_core_busy_pct=round(cpu / wall * 100, 1))
        gc_log = getattr(gateway, "gc_log", None)
        if gc_log is not None and gc_log.exists():  # per generation: [collections, total ms, longest ms]
            line["gc_pauses"] = json.loads(gc_log.read_text())
            if getattr(gateway, "gc_full", False):
                line["gc_full_after_load"] = full_collection(gateway, gc_log)
    return line


def full_collection(gateway: subprocess.Popen, gc_log: Path) -> dict:
    """Ask the gateway (bench/gc_probe) for one full collection now: the objects it walked and
    freed (unreachable cycles: what the requests just served left behind), and its pause."""
    result = gc_log.with_name(gc_log.name + ".full")
    result.unlink(missing_ok=True)
    gateway.send_signal(signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if result.exists() and result.stat().st_size:
            try:
                return json.loads(result.read_text())
            except ValueError:  # caught while being written
                pass
        time.sleep(0.05)
    raise RuntimeError("the gateway did not report its full collection within 30 s")


# --- targets ----------------------------------------------------------------------------------

class TargetDied(Exception):
    pass


class Target:
    """A gateway (or none, ``direct``) in front of its own bench mock, started on the pinned cores."""

    def __init__(self, name: str, args: argparse.Namespace, tmp: Path, cores: tuple[int | None, int | None]) -> None:
        self.name = name
        gateway_cpu, peer_cpu = cores
        self.mock, mock_port = start_bench_mock(peer_cpu)
        self.gateway: subprocess.Popen | None = None
        try:
            if name == "direct":
                self.port = mock_port
            elif name == "litellm":
                self.port = _free_port()
                self.gateway = start_litellm(args.litellm_bin, mock_port, self.port, tmp, gateway_cpu)
            else:
                self.port = _free_port()
                self.gateway = start_trioproxy(mock_port, self.port, tmp, gateway_cpu, args.workers, args.gateway_gc)
        except BaseException:
            self.close()
            raise

    def run(self, rate: float, args: argparse.Namespace) -> dict[str, Any]:
        """One rate; a process of the target that is gone (before or during the run) makes an
        ``error`` line naming it, with its last output, instead of a traceback."""
        try:
            self._check_alive()
            return measure(self.name, rate, args.duration, self.port, self.gateway, self.mock, args.timeout)
        except OSError:
            self._check_alive()
            raise

    def _check_alive(self) -> None:
        for what, proc in (("gateway", self.gateway), ("mock", self.mock)):
            if proc is not None and proc.poll() is not None:
                tail = "".join(getattr(proc, "output_lines", [])[-5:]).strip()
                raise TargetDied(f"{self.name}: the {what} exited with code {proc.returncode}"
                                 + (f"; its last output: {tail}" if tail else ""))

    def close(self) -> None:
        for proc in (self.gateway, self.mock):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()


COLUMNS = [("target", "target"), ("rate", "rate"), ("requests", "requests"), ("success", "success %"),
           ("p50_added_ms", "p50 added ms"), ("p99_added_ms", "p99 added ms"),
           ("p99_steady_added_ms", f"p99 after {STEADY_AFTER:g} s"), ("rss_mb", "RSS MB"),
           ("peak_rss_mb", "peak RSS MB"), ("gateway_cpu_ms_per_request", "gw CPU ms/req"),
           ("gateway_core_busy_pct", "gw core %"), ("mock_cpu_ms_per_request", "mock CPU ms/req"),
           ("generator_cpu_ms_per_request", "gen CPU ms/req"), ("client_connections", "client conns"),
           ("upstream_connections", "upstream conns")]


def table(lines: list[dict[str, Any]]) -> str:
    rows = [[h for _, h in COLUMNS]] + [["—" if line.get(k) is None else str(line[k]) for k, _ in COLUMNS] for line in lines]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    out = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |" for row in rows]
    out.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)


def _cores(args: argparse.Namespace) -> tuple[int | None, int | None]:
    cpus = os.sched_getaffinity(0)
    if args.workers > 1:  # the workers take every core, the peers share them
        print(f"note: --workers {args.workers}: nothing pinned; 'gw core %' is the share of one core "
              "(over 100: more than one)", file=sys.stderr)
        return None, None
    if args.no_pin or shutil.which("taskset") is None or not {args.gateway_cpu, args.peer_cpu} <= cpus \
            or args.gateway_cpu == args.peer_cpu:
        if not args.no_pin:
            print(f"note: not pinning (cores {sorted(cpus)}, taskset {'found' if shutil.which('taskset') else 'missing'})",
                  file=sys.stderr)
        return None, None
    os.sched_setaffinity(0, {args.peer_cpu})  # the generator (this process) shares the peers' core
    return args.gateway_cpu, args.peer_cpu


def _held(line: dict[str, Any], max_p99_ms: float) -> bool:
    """100% success, and kept up: a gateway falling behind still answers everything of a short run
    within ``--timeout``, with a p99 growing by the second; ``--hold-p99-ms`` tells the two apart."""
    return line["success"] == 100.0 and line["p99_added_ms"] is not None and line["p99_added_ms"] <= max_p99_ms


def run_rates(args: argparse.Namespace) -> None:
    cores = _cores(args)
    targets = [args.gateway, *[t for t in args.compare if t != args.gateway]]
    if "litellm" in targets and shutil.which(args.litellm_bin) is None:
        raise SystemExit(f"--litellm-bin: {args.litellm_bin!r} not found (pip install 'litellm[proxy]' and pass its path)")
    print(f"cores: gateway {cores[0]}, mock + generator {cores[1]}; delay {DELAY_MS} ms; {args.duration:g} s per rate",
          file=sys.stderr)
    lines: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        for name in targets:
            target = Target(name, args, Path(tmp_dir), cores)
            try:
                if args.find_max:
                    try:
                        lines += find_max(target, args)
                    except TargetDied as died:
                        lines.append({"target": name, "error": str(died)})
                        print(json.dumps(lines[-1]), flush=True)
                else:
                    for rate in args.rate:
                        try:
                            line = target.run(rate, args)
                        except TargetDied as died:
                            line = {"target": name, "rate": rate, "error": str(died)}
                            print(json.dumps(line), flush=True)
                            lines.append(line)
                            break  # the next rates of this target would only repeat it
                        print(json.dumps(line), flush=True)
                        lines.append(line)
            finally:
                target.close()
    print(table([line for line in lines if "rate" in line]))
    for line in lines:
        if "error" in line:
            print(f"error: {line['error']}")


def find_max(target: Target, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Double the rate from ``--rate``'s first value until a run is not held, then bisect three
    times: at most ``log2(--max-rate / start) + 4`` runs of ``--duration`` (+ up to ``--timeout``)."""
    lines: list[dict[str, Any]] = []

    def run(rate: float) -> bool:
        line = target.run(round(rate), args)
        print(json.dumps(line), flush=True)
        lines.append(line)
        return _held(line, args.hold_p99_ms)

    good, bad = 0.0, None
    rate = float(args.rate[0])
    while rate <= args.max_rate:
        if not run(rate):
            bad = rate
            break
        good, rate = rate, rate * 2
    if bad is not None:
        for _ in range(3):
            middle = (good + bad) / 2
            if run(middle):
                good = middle
            else:
                bad = middle
    target_met = [line["rate"] for line in lines if _held(line, 20.0)]
    print(json.dumps({"target": target.name, "highest_rate_held": round(good), "first_failed": bad and round(bad),
                      "held": f"100% success and p99 added <= {args.hold_p99_ms:g} ms",
                      "highest_rate_with_p99_le_20ms": max(target_met, default=None)}), flush=True)
    return lines


# --- idle connections and SSE streams (RSS per connection) --------------------------------------

async def hold_connections(port: int, count: int, sse: bool) -> list[trio.SocketStream]:
    """Open ``count`` connections, 100 at a time (one by one took minutes on a loaded machine)."""
    streams: list[trio.SocketStream] = []
    body = json.dumps({"model": "mock-model", "stream": True, "messages": [{"role": "user", "content": "x"}]}).encode()

    async def one() -> None:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        if sse:
            await stream.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: b\r\nx-mock-chunks: 1000\r\n"
                                  b"x-mock-chunk-delay-ms: 1000\r\nContent-Type: application/json\r\nContent-Length: "
                                  + str(len(body)).encode() + b"\r\n\r\n" + body)
            await stream.receive_some(65536)  # the response head and first event: the stream is open
        else:
            await stream.send_all(b"GET /v1/models HTTP/1.1\r\nHost: b\r\n\r\n")
            await stream.receive_some(65536)  # answered; now the connection is idle keep-alive
        streams.append(stream)

    for first in range(0, count, 100):
        async with trio.open_nursery() as nursery:
            for _ in range(min(100, count - first)):
                nursery.start_soon(one)
    return streams


async def hold_main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp_dir:
        mock, mock_port = start_mock()
        port = args.port or _free_port()
        gw = start_trioproxy(mock_port, port, Path(tmp_dir))
        try:
            before = rss_mb(gw.pid)
            count = args.idle or args.sse
            streams = await hold_connections(port, count, bool(args.sse))
            await trio.sleep(2)
            after = rss_mb(gw.pid)
            print(json.dumps({"gateway": "trioproxy", "kind": "sse" if args.sse else "idle", "connections": len(streams),
                              "rss_before_mb": round(before, 1), "rss_after_mb": round(after, 1),
                              "kb_per_connection": round((after - before) * 1024 / max(1, len(streams)), 1),
                              "gateway_fds": fds(gw.pid)}))
            for s in streams:
                await s.aclose()
        finally:
            gw.terminate()
            mock.terminate()
            gw.wait(10)
            mock.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, nargs="+", default=[250, 500], help="arrival rates (req/s); "
                        "with --find-max, the first is where the search starts")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds each rate is held (default 60)")
    parser.add_argument("--gateway", choices=["trioproxy", "litellm", "direct"], default="trioproxy")
    parser.add_argument("--compare", choices=["trioproxy", "litellm", "direct"], nargs="*", default=[],
                        help="more targets, run one after the other and printed in the same table")
    parser.add_argument("--find-max", action="store_true", help="the highest rate held with 100%% success")
    parser.add_argument("--max-rate", type=float, default=4000, help="--find-max stops doubling here")
    parser.add_argument("--hold-p99-ms", type=float, default=1000.0,
                        help="--find-max: a rate is held with 100%% success and p99 added latency under this "
                             "(default 1000: the gateway kept up)")
    parser.add_argument("--timeout", type=float, default=30.0, help="a request later than this (s) failed")
    parser.add_argument("--litellm-bin", default="litellm")
    parser.add_argument("--gateway-cpu", type=int, default=1, help="core for the gateway (default 1)")
    parser.add_argument("--peer-cpu", type=int, default=0, help="core for the mock and the generator (default 0)")
    parser.add_argument("--no-pin", action="store_true", help="do not use taskset")
    parser.add_argument("--gateway-gc", choices=["periodic", "automatic", "off"], default=None,
                        help="run trioproxy's garbage collector this way (bench/gc_probe: periodic is as shipped, "
                             "automatic is CPython's by allocation counts, off never) and report its pauses")
    parser.add_argument("--workers", type=int, default=1,
                        help="trioproxy --workers N (N > 1: nothing pinned; RSS is the largest process's)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--idle", type=int, default=0, help="hold N idle keep-alive connections, report RSS")
    parser.add_argument("--sse", type=int, default=0, help="hold N concurrent SSE streams, report RSS")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.idle or args.sse:
        trio.run(hold_main, args)
    else:
        run_rates(args)


if __name__ == "__main__":
    main()
