"""Fault suite, backend rows (docs/reliability.md rows 4 and 9): backends that hang, answer garbage,
and clients whose request body stops arriving."""

from __future__ import annotations

import trio

from tests.conftest import free_port, start_gateway
from tests.fault_helpers import (
    BacklogFullBackend,
    HangingBackend,
    PlannedBackend,
    raw_exchange,
    status_line,
    wait_until,
)
from trioproxy.config.model import Address
from trioproxy.errors import BadUpstreamResponse, plain_text

# Row 9: error bodies are plain text ---------------------------------------------------------------


async def test_row9_a_502_body_holds_no_python_repr(gateway):
    async with gateway.client() as client:
        response = await client.get("/garbage")  # the echo backend answers "this is not http"
    assert response.status_code == 502
    assert response.text == "invalid upstream response: illegal status line: 'this is not http'"


def test_row9_plain_text_unquotes_byte_reprs():
    assert plain_text("bad: bytearray(b'a b') and b\"c\"") == "bad: 'a b' and 'c'"
    assert BadUpstreamResponse("x: bytearray(b'\\x00')").message == "x: '\\x00'"
    assert plain_text("no bytes here, it's fine") == "no bytes here, it's fine"


# Row 4: timeouts -----------------------------------------------------------------------------------

def _config(frontend: str = "", backend: str = "") -> str:
    return (f"config: {{{{backend: {{{{{backend}}}}}}}}}\n" if backend else "") + (
        f"frontendPolicies: {{{{http: {{{{{frontend}}}}}}}}}\n" if frontend else "") + """
binds:
- port: {port}
  listeners: [{{routes: [{{backends: [{{host: "127.0.0.1:{backend}"}}]}}]}}]
"""


