"""The gateway's own cost per request, as instructions (callgrind) or CPU time: the A/B figure for
changes to the per-request path (gateway.py, exchange.py, upstream.py ...).

    python -m bench.llm_callgrind                       # instructions per request (~2 min)
    python -m bench.llm_callgrind --cpu                 # CPU time per request instead (no valgrind)
    python -m bench.llm_callgrind --root /tmp/base      # the same, for another checkout's trioproxy
    python -m bench.llm_callgrind --as-compare          # llm as proxy_compare's trioproxy-ai (see below)

One gateway process, one bench mock (``bench/llm_mock.py``, answering at once: ``--delay-ms 0``) and a
sequential keep-alive client over a raw socket (the cheapest there is, so the figure is the
gateway's). Three requests, each its own route to the same mock:

- ``llm``: ``POST /v1/chat/completions``, the chat request of ``bench/llm_load.py``, to an ``ai``
  backend (openAI, hostOverride to the mock): the body is read, parsed and forwarded, the usage read;
- ``plain``: the same POST to ``/plain``, a ``host:`` backend: the body is streamed through;
- ``get``: ``GET /plain``.

``--as-compare`` runs the gateway as ``bench/proxy_compare.py`` does: the access log on at ``info``
(JSON lines, to /dev/null here) and the ``llm`` route with its token ``localRateLimit`` (never
rejecting, charging every answer) and its provider model ``bench``, not the body's (so the body is
rewritten with the model): the figure covers the log line, the token charge and the rewrite too.
``--as-compare --without log,limit,rewrite`` leaves those parts out, one or more: the difference is
what each costs (bench/README.md, "Session 42").

With callgrind (the default) the gateway runs under ``valgrind --tool=callgrind --instr-atstart=no``;
after a warm-up, instrumentation is switched on with ``callgrind_control -i on`` and each route is
counted over ``--requests`` requests, twice, interleaved, keeping the lower. Instruction counts do
not depend on other jobs on the machine, so changes of 1% show; they leave out time in the kernel
(syscalls), which ``--cpu`` includes: the gateway's CPU time (``/proc/<pid>/task/*/schedstat``) per
request, six interleaved rounds, the median round kept.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.global_ratelimit import cpu_seconds
from bench.harness import callgrind_command, callgrind_count, callgrind_on, free_port
from bench.llm_load import BODY, start_bench_mock
from bench.policy_overhead import LIMIT_TOKENS

ROOT = Path(__file__).resolve().parent.parent

CONFIG = """binds:
- port: {port}
  listeners:
  - routes:
    - name: llm
      matches: [{{path: {{pathPrefix: /v1/}}}}]{policies}
      backends:
      - ai:
          name: mock
          provider: {{openAI: {{model: {model}}}}}
          hostOverride: 127.0.0.1:{mock}
    - name: plain
      matches: [{{path: {{pathPrefix: /plain}}}}]
      backends:
      - host: 127.0.0.1:{mock}
