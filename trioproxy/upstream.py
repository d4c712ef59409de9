"""HTTP/1.1 to backends: an h11 keep-alive connection pool on Trio streams.

Why not httpx here: its pool costs 0.7–2.8 ms per request (DESIGN.md); this one is a thin
loop around h11's state machine. A connection goes back to the pool only when both sides
reached DONE (``start_next_cycle``); anything else (an error, a cancelled body, ``Connection:
close``) closes it. An idle connection that became readable while pooled (EOF, or bytes nobody
asked for) is stale and dropped before use, the way httpcore checks ``is_readable``.
"""

from __future__ import annotations

import select
from collections import deque
from collections.abc import AsyncIterator, Sequence

import h11
import trio

from .asgi import Header
from .config.model import Address
from .errors import BackendUnreachable, BadUpstreamResponse

READ_SIZE = 65536
MAX_RESPONSE_HEADER_BYTES = 64 * 1024


def _is_readable(stream: trio.SocketStream) -> bool:
    """True when a pooled socket has EOF or unexpected data waiting: it must not be reused.

    ``select`` with a zero timeout: one syscall, no poll object to build per reuse (the profile
    in bench/README.md showed ``select.poll()`` setup as trioproxy's largest own cost)."""
    try:
        readable, _, _ = select.select((stream.socket.fileno(),), (), (), 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class UpstreamConnection:
    __slots__ = ("closed", "got_bytes", "h11", "idle_since", "reused", "stream", "target")

    def __init__(self, stream: trio.SocketStream, target: Address) -> None:
        self.stream = stream
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_RESPONSE_HEADER_BYTES)
        self.target = target
        self.idle_since = 0.0
        self.reused = False
        self.got_bytes = False  # in the current exchange; a dead reused socket shows none
        self.closed = False


class _Upload:
    """Sends a streamed request body while the response is read (full duplex, as Envoy does):
    a backend that answers while it still reads, such as a mirror, must not deadlock us."""

    def __init__(self, pool: UpstreamPool, conn: UpstreamConnection, body: AsyncIterator[bytes]) -> None:
        self.pool = pool
        self.conn = conn
        self.body = body
        self.error: BaseException | None = None
        self.done = trio.Event()

    async def run(self) -> None:
        conn = self.conn
        try:
            async for chunk in self.body:
                if chunk:
                    await self.pool._send(conn, conn.h11.send(h11.Data(data=chunk)))
            await self.pool._send(conn, conn.h11.send(h11.EndOfMessage()))
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which re-raises it
            self.error = exc
            self.pool._close_now(conn)  # wakes the reader with ClosedResourceError
        finally:
            self.done.set()