async def test_row4_a_hung_backend_gives_504_after_the_default_response_header_timeout(nursery, mock_clock):
    mock_clock.autojump_threshold = 0.2  # jump only when nothing at all happens for 0.2 s of real time
    hanging = await nursery.start(HangingBackend().serve)
    gw = await start_gateway(nursery, _config(), port=free_port(), backend=hanging.port)
    assert gw.info.runtime.state.config.backend.response_header_timeout == 300.0
    started = trio.current_time()
    response = await raw_exchange(gw.info.ports[gw.port], b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", timeout=3600)
    assert status_line(response) == b"HTTP/1.1 504 Gateway Timeout"
    assert response.endswith(b"upstream call timeout")
    assert 300 <= trio.current_time() - started < 301


async def test_row4_a_pooled_connection_that_stops_answering_gets_504_at_the_response_header_timeout(nursery, mock_clock):
    """The second request goes out on the first one's pooled connection, whose deadline is kept
    without a cancel scope (fd_deadlines.py): the same 504, at the same time, and that connection is
    not used again."""
    mock_clock.autojump_threshold = 0.2
    backend = await nursery.start(PlannedBackend("ok").serve)
    gw = await start_gateway(nursery, _config(), port=free_port(), backend=backend.port)
    port = gw.info.ports[gw.port]
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = b""
    while not answer.endswith(b"ok"):
        answer += await stream.receive_some(65536)
    assert status_line(answer) == b"HTTP/1.1 200 OK"
    pool = gw.info.runtime.pool
    assert len(pool.idle_connections(Address("127.0.0.1", backend.port))) == 1
    started = trio.current_time()
    await stream.send_all(b"GET /second HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = b""
    with trio.fail_after(3600):
        while not answer.endswith(b"upstream call timeout"):
            answer += await stream.receive_some(65536)
    assert status_line(answer) == b"HTTP/1.1 504 Gateway Timeout"
    assert 300 <= trio.current_time() - started < 301
    assert backend.connections == 1 and backend.requests == 2
    # the hung connection is closed, not pooled, and its deadline gone
    assert len(pool.deadlines) == 0 and pool.open_connections == 0
    assert pool.idle_connections(Address("127.0.0.1", backend.port)) == []


async def test_row4_a_route_backend_request_timeout_bounds_a_pooled_connection_too(nursery, mock_clock):
    mock_clock.autojump_threshold = 0.2
    backend = await nursery.start(PlannedBackend("ok").serve)
    gw = await start_gateway(nursery, """
        binds:
        - port: {port}
          listeners:
          - routes:
            - policies: {{timeout: {{backendRequestTimeout: 7s}}}}
              backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port)
    port = gw.info.ports[gw.port]
    assert status_line(await raw_exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")) == b"HTTP/1.1 200 OK"
    started = trio.current_time()
    response = await raw_exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", timeout=3600)
    assert status_line(response) == b"HTTP/1.1 504 Gateway Timeout"
    assert 7 <= trio.current_time() - started < 8
    assert backend.connections == 1  # the second request went out on the pooled connection


async def test_row4_response_header_timeout_is_configurable_and_a_route_timeout_replaces_it(nursery, backend):
    gw = await start_gateway(nursery, _config(backend="responseHeaderTimeout: 300ms"), port=free_port(),
                             backend=backend.port)
    port = gw.info.ports[gw.port]
    response = await raw_exchange(port, b"GET /slow?ms=2000 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_line(response) == b"HTTP/1.1 504 Gateway Timeout"
    assert status_line(await raw_exchange(port, b"GET /slow?ms=50 HTTP/1.1\r\nHost: x\r\n\r\n")) == b"HTTP/1.1 200 OK"
    # A route with its own timeout policy is not cut by the default.
    gw2 = await start_gateway(nursery, """
        config: {{backend: {{responseHeaderTimeout: 100ms}}}}
        binds:
        - port: {port}
          listeners:
          - routes:
            - policies: {{timeout: {{requestTimeout: 5s}}}}
              backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port)
    response = await raw_exchange(gw2.info.ports[gw2.port], b"GET /slow?ms=400 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_line(response) == b"HTTP/1.1 200 OK"


async def test_row4_the_response_header_clock_starts_once_a_slow_upload_is_sent(nursery, backend):
    gw = await start_gateway(nursery, _config(backend="responseHeaderTimeout: 300ms"), port=free_port(),
                             backend=backend.port)
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", gw.info.ports[gw.port])
        await stream.send_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\nConnection: close\r\n\r\n")
        for _ in range(8):  # 0.8 s of upload: longer than the response-header timeout
            await stream.send_all(b"x")
            await trio.sleep(0.1)
        response = b""
        while chunk := await stream.receive_some(65536):
            response += chunk
    assert status_line(response) == b"HTTP/1.1 200 OK"
    assert b'"body_length": 8' in response or b'"body_length":8' in response


async def test_row4_a_backend_that_does_not_accept_gets_503_after_the_connect_timeout(nursery):
    with BacklogFullBackend() as full:
        gw = await start_gateway(nursery, _config(backend="connectTimeout: 300ms"), port=free_port(),
                                 backend=full.port)
        assert gw.info.runtime.pool.connect_timeout == 0.3
        started = trio.current_time()
        response = await raw_exchange(gw.info.ports[gw.port], b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert 0.3 <= trio.current_time() - started < 3
    assert status_line(response) == b"HTTP/1.1 503 Service Unavailable"
    assert b"upstream connect timeout" in response


def test_row4_defaults():
    from trioproxy.config import parse_config

    config = parse_config("binds: []\n", env={})
    assert config.backend.connect_timeout == 10.0 and config.backend.response_header_timeout == 300.0
    assert config.frontend.header_timeout == 10.0 and config.frontend.body_idle_timeout == 60.0
    assert config.frontend.idle_timeout == 60.0 and config.frontend.max_in_flight == 10_000


async def test_row4_a_request_body_that_stops_arriving_gets_408_and_frees_the_backend(nursery, backend):
    gw = await start_gateway(nursery, _config(frontend="requestBodyIdleTimeout: 300ms"), port=free_port(),
                             backend=backend.port)
    response = await raw_exchange(gw.info.ports[gw.port],
                                  b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx")
    assert status_line(response) == b"HTTP/1.1 408 Request Timeout"
    assert response.endswith(b"request body timeout")
    await wait_until(lambda: gw.info.runtime.pool.open_connections == 0, what="backend connection closed")


async def test_row4_the_body_idle_timeout_is_per_gap_not_per_body(nursery, backend):
    gw = await start_gateway(nursery, _config(frontend="requestBodyIdleTimeout: 300ms"), port=free_port(),
                             backend=backend.port)
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", gw.info.ports[gw.port])
        await stream.send_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\nConnection: close\r\n\r\n")
        for _ in range(8):
            await stream.send_all(b"x")
            await trio.sleep(0.1)
        response = b""
        while chunk := await stream.receive_some(65536):
            response += chunk
    assert status_line(response) == b"HTTP/1.1 200 OK"


async def test_row4_the_default_body_idle_timeout_applies(nursery, backend, mock_clock):
    mock_clock.autojump_threshold = 0.2
    gw = await start_gateway(nursery, _config(), port=free_port(), backend=backend.port)
    started = trio.current_time()
    response = await raw_exchange(gw.info.ports[gw.port],
                                  b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nx", timeout=3600)
    assert status_line(response) == b"HTTP/1.1 408 Request Timeout"
    assert 60 <= trio.current_time() - started < 61


async def test_row4_a_slowloris_head_gets_408_and_is_closed(nursery, backend):
    gw = await start_gateway(nursery, _config(frontend="requestHeaderTimeout: 300ms"), port=free_port(),
                             backend=backend.port)
    port = gw.info.ports[gw.port]
    with trio.fail_after(5):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n")
        for _ in range(10):  # one header line every 0.1 s: bytes keep coming, the head never ends
            await trio.sleep(0.1)
            try:
                await stream.send_all(b"X-Slow: 1\r\n")
            except trio.BrokenResourceError:
                break
        response = b""
        while chunk := await stream.receive_some(65536):
            response += chunk
    assert status_line(response) == b"HTTP/1.1 408 Request Timeout"
    # A head that completes in time, in pieces, on a keep-alive connection: served, twice.
    with trio.fail_after(5):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        for _ in range(2):
            for piece in (b"GET / HTTP/1.1\r\n", b"Host: x\r\n", b"\r\n"):
                await stream.send_all(piece)
                await trio.sleep(0.1)
            answer = await stream.receive_some(65536)
            assert answer.startswith(b"HTTP/1.1 200 OK")
            await trio.sleep(0.25)  # idle time between requests is not head time
        await stream.aclose()


async def test_config_backend_reaches_the_pool_and_follows_reloads():
    from trioproxy.config import parse_config
    from trioproxy.proxy.runtime import Runtime

    first = parse_config("config: {backend: {connectTimeout: 2s, poolIdleTimeout: 30s, poolMaxSize: 3}}\n"
                         "binds: []\n", env={})
    runtime = Runtime(first)
    assert (runtime.pool.connect_timeout, runtime.pool.idle_timeout, runtime.pool.max_idle_per_target) == (2, 30, 3)
    runtime.apply(parse_config("binds: []\n", env={}))
    assert (runtime.pool.connect_timeout, runtime.pool.idle_timeout, runtime.pool.max_idle_per_target) == (10, 90, 256)