"""

_POST_HEAD = b"Host: bench\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY)
REQUESTS = {
    "llm": b"POST /v1/chat/completions HTTP/1.1\r\n" + _POST_HEAD + BODY,
    "plain": b"POST /plain HTTP/1.1\r\n" + _POST_HEAD + BODY,
    "get": b"GET /plain HTTP/1.1\r\nHost: bench\r\n\r\n",
}


class Client:
    """One keep-alive connection; ``call`` sends a request and reads its whole response."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def call(self, request: bytes) -> None:
        self.sock.sendall(request)
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self._more()
        head = self.buffer[:end].lower()
        assert head.startswith(b"http/1.1 200"), head
        length = int(head.split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        while len(self.buffer) < end + 4 + length:
            self._more()
        self.buffer = self.buffer[end + 4 + length:]

    def _more(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the gateway closed the connection")
        self.buffer += data

    def close(self) -> None:
        self.sock.close()


#: what ``--as-compare`` adds to the default run, each of which ``--without`` can leave out
AS_COMPARE = frozenset({"log", "limit", "rewrite"})


def _gateway(root: Path, mock_port: int, tmp: Path, wrap: list[str],
             parts: frozenset[str] = frozenset()) -> tuple[subprocess.Popen, int]:
    """The gateway under ``wrap``, with ``parts`` of ``AS_COMPARE`` (none: the default run)."""
    port = free_port()
    config = tmp / "gw.yaml"
    policies = f"\n      policies: {LIMIT_TOKENS}" if "limit" in parts else ""
    # proxy_compare's provider model (bench) is not the body's (mock-model): the body is rewritten
    model = "bench" if "rewrite" in parts else "mock-model"
    config.write_text(CONFIG.format(port=port, mock=mock_port, policies=policies, model=model))
    env = {"ADMIN_ADDR": "127.0.0.1:0", "STATS_ADDR": "127.0.0.1:0", "READINESS_ADDR": "127.0.0.1:0",
           "TRIOPROXY_RUNTIME_DIR": str(tmp / "rt"), "LOG_LEVEL": "info" if "log" in parts else "error",
           "LOG_FORMAT": "json", "PYTHONPATH": str(root)}
    cmd = [*wrap, sys.executable, "-m", "trioproxy", "--config", str(config)]
    proc = subprocess.Popen(cmd, cwd=root, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"the gateway exited ({proc.returncode})") from None
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the gateway did not start")


def instructions(root: Path, mock_port: int, tmp: Path, n: int,
                 parts: frozenset[str] = frozenset()) -> dict[str, float]:
    out = tmp / "callgrind.out"
    proc, port = _gateway(root, mock_port, tmp, callgrind_command(out), parts)
    counts: dict[str, list[float]] = {name: [] for name in REQUESTS}
    client = Client(port)
    try:
        for request in REQUESTS.values():
            for _ in range(50):
                client.call(request)
        callgrind_on(proc.pid)
        for name in [*REQUESTS, *REQUESTS]:
            def work(request: bytes = REQUESTS[name]) -> None:
                for _ in range(n):
                    client.call(request)
            counts[name].append(callgrind_count(proc.pid, out, work) / n)
    finally:
        client.close()
        proc.terminate()
        proc.wait(60)
    return {name: min(values) for name, values in counts.items()}


def cpu(root: Path, mock_port: int, tmp: Path, n: int, rounds: int = 6,
        parts: frozenset[str] = frozenset()) -> dict[str, float]:
    proc, port = _gateway(root, mock_port, tmp, [], parts)
    per_round: dict[str, list[float]] = {name: [] for name in REQUESTS}
    client = Client(port)
    try:
        for request in REQUESTS.values():
            for _ in range(200):
                client.call(request)
        for _ in range(rounds):
            for name, request in REQUESTS.items():
                before = cpu_seconds(proc.pid)
                for _ in range(n):
                    client.call(request)
                per_round[name].append((cpu_seconds(proc.pid) - before) / n)
    finally:
        client.close()
        proc.terminate()
        proc.wait(60)
    return {name: statistics.median(values) for name, values in per_round.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu", action="store_true", help="CPU time per request instead of instructions")
    parser.add_argument("--requests", type=int, default=None, help="per round (default 200; --cpu 2000)")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout whose trioproxy runs")
    parser.add_argument("--as-compare", action="store_true",
                        help="access log at info and a token localRateLimit on llm, as proxy_compare's trioproxy-ai")
    parser.add_argument("--without", default="", help="with --as-compare: leave out some of "
                        f"{','.join(sorted(AS_COMPARE))} (comma-separated)")
    args = parser.parse_args()
    left_out = frozenset(filter(None, (part.strip() for part in args.without.split(","))))
    if left_out - AS_COMPARE or (left_out and not args.as_compare):
        parser.error(f"--without takes {', '.join(sorted(AS_COMPARE))}, with --as-compare")
    parts = AS_COMPARE - left_out if args.as_compare else frozenset()
    mock, mock_port = start_bench_mock(None, delay_ms=0)
    try:
        with tempfile.TemporaryDirectory() as tmpdir:
            if args.cpu:
                result = cpu(args.root, mock_port, Path(tmpdir), args.requests or 2000, parts=parts)
                print(f"# {args.root}: gateway CPU per request (median of 6 interleaved rounds; shared machine)")
                print("  ".join(f"{name} {value * 1e6:.0f} us" for name, value in result.items()))
            else:
                result = instructions(args.root, mock_port, Path(tmpdir), args.requests or 200, parts)
                print(f"# {args.root}: gateway instructions per request (callgrind, lower of 2 rounds)")
                print("  ".join(f"{name} {value / 1000:.0f}k" for name, value in result.items()))
    finally:
        mock.terminate()
        mock.wait(10)


if __name__ == "__main__":
    main()
