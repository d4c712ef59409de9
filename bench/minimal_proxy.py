"""The floor under trioproxy: a minimal Trio reverse proxy, for ``proxy_compare.py``'s table.

    python -m bench.minimal_proxy --port 8080 --backend 127.0.0.1:9000 [--parser httptools|h11]

One task per client connection with one keep-alive connection of its own to the backend; each
request's head and Content-Length body are read, forwarded as they came (no policies, no routing,
no header rewriting), and the backend's answer sent back. Parsing on both sides is either llhttp
(``httptools``, what ``trioproxy/upstream/wire.py`` uses) or ``h11``, so the table shows what a Trio
proxy costs per request with each parser and nothing else: the gateway's own share is the rest.
Not a proxy to use: no chunked bodies, no timeouts, no error answers (a fault closes both sides).
"""

from __future__ import annotations

import argparse
from typing import Any

import h11
import httptools
import trio


class _Message:
    """One HTTP message from llhttp's callbacks: its head line parts, headers and body."""

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.done = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = True


def _head(first: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    lines = [first] + [b"%s: %s\r\n" % (n, v) for n, v in headers if n.lower() not in (b"content-length",
                                                                                        b"transfer-encoding")]
    lines.append(b"content-length: %d\r\n\r\n" % len(body))
    return b"".join(lines) + body


async def _read(stream: trio.SocketStream, parser: Any, message: _Message) -> bool:
    while not message.done:
        data = await stream.receive_some(65536)
        if not data:
            return False
        parser.feed_data(data)
    return True


async def serve_httptools(client: trio.SocketStream, backend: tuple[str, int]) -> None:
    upstream = await trio.open_tcp_stream(*backend)
    request = _Message()
    request_parser = httptools.HttpRequestParser(request)
    try:
        while True:
            if not await _read(client, request_parser, request):
                return
            method = request_parser.get_method()
            await upstream.send_all(_head(b"%s %s HTTP/1.1\r\n" % (method, request.url), request.headers,
                                          b"".join(request.body)))
            response = _Message()
            response_parser = httptools.HttpResponseParser(response)
            if not await _read(upstream, response_parser, response):
                return
            status = response_parser.get_status_code()
            await client.send_all(_head(b"HTTP/1.1 %d OK\r\n" % status, response.headers, b"".join(response.body)))
            request.__init__()  # type: ignore[misc]  # the next request on the same parser
    finally:
        await upstream.aclose()


async def _next(conn: h11.Connection, stream: trio.SocketStream) -> Any:
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        conn.receive_data(await stream.receive_some(65536))


async def serve_h11(client: trio.SocketStream, backend: tuple[str, int]) -> None:
    upstream = await trio.open_tcp_stream(*backend)
    server, to_backend = h11.Connection(h11.SERVER), h11.Connection(h11.CLIENT)
    try:
        while True:
            request = await _next(server, client)
            if type(request) is not h11.Request:
                return
            body = []
            while type(event := await _next(server, client)) is h11.Data:
                body.append(event.data)
            await upstream.send_all(to_backend.send(request) + to_backend.send(h11.Data(data=b"".join(body)))
                                    + to_backend.send(h11.EndOfMessage()))
            response = await _next(to_backend, upstream)
            body = []
            while type(event := await _next(to_backend, upstream)) is h11.Data:
                body.append(event.data)
            headers = [(n, v) for n, v in response.headers if n not in (b"content-length", b"transfer-encoding")]
            out = server.send(h11.Response(status_code=response.status_code, headers=[
                *headers, (b"content-length", b"%d" % sum(map(len, body)))]))
            await client.send_all(out + server.send(h11.Data(data=b"".join(body))) + server.send(h11.EndOfMessage()))
            if server.our_state is not h11.DONE or to_backend.our_state is not h11.DONE:
                return
            server.start_next_cycle()
            to_backend.start_next_cycle()
    finally:
        await upstream.aclose()


async def main(port: int, backend: tuple[str, int], parser: str) -> None:
    serve = serve_h11 if parser == "h11" else serve_httptools

    async def handler(client: trio.SocketStream) -> None:
        try:
            await serve(client, backend)
        except (OSError, trio.BrokenResourceError, httptools.HttpParserError, h11.ProtocolError):
            pass
        finally:
            await client.aclose()

    await trio.serve_tcp(handler, port, host="127.0.0.1", backlog=4096)


if __name__ == "__main__":
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--port", type=int, required=True)
    args.add_argument("--backend", required=True, help="host:port")
    args.add_argument("--parser", choices=["httptools", "h11"], default="httptools")
    ns = args.parse_args()
    host, _, backend_port = ns.backend.rpartition(":")
    trio.run(main, ns.port, (host, int(backend_port)), ns.parser)
