"""Soak: mixed traffic through one gateway for a bounded time; resources must come back to baseline.

Traffic (a few concurrent clients of each kind): plain GETs to an echo backend, LLM JSON and SSE
streams to fixtures/mock_openai.py, requests over a local rate limit (429), clients that
disconnect mid-stream, and the echo backend restarted halfway (its requests then get 503 until it
is back). Reports requests by outcome, unexpected errors, and the gateway's fds and RSS at start
and end (after an idle settle).

    python -m bench.soak                 # 300 s
    python -m bench.soak --duration 30
    python -m bench.soak --short         # ~8 s smoke test (tests/e2e/test_bench_smoke.py style)
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

from bench.llm_load import _free_port, fds, rss_mb, start, start_mock

CONFIG = """binds:
- port: {port}
  listeners:
  - routes:
    - name: llm
      matches: [{{path: {{pathPrefix: /v1}}}}]
      backends:
      - ai:
          name: mock
          provider: {{openAI: {{model: mock-model}}}}
          hostOverride: 127.0.0.1:{mock}
    - name: limited
      matches: [{{path: {{pathPrefix: /limited}}}}]
      policies:
        localRateLimit: [{{maxTokens: 5, tokensPerFill: 5, fillInterval: 1s}}]
      backends: [{{host: "127.0.0.1:{echo}"}}]
    - name: plain
      backends: [{{host: "127.0.0.1:{echo}"}}]
"""


def start_echo(port: int) -> subprocess.Popen:
    proc, _ = start([sys.executable, "-m", "fixtures.echo_backend", "--port", str(port)], r"echo backend on")
    return proc


async def request(port: int, head: bytes, body: bytes = b"", *, cut_after: int | None = None) -> str:
    """One request on its own connection; returns the status code, or 'cut' / 'error'."""
    try:
        with trio.fail_after(30):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                data = b""
                while chunk := await stream.receive_some(65536):
                    data += chunk
                    if cut_after is not None and len(data) >= cut_after:
                        return "cut"
                return data[9:12].decode() or "empty"
    except (OSError, trio.TooSlowError, trio.BrokenResourceError) as exc:
        return f"error:{type(exc).__name__}"


def kinds(port: int) -> dict:
    chat = json.dumps({"model": "mock-model", "messages": [{"role": "user", "content": "hi"}]}).encode()
    stream = json.dumps({"model": "mock-model", "stream": True, "messages": [{"role": "user", "content": "hi"}]}).encode()
    base = b"Host: soak\r\nConnection: close\r\n"
    return {
        "plain": lambda: request(port, b"GET /plain HTTP/1.1\r\n" + base),
        "llm_json": lambda: request(port, b"POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n" + base, chat),
        "llm_sse": lambda: request(port, b"POST /v1/chat/completions HTTP/1.1\r\nx-mock-chunks: 20\r\n" + base, stream),
        "limited": lambda: request(port, b"GET /limited HTTP/1.1\r\n" + base),
        "disconnect": lambda: request(port, b"POST /v1/chat/completions HTTP/1.1\r\nx-mock-chunks: 50\r\n"
                                      b"x-mock-chunk-delay-ms: 20\r\n" + base, stream, cut_after=300),
    }


EXPECTED = {"plain": {"200", "503", "502"}, "llm_json": {"200"}, "llm_sse": {"200"}, "limited": {"200", "429", "503", "502"},
            "disconnect": {"cut"}}


async def soak(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        mock, mock_port = start_mock()
        echo_port = _free_port()
        echo = start_echo(echo_port)
        port = _free_port()
        (tmp / "gw.yaml").write_text(CONFIG.format(port=port, mock=mock_port, echo=echo_port))
        env = {"ADMIN_ADDR": "127.0.0.1:0", "STATS_ADDR": "127.0.0.1:0", "READINESS_ADDR": "127.0.0.1:0",
               "TRIOPROXY_RUNTIME_DIR": str(tmp / "rt"), "LOG_LEVEL": "warn"}
        gw, _ = start([sys.executable, "-m", "trioproxy", "--config", str(tmp / "gw.yaml")], r"bind \d+ listening", env=env)
        log_path = tmp / "gw.log"
        outcomes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        try:
            await request(port, b"GET /plain HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n")  # warm
            start_fds, start_rss = fds(gw.pid), rss_mb(gw.pid)
            traffic = kinds(port)
            deadline = trio.current_time() + args.duration

            async def client(kind: str) -> None:
                while trio.current_time() < deadline:
                    outcomes[kind][await traffic[kind]()] += 1
                    await trio.sleep(random.uniform(0, 0.02))

            async with trio.open_nursery() as nursery:
                for kind in traffic:
                    for _ in range(args.clients):
                        nursery.start_soon(client, kind)
                await trio.sleep(args.duration / 2)
                echo.terminate()  # the backend restarted midway
                echo.wait(10)
                await trio.sleep(min(2.0, args.duration / 10))
                echo = start_echo(echo_port)
            await trio.sleep(args.settle)
            end_fds, end_rss = fds(gw.pid), rss_mb(gw.pid)
        finally:
            gw.terminate()
            try:
                gw.wait(timeout=15)
            except subprocess.TimeoutExpired:
                gw.kill()
                gw.wait()
            await trio.sleep(0.2)  # the reader thread takes the last lines
            out = "".join(gw.output_lines)  # start() keeps reading the output so the pipe never fills
            log_path.write_text(out)
            echo.terminate()
            mock.terminate()
        unexpected = {k: {o: n for o, n in c.items() if o not in EXPECTED[k]} for k, c in outcomes.items()}
        unexpected = {k: v for k, v in unexpected.items() if v}
        return {
            "duration_s": args.duration, "clients_per_kind": args.clients,
            "requests": sum(sum(c.values()) for c in outcomes.values()),
            "outcomes": {k: dict(c) for k, c in outcomes.items()},
            "unexpected": unexpected,
            "tracebacks_in_log": (out or "").count("Traceback"),
            "fds": [start_fds, end_fds], "rss_mb": [round(start_rss, 1), round(end_rss, 1)],
        }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=300.0)
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients per traffic kind")
    parser.add_argument("--settle", type=float, default=3.0, help="idle seconds before the end measurement")
    parser.add_argument("--short", action="store_true", help="8 s, 2 clients per kind (smoke test)")
    args = parser.parse_args()
    if args.short:
        args.duration, args.clients, args.settle = 8.0, 2, 1.0
    report = asyncio_free_run(args)
    print(json.dumps(report))
    return 0 if not report["unexpected"] and not report["tracebacks_in_log"] else 1


def asyncio_free_run(args: argparse.Namespace) -> dict:
    return trio.run(soak, args)


if __name__ == "__main__":
    raise SystemExit(main())
