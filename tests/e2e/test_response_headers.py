"""What the status line and headers of every data-plane answer look like on the wire (raw sockets):
one ``date`` (the backend's when it sent one), no ``server`` added by the gateway, a reason phrase."""

from __future__ import annotations

import email.utils

import trio

from fixtures.echo_backend import EchoBackend
from tests.conftest import SIMPLE, free_port, start_gateway

BACKEND_DATE = b"Tue, 01 Jan 2030 00:00:00 GMT"


async def dated_backend(nursery) -> int:
    """Answers every request with its own fixed date and server name, then closes."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

    async def answer(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ndate: " + BACKEND_DATE +
                              b"\r\nserver: my-backend\r\nconnection: close\r\n\r\nok")
        await stream.aclose()

    nursery.start_soon(trio.serve_listeners, answer, listeners)
    return listeners[0].socket.getsockname()[1]


async def raw(gw, request: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """(status line, headers) of the answer to ``request`` sent as raw bytes."""
    stream = await trio.open_tcp_stream("127.0.0.1", gw.info.ports[gw.port])
    await stream.send_all(request)
    data = b""
    with trio.fail_after(10):
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            assert chunk, data
            data += chunk
    await stream.aclose()
    status, *lines = data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")
    return status, [(k.lower(), v.strip()) for k, v in (line.split(b":", 1) for line in lines)]


def values(headers, name: bytes) -> list[bytes]:
    return [v for k, v in headers if k == name]


async def test_the_backends_date_and_server_are_kept_and_nothing_is_added(nursery):
    port = await dated_backend(nursery)
    gw = await start_gateway(nursery, SIMPLE, port=free_port(), backend=port)
    status, headers = await raw(gw, b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
    assert status == b"HTTP/1.1 200 OK"
    assert values(headers, b"date") == [BACKEND_DATE]
    assert values(headers, b"server") == [b"my-backend"]


async def test_a_backend_without_date_gets_exactly_one_and_no_server(nursery):
    backend = await nursery.start(EchoBackend().serve)
    gw = await start_gateway(nursery, SIMPLE, port=free_port(), backend=backend.port)
    status, headers = await raw(gw, b"GET /status/503 HTTP/1.1\r\nhost: a\r\n\r\n")
    assert status == b"HTTP/1.1 503 Service Unavailable"  # the backend's status, with its phrase
    (date,) = values(headers, b"date")
    assert email.utils.parsedate_to_datetime(date.decode()).tzname() == "UTC"
    assert values(headers, b"server") == []


async def test_the_gateways_own_answers_have_one_date_and_a_reason_phrase(nursery):
    backend = await nursery.start(EchoBackend().serve)
    text = SIMPLE.replace("    - name: echo\n", "    - name: echo\n      hostnames: [only.example]\n")
    gw = await start_gateway(nursery, text, port=free_port(), backend=backend.port)
    for request, line in [
        (b"GET / HTTP/1.1\r\nhost: other.example\r\n\r\n", b"HTTP/1.1 404 Not Found"),     # gateway error
        (b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n",
         b"HTTP/1.1 400 Bad Request"),                                                     # front door
    ]:
        status, headers = await raw(gw, request)
        assert status == line
        assert len(values(headers, b"date")) == 1, headers
        assert not any(k == b"server" for k, _ in headers)
