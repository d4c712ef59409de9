"""The upstream pool over ``trio.testing`` memory streams: scripted backend bytes, no sockets.

Each backend connection is a ``memory_stream_pair``; the pool's end answers the staleness probe
a socket answers with ``select`` (``is_readable()``), from bytes the backend sent that the pool
has not read and from the backend's EOF. Time is pytest-trio's ``mock_clock``; nothing sleeps.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import h11
import pytest
import trio
import trio.testing

from tests.fault_helpers import PlannedBackend
from trioproxy.config.model import Address
from trioproxy.errors import BackendUnreachable, BadUpstreamResponse
from trioproxy.upstream.pool import UpstreamConnection, UpstreamPool, UpstreamResponse

A = Address("a.test", 80)
B = Address("b.test", 80)
HEADERS = [(b"host", b"a.test")]
CHUNKED = [(b"host", b"a.test"), (b"transfer-encoding", b"chunked")]


def ok(body: bytes = b"ok", *extra: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(body), b"".join(e + b"\r\n" for e in extra), body)


class PoolEnd(trio.abc.Stream):
    """The pool's end of one backend connection (a memory stream pair)."""

    def __init__(self, inner: trio.StapledStream[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream]) -> None:
        self.inner = inner
        self.unread = 0  # bytes the backend sent that the pool has not received yet
        self.eof = False

    def is_readable(self) -> bool:
        return self.unread > 0 or self.eof

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:  # pragma: no cover - the pool never calls it
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        self.unread -= len(data)
        return data

    async def send_eof(self) -> None:  # pragma: no cover
        await self.inner.send_eof()

    def close(self) -> None:
        self.inner.send_stream.close()
        self.inner.receive_stream.close()

    async def aclose(self) -> None:  # pragma: no cover - the pool closes without awaiting
        self.close()
        await trio.lowlevel.checkpoint()


class BackendEnd:
    """The backend's end: h11 parses the requests, the answers are raw scripted bytes."""

    def __init__(self, stream: trio.StapledStream[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream],
                 pool_end: PoolEnd) -> None:
        self.stream = stream
        self.pool_end = pool_end
        self.h11 = h11.Connection(h11.SERVER)

    async def _event(self) -> h11.Event | type[h11.NEED_DATA]:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            self.h11.receive_data(bytes(await self.stream.receive_some()))

    async def head(self) -> h11.Request | None:
        """The next request's head (None when the pool closed the connection)."""
        if self.h11.our_state is h11.DONE or self.h11.their_state is h11.DONE:
            # The answer went out as raw bytes, bypassing h11: start the next request with a fresh
            # parser fed what the previous one already buffered.
            leftover, closed = self.h11.trailing_data
            self.h11 = h11.Connection(h11.SERVER)
            if leftover:
                self.h11.receive_data(leftover)
            if closed:
                self.h11.receive_data(b"")
        try:
            event = await self._event()
        except trio.ClosedResourceError:
            return None
        if type(event) is h11.ConnectionClosed:
            return None
        assert type(event) is h11.Request, event
        return event

    async def body(self) -> bytes:
        """The rest of the current request's body."""
        data = b""
        while True:
            event = await self._event()
            if type(event) is h11.EndOfMessage:
                return data
            assert type(event) is h11.Data, event
            data += event.data

    async def request(self) -> tuple[h11.Request, bytes] | None:
        head = await self.head()
        return None if head is None else (head, await self.body())

    async def send(self, raw: bytes) -> None:
        self.pool_end.unread += len(raw)
        await self.stream.send_all(raw)

    def close(self) -> None:
        """EOF to the pool (it sees its stream readable)."""
        self.pool_end.eof = True
        self.stream.send_stream.close()

    async def serve_ok(self, body: bytes = b"ok") -> None:
        """Answer every request with 200 until the pool closes the connection."""
        while await self.request() is not None:
            await self.send(ok(body))


Script = Callable[[BackendEnd, int], Awaitable[None]]