class UpstreamResponse:
    """A response whose body is still on the wire; iterate ``body()`` once, or ``aclose()``."""

    def __init__(self, pool: UpstreamPool, conn: UpstreamConnection, event: h11.Response,
                 upload: _Upload | None = None) -> None:
        self.pool = pool
        self._upload = upload
        self.status: int = event.status_code
        self.headers: list[Header] = list(event.headers)
        self.reason: bytes = event.reason
        self._conn: UpstreamConnection | None = conn

    async def body(self) -> AsyncIterator[bytes]:
        """Yield body chunks as they arrive; on completion the connection returns to the pool."""
        conn = self._conn
        assert conn is not None, "body() already consumed"
        try:
            while True:
                try:
                    event = await self.pool._next_event(conn)
                except BadUpstreamResponse:
                    if self._upload is not None and self._upload.error is not None:
                        raise self._upload.error from None
                    raise
                if type(event) is h11.Data:
                    yield event.data
                elif type(event) is h11.EndOfMessage:
                    self._conn = None
                    upload = self._upload
                    for _ in range(3):  # an upload that is only finishing its last write
                        if upload is None or upload.done.is_set():
                            break
                        await trio.lowlevel.checkpoint()
                    self.pool._release(conn)  # not DONE both ways → closed, not pooled
                    return
                else:  # pragma: no cover - h11 yields nothing else after Response
                    raise BadUpstreamResponse(f"unexpected upstream event {type(event).__name__}")
        finally:
            if self._conn is not None:
                # Not fully read (error, cancellation, early exit): the connection is unusable.
                self._conn = None
                self.pool._close_now(conn)

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.body()])

    async def aclose(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            self.pool._close_now(conn)


class UpstreamPool:
    """Keep-alive connections per target, most recently used first."""

    def __init__(self, *, max_idle_per_target: int = 256, idle_timeout: float = 90.0, connect_timeout: float = 10.0) -> None:
        self._idle: dict[Address, deque[UpstreamConnection]] = {}
        self.max_idle_per_target = max_idle_per_target
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self.open_connections = 0
        self.connections_created = 0

    # --- connections ----------------------------------------------------------------------

    def _take_idle(self, target: Address) -> UpstreamConnection | None:
        idle = self._idle.get(target)
        now = trio.current_time()
        while idle:
            conn = idle.pop()
            if now - conn.idle_since > self.idle_timeout or _is_readable(conn.stream):
                self._close_now(conn)
                continue
            conn.reused = True
            return conn
        return None

    async def _connect(self, target: Address) -> UpstreamConnection:
        try:
            with trio.fail_after(self.connect_timeout):
                stream = await trio.open_tcp_stream(target.host, target.port)
        except trio.TooSlowError:
            raise BackendUnreachable(f"upstream connect timeout ({target})") from None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise BackendUnreachable(f"upstream connect error: {reason} ({target})") from None
        self.open_connections += 1
        self.connections_created += 1
        return UpstreamConnection(stream, target)

    def _release(self, conn: UpstreamConnection) -> None:
        if conn.h11.our_state is h11.DONE and conn.h11.their_state is h11.DONE:
            conn.h11.start_next_cycle()
            conn.got_bytes = False
            idle = self._idle.setdefault(conn.target, deque())
            if len(idle) < self.max_idle_per_target:
                conn.idle_since = trio.current_time()
                idle.append(conn)
                return
        self._close_now(conn)

    def _close_now(self, conn: UpstreamConnection) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.open_connections -= 1
        try:
            conn.stream.socket.close()
        except OSError:  # pragma: no cover
            pass

    def close_idle(self) -> None:
        for idle in self._idle.values():
            while idle:
                self._close_now(idle.pop())

    # --- the exchange ---------------------------------------------------------------------

    async def _next_event(self, conn: UpstreamConnection) -> h11.Event:
        while True:
            try:
                event = conn.h11.next_event()
            except h11.RemoteProtocolError as exc:
                raise BadUpstreamResponse(f"invalid upstream response: {exc}") from None
            if event is not h11.NEED_DATA:
                if type(event) is h11.ConnectionClosed:
                    raise BadUpstreamResponse("upstream closed the connection before the response completed")
                return event
            try:
                data = await conn.stream.receive_some(READ_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise BadUpstreamResponse(f"upstream connection reset: {exc}") from None
            if data:
                conn.got_bytes = True
            conn.h11.receive_data(data)

    async def _send(self, conn: UpstreamConnection, data: bytes) -> None:
        try:
            await conn.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise BackendUnreachable(f"upstream connection reset while sending: {exc}") from None

    async def request(
        self,
        target: Address,
        method: bytes,
        path: bytes,
        headers: Sequence[Header],
        body: bytes | AsyncIterator[bytes] = b"",
        *,
        nursery: trio.Nursery | None = None,
    ) -> UpstreamResponse:
        """Send one request and return once the response headers arrived.

        With a ``nursery``, a streamed body is uploaded by a task of it while the response is
        read; without one, it is sent before reading. A buffered body (``bytes``) can be replayed, so a reused connection that turns out to be
        dead before any response byte is retried once on a fresh one; a streamed body cannot.
        """
        replayable = isinstance(body, bytes)
        conn = self._take_idle(target) or await self._connect(target)
        while True:
            try:
                return await self._exchange(conn, method, path, headers, body, nursery)
            except (BackendUnreachable, BadUpstreamResponse):
                self._close_now(conn)
                if not (replayable and conn.reused and not conn.got_bytes):
                    raise
                conn = await self._connect(target)
            except BaseException:
                self._close_now(conn)
                raise

    async def _exchange(
        self, conn: UpstreamConnection, method: bytes, path: bytes, headers: Sequence[Header],
        body: bytes | AsyncIterator[bytes], nursery: trio.Nursery | None,
    ) -> UpstreamResponse:
        try:
            head = conn.h11.send(h11.Request(method=method, target=path, headers=headers))
        except h11.LocalProtocolError as exc:
            raise BadUpstreamResponse(f"cannot forward request: {exc}") from None
        upload = None
        if isinstance(body, bytes):
            data = head + (conn.h11.send(h11.Data(data=body)) if body else b"") + conn.h11.send(h11.EndOfMessage())
            await self._send(conn, data)
        else:
            await self._send(conn, head)
            upload = _Upload(self, conn, body)
            if nursery is None:
                await upload.run()
                if upload.error is not None:
                    raise upload.error
            else:
                nursery.start_soon(upload.run)
        try:
            while True:
                event = await self._next_event(conn)
                if type(event) is h11.Response:
                    return UpstreamResponse(self, conn, event, upload)
                if type(event) is not h11.InformationalResponse:  # pragma: no cover
                    raise BadUpstreamResponse(f"unexpected upstream event {type(event).__name__}")
        except BadUpstreamResponse:
            if upload is not None and upload.error is not None:
                raise upload.error from None
            raise
