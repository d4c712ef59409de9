"""What failover adds to an LLM request's latency (docs/resilience.md, bench/README.md).

One gateway (``python -m trioproxy``) with three virtual models, each failing over from a primary to
the same healthy secondary (an OpenAI mock, ``python -m fixtures.mock_openai``):

- ``healthy``: the primary answers (the baseline);
- ``refused``: nothing listens on the primary's port: every request pays a refused connect, then
  goes to the secondary (the primary's outlier detection is set never to eject it, so every request
  pays, not only the first five);
- ``first-token``: the primary answers nothing (``POST /mock/fail {"mode": "hang"}``) and the model's
  ``firstTokenTimeout`` (default 100 ms) moves the request on.

Requests are sequential (one client connection at a time, httpx), non-streaming chat completions;
it prints p50 and p99 per scenario and what each adds over ``healthy``::

    python -m bench.failover_bench                       # 300 requests per scenario
    python -m bench.failover_bench --requests 50 --first-token-timeout 50ms
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import httpx

from .harness import ROOT, Processes, free_port, run_main, start_trioproxy, wait_http, workspace

CONFIG = """
llm:
  port: {port}
  models:
  - {{name: ok, provider: openAI, params: {{model: m, apiKey: k, hostOverride: "127.0.0.1:{ok}"}}}}
  - {{name: dead, provider: openAI, params: {{model: m, apiKey: k, hostOverride: "127.0.0.1:{dead}"}},
     health: {{eviction: {{consecutiveFailures: 1000}}}}}}
  - {{name: hung, provider: openAI, params: {{model: m, apiKey: k, hostOverride: "127.0.0.1:{hung}"}},
     health: {{eviction: {{consecutiveFailures: 1000}}}}}}
  - {{name: backup, provider: openAI, params: {{model: m, apiKey: k, hostOverride: "127.0.0.1:{ok}"}}}}
  virtualModels:
  - {{name: healthy, routing: {{failover: {{targets: [{{model: ok}}, {{model: backup, priority: 1}}]}}}}}}
  - {{name: refused, routing: {{failover: {{targets: [{{model: dead}}, {{model: backup, priority: 1}}]}}}}}}
  - name: first-token
    firstTokenTimeout: {timeout}
    routing: {{failover: {{targets: [{{model: hung}}, {{model: backup, priority: 1}}]}}}}
"""


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.failover_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="requests per scenario (default 300)")
    parser.add_argument("--first-token-timeout", default="100ms", help="the first-token scenario's limit")
    parser.add_argument("--keep-tmp", action="store_true")
    return parser.parse_args(argv)


def start_mock(procs: Processes, name: str) -> int:
    port = free_port()
    proc = procs.start(name, [sys.executable, "-m", "fixtures.mock_openai", "--port", str(port)], cpu=None, cwd=ROOT)
    wait_http(port, "/mock/requests", proc)
    return port


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(client: httpx.Client, model: str, n: int) -> list[float]:
    body = {"model": model, "messages": [{"role": "user", "content": "hello"}]}
    for _ in range(min(20, n)):  # warm up: connections, caches
        client.post("/v1/chat/completions", json=body).raise_for_status()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        response = client.post("/v1/chat/completions", json=body)
        times.append((time.perf_counter() - start) * 1000)
        response.raise_for_status()
    return times


def body(args: argparse.Namespace) -> int:
    with workspace("failover-bench-", keep=args.keep_tmp) as (tmp, procs):
        ok = start_mock(procs, "mock-ok")
        hung = start_mock(procs, "mock-hung")
        httpx.post(f"http://127.0.0.1:{hung}/mock/fail", json={"mode": "hang"}).raise_for_status()
        port = free_port()
        conf = CONFIG.format(port=port, ok=ok, dead=free_port(), hung=hung, timeout=args.first_token_timeout)
        _, bind = start_trioproxy(procs, tmp, 0, None, conf=conf, probe_path=None)
        rows = []
        with httpx.Client(base_url=f"http://127.0.0.1:{bind}", timeout=30) as client:
            for model in ("healthy", "refused", "first-token"):
                times = run(client, model, args.requests)
                rows.append((model, statistics.median(times), percentile(times, 0.99)))
    base50, base99 = rows[0][1], rows[0][2]
    print(f"{'scenario':<12} {'p50 ms':>8} {'p99 ms':>8} {'+p50 ms':>8} {'+p99 ms':>8}")
    for model, p50, p99 in rows:
        print(f"{model:<12} {p50:8.2f} {p99:8.2f} {p50 - base50:8.2f} {p99 - base99:8.2f}")
    print(f"({args.requests} sequential requests each; first-token timeout {args.first_token_timeout})")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(parse, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