class ScriptedBackend:
    """Hands the pool memory-stream connections; each runs ``script(backend_end, index)``."""

    def __init__(self, nursery: trio.Nursery, script: Script) -> None:
        self.nursery = nursery
        self.script = script
        self.connects: list[Address] = []

    async def connect(self, target: Address) -> trio.abc.Stream:
        pool_side, backend_side = trio.testing.memory_stream_pair()
        pool_end = PoolEnd(pool_side)
        self.nursery.start_soon(self.script, BackendEnd(backend_side, pool_end), len(self.connects))
        self.connects.append(target)
        await trio.lowlevel.checkpoint()
        return pool_end


def make_pool(nursery: trio.Nursery, script: Script, **options: float) -> tuple[UpstreamPool, ScriptedBackend]:
    backend = ScriptedBackend(nursery, script)
    return UpstreamPool(connect=backend.connect, **options), backend  # type: ignore[arg-type]


async def get(pool: UpstreamPool, target: Address = A, path: bytes = b"/") -> bytes:
    async with await pool.request(target, b"GET", path, HEADERS) as response:
        return await response.read()


async def serve_ok(end: BackendEnd, index: int) -> None:
    await end.serve_ok()


def idle(pool: UpstreamPool, target: Address = A) -> list[str]:
    return [repr(conn) for conn in pool.idle_connections(target)]


# --- keep-alive -------------------------------------------------------------------------------

async def test_a_finished_exchange_returns_its_connection_and_the_next_request_reuses_it(nursery):
    pool, backend = make_pool(nursery, serve_ok)
    response = await pool.request(A, b"GET", b"/", HEADERS)
    assert repr(response) == "<UpstreamResponse 200 open>"
    assert repr(pool) == "<UpstreamPool open=1 idle={}>"
    assert await response.read() == b"ok"
    assert repr(response) == "<UpstreamResponse 200 done>"
    assert idle(pool) == ["<UpstreamConnection a.test:80 IDLE requests=1>"]

    assert await get(pool) == b"ok"
    assert await get(pool) == b"ok"
    assert backend.connects == [A]
    assert idle(pool) == ["<UpstreamConnection a.test:80 IDLE requests=3>"]
    assert repr(pool) == "<UpstreamPool open=1 idle={'a.test:80': 1}>"
    assert (pool.open_connections, pool.connections_created) == (1, 1)


