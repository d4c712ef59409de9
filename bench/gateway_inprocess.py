"""The gateway's own cost per request above the server: its ASGI app driven in-process, no sockets.

    python -m bench.gateway_inprocess llm 5000           # CPU time per request (thread time)
    python -m bench.gateway_inprocess llm 5000 --profile out.prof   # + cProfile (thread time)
    CLIENT_FD=1 python -m bench.gateway_inprocess llm 5000          # with the asgi.CLIENT_FD extension

``bench/llm_callgrind.py`` counts the whole gateway process (server, h11 both ways, syscalls' user
side); this drives ``FrontDoor(Gateway(...))`` directly with the scope an HTTP/1.1 server builds,
a ``receive`` that hands over the body in one message, and backends that are memory streams
answering the bench mock's canned chat completion at once, so what it measures is the gateway
(front door, stages, LLM handling, the upstream pool and its h11, metrics) and Trio's scheduling
of it. Instruction counts (what the commit messages quote as "in-process"): run it under
``valgrind --tool=callgrind`` with N and with 0 requests and divide the difference by N (the
python binary itself, not a pyenv shim).
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from typing import Any

import trio

from bench.llm_load import BODY
from bench.llm_mock import KEEP_ALIVE_RESPONSE
from trioproxy.asgi import CLIENT_FD
from trioproxy.config import parse_config
from trioproxy.frontend.front_door import FrontDoor
from trioproxy.proxy.gateway import Gateway
from trioproxy.proxy.runtime import Runtime
from trioproxy.upstream.pool import UpstreamPool

CONFIG = """binds:
- port: 3000
  listeners:
  - routes:
    - name: llm
      matches: [{path: {pathPrefix: /v1/}}]
      backends:
      - ai: {name: mock, provider: {openAI: {model: mock-model}}, hostOverride: "127.0.0.1:9"}
    - name: plain
      matches: [{path: {pathPrefix: /plain}}]
      backends: [{host: "127.0.0.1:9"}]
"""


class MockBackend(trio.abc.Stream):
    """Answers each complete request (head and content-length body) with the canned completion."""

    def __init__(self) -> None:
        self.buffer = b""

    async def send_all(self, data: Any) -> None:
        self.buffer += bytes(data)
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = self.buffer[:end].lower()
                at = head.find(b"content-length: ")
                length = int(head[at + 16:].split(b"\r\n", 1)[0]) if at >= 0 else 0
                if len(self.buffer) >= end + 4 + length:
                    self.buffer = self.buffer[end + 4 + length:]
                    return KEEP_ALIVE_RESPONSE
            await trio.lowlevel.checkpoint()

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def _connect(target: Any) -> trio.abc.Stream:
    return MockBackend()


def scope_for(kind: str, extensions: dict[str, Any]) -> dict[str, Any]:
    method, path = {"llm": ("POST", "/v1/chat/completions"), "plain": ("POST", "/plain"), "get": ("GET", "/plain")}[kind]
    headers = [(b"host", b"bench"), (b"content-type", b"application/json")]
    if method == "POST":
        headers.append((b"content-length", str(len(BODY)).encode()))
    return {"type": "http", "asgi": {"spec_version": "2.1", "version": "3.0"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
            "root_path": "", "headers": headers, "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 3000),
            "extensions": dict(extensions)}


async def one(app: FrontDoor, kind: str, extensions: dict[str, Any]) -> None:
    scope = scope_for(kind, extensions)
    statuses: list[int] = []
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if reads == 1 and scope["method"] == "POST":
            return {"type": "http.request", "body": BODY, "more_body": False}
        await trio.sleep_forever()  # after the body: a client that stays
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    await app(scope, receive, send)
    assert statuses == [200], statuses


async def run(kind: str, n: int, profile: str | None, extensions: dict[str, Any]) -> None:
    runtime = Runtime(parse_config(CONFIG, env={}), pool=UpstreamPool(connect=_connect))
    app = FrontDoor(Gateway(runtime, 3000))
    for _ in range(300):  # warm-up: caches, pooled connection
        await one(app, kind, extensions)
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
    start = time.thread_time()
    for _ in range(n):
        await one(app, kind, extensions)
    spent = time.thread_time() - start
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(profile)
    if n:
        print(f"{kind}: {spent / n * 1e6:.1f} us CPU per request (thread time, {n} requests)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("llm", "plain", "get"))
    parser.add_argument("requests", type=int)
    parser.add_argument("--profile", help="write a cProfile of the measured requests here")
    args = parser.parse_args()
    extensions: dict[str, Any] = {}
    pair = None
    if os.environ.get("CLIENT_FD"):
        pair = socket.socketpair()  # a client socket that stays open: the monitor watches it
        extensions[CLIENT_FD] = pair[0].fileno()
    try:
        trio.run(run, args.kind, args.requests, args.profile, extensions)
    finally:
        if pair is not None:
            for sock in pair:
                sock.close()


if __name__ == "__main__":
    main()
