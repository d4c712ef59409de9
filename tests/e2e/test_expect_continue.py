"""``Expect: 100-continue`` over a raw socket: the 100 comes only when the gateway wants the body."""

from __future__ import annotations

import json

import trio

from tests.conftest import LIMITED, free_port, start_gateway


async def read_head(stream: trio.SocketStream, buffer: bytearray) -> bytes:
    """One response head (status line and headers); what follows stays in ``buffer``."""
    while b"\r\n\r\n" not in buffer:
        data = await stream.receive_some(65536)
        if not data:
            raise AssertionError(f"connection closed after {bytes(buffer)!r}")
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    buffer[:] = rest
    return head


async def read_body(stream: trio.SocketStream, buffer: bytearray, head: bytes) -> bytes:
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))
    while len(buffer) < length:
        buffer += await stream.receive_some(65536)
    body, buffer[:] = bytes(buffer[:length]), buffer[length:]
    return body


def request(path: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nhost: example.com\r\ncontent-type: text/plain\r\n"
            f"content-length: {len(body)}\r\nexpect: 100-continue\r\n\r\n").encode()


async def test_the_body_follows_the_100_and_reaches_the_backend(nursery, backend):
    gw = await start_gateway(nursery, LIMITED, port=free_port(), backend=backend.port, max_tokens=1)
    stream = await trio.open_tcp_stream("127.0.0.1", gw.info.ports[gw.port])
    buffer = bytearray()
    with trio.fail_after(5):
        await stream.send_all(request("/echo", b"hello"))
        assert await read_head(stream, buffer) == b"HTTP/1.1 100 Continue"
        await stream.send_all(b"hello")
        head = await read_head(stream, buffer)
        assert head.startswith(b"HTTP/1.1 200 ")
        echoed = json.loads(await read_body(stream, buffer, head))
    assert echoed["body_length"] == 5
    assert "expect" not in {k.lower() for k, _ in echoed["headers"]}  # answered by the gateway
    # The connection stays usable: a second request on it.
    with trio.fail_after(5):
        await stream.send_all(request("/again", b"hi"))
        assert await read_head(stream, buffer) == b"HTTP/1.1 100 Continue"
        await stream.send_all(b"hi")
        assert (await read_head(stream, buffer)).startswith(b"HTTP/1.1 200 ")
    await stream.aclose()


async def test_a_refused_request_gets_its_answer_instead_of_100_and_never_sends_the_body(nursery, backend):
    gw = await start_gateway(nursery, LIMITED, port=free_port(), backend=backend.port, max_tokens=1)
    async with gw.client() as client:
        assert (await client.get("/limited")).status_code == 200  # spends the one token
    requests_before = backend.requests
    stream = await trio.open_tcp_stream("127.0.0.1", gw.info.ports[gw.port])
    buffer = bytearray()
    with trio.fail_after(5):
        await stream.send_all(request("/limited", b"x" * 100_000))
        head = await read_head(stream, buffer)
        assert head.startswith(b"HTTP/1.1 429 Too Many Requests")
        assert b"connection: close" in head.lower()
        assert await read_body(stream, buffer, head) == b"rate limit exceeded"
        assert await stream.receive_some(100) == b""  # closed: the unsent body's framing is left open
    assert backend.requests == requests_before
