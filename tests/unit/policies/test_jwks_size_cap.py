"""The JWKS size cap holds while the body streams in, against a real HTTP server on port 0.

Before, the body was buffered whole (``response.content``) and measured afterwards: an IdP (or
whatever answers at the JWKS URL) that sends without end made the gateway buffer everything it
sent until the fetch timed out, hundreds of MB on a fast link."""

from __future__ import annotations

import h11
import trio

from trioproxy.policies.jwks import MAX_JWKS_BYTES, RemoteJwks

CHUNK = b" " * 65536


class EndlessJwks:
    """Answers ``GET`` with a body that never ends (chunked) or a huge ``content-length``; counts
    the bytes the client took before it hung up."""

    def __init__(self, *, declare_length: bool) -> None:
        self.declare_length = declare_length
        self.sent = 0
        self.done = trio.Event()
        self.port = 0

    async def serve(self, task_status: trio.TaskStatus[EndlessJwks] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self)
            await trio.serve_listeners(self._connection, listeners, handler_nursery=nursery)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while not isinstance(conn.next_event(), h11.Request):
                conn.receive_data(await stream.receive_some(65536))
            framing = [("content-length", str(1 << 40))] if self.declare_length else [("transfer-encoding", "chunked")]
            await stream.send_all(conn.send(h11.Response(status_code=200, headers=[
                ("content-type", "application/json"), *framing])))
            await stream.send_all(conn.send(h11.Data(data=b'{"keys": [')))
            while True:
                await stream.send_all(conn.send(h11.Data(data=CHUNK)))
                self.sent += len(CHUNK)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.done.set()
            await stream.aclose()


async def _fetch_from(nursery: trio.Nursery, *, declare_length: bool) -> tuple[RemoteJwks, EndlessJwks, bool]:
    server = await nursery.start(EndlessJwks(declare_length=declare_length).serve)
    remote = RemoteJwks(f"http://127.0.0.1:{server.port}/jwks", timeout=20.0)
    with trio.fail_after(15):  # before the fix: 20 s of buffering, then "timed out"
        fresh = await remote.fetch()
        await server.done.wait()
    return remote, server, fresh


async def test_an_endless_jwks_body_is_abandoned_at_the_cap(nursery):
    remote, server, fresh = await _fetch_from(nursery, declare_length=False)
    assert not fresh and remote.last_error == f"JWKS larger than {MAX_JWKS_BYTES} bytes"
    # the cap plus what the two sockets' buffers held when the client hung up
    assert server.sent < MAX_JWKS_BYTES + 8 * 1024 * 1024


async def test_a_jwks_declaring_a_huge_length_is_refused_before_its_body(nursery):
    remote, server, fresh = await _fetch_from(nursery, declare_length=True)
    assert not fresh and remote.last_error == f"JWKS larger than {MAX_JWKS_BYTES} bytes"
    assert server.sent < 8 * 1024 * 1024
