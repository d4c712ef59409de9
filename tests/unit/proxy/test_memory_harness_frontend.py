"""The in-memory harness goes through the real frontend: the bytes a client writes are parsed by
``http1.py`` and checked by ``front_door.py`` before any stage runs, as on a socket."""

from __future__ import annotations

import trio

from tests.memory_harness import Backend, answer, memory_gateway

CONFIG = """
binds:
- port: 3000
  listeners:
  - routes:
    - policies: {apiKey: {mode: strict, keys: [{key: k1}]}}
      backends: [{host: "b.test:80"}]
"""
KEY = b"authorization: Bearer k1\r\n"


async def test_pipelined_requests_are_answered_in_order_on_one_backend_connection(autojump_clock):
    backend = Backend(answer())
    async with memory_gateway(CONFIG, {"b.test:80": backend}) as gw:
        client = gw.connect()
        await client.send_raw(b"".join(b"GET /%d HTTP/1.1\r\nhost: gw.test\r\n%s\r\n" % (i, KEY) for i in range(3))
                              + b"GET /last HTTP/1.1\r\nhost: gw.test\r\nconnection: close\r\n" + KEY + b"\r\n")
        raw = await client.closed()
    assert raw.count(b"HTTP/1.1 200 OK\r\n") == 4
    assert [(r.target, r.connection) for r in backend.received] == [("/0", 0), ("/1", 0), ("/2", 0), ("/last", 0)]


async def test_content_length_with_transfer_encoding_is_refused_by_the_front_door_before_any_stage(autojump_clock):
    backend = Backend(answer())
    async with memory_gateway(CONFIG, {"b.test:80": backend}) as gw:
        client = gw.connect()
        await client.send_raw(b"POST / HTTP/1.1\r\nhost: gw.test\r\n" + KEY
                              + b"content-length: 3\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n")
        raw = await client.closed()
    assert raw.startswith(b"HTTP/1.1 400 Bad Request\r\n") and b"both content-length and transfer-encoding" in raw
    assert backend.connects == 0


async def test_a_refused_request_that_expects_100_continue_gets_its_answer_and_no_100(autojump_clock):
    backend = Backend(answer())
    async with memory_gateway(CONFIG, {"b.test:80": backend}) as gw:
        client = gw.connect()
        await client.send_head("POST", "/", [(b"content-length", b"5"), (b"expect", b"100-continue")])
        refused = await client.response()
        keyed = gw.connect()
        await keyed.send_head("POST", "/", [(b"content-length", b"5"), (b"expect", b"100-continue"),
                                            (b"authorization", b"Bearer k1")])
        with trio.move_on_after(1):  # the body waits for the 100, as a client would
            continue_line = await keyed.stream.receive_some()
        await keyed.send_body(b"hello", end=True)
        accepted = await keyed.response()
    assert refused.status == 401 and refused.informational == []
    assert continue_line.startswith(b"HTTP/1.1 100 Continue\r\n")
    assert accepted.status == 200 and backend.received[0].body == b"hello"
