"""Open-loop LLM gateway load: a mock provider answering after 1.5 s, a fixed arrival rate.

The scenario LLM-gateway benchmarks publish: requests arrive at ``--rate`` per second for
``--duration`` seconds whether or not earlier ones finished (open loop, so a slow gateway
cannot slow the offered load); each is a chat completion the mock answers after 1.5 s.
Reports success rate, p50/p99 added latency (total minus the mock's 1.5 s) and the gateway's
RSS at the end. ``--gateway litellm`` runs LiteLLM's proxy instead (needs
``pip install 'litellm[proxy]'``, given with ``--litellm-bin``); ``--idle N`` / ``--sse N`` hold N
idle keep-alive connections or N concurrent SSE streams and report RSS per connection.

    python -m bench.llm_load --rate 250 --duration 60
    python -m bench.llm_load --rate 500 --duration 60 --gateway litellm --litellm-bin /tmp/litellm-venv/bin/litellm
    python -m bench.llm_load --idle 10000
    python -m bench.llm_load --sse 2000

Every client request opens its own connection (``connection: close``): the client side stays
cheap enough to offer 500 req/s from the same 2 cores the gateway runs on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
DELAY_MS = 1500
BODY = json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "hello"}]}).encode()


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its children so far (litellm runs workers as children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def start(cmd: list[str], pattern: str, env: dict[str, str] | None = None, timeout: float = 60) -> tuple[subprocess.Popen, re.Match]:
    """Start a process and wait for a stderr/stdout line matching ``pattern``."""
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


def _complete(data: bytes) -> bool:
    """A whole response with a content-length (hypercorn keeps a ``Connection: close`` socket open
    until the client closes it, so EOF is not the end; the earlier "direct: 0%" was this)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def start_mock() -> tuple[subprocess.Popen, int]:
    proc, m = start([sys.executable, "-m", "fixtures.mock_openai", "--port", "0"], r"listening on http://[^:]+:(\d+)")
    return proc, int(m.group(1))


def gateway_config(mock_port: int, port: int) -> str:
    # maxConnections: the default (10,000 or what RLIMIT_NOFILE allows, 9,872 at a 20,000 limit)
    # would refuse the last of --idle 10000.
    return f"""frontendPolicies: {{http: {{maxConnections: 12000}}}}
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


def start_trioproxy(mock_port: int, port: int, tmp: Path) -> subprocess.Popen:
    path = tmp / "gw.yaml"
    path.write_text(gateway_config(mock_port, port))
    env = {"ADMIN_ADDR": "127.0.0.1:0", "STATS_ADDR": "127.0.0.1:0", "READINESS_ADDR": "127.0.0.1:0",
           "TRIOPROXY_RUNTIME_DIR": str(tmp / "rt"), "LOG_LEVEL": "error"}
    proc, _ = start([sys.executable, "-m", "trioproxy", "--config", str(path)], r"bind \d+ listening", env=env)
    return proc


def start_litellm(binary: str, mock_port: int, port: int, tmp: Path) -> subprocess.Popen:
    path = tmp / "litellm.yaml"
    path.write_text(f"""model_list:
- model_name: mock-model
  litellm_params:
    model: openai/mock-model
    api_base: http://127.0.0.1:{mock_port}/v1
    api_key: unused
""")
    env = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    proc, _ = start([binary, "--config", str(path), "--port", str(port), "--num_workers", "1"],
                    r"Uvicorn running|Application startup complete", env=env, timeout=120)
    return proc


async def one_request(port: int, headers: bytes, results: list[tuple[bool, float]]) -> None:
    began = time.monotonic()
    ok = False
    try:
        with trio.fail_after(120):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
                                      b"Connection: close\r\n" + headers + b"Content-Length: "
                                      + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)
                data = b""
                while chunk := await stream.receive_some(65536):
                    data += chunk
                    if _complete(data):
                        break
                ok = data.startswith(b"HTTP/1.1 200") and _complete(data)
    except (OSError, trio.TooSlowError, trio.BrokenResourceError):
        ok = False
    results.append((ok, time.monotonic() - began))


async def open_loop(port: int, rate: float, duration: float) -> list[tuple[bool, float]]:
    results: list[tuple[bool, float]] = []
    headers = f"x-mock-delay-ms: {DELAY_MS}\r\n".encode()
    async with trio.open_nursery() as nursery:
        start_at = trio.current_time()
        n = int(rate * duration)
        for i in range(n):
            await trio.sleep_until(start_at + i / rate)
            nursery.start_soon(one_request, port, headers, results)
    return results


def summary(name: str, rate: float, results: list[tuple[bool, float]], pid: int) -> dict:
    ok = [t for good, t in results if good]
    added = sorted((t - DELAY_MS / 1000) * 1000 for t in ok)
    q = statistics.quantiles(added, n=100) if len(added) >= 2 else [0.0] * 99
    return {"gateway": name, "rate": rate, "requests": len(results), "success": round(len(ok) / max(1, len(results)) * 100, 2),
            "p50_added_ms": round(q[49], 1), "p99_added_ms": round(q[98], 1), "rss_mb": round(rss_mb(pid), 1)}


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


async def main_async(args: argparse.Namespace) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        mock, mock_port = start_mock()
        port = args.port or _free_port()
        if args.gateway == "direct":  # the mock alone: the client's and the machine's own share
            gw, port = mock, mock_port
        elif args.gateway == "litellm":
            gw = start_litellm(args.litellm_bin, mock_port, port, tmp)
        else:
            gw = start_trioproxy(mock_port, port, tmp)
        try:
            if args.idle or args.sse:
                before = rss_mb(gw.pid)
                count = args.idle or args.sse
                streams = await hold_connections(port, count, bool(args.sse))
                await trio.sleep(2)
                after = rss_mb(gw.pid)
                print(json.dumps({"gateway": args.gateway, "kind": "sse" if args.sse else "idle", "connections": len(streams),
                                  "rss_before_mb": round(before, 1), "rss_after_mb": round(after, 1),
                                  "kb_per_connection": round((after - before) * 1024 / max(1, len(streams)), 1),
                                  "gateway_fds": fds(gw.pid)}))
                for s in streams:
                    await s.aclose()
                return
            for rate in args.rate:
                cpu_before = cpu_seconds(gw.pid)
                results = await open_loop(port, rate, args.duration)
                line = summary(args.gateway, rate, results, gw.pid)
                cpu = cpu_seconds(gw.pid) - cpu_before  # CPU time, not wall: the machine is shared
                line.update(gateway_cpu_s=round(cpu, 1), cpu_ms_per_request=round(cpu * 1000 / max(1, len(results)), 2))
                print(json.dumps(line), flush=True)
        finally:
            gw.terminate()
            mock.terminate()
            gw.wait(10)
            mock.wait(10)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, nargs="+", default=[250, 500], help="arrival rates (req/s)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds each rate is held")
    parser.add_argument("--gateway", choices=["trioproxy", "litellm", "direct"], default="trioproxy")
    parser.add_argument("--litellm-bin", default="litellm")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--idle", type=int, default=0, help="hold N idle keep-alive connections, report RSS")
    parser.add_argument("--sse", type=int, default=0, help="hold N concurrent SSE streams, report RSS")
    trio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()
