"""A bench-only LLM provider: a fixed OpenAI chat completion (with ``usage``) after a delay, at minimal CPU.

``bench/llm_load.py`` measures a gateway; its mock must not be what the machine runs out of.
``fixtures/mock_openai.py`` (the tests' general-purpose mock on hypercorn) costs ~2.5 ms of CPU
per request; published LLM-gateway benchmarks use a Go mock. This one is an ``asyncio.Protocol``:
no HTTP library, a response built once at start, the delay a ``loop.call_later`` per request, and
keep-alive connections (HTTP/1.1 persistent unless the request says ``connection: close``);
``SIGUSR1`` prints the number of connections accepted so far. It
reads a request's head only for ``content-length`` and ``connection: close``; every request,
whatever its method and path, gets the same answer. Its own CPU per request is reported by
``llm_load.py`` (``/proc/<pid>/stat``).

    python -m bench.llm_mock --port 0 --delay-ms 1500   # prints "llm-mock listening on http://127.0.0.1:PORT"
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal

CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
CONNECTION_CLOSE = re.compile(rb"\r\nconnection:[ \t]*close", re.IGNORECASE)

COMPLETION = json.dumps({
    "id": "chatcmpl-bench", "object": "chat.completion", "created": 1700000000, "model": "mock-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello from the bench mock"},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 5, "completion_tokens": 6, "total_tokens": 11},
}, separators=(",", ":")).encode()


def response_bytes(close: bool) -> bytes:
    head = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
            + str(len(COMPLETION)).encode() + b"\r\n" + (b"connection: close\r\n" if close else b"") + b"\r\n")
    return head + COMPLETION


KEEP_ALIVE_RESPONSE = response_bytes(close=False)
CLOSE_RESPONSE = response_bytes(close=True)


class MockProtocol(asyncio.Protocol):
    """One client connection: parse heads, skip bodies, answer each request after the delay."""

    accepted = 0  # connections so far: a gateway's pool reuse shows here (SIGUSR1 prints it)

    __slots__ = ("buffer", "closing", "delay", "loop", "transport")

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.buffer = b""
        self.closing = False
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        MockProtocol.accepted += 1

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer + data if self.buffer else data
        while not self.closing:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buffer[:end]
            match = CONTENT_LENGTH.search(head)
            total = end + 4 + (int(match.group(1)) if match else 0)
            if len(buffer) < total:
                break
            buffer = buffer[total:]
            close = CONNECTION_CLOSE.search(head) is not None
            self.closing = close
            self.loop.call_later(self.delay, self.answer, close)
        self.buffer = buffer

    def answer(self, close: bool) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        transport.write(CLOSE_RESPONSE if close else KEEP_ALIVE_RESPONSE)
        if close:
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(host: str, port: int, delay: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: MockProtocol(delay), host, port, backlog=4096)
    bound = server.sockets[0].getsockname()[1]
    # Before the line the bench waits for: a SIGUSR1 sent right after it would otherwise kill the
    # mock (the default action), as it did the direct step of a run and of the suite's smoke test.
    loop.add_signal_handler(signal.SIGUSR1, lambda: print(f"llm-mock connections {MockProtocol.accepted}", flush=True))
    print(f"llm-mock listening on http://{host}:{bound}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=1500.0, help="before each answer")
    args = parser.parse_args()
    try:
        asyncio.run(serve(args.host, args.port, args.delay_ms / 1000))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
