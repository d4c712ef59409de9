"""Keep-alive over the in-memory harness: a client connection serves request after request, and
the upstream pool reuses a backend connection only while it can (upstream.py, docs/upstream.md)."""

from __future__ import annotations

import trio

from tests.memory_harness import Backend, BackendConnection, answer, memory_gateway


def config(top: str = "") -> str:
    return top + 'binds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends: [{host: "b.test:80"}]\n'


async def test_requests_on_one_client_connection_reuse_one_backend_connection(autojump_clock):
    backend = Backend(answer())
    async with memory_gateway(config(), {"b.test:80": backend}) as gw:
        client = gw.connect()
        statuses = [(await client.request("POST" if i % 2 else "GET", f"/{i}", body=b"b" * i)).status
                    for i in range(4)]
        assert not client.served.is_set()  # the client's connection is still open
        assert gw.pool.open_connections == 1
    assert statuses == [200] * 4
    assert [(r.target, r.connection) for r in backend.received] == [("/0", 0), ("/1", 0), ("/2", 0), ("/3", 0)]


async def test_a_backend_answer_with_connection_close_is_not_pooled(autojump_clock):
    async def close_after_one(conn: BackendConnection) -> None:
        await conn.request()
        await conn.respond(200, b"once", [(b"connection", b"close")])
        conn.close()

    backend = Backend(close_after_one)
    async with memory_gateway(config(), {"b.test:80": backend}) as gw:
        client = gw.connect()
        first, second = await client.request(), await client.request()
    assert first.body == second.body == b"once"
    assert [r.connection for r in backend.received] == [0, 1]
    assert first.header("connection") is None  # hop-by-hop: the client's connection stays open


async def test_a_pooled_connection_the_backend_closed_is_dropped_before_use(autojump_clock):
    async def one_then_idle_close(conn: BackendConnection) -> None:
        await conn.request()
        await conn.respond(200, b"fresh")
        await trio.sleep(5)
        conn.close()  # EOF while the connection sits in the pool

    backend = Backend(one_then_idle_close)
    async with memory_gateway(config(), {"b.test:80": backend}) as gw:
        client = gw.connect()
        await client.request()
        await trio.sleep(10)
        response = await client.request("POST", "/", body=b"streamed: sent once, so never on a dead connection")
    assert response.status == 200 and [r.connection for r in backend.received] == [0, 1]


async def test_a_reused_connection_that_dies_before_answering_is_retried_once_on_a_fresh_one(autojump_clock):
    async def die_on_second(conn: BackendConnection) -> None:
        await conn.request()
        await conn.respond(200, b"ok")
        if await conn.request() is not None:
            conn.close()  # read the request, then gone without a byte: as a backend's idle close racing it

    backend = Backend(die_on_second)
    async with memory_gateway(config(), {"b.test:80": backend}) as gw:
        client = gw.connect()
        first = await client.request()
        second = await client.request("GET", "/again")  # no body: it can be sent again
    assert first.status == second.status == 200
    assert [(r.target, r.connection) for r in backend.received] == [("/", 0), ("/again", 0), ("/again", 1)]


async def test_a_streamed_body_on_a_reused_connection_that_dies_is_not_sent_twice(autojump_clock):
    async def die_on_second(conn: BackendConnection) -> None:
        await conn.request()
        await conn.respond(200, b"ok")
        if await conn.request() is not None:
            conn.close()

    backend = Backend(die_on_second)
    async with memory_gateway(config(), {"b.test:80": backend}) as gw:
        client = gw.connect()
        await client.request()
        second = await client.request("POST", "/upload", body=b"streamed")
    assert second.status == 502  # the body went out once; it is not replayed
    assert [(r.target, r.body) for r in backend.received] == [("/", b""), ("/upload", b"streamed")]


async def test_the_pool_idle_timeout_retires_a_connection_at_its_exact_age(autojump_clock):
    backend = Backend(answer())
    top = "config:\n  backend: {poolIdleTimeout: 30s}\n"
    async with memory_gateway(config(top), {"b.test:80": backend}) as gw:
        client = gw.connect()
        await client.request()
        await trio.sleep(30)  # exactly the idle timeout: still usable
        await client.request()
        await trio.sleep(30.5)
        await client.request()
    assert [r.connection for r in backend.received] == [0, 0, 1]


async def test_a_client_asking_to_close_gets_its_answer_then_the_connection_ends(autojump_clock):
    async with memory_gateway(config(), {"b.test:80": answer()}) as gw:
        client = gw.connect()
        response = await client.request(headers=[(b"connection", b"close")])
        assert await client.closed() == b""
        await client.served.wait()
        assert trio.current_time() == response.at
    assert response.status == 200
