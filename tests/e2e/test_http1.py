"""The data plane's HTTP/1.1 loop (trioproxy/frontend/http1.py) on real sockets, with small ASGI apps whose
behaviour each test chooses: keep-alive and pipelining, body messages, answers the app gets wrong,
the hand-off to hypercorn, timeouts and shutdown. The gateway's own use of it is covered by every
raw-socket test (test_faults*.py, test_response_headers.py, test_expect_continue.py ...)."""

from __future__ import annotations

import logging

import pytest
import trio

from tests.conftest import SIMPLE, free_port, start_gateway
from trioproxy.frontend.http1 import Http1Server


async def ok(scope, receive, send) -> None:
    """Answers ``path`` with its body (read whole), and records nothing."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    text = scope["path"].encode() + b":" + body
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(text)).encode())]})
    await send({"type": "http.response.body", "body": text})


class Served:
    """An ``Http1Server`` listening on 127.0.0.1, and what it handed to hypercorn."""

    def __init__(self, app, **limits) -> None:
        self.handed: list[bytes] = []
        settings = {"idle_timeout": 60.0, "header_timeout": 10.0, "max_head": 1024, **limits}
        self.server = Http1Server(app, handoff=self._handoff, **settings)

    async def _handoff(self, stream) -> None:
        self.handed.append(await stream.receive_some(65536))
        await stream.send_all(b"handed")

    async def start(self, nursery: trio.Nursery) -> int:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        nursery.start_soon(trio.serve_listeners, self.server, listeners)
        return listeners[0].socket.getsockname()[1]


async def connect(nursery, app, **limits) -> tuple[Served, trio.SocketStream]:
    served = Served(app, **limits)
    port = await served.start(nursery)
    return served, await trio.open_tcp_stream("127.0.0.1", port)


async def read_until_closed(stream: trio.SocketStream, timeout: float = 10) -> bytes:
    data = b""
    with trio.fail_after(timeout):
        while chunk := await stream.receive_some(65536):
            data += chunk
    return data


async def read_answers(stream: trio.SocketStream, count: int) -> bytes:
    """Bytes until ``count`` complete answers (each with a content-length body) arrived."""
    data = b""
    with trio.fail_after(10):
        while _complete_answers(data) < count:
            chunk = await stream.receive_some(65536)
            assert chunk, data
            data += chunk
    return data


def _complete_answers(data: bytes) -> int:
    count = 0
    while (end := data.find(b"\r\n\r\n")) >= 0:
        head = data[:end].lower()
        length = int(head.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0]) if b"content-length: " in head else 0
        if len(data) < end + 4 + length:
            break
        count += 1
        data = data[end + 4 + length:]
    return count


async def test_keep_alive_and_pipelined_requests_are_answered_in_order(nursery):
    _, stream = await connect(nursery, ok)
    await stream.send_all(b"GET /one HTTP/1.1\r\nhost: a\r\n\r\n")
    first = await read_answers(stream, 1)
    assert first.startswith(b"HTTP/1.1 200 OK\r\n") and first.endswith(b"/one:")
    # Two requests, the second with a body, in one write: both answered, in order, same connection.
    await stream.send_all(b"GET /two HTTP/1.1\r\nhost: a\r\n\r\n"
                          b"POST /three HTTP/1.1\r\nhost: a\r\ncontent-length: 3\r\n\r\nabc")
    rest = await read_answers(stream, 2)
    assert rest.index(b"/two:") < rest.index(b"/three:abc")


async def test_a_body_that_arrived_whole_is_one_message_and_a_chunked_one_arrives_in_pieces(nursery):
    seen = []

    async def record(scope, receive, send) -> None:
        while True:
            message = await receive()
            seen.append((message["body"], message["more_body"]))
            if not message["more_body"]:
                break
            await send_nothing()
        await ok(scope, _empty, send)

    async def send_nothing() -> None:
        await trio.lowlevel.checkpoint()

    _, stream = await connect(nursery, record)
    await stream.send_all(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\n\r\nhello")
    await read_answers(stream, 1)
    assert seen == [(b"hello", False)]
    seen.clear()
    await stream.send_all(b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n")
    await wait_for(lambda: seen)
    await stream.send_all(b"2\r\nde\r\n0\r\n\r\n")
    await read_answers(stream, 1)
    assert b"".join(body for body, _ in seen) == b"abcde"
    assert seen[0] == (b"abc", True) and seen[-1][1] is False


async def _empty():
    return {"type": "http.request", "body": b"", "more_body": False}


async def wait_for(condition) -> None:
    with trio.fail_after(10):
        while not condition():
            await trio.sleep(0.001)


async def test_a_bodiless_request_keeps_the_connection_though_the_app_never_reads(nursery):
    async def no_read(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    served, stream = await connect(nursery, no_read)
    for _ in range(2):
        await stream.send_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
        with trio.fail_after(10):
            assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 204 No Content\r\n")


async def test_a_body_left_on_the_wire_closes_the_connection_after_the_answer(nursery):
    async def no_read(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"no"})

    _, stream = await connect(nursery, no_read)
    await stream.send_all(b"POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 100\r\n\r\npart")
    answer = await read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 401 Unauthorized\r\n") and answer.endswith(b"\r\n\r\nno")


async def test_head_answers_carry_no_body_and_unknown_statuses_an_empty_reason(nursery):
    async def body_anyway(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 299 if scope["path"] == "/odd" else 200,
                    "headers": [(b"content-length", b"4")]})
        await send({"type": "http.response.body", "body": b"body"})

    _, stream = await connect(nursery, body_anyway)
    await stream.send_all(b"HEAD / HTTP/1.1\r\nhost: a\r\n\r\n")
    with trio.fail_after(10):
        answer = await stream.receive_some(65536)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\n")
    await stream.send_all(b"GET /odd HTTP/1.1\r\nhost: a\r\n\r\n")
    assert (await read_answers(stream, 1)).startswith(b"HTTP/1.1 299 \r\n")


@pytest.mark.parametrize("fault", ["raises", "returns"])
async def test_an_app_that_fails_before_answering_gives_500_and_a_close(nursery, caplog, fault):
    async def broken(scope, receive, send) -> None:
        if fault == "raises":
            raise ValueError("boom")

    _, stream = await connect(nursery, broken)
    with caplog.at_level(logging.ERROR, logger="trioproxy"):
        await stream.send_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
        answer = await read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert answer.endswith(b"internal server error: the request was not answered\n")
    assert ("Error in ASGI Framework" in caplog.text) == (fault == "raises")


async def test_a_truncated_answer_closes_the_connection(nursery):
    async def half(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"10")]})
        await send({"type": "http.response.body", "body": b"12345", "more_body": True})

    _, stream = await connect(nursery, half)
    await stream.send_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
    assert (await read_until_closed(stream)).endswith(b"\r\n\r\n12345")


async def test_a_malformed_head_gets_400_and_a_malformed_body_400_unless_answered(nursery):
    _, stream = await connect(nursery, ok)
    await stream.send_all(b"GET / HTTP/1.1\r\nhost: a\r\nbad header\r\n\r\n")
    answer = await read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain\r\n")
    assert answer.endswith(b"\r\n\r\nbad request: malformed request head\n")
    _, stream = await connect(nursery, ok)
    await stream.send_all(b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n")
    answer = await read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n") and answer.endswith(b"bad request: malformed request body\n")


async def test_the_client_leaving_is_reported_by_receive_and_send_then_never_raises(nursery):
    events = []
    left = trio.Event()

    async def slow(scope, receive, send) -> None:
        await receive()  # the (empty) body
        events.append((await receive())["type"])  # then: the client's close
        left.set()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        events.append("sent")

    _, stream = await connect(nursery, slow)
    await stream.send_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
    await stream.aclose()
    with trio.fail_after(10):
        await left.wait()
    await wait_for(lambda: "sent" in events)
    assert events == ["http.disconnect", "sent"]


async def test_100_continue_is_sent_when_the_app_first_reads_the_body(nursery):
    async def refuse_or_read(scope, receive, send) -> None:
        if scope["path"] == "/read":
            await ok(scope, receive, send)
            return
        await send({"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    _, stream = await connect(nursery, refuse_or_read)
    await stream.send_all(b"POST /read HTTP/1.1\r\nhost: a\r\nexpect: 100-continue\r\ncontent-length: 1\r\n\r\n")
    with trio.fail_after(10):
        assert await stream.receive_some(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
    await stream.send_all(b"x")
    assert (await read_answers(stream, 1)).endswith(b"/read:x")
    _, stream = await connect(nursery, refuse_or_read)
    await stream.send_all(b"POST /no HTTP/1.1\r\nhost: a\r\nexpect: 100-continue\r\ncontent-length: 1\r\n\r\n")
    assert (await read_until_closed(stream)).startswith(b"HTTP/1.1 401 Unauthorized\r\n")


@pytest.mark.parametrize("opening", [
    b"GET /ws HTTP/1.1\r\nhost: a\r\nconnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: a\r\nupgrade : h2c\r\n\r\n",
    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
])
async def test_upgrades_and_the_http2_preface_are_handed_over_with_every_byte(nursery, opening):
    served, stream = await connect(nursery, ok)
    await stream.send_all(b"GET /first HTTP/1.1\r\nhost: a\r\n\r\n")
    await read_answers(stream, 1)
    await stream.send_all(opening + b"more")
    with trio.fail_after(10):
        assert await stream.receive_some(65536) == b"handed"
    assert served.handed == [opening + b"more"]


async def test_heads_past_the_limit_get_431_however_they_arrive(nursery):
    # A complete oversized head pipelined behind a small request, in one write.
    _, stream = await connect(nursery, ok, max_head=200)
    await stream.send_all(b"GET /a HTTP/1.1\r\nhost: a\r\n\r\n" + b"GET /b HTTP/1.1\r\nx: " + b"y" * 300 + b"\r\n\r\n")
    answer = await read_until_closed(stream)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and b"HTTP/1.1 431 " in answer
    # An unfinished one, a few bytes at a time.
    _, stream = await connect(nursery, ok, max_head=200)
    for _ in range(30):
        try:
            await stream.send_all(b"x-long: 0123456\r\n")
        except trio.BrokenResourceError:
            break
    assert (await read_until_closed(stream)).startswith(b"HTTP/1.1 431 ")


async def test_a_head_sent_slowly_gets_408_and_an_idle_connection_is_closed(nursery, mock_clock):
    mock_clock.autojump_threshold = 0.1  # jump only when nothing happens for 0.1 s of real time
    _, stream = await connect(nursery, ok, idle_timeout=30.0, header_timeout=5.0)
    await stream.send_all(b"GET / HTTP/1.1\r\n")
    started = trio.current_time()
    assert (await read_until_closed(stream)).startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert 5.0 <= trio.current_time() - started < 6.0
    _, stream = await connect(nursery, ok, idle_timeout=30.0, header_timeout=5.0)
    await stream.send_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
    await read_answers(stream, 1)
    answered = trio.current_time()
    assert await read_until_closed(stream, timeout=60) == b""
    assert 30.0 <= trio.current_time() - answered < 31.0


async def test_shutdown_closes_idle_connections_now_and_busy_ones_after_their_answer(nursery):
    release = trio.Event()

    async def waits(scope, receive, send) -> None:
        if scope["path"] == "/busy":
            await release.wait()
        await ok(scope, receive, send)

    served, idle = await connect(nursery, waits)
    await idle.send_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
    await read_answers(idle, 1)
    port = idle.socket.getpeername()[1]
    busy = await trio.open_tcp_stream("127.0.0.1", port)
    await busy.send_all(b"GET /busy HTTP/1.1\r\nhost: a\r\n\r\n")
    await trio.sleep(0.05)
    served.server.terminate()
    assert await read_until_closed(idle) == b""
    release.set()
    assert (await read_until_closed(busy)).endswith(b"/busy:")


async def test_the_gateway_serves_pipelined_requests_on_a_plain_bind(nursery, backend):
    gw = await start_gateway(nursery, SIMPLE, port=free_port(), backend=backend.port)
    stream = await trio.open_tcp_stream("127.0.0.1", gw.info.ports[gw.port])
    await stream.send_all(b"GET /a HTTP/1.1\r\nhost: x\r\n\r\nGET /b HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    answers = await read_until_closed(stream)
    assert answers.count(b"HTTP/1.1 200 OK\r\n") == 2


async def test_a_client_that_leaves_while_the_backend_works_gets_no_answer_and_frees_the_backend(nursery):
    """The gateway learns of the close from the socket it is handed (asgi.CLIENT_FD), so the loop
    never sees it in ``receive``: it must not then answer 500 to a client that half-closed."""
    from tests.fault_helpers import HangingBackend

    hanging = await nursery.start(HangingBackend().serve)
    gw = await start_gateway(nursery, SIMPLE, port=free_port(), backend=hanging.port)
    stream = await trio.open_tcp_stream("127.0.0.1", gw.info.ports[gw.port])
    await stream.send_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
    await wait_for(lambda: hanging.connections == 1)
    await stream.send_eof()
    assert await read_until_closed(stream) == b""
    await wait_for(lambda: gw.info.runtime.metrics.requests_in_flight() == 0)


async def test_the_scope_is_the_one_hypercorn_builds(nursery):
    scopes = []

    async def record(scope, receive, send) -> None:
        scopes.append(scope)
        await ok(scope, receive, send)

    served, stream = await connect(nursery, record)
    await stream.send_all(b"GET /a%20b?x=1&y HTTP/1.1\r\nHost: h\r\nX-Up: V\r\n\r\n")
    await read_answers(stream, 1)
    scope = scopes[0]
    client, server = stream.socket.getsockname(), stream.socket.getpeername()
    extensions = scope.pop("extensions")
    assert scope == {
        "type": "http", "asgi": {"spec_version": "2.1", "version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": "/a b", "raw_path": b"/a%20b", "query_string": b"x=1&y", "root_path": "",
        "headers": [(b"host", b"h"), (b"x-up", b"V")], "client": client[:2], "server": server[:2]}
    assert set(extensions) == {"trioproxy.cork", "trioproxy.client_fd", "trioproxy.receive_within",
                               "trioproxy.client_connection", "trioproxy.connection_scope"}
    assert type(extensions["trioproxy.client_connection"]) is int
    assert type(extensions["trioproxy.connection_scope"]) is trio.CancelScope
    # asgi.CLIENT_CONNECTION: the same number for each request of a connection, another for the next connection
    await stream.send_all(b"GET /again HTTP/1.1\r\nHost: h\r\n\r\n")
    await read_answers(stream, 1)
    assert scopes[1]["extensions"]["trioproxy.client_connection"] == extensions["trioproxy.client_connection"]
    # asgi.CONNECTION_SCOPE: one scope per connection, around each of its requests
    assert scopes[1]["extensions"]["trioproxy.connection_scope"] is extensions["trioproxy.connection_scope"]
    _, other = await connect(nursery, record)
    await other.send_all(b"GET /b HTTP/1.1\r\nHost: h\r\n\r\n")
    await read_answers(other, 1)
    assert scopes[2]["extensions"]["trioproxy.client_connection"] != extensions["trioproxy.client_connection"]
    assert scopes[2]["extensions"]["trioproxy.connection_scope"] is not extensions["trioproxy.connection_scope"]


@pytest.mark.parametrize("status", [204, 304])
async def test_no_body_goes_out_with_204_or_304(nursery, status):
    async def body_anyway(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"body"})

    _, stream = await connect(nursery, body_anyway)
    await stream.send_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\nGET / HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
    answers = await read_until_closed(stream)
    assert answers.count(b"HTTP/1.1 %d " % status) == 2 and b"body" not in answers


async def test_a_head_of_exactly_the_limit_is_served(nursery):
    request = b"GET / HTTP/1.1\r\nhost: a\r\nx: "
    request += b"y" * (200 - len(request) - 4) + b"\r\n\r\n"
    assert len(request) == 200
    _, stream = await connect(nursery, ok, max_head=200)
    await stream.send_all(request)
    assert (await read_answers(stream, 1)).startswith(b"HTTP/1.1 200 OK\r\n")
    _, stream = await connect(nursery, ok, max_head=199)
    await stream.send_all(request)
    assert (await read_until_closed(stream)).startswith(b"HTTP/1.1 431 ")


async def test_a_proxied_answer_that_came_whole_leaves_in_one_write(nursery, backend, monkeypatch):
    """Head, body and end of an answer the backend sent at once go to the client in one socket
    write (gateway.py ``_respond``: one body message after the start; larger ones are corked)."""
    from trioproxy import direct_io

    writes: list[bytes] = []
    send_now = direct_io.send_now

    def counting(fd: int, data: bytes) -> int:
        if data.startswith(b"HTTP/1.1 "):  # (the gateway's writes to the backend are requests)
            writes.append(data)
        return send_now(fd, data)

    monkeypatch.setattr(direct_io, "send_now", counting)
    gw = await start_gateway(nursery, SIMPLE, port=free_port(), backend=backend.port)
    stream = await trio.open_tcp_stream("127.0.0.1", gw.info.ports[gw.port])
    await stream.send_all(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHost: x\r\n\r\n")
    data = await read_answers(stream, 2)
    assert len(writes) == 2 and b"".join(writes) == data
    assert all(w.count(b"HTTP/1.1 200") == 1 and w.endswith(b"}") for w in writes)
