"""Translation's added CPU per request through a real gateway, streamed and not, beside passthrough on
the same provider mock (bench/llm_translate.py measures the pure functions alone).

A gateway process (``python -m trioproxy``) fronts two strict provider mocks (fixtures/mock_anthropic.py,
fixtures/mock_openai.py, each its own process). Per provider, the same conversation is sent twice: in
the provider's own format (passthrough: Anthropic Messages to ``anthropic``, OpenAI chat to ``openAI``)
and in the other one (translated: OpenAI chat to ``anthropic``, Anthropic Messages to ``openAI``). The
answer echoes the last user message (60 words; streamed: one event per word). For each case, keep-alive
client threads send ``--requests`` requests; the table shows requests/s, the gateway process's CPU per
request (utime + stime from /proc, over the measured requests only) and latency p50/p99.

    python -m bench.llm_translate_gateway                 # ~1 min
    python -m bench.llm_translate_gateway --quick         # a few seconds (the smoke test's run)
    python -m bench.llm_translate_gateway --requests 2000 --concurrency 8 --json /tmp/x.json
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time
from pathlib import Path

from bench.harness import (
    ROOT,
    BenchError,
    Processes,
    free_port,
    run_main,
    start_trioproxy,
    tree_cpu_seconds,
    wait_http,
    workspace,
    write_report,
)

WORDS = " ".join(f"word{i}" for i in range(60))
SYSTEM = "You are a careful assistant. " * 20
HISTORY = [("user", "Find the population of the three largest cities. " * 5),
           ("assistant", "Tokyo, Delhi and Shanghai, by most counts. " * 5),
           ("user", WORDS)]

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
""" + "".join(f"""
    - name: {name}
      matches: [{{{{path: {{{{pathPrefix: /{name}}}}}}}}}]
      policies:
        urlRewrite: {{{{path: {{{{prefix: /}}}}}}}}
        backendAuth: {{{{key: sk-bench}}}}
      backends:
      - ai: {{{{name: {name}, provider: {{{{{provider}: {{{{}}}}}}}}, hostOverride: "127.0.0.1:{{{name}}}"}}}}
""" for name, provider in (("anthropic", "anthropic"), ("openai", "openAI")))


def openai_body(streamed: bool) -> bytes:
    messages = [{"role": "system", "content": SYSTEM}] + [{"role": r, "content": c} for r, c in HISTORY]
    return json.dumps({"model": "m", "max_tokens": 512, "stream": streamed, "messages": messages}).encode()


def anthropic_body(streamed: bool) -> bytes:
    return json.dumps({"model": "m", "max_tokens": 512, "stream": streamed, "system": SYSTEM,
                       "messages": [{"role": r, "content": c} for r, c in HISTORY]}).encode()


#: (case, provider route, client path, body builder, translated)
CASES = [
    ("anthropic", "anthropic", "/v1/messages", anthropic_body, False),
    ("openai -> anthropic", "anthropic", "/v1/chat/completions", openai_body, True),
    ("openai", "openai", "/v1/chat/completions", openai_body, False),
    ("anthropic -> openai", "openai", "/v1/messages", anthropic_body, True),
]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def drive(port: int, path: str, body: bytes, requests: int, concurrency: int) -> tuple[float, list[float]]:
    """``requests`` POSTs over ``concurrency`` keep-alive connections: (wall seconds, latencies in s)."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    left = [requests]
    headers = {"content-type": "application/json", "x-api-key": "sk-client", "authorization": "Bearer sk-client"}

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            while True:
                with lock:
                    if left[0] <= 0 or errors:
                        return
                    left[0] -= 1
                start = time.perf_counter()
                conn.request("POST", path, body, headers)
                response = conn.getresponse()
                data = response.read()
                took = time.perf_counter() - start
                with lock:
                    if response.status != 200:
                        errors.append(f"{path}: {response.status} {data[:300]!r}")
                    latencies.append(took)
        finally:
            conn.close()

    start = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise BenchError(errors[0])
    return time.perf_counter() - start, latencies


def start_mock(procs: Processes, module: str) -> int:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = procs.start(module, [sys.executable, "-m", f"fixtures.{module}", "--port", str(port)], cpu=None, env=env,
                       cwd=ROOT)
    wait_http(port, "/", proc, expect=404)  # up: both answer an unknown path 404
    return port


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.llm_translate_gateway", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=600, help="measured requests per case (default 600)")
    parser.add_argument("--concurrency", type=int, default=4, help="client connections (default 4)")
    parser.add_argument("--quick", action="store_true", help="40 requests per case, for a smoke run")
    parser.add_argument("--json", type=Path, default=Path("/tmp/trioproxy-bench-llm-translate-gateway.json"))
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (configs and logs)")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests = 40
    return args


def body(args: argparse.Namespace) -> int:
    rows = []
    with workspace("trioproxy-llm-translate-gw-", keep=args.keep_tmp) as (tmp, procs):
        mocks = {"anthropic": start_mock(procs, "mock_anthropic"), "openai": start_mock(procs, "mock_openai")}
        port = free_port()
        gateway, _ = start_trioproxy(procs, tmp, 0, None, conf=CONFIG.format(port=port, **mocks), probe_path=None)
        for case, route, path, build, translated in CASES:
            for streamed in (False, True):
                request = build(streamed)
                target = f"/{route}{path}"
                drive(port, target, request, max(10, args.requests // 10), args.concurrency)  # warm up
                before = tree_cpu_seconds(gateway.pid)
                wall, latencies = drive(port, target, request, args.requests, args.concurrency)
                cpu = tree_cpu_seconds(gateway.pid) - before
                gateway.check_alive()
                rows.append({"case": case, "provider": route, "translated": translated, "streamed": streamed,
                             "requests": len(latencies), "rps": round(len(latencies) / wall, 1),
                             "cpu_us_per_request": round(cpu / len(latencies) * 1e6),
                             "p50_ms": round(percentile(latencies, 0.5) * 1e3, 2),
                             "p99_ms": round(percentile(latencies, 0.99) * 1e3, 2)})
    base = {(r["provider"], r["streamed"]): r["cpu_us_per_request"] for r in rows if not r["translated"]}
    for row in rows:
        row["added_cpu_us"] = row["cpu_us_per_request"] - base[(row["provider"], row["streamed"])]
    lines = ["| case | streamed | requests/s | gateway CPU µs/req | added µs/req | p50 ms | p99 ms |",
             "|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r['case']} | {'yes' if r['streamed'] else 'no'} | {r['rps']} | {r['cpu_us_per_request']} | "
              f"{r['added_cpu_us'] if r['translated'] else '—'} | {r['p50_ms']} | {r['p99_ms']} |" for r in rows]
    print("\n".join(lines))
    write_report(args.json, [], [
        "passthrough rows: the provider's own format; translated rows: the other format to the same mock",
        "gateway CPU: utime+stime of the gateway process over the measured requests (/proc), not the mocks' or client's",
        f"{args.concurrency} keep-alive client connections; the mocks and the client share the machine"],
        {"requests": args.requests, "concurrency": args.concurrency, "rows": rows})
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(parse, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
