"""``retry`` over the in-memory harness (policies/retry.py, docs/traffic-policies.md): how many
calls, when (the backoff in virtual time), which statuses and failures are retried, and the body
each attempt carries."""

from __future__ import annotations

import trio

from tests.memory_harness import Backend, BackendConnection, answer, answers, hang, memory_gateway


def config(policies: str) -> str:
    return ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {" + policies + "}\n"
            '      backends: [{host: "b.test:80"}]\n')


async def test_attempts_count_the_calls_after_the_first_and_the_last_answer_is_the_clients(autojump_clock):
    backend = Backend(answers(503, 503, 503, 200))
    async with memory_gateway(config("retry: {attempts: 2, codes: [503]}"), {"b.test:80": backend}) as gw:
        response = await gw.request()
    assert response.status == 503  # three calls: the first and two retries; the 200 was never asked for
    assert [r.header("x-retry-attempt") for r in backend.received] == [None, "1", "2"]


async def test_backoff_spaces_the_attempts_in_virtual_time(autojump_clock):
    backend = Backend(answers(503, 503, 200))
    async with memory_gateway(config("retry: {attempts: 3, codes: [503], backoff: 250ms}"),
                              {"b.test:80": backend}) as gw:
        start = trio.current_time()
        response = await gw.request()
    assert response.status == 200
    assert [r.at - start for r in backend.received] == [0.0, 0.25, 0.5]
    assert response.at - start == 0.5


async def test_only_the_listed_statuses_are_retried(autojump_clock):
    backend = Backend(answers(500, 200))
    async with memory_gateway(config("retry: {attempts: 3, codes: [502, 503]}"), {"b.test:80": backend}) as gw:
        response = await gw.request()
    assert response.status == 500 and len(backend.received) == 1


async def test_a_refused_connect_is_retried(autojump_clock):
    backend = Backend(answer(200, b"second"), refuse=1)
    async with memory_gateway(config("retry: {attempts: 1, codes: []}"), {"b.test:80": backend}) as gw:
        response = await gw.request()
    assert (response.status, response.body) == (200, b"second") and backend.connects == 2


async def test_a_backend_request_timeout_is_retried_and_each_attempt_gets_the_whole_timeout(autojump_clock):
    async def hang_first(conn: BackendConnection) -> None:
        if conn.index == 0:
            await hang(conn)
        else:
            await answer()(conn)

    backend = Backend(hang_first)
    policies = "retry: {attempts: 1, codes: []}, timeout: {backendRequestTimeout: 1500ms}"
    async with memory_gateway(config(policies), {"b.test:80": backend}) as gw:
        start = trio.current_time()
        response = await gw.request()
    assert response.status == 200 and response.at - start == 1.5
    assert backend.connections[0].closed_at == start + 1.5  # the hung call's connection is dropped


async def test_the_request_timeout_caps_every_attempt_and_backoff_together(autojump_clock):
    backend = Backend(answer(503))
    policies = "retry: {attempts: 50, codes: [503], backoff: 1s}, timeout: {requestTimeout: 2500ms}"
    async with memory_gateway(config(policies), {"b.test:80": backend}) as gw:
        start = trio.current_time()
        response = await gw.request()
    assert (response.status, response.text) == (504, "request timeout")
    assert response.at - start == 2.5
    assert [r.at - start for r in backend.received] == [0.0, 1.0, 2.0]


async def test_a_retried_request_carries_its_whole_body_each_time(autojump_clock):
    backend = Backend(answers(503, 200))
    async with memory_gateway(config("retry: {attempts: 1, codes: [503]}"), {"b.test:80": backend}) as gw:
        response = await gw.request("POST", "/upload", body=b"x" * 5000)
    assert response.status == 200
    assert [(r.method, r.target, r.body) for r in backend.received] == [("POST", "/upload", b"x" * 5000)] * 2


async def test_a_chunked_body_is_streamed_and_not_retried(autojump_clock):
    backend = Backend(answers(503, 200))
    async with memory_gateway(config("retry: {attempts: 1, codes: [503]}"), {"b.test:80": backend}) as gw:
        client = gw.connect()
        await client.send_head("POST", "/", [(b"transfer-encoding", b"chunked")])
        await client.send_body(b"streamed", end=True)
        response = await client.response()
    assert response.status == 503 and [r.body for r in backend.received] == [b"streamed"]
