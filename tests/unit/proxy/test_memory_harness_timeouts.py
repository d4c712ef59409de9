"""Deadlines over the in-memory harness, at exact virtual times (docs/pipeline.md "Deadlines",
docs/reliability.md's timeout table): the gateway's answer comes when the config says, not later
and not earlier, and what the deadline cut (the backend connection) is let go."""

from __future__ import annotations

import trio

from tests.memory_harness import Backend, BackendConnection, answer, hang, memory_gateway


def config(policies: str = "", top: str = "") -> str:
    route_policies = f"    - policies: {{{policies}}}\n      backends" if policies else "    - backends"
    return top + "binds:\n- port: 3000\n  listeners:\n  - routes:\n" + route_policies + ': [{host: "b.test:80"}]\n'


async def test_request_timeout_answers_504_at_its_deadline_and_closes_the_backend_connection(autojump_clock):
    backend = Backend(hang)
    async with memory_gateway(config("timeout: {requestTimeout: 1500ms}"), {"b.test:80": backend}) as gw:
        start = trio.current_time()
        response = await gw.request()
        await trio.testing.wait_all_tasks_blocked()
        assert gw.pool.open_connections == 0
    assert (response.status, response.text) == (504, "request timeout")
    assert response.at - start == 1.5 and backend.connections[0].closed_at == response.at


async def test_backend_request_timeout_is_per_call_and_worded_apart_from_the_request_timeout(autojump_clock):
    policies = "timeout: {requestTimeout: 10s, backendRequestTimeout: 2s}"
    async with memory_gateway(config(policies), {"b.test:80": hang}) as gw:
        start = trio.current_time()
        response = await gw.request()
    assert (response.status, response.text) == (504, "upstream call timeout")
    assert response.at - start == 2.0


async def test_without_a_timeout_policy_the_default_response_header_timeout_is_five_minutes(autojump_clock):
    async with memory_gateway(config(), {"b.test:80": hang}) as gw:
        start = trio.current_time()
        response = await gw.request()
    assert (response.status, response.text) == (504, "upstream call timeout")
    assert response.at - start == 300.0


async def test_the_response_header_timeout_is_configurable_and_counts_from_the_end_of_a_slow_upload(
        autojump_clock):
    backend = Backend(hang)
    top = "config:\n  backend: {responseHeaderTimeout: 20s}\n"
    async with memory_gateway(config(top=top), {"b.test:80": backend}) as gw:
        client = gw.connect()
        start = trio.current_time()
        await client.send_head("POST", "/", [(b"transfer-encoding", b"chunked")])
        for _ in range(5):  # 50 s of upload: longer than the 20 s the backend gets to answer
            await client.send_body(b"piece")
            await trio.sleep(10)
        await client.send_body(b"", end=True)
        response = await client.response()
    assert (response.status, response.text) == (504, "upstream call timeout")
    assert response.at - start == 50.0 + 20.0
    assert backend.received[0].body == b"piece" * 5


async def test_a_request_body_that_stops_arriving_gets_408_after_the_default_idle_gap(autojump_clock):
    backend = Backend(hang)
    async with memory_gateway(config(), {"b.test:80": backend}) as gw:
        client = gw.connect()
        await client.send_head("POST", "/", [(b"content-length", b"10")])
        for _ in range(3):  # gaps under the limit are fine however many there are
            await client.send_body(b"ab")
            await trio.sleep(59)
        await client.send_body(b"ab")
        last = trio.current_time()
        response = await client.response()
        await trio.testing.wait_all_tasks_blocked()
        assert gw.pool.open_connections == 0  # the backend's half-sent request is dropped
    assert (response.status, response.text) == (408, "request body timeout")
    assert response.at - last == 60.0
    assert backend.received == []


async def test_the_request_timeout_does_not_cut_a_streamed_response_body(autojump_clock):
    async def slow_stream(conn: BackendConnection) -> None:
        await conn.request()
        await conn.send_raw(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for i in range(4):
            await trio.sleep(1)
            await conn.send_raw(b"1\r\n%d\r\n" % i)
        await conn.send_raw(b"0\r\n\r\n")

    async with memory_gateway(config("timeout: {requestTimeout: 2s}"), {"b.test:80": slow_stream}) as gw:
        start = trio.current_time()
        response = await gw.request()
    assert response.status == 200 and response.body == b"0123"
    assert response.at - start == 4.0


async def test_a_client_head_that_never_ends_gets_408_at_the_header_timeout(autojump_clock):
    top = "frontendPolicies:\n  http: {requestHeaderTimeout: 5s}\n"
    async with memory_gateway(config(top=top), {"b.test:80": answer()}) as gw:
        client = gw.connect()
        await trio.sleep(30)  # idle before the first byte does not count
        start = trio.current_time()
        await client.send_raw(b"GET / HTTP/1.1\r\nhost: gw.test\r\n")
        answered = await client.closed()
        closed_at = trio.current_time()
    assert answered.startswith(b"HTTP/1.1 408 ") and answered.endswith(b"request head timeout\n")
    assert closed_at - start == 5.0


async def test_an_idle_client_connection_is_closed_at_the_idle_timeout_after_its_last_response(autojump_clock):
    top = "frontendPolicies:\n  http: {http1IdleTimeout: 7s}\n"
    async with memory_gateway(config(top=top), {"b.test:80": answer()}) as gw:
        client = gw.connect()
        await trio.sleep(5)
        first = await client.request()
        await trio.sleep(6)  # under the idle timeout: the connection is still served
        second = await client.request()
        assert await client.closed() == b""
        closed_at = trio.current_time()
    assert first.status == second.status == 200
    assert closed_at - second.at == 7.0