async def test_connection_close_from_the_backend_is_not_pooled(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        while await end.request() is not None:
            await end.send(ok(b"bye", b"connection: close"))

    pool, backend = make_pool(nursery, script)
    assert await get(pool) == b"bye"
    assert await get(pool) == b"bye"
    assert len(backend.connects) == 2
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"


async def test_a_response_closed_before_its_body_is_read_closes_the_connection(nursery):
    pool, backend = make_pool(nursery, serve_ok)
    async with await pool.request(A, b"GET", b"/", HEADERS) as response:
        assert response.status == 200
    assert repr(response) == "<UpstreamResponse 200 done>"
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"
    assert await get(pool) == b"ok"
    assert len(backend.connects) == 2


# --- stale pooled connections -----------------------------------------------------------------

async def test_a_pooled_connection_the_backend_closed_is_dropped_before_use(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(ok())
        if index == 0:
            end.close()  # an idle-timeout on the backend's side: EOF while pooled
        else:
            await end.serve_ok()

    pool, backend = make_pool(nursery, script)
    assert await get(pool) == b"ok"
    await trio.testing.wait_all_tasks_blocked()
    [first] = pool.idle_connections(A)
    assert first.is_readable()
    assert await get(pool) == b"ok"
    assert repr(first) == "<UpstreamConnection a.test:80 CLOSED requests=1>"
    assert len(backend.connects) == 2
    assert idle(pool) == ["<UpstreamConnection a.test:80 IDLE requests=1>"]
    assert pool.open_connections == 1


@pytest.mark.parametrize("same_read", [True, False], ids=["in-the-same-read", "later"])
async def test_a_connection_with_bytes_nobody_asked_for_is_not_reused(nursery, same_read):
    """Extra bytes after a complete response: buffered by h11 when they came with it, seen by the
    staleness probe when they came later. Either way the next request must not read them."""
    extra = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nextra"

    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(ok() + (extra if index == 0 and same_read else b""))
        if index == 0 and not same_read:
            await end.send(extra)
        await end.serve_ok()

    pool, backend = make_pool(nursery, script)
    assert await get(pool) == b"ok"
    await trio.testing.wait_all_tasks_blocked()
    assert await get(pool) == b"ok"  # not b"extra"
    assert len(backend.connects) == 2
    assert pool.open_connections == 1


async def test_a_connection_idle_longer_than_the_idle_timeout_is_dropped(nursery, mock_clock):
    pool, backend = make_pool(nursery, serve_ok, idle_timeout=90.0)
    assert await get(pool) == b"ok"
    mock_clock.jump(89)
    assert await get(pool) == b"ok"
    assert len(backend.connects) == 1
    mock_clock.jump(91)
    assert await get(pool) == b"ok"
    assert len(backend.connects) == 2
    assert pool.open_connections == 1


# --- replay -----------------------------------------------------------------------------------

def dies_on_second_request(end_script: Script | None = None) -> Script:
    """Connection 0 answers once, then reads the next request and closes without a byte (a
    backend that timed the connection out as the request arrived); later ones serve."""
    async def script(end: BackendEnd, index: int) -> None:
        if index == 0:
            await end.request()
            await end.send(ok())
            await end.head()
            end.close()
        else:
            await end.serve_ok()
    return script


async def test_a_buffered_request_on_a_dead_reused_connection_is_replayed_once_on_a_fresh_one(nursery):
    pool, backend = make_pool(nursery, dies_on_second_request())
    assert await get(pool) == b"ok"
    [first] = pool.idle_connections(A)
    async with await pool.request(A, b"POST", b"/", HEADERS + [(b"content-length", b"4")], b"data") as response:
        assert await response.read() == b"ok"
    assert repr(first) == "<UpstreamConnection a.test:80 CLOSED requests=2>"
    assert len(backend.connects) == 2
    assert idle(pool) == ["<UpstreamConnection a.test:80 IDLE requests=1>"]


async def test_a_fresh_connection_that_dies_is_not_replayed(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        await end.head()
        end.close()

    pool, backend = make_pool(nursery, script)
    with pytest.raises(BadUpstreamResponse):
        await get(pool)
    assert len(backend.connects) == 1
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"


async def test_a_replay_that_dies_again_is_not_replayed_twice(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        if index == 0:
            await end.request()
            await end.send(ok())
        await end.head()
        end.close()

    pool, backend = make_pool(nursery, script)
    assert await get(pool) == b"ok"
    with pytest.raises(BadUpstreamResponse):
        await get(pool)
    assert len(backend.connects) == 2
    assert pool.open_connections == 0


async def test_a_streamed_request_on_a_dead_reused_connection_is_never_replayed(nursery):
    pool, backend = make_pool(nursery, dies_on_second_request())
    assert await get(pool) == b"ok"

    async def body() -> AsyncIterator[bytes]:
        yield b"once"

    with pytest.raises(BadUpstreamResponse):
        await pool.request(A, b"POST", b"/", CHUNKED, body())
    assert len(backend.connects) == 1
    assert repr(pool) == "<UpstreamPool open=0 idle={'a.test:80': 0}>" or repr(pool) == "<UpstreamPool open=0 idle={}>"


async def test_a_dead_reused_connection_that_had_started_answering_is_not_replayed(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(ok())
        await end.request()
        await end.send(b"HTTP/1.1 20")
        end.close()

    pool, backend = make_pool(nursery, script)
    assert await get(pool) == b"ok"
    with pytest.raises(BadUpstreamResponse):
        await get(pool)
    assert len(backend.connects) == 1


# --- broken backends ----------------------------------------------------------------------------

async def test_a_backend_that_closes_mid_body_fails_the_body_and_its_connection_is_gone(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
        end.close()

    pool, backend = make_pool(nursery, script)
    response = await pool.request(A, b"GET", b"/", HEADERS)
    chunks = []
    with pytest.raises(BadUpstreamResponse, match=r"received 4 bytes, expected 10"):
        async with response:
            async for chunk in response.body():
                chunks.append(chunk)
    assert chunks == [b"half"]
    assert repr(response) == "<UpstreamResponse 200 done>"
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"


async def test_ready_takes_a_body_that_came_with_the_headers_and_pools_the_connection(nursery):
    """``ready()`` (the gateway's one-write answer) reads nothing from the network."""
    pool, backend = make_pool(nursery, serve_ok)
    response = await pool.request(A, b"GET", b"/", HEADERS)
    assert response.ready() == ([b"ok"], True)
    assert repr(response) == "<UpstreamResponse 200 done>"
    assert idle(pool) == ["<UpstreamConnection a.test:80 IDLE requests=1>"]
    assert await get(pool) == b"ok"
    assert backend.connects == [A]


async def test_ready_takes_what_is_here_and_body_streams_the_rest(nursery):
    checked = trio.Event()

    async def later(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
        await checked.wait()
        await end.send(b"rest..")
        await end.serve_ok()

    pool, _ = make_pool(nursery, later)
    response = await pool.request(A, b"GET", b"/", HEADERS)
    assert response.ready() == ([b"half"], False)
    assert response.ready() == ([], False)
    checked.set()
    assert b"".join([chunk async for chunk in response.body()]) == b"rest.."
    assert idle(pool) == ["<UpstreamConnection a.test:80 IDLE requests=1>"]


async def test_ready_keeps_a_bad_body_for_body_to_raise(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\nzz\r\n")

    pool, _ = make_pool(nursery, script)
    response = await pool.request(A, b"GET", b"/", HEADERS)
    assert response.ready() == ([b"ok"], False)
    with pytest.raises(BadUpstreamResponse, match="invalid upstream response"):
        async with response:
            async for _ in response.body():
                pass
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"


async def test_a_backend_that_closes_before_answering_gets_a_plain_message(nursery):
    """Not h11's wording for its own state machine ("can't handle event type ConnectionClosed ...")."""
    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        end.close()

    pool, _ = make_pool(nursery, script)
    with pytest.raises(BadUpstreamResponse) as info:
        await get(pool)
    assert info.value.message == "upstream closed the connection before the response completed"


async def test_a_response_that_is_not_http_is_a_bad_upstream_response(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")

    pool, _ = make_pool(nursery, script)
    with pytest.raises(BadUpstreamResponse, match="invalid upstream response"):
        await get(pool)
    assert pool.open_connections == 0


async def test_an_informational_response_is_skipped(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(b"HTTP/1.1 103 Early Hints\r\nlink: </a.css>\r\n\r\n" + ok(b"final"))
        await end.serve_ok()

    pool, _ = make_pool(nursery, script)
    assert await get(pool) == b"final"
    assert len(pool.idle_connections(A)) == 1


async def test_connect_errors_and_timeouts_are_backend_unreachable(nursery, autojump_clock):
    async def refused(target: Address) -> trio.abc.Stream:
        raise ConnectionRefusedError(111, "Connection refused")

    async def silent(target: Address) -> trio.abc.Stream:
        await trio.sleep_forever()
        raise AssertionError

    with pytest.raises(BackendUnreachable, match=r"upstream connect error: Connection refused \(a.test:80\)"):
        await get(UpstreamPool(connect=refused))
    with pytest.raises(BackendUnreachable, match=r"upstream connect timeout \(a.test:80\)"):
        await get(UpstreamPool(connect=silent, connect_timeout=3.0))
    assert trio.current_time() == pytest.approx(3.0)


async def test_a_request_h11_cannot_frame_is_refused_before_anything_is_sent(nursery):
    pool, backend = make_pool(nursery, serve_ok)
    with pytest.raises(BadUpstreamResponse, match="cannot forward request"):
        await pool.request(A, b"GET", b"/", [(b"host", b"a"), (b"bad header", b"x")])
    assert pool.open_connections == 0


# --- limits per backend -----------------------------------------------------------------------

async def test_idle_connections_are_kept_per_backend_up_to_the_limit(nursery):
    pool, backend = make_pool(nursery, serve_ok, max_idle_per_target=2)
    a = [await pool.request(A, b"GET", b"/", HEADERS) for _ in range(3)]
    b = await pool.request(B, b"GET", b"/", HEADERS)
    assert repr(pool) == "<UpstreamPool open=4 idle={}>"
    for response in [*a, b]:
        assert await response.read() == b"ok"
    assert repr(pool) == "<UpstreamPool open=3 idle={'a.test:80': 2, 'b.test:80': 1}>"
    assert idle(pool, A) == ["<UpstreamConnection a.test:80 IDLE requests=1>"] * 2
    assert backend.connects == [A, A, A, B]
    # most recently returned first
    assert pool.idle_connections(A)[-1] is pool._checkout(A)


async def test_a_closed_pool_closes_idle_connections_and_those_that_come_back(nursery):
    pool, backend = make_pool(nursery, serve_ok)
    async with pool:
        assert await get(pool) == b"ok"
        response = await pool.request(A, b"GET", b"/", HEADERS)
    assert repr(pool) == "<UpstreamPool open=1 idle={} closed>"
    assert await response.read() == b"ok"
    assert repr(pool) == "<UpstreamPool open=0 idle={} closed>"


# --- cancellation -----------------------------------------------------------------------------

async def test_cancelled_while_waiting_for_the_response_head_leaves_nothing_half_used(nursery):
    got_request = trio.Event()

    async def script(end: BackendEnd, index: int) -> None:
        if index == 0:
            await end.request()
            got_request.set()
            await trio.sleep_forever()
        await end.serve_ok()

    pool, backend = make_pool(nursery, script)
    with trio.CancelScope() as scope:
        nursery.start_soon(lambda: _cancel_on(got_request, scope))
        await get(pool)
    assert scope.cancelled_caught
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"
    assert await get(pool) == b"ok"
    assert len(backend.connects) == 2


async def test_cancelled_mid_body_closes_the_connection_instead_of_pooling_it(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\nfirs\r\n")
        await trio.sleep_forever()

    pool, _ = make_pool(nursery, script)
    response = await pool.request(A, b"GET", b"/", HEADERS)
    with trio.CancelScope() as scope:
        async with response:
            async for chunk in response.body():
                assert chunk == b"firs"
                scope.cancel()
    assert scope.cancelled_caught
    assert repr(response) == "<UpstreamResponse 200 done>"
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"


async def _cancel_on(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


# --- streamed uploads ---------------------------------------------------------------------------

def answers_before_the_body_ends() -> Script:
    """Reads the head and the first chunk, answers in full, then reads the rest of the body."""
    async def script(end: BackendEnd, index: int) -> None:
        while await end.head() is not None:
            await end._event()  # the first chunk
            await end.send(ok())
            try:
                await end.body()
            except h11.RemoteProtocolError:  # the pool closed mid-body
                return
    return script


async def test_an_upload_still_writing_when_the_response_ends_releases_the_connection_itself(nursery):
    pool, backend = make_pool(nursery, answers_before_the_body_ends())
    more = trio.Event()

    async def body() -> AsyncIterator[bytes]:
        yield b"first"
        await more.wait()
        yield b"last"

    async with trio.open_nursery() as request_nursery:
        response = await pool.request(A, b"POST", b"/", CHUNKED, body(), nursery=request_nursery)
        assert await response.read() == b"ok"
        assert repr(pool) == "<UpstreamPool open=1 idle={}>"  # the upload still owns it
        more.set()
    assert idle(pool) == ["<UpstreamConnection a.test:80 IDLE requests=1>"]
    assert await get(pool) == b"ok"
    assert len(backend.connects) == 1


async def test_an_upload_cancelled_after_the_response_closes_the_connection(nursery):
    pool, backend = make_pool(nursery, answers_before_the_body_ends())

    async def body() -> AsyncIterator[bytes]:
        yield b"first"
        await trio.sleep_forever()
        yield b"never"  # pragma: no cover

    async with trio.open_nursery() as request_nursery:
        response = await pool.request(A, b"POST", b"/", CHUNKED, body(), nursery=request_nursery)
        assert await response.read() == b"ok"
        request_nursery.cancel_scope.cancel()  # the gateway does this when the request ends
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"


async def test_a_streamed_body_without_a_nursery_is_sent_before_reading(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        while (request := await end.request()) is not None:
            await end.send(ok(request[1]))

    pool, _ = make_pool(nursery, script)

    async def body() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b""
        yield b"cd"

    async with await pool.request(A, b"POST", b"/", CHUNKED, body()) as response:
        assert await response.read() == b"abcd"
    assert idle(pool) == ["<UpstreamConnection a.test:80 IDLE requests=1>"]


async def test_an_upload_whose_source_fails_fails_the_response_with_that_error(nursery):
    class ClientGone(Exception):
        pass

    async def script(end: BackendEnd, index: int) -> None:
        await end.head()
        await trio.sleep_forever()

    pool, _ = make_pool(nursery, script)

    async def body() -> AsyncIterator[bytes]:
        yield b"first"
        raise ClientGone()

    async with trio.open_nursery() as request_nursery:
        with pytest.raises(ClientGone):
            await pool.request(A, b"POST", b"/", CHUNKED, body(), nursery=request_nursery)
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"


async def test_a_connection_is_an_async_context_manager(nursery):
    pool, _ = make_pool(nursery, serve_ok)
    assert await get(pool) == b"ok"
    conn = pool._checkout(A)
    assert isinstance(conn, UpstreamConnection)
    async with conn:
        assert repr(conn) == "<UpstreamConnection a.test:80 ACTIVE requests=1>"
    assert repr(conn) == "<UpstreamConnection a.test:80 CLOSED requests=1>"
    assert pool.open_connections == 0
    assert isinstance(UpstreamResponse, type)


# --- the staleness probe and the synchronous close on real sockets -----------------------------

async def test_a_socket_stream_is_probed_with_poll_and_closed_at_once():
    ours, theirs = trio.socket.socketpair()
    conn = UpstreamConnection(trio.SocketStream(ours), A)
    assert not conn.is_readable()
    await theirs.send(b"x")
    assert conn.is_readable()  # unasked-for bytes
    assert await conn.stream.receive_some(10) == b"x"
    assert not conn.is_readable()
    theirs.close()
    assert conn.is_readable()  # EOF
    conn.close()
    assert ours.fileno() == -1
    assert conn.is_readable()  # a closed socket is never reused either
    assert repr(conn) == "<UpstreamConnection a.test:80 CLOSED requests=0>"


async def test_a_socket_above_fd_setsize_is_probed_too():
    """``select`` cannot take a descriptor ≥ 1024: under load every such pooled connection looked
    stale and was replaced instead of reused (bench/llm_load.py at 500 req/s has ~1,500 fds)."""
    import fcntl
    import resource
    import socket

    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1200:
        pytest.skip("needs a file limit above 1,200")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    ours, theirs = socket.socketpair()
    high = fcntl.fcntl(ours.fileno(), fcntl.F_DUPFD, 1100)
    ours.close()
    conn = UpstreamConnection(trio.SocketStream(trio.socket.from_stdlib_socket(socket.socket(fileno=high))), A)
    try:
        assert high >= 1100
        assert not conn.is_readable()
        theirs.send(b"x")
        assert conn.is_readable()
    finally:
        conn.close()
        theirs.close()


async def test_a_tls_stream_is_probed_and_closed_through_its_transport():
    import ssl

    ours, theirs = trio.socket.socketpair()
    tls = trio.SSLStream(trio.SocketStream(ours), ssl.create_default_context(), server_hostname="a.test")
    conn = UpstreamConnection(tls, A)
    assert not conn.is_readable()
    theirs.close()
    assert conn.is_readable()
    conn.close()
    assert ours.fileno() == -1


async def test_a_stream_without_a_socket_or_probe_is_taken_as_fresh_and_closed_by_halves():
    pool_side, backend_side = trio.testing.memory_stream_pair()
    conn = UpstreamConnection(pool_side, A)
    assert not conn.is_readable()
    conn.close()
    with pytest.raises(trio.ClosedResourceError):
        await pool_side.send_stream.send_all(b"x")
    with pytest.raises(trio.ClosedResourceError):
        await pool_side.receive_stream.receive_some()


async def test_every_stale_pooled_connection_is_dropped_not_only_the_first(nursery):
    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nab\r\n2\r\ncd\r\n0\r\n\r\n")
        if index < 2:
            end.close()
        else:
            await end.serve_ok()

    pool, backend = make_pool(nursery, script)
    first, second = [await pool.request(A, b"GET", b"/", HEADERS) for _ in range(2)]
    assert (await first.read(), await second.read()) == (b"abcd", b"abcd")  # read() joins chunks as they came
    assert first.reason == b"OK"
    await trio.testing.wait_all_tasks_blocked()
    assert await get(pool) == b"abcd"
    assert idle(pool) == ["<UpstreamConnection a.test:80 IDLE requests=1>"]
    assert (pool.open_connections, pool.connections_created) == (1, 3)


# --- what the pool says when a backend misbehaves --------------------------------------------------

async def test_a_response_head_over_64_kib_is_a_bad_upstream_response(nursery):
    big = b"x-big: " + b"a" * (64 * 1024) + b"\r\n"

    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(b"HTTP/1.1 200 OK\r\n" + big)  # the head does not end within the cap...
        end.close()  # ...nor ever: without the cap this is a premature close, a different message

    pool, _ = make_pool(nursery, script)
    with pytest.raises(BadUpstreamResponse, match="invalid upstream response: Receive buffer too long"):
        await get(pool)
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"


async def test_a_head_just_under_the_cap_is_accepted(nursery):
    header = b"x-big: " + b"a" * (60 * 1024)

    async def script(end: BackendEnd, index: int) -> None:
        await end.request()
        await end.send(ok(b"ok", header))

    pool, _ = make_pool(nursery, script)
    assert await get(pool) == b"ok"


async def test_an_upload_that_fails_mid_body_surfaces_from_the_response_body(nursery):
    """The backend answers its headers early; when the client's upload then breaks, the body read
    raises the upload's error (what went wrong), not the backend connection's reset."""
    class ClientGone(Exception):
        pass

    headers_read = trio.Event()

    async def script(end: BackendEnd, index: int) -> None:
        await end.head()
        await end._event()  # the first chunk
        await end.send(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf")
        await trio.sleep_forever()

    pool, _ = make_pool(nursery, script)

    async def body() -> AsyncIterator[bytes]:
        yield b"first"
        await headers_read.wait()
        raise ClientGone()

    async with trio.open_nursery() as request_nursery:
        response = await pool.request(A, b"POST", b"/", CHUNKED, body(), nursery=request_nursery)
        headers_read.set()
        chunks = []
        with pytest.raises(ClientGone):
            async with response:
                async for chunk in response.body():
                    chunks.append(chunk)
        assert chunks == [b"half"]
    assert repr(pool) == "<UpstreamPool open=0 idle={}>"


class BrokenStream(trio.abc.Stream):
    """A transport whose every send or receive fails as a reset socket does."""

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        raise trio.BrokenResourceError("reset by peer")

    async def wait_send_all_might_not_block(self) -> None:  # pragma: no cover
        raise trio.BrokenResourceError("reset by peer")

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        raise trio.BrokenResourceError("reset by peer")

    async def send_eof(self) -> None:  # pragma: no cover
        pass

    async def aclose(self) -> None:  # pragma: no cover
        pass


async def test_a_reset_while_sending_and_while_reading_say_which():
    conn = UpstreamConnection(BrokenStream(), A)
    with pytest.raises(BackendUnreachable) as sending:
        await conn.send(b"GET / HTTP/1.1\r\n\r\n")
    assert sending.value.message == "upstream connection reset while sending: reset by peer"
    with pytest.raises(BadUpstreamResponse) as reading:
        await conn.next_event()
    assert reading.value.message == "upstream connection reset: reset by peer"


def test_a_bare_pool_has_the_documented_backend_defaults():
    """``UpstreamPool()`` (tests, tools) and ``config.backend``'s defaults (what the runtime applies)
    are one set of numbers: docs/reliability.md documents them once."""
    from trioproxy.config.model import BackendConnectionSpec

    pool, spec = UpstreamPool(), BackendConnectionSpec()
    assert (pool.max_idle_per_target, pool.idle_timeout, pool.connect_timeout) == (
        spec.pool_max_idle, spec.pool_idle_timeout, spec.connect_timeout)


# --- opening TCP connections ------------------------------------------------------------------

async def test_an_ip_literal_backend_is_connected_without_the_resolver(monkeypatch):
    """127.0.0.1 / ::1 skip trio.open_tcp_stream (resolver, happy-eyeballs nursery): ~2.7x less CPU
    per connect; the stream is the same kind, with TCP_NODELAY."""
    import socket

    from trioproxy.upstream import pool as upstream

    async def no_resolver(*args, **kwargs):
        raise AssertionError("open_tcp_stream used for an IP literal")

    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    monkeypatch.setattr(trio, "open_tcp_stream", no_resolver)
    stream = await upstream.open_tcp(Address("127.0.0.1", port))
    try:
        assert isinstance(stream, trio.SocketStream)
        assert stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        accepted, _ = await listener.accept()
        await stream.send_all(b"x")
        assert await accepted.recv(1) == b"x"
        accepted.close()
    finally:
        await stream.aclose()
        listener.close()
    with pytest.raises(AssertionError, match="open_tcp_stream used"):
        await upstream.open_tcp(Address("localhost", port))  # a name still goes through the resolver


async def test_a_refused_ip_literal_connect_names_the_reason():
    listener = trio.socket.socket()
    await listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()  # nothing listens there now
    pool = UpstreamPool()
    with pytest.raises(BackendUnreachable, match=rf"upstream connect error: Connection refused \(127\.0\.0\.1:{port}\)"):
        await pool.request(Address("127.0.0.1", port), b"GET", b"/", [(b"host", b"x")], b"", nursery=None)


# --- the deadline (``request(deadline=...)``) --------------------------------------------------

async def deadline_get(pool: UpstreamPool, backend: PlannedBackend, seconds: float) -> bytes:
    response = await pool.request(Address("127.0.0.1", backend.port), b"GET", b"/", [(b"host", b"b")],
                                  deadline=trio.current_time() + seconds)
    async with response:
        return await response.read()


async def test_a_pooled_connection_past_its_deadline_raises_too_slow_and_is_closed(nursery, mock_clock):
    mock_clock.autojump_threshold = 0.1
    backend = await nursery.start(PlannedBackend("ok", "hang").serve)
    pool = UpstreamPool()
    assert await deadline_get(pool, backend, 5) == b"ok"
    assert len(pool.idle_connections(Address("127.0.0.1", backend.port))) == 1
    start = trio.current_time()
    with pytest.raises(trio.TooSlowError):
        await deadline_get(pool, backend, 5)
    assert trio.current_time() - start == pytest.approx(5)
    assert pool.open_connections == 0 and len(pool.deadlines) == 0
    assert backend.connections == 1


async def test_a_new_connection_past_its_deadline_raises_too_slow_too(nursery, mock_clock):
    mock_clock.autojump_threshold = 0.1
    backend = await nursery.start(PlannedBackend("hang").serve)
    pool = UpstreamPool()
    start = trio.current_time()
    with pytest.raises(trio.TooSlowError):
        await deadline_get(pool, backend, 3)
    assert trio.current_time() - start == pytest.approx(3)
    assert pool.open_connections == 0


async def test_a_dead_pooled_connection_is_replayed_on_a_fresh_one_within_the_deadline(nursery, mock_clock):
    mock_clock.autojump_threshold = 0.1
    backend = await nursery.start(PlannedBackend("ok", "close", "ok").serve)
    pool = UpstreamPool()
    assert await deadline_get(pool, backend, 5) == b"ok"
    assert await deadline_get(pool, backend, 5) == b"ok"  # the backend closed its first connection unanswered
    assert backend.connections == 2 and backend.requests == 3
    assert len(pool.deadlines) == 0


async def test_a_dead_pooled_connection_whose_replay_hangs_is_still_bounded(nursery, mock_clock):
    mock_clock.autojump_threshold = 0.1
    backend = await nursery.start(PlannedBackend("ok", "close", "hang").serve)
    pool = UpstreamPool()
    assert await deadline_get(pool, backend, 5) == b"ok"
    start = trio.current_time()
    with pytest.raises(trio.TooSlowError):
        await deadline_get(pool, backend, 5)
    assert trio.current_time() - start == pytest.approx(5)
    assert backend.connections == 2


async def test_an_error_on_a_pooled_connection_before_its_deadline_is_that_error(nursery, mock_clock):
    mock_clock.autojump_threshold = 0.1
    backend = await nursery.start(PlannedBackend("ok", "close", "close").serve)
    pool = UpstreamPool()
    assert await deadline_get(pool, backend, 5) == b"ok"
    with pytest.raises(BadUpstreamResponse, match="closed the connection before"):
        await deadline_get(pool, backend, 5)
    assert len(pool.deadlines) == 0 and pool.open_connections == 0
