"""HTTP/1.1 to backends: an h11 keep-alive connection pool on Trio streams.

Why not httpx here: its pool costs 0.7–2.8 ms per request (bench/README.md); this one is a thin
loop around h11's state machine, split the way httpcore splits its own. An exchange's bytes go
through llhttp (``wire.FastClient``: h11's events and checks, parsed in C) except for HEAD and
CONNECT, whose answers h11 frames by the request's method, and with ``TRIOPROXY_HTTP1_PARSER=h11``:

- ``UpstreamConnection`` owns one stream and its h11 state: it sends, reads the next event,
  runs one request up to the response headers, and is released or closed by itself.
- ``UpstreamPool`` only hands connections out and takes them back. Its state (the idle deques and
  the counters) changes in three synchronous methods, ``_checkout``, ``_opened`` and ``_returned``,
  so no cancellation can interleave with a half-made change.
- ``UpstreamResponse`` is a response whose body is still on the wire; callers read it with
  ``async with aclosing(response.body())`` or close it with ``async with response``.

A connection goes back to the pool only when both sides reached DONE (``start_next_cycle``) and
a streamed upload finished; anything else (an error, a cancelled body, ``Connection: close``)
closes it. An idle connection that became readable while pooled (EOF, or bytes nobody asked for)
is stale and dropped before use, the way httpcore checks ``is_readable``.

The pool opens streams through ``connect`` (a TCP connection by default), so tests drive it over
``trio.testing`` memory streams with scripted bytes (tests/unit/upstream/test_upstream.py; docs/upstream.md).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import select
import socket
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import Any, cast

import h11
import trio

from .. import direct_io
from ..asgi import Header
from ..config.model import Address, TlsAddress
from ..errors import BackendUnreachable, BadUpstreamResponse
from ..fd_deadlines import FdDeadlines
from .tls import open_tls
from .wire import BadResponse, FastClient, LocalProtocolError

#: llhttp parses responses (``wire.FastClient``) unless ``TRIOPROXY_HTTP1_PARSER=h11`` (frontend/http1.py)
FAST = os.environ.get("TRIOPROXY_HTTP1_PARSER", "llhttp") != "h11"

READ_SIZE = 65536
MAX_RESPONSE_HEADER_BYTES = 64 * 1024

Connect = Callable[[Address], Awaitable[trio.abc.Stream]]
"""Opens the byte stream to a backend; ``OSError`` means unreachable."""


async def open_tcp(target: Address) -> trio.abc.Stream:
    """TCP, or TLS for a ``TlsAddress`` (a backend with backendTLS: ``upstream_tls.py``)."""
    if isinstance(target, TlsAddress):
        return await open_tls(target)
    family = _ip_family(target.host)
    if family is None:
        return await trio.open_tcp_stream(target.host, target.port)
    # An IP literal needs neither the resolver nor happy eyeballs' nursery and tasks:
    # 125 us of CPU per connect instead of 330-350 us (trio micro-benchmark, accept side
    # included), which counts while a pool fills (750 connects in 1.5 s, bench/llm_load.py).
    sock = trio.socket.socket(family, socket.SOCK_STREAM)
    try:
        await sock.connect((target.host, target.port))
    except OSError as exc:
        sock.close()
        if exc.errno:  # trio words it "Error connecting to (...): <reason>"; the pool adds the target
            raise OSError(exc.errno, os.strerror(exc.errno)) from None
        raise
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)  # sets TCP_NODELAY, as open_tcp_stream's does


@functools.lru_cache(maxsize=256)
def _ip_family(host: str) -> int | None:
    """``AF_INET``/``AF_INET6`` for an IP literal, None for a name to resolve."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    return socket.AF_INET6 if address.version == 6 else socket.AF_INET


def _socket_of(stream: trio.abc.Stream) -> trio.socket.SocketType | None:
    """The OS socket under a stream (a TLS stream wraps its transport), if there is one."""
    if type(stream) is trio.SocketStream:
        return stream.socket
    inner: Any = stream
    while inner is not None:
        sock = getattr(inner, "socket", None)
        if sock is not None:
            return cast(trio.socket.SocketType, sock)
        inner = getattr(inner, "transport_stream", None)
    return None


def is_readable(stream: trio.abc.Stream) -> bool:
    """True when a pooled stream has EOF or unexpected data waiting: it must not be reused.

    ``poll`` with a zero timeout, one syscall. Not ``select``: it raises for a descriptor at or
    above ``FD_SETSIZE`` (1024), which made every pooled connection past the first ~1,000 fds look
    stale, so under load (750 requests in flight, bench/llm_load.py) the pool closed and reopened
    connections instead of reusing them. A stream without a socket (a test's memory stream) answers
    through its own ``is_readable()``."""
    sock = _socket_of(stream)
    if sock is None:
        probe = getattr(stream, "is_readable", None)
        return bool(probe()) if probe is not None else False
    return fd_readable(sock.fileno())


def fd_readable(fd: int) -> bool:
    """``is_readable`` for a socket's descriptor (-1: closed, so readable)."""
    if fd < 0:
        return True
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    try:
        return bool(poller.poll(0))
    except OSError:  # pragma: no cover
        return True


def _close_stream_now(stream: trio.abc.Stream) -> None:
    """Close without awaiting, so it can run in ``finally`` blocks and under cancellation; an
    aborted exchange owes the backend no graceful TLS close."""
    sock = _socket_of(stream)
    if sock is not None:
        try:
            sock.close()
        except OSError:  # pragma: no cover
            pass
        return
    parts: tuple[Any, ...] = (stream,)
    if isinstance(stream, trio.StapledStream):  # trio.testing.memory_stream_pair's halves
        parts = (stream.send_stream, stream.receive_stream)
    for part in parts:
        close = getattr(part, "close", None)
        if close is not None:
            close()


class UpstreamConnection:
    """One keep-alive HTTP/1.1 connection to a backend. Not shared: one exchange at a time."""

    __slots__ = ("closed", "fast", "fd", "got_bytes", "h11", "idle", "idle_since", "pool", "requests", "reused",
                 "stream", "target")

    def __init__(self, stream: trio.abc.Stream, target: Address, pool: UpstreamPool | None = None) -> None:
        self.stream = stream
        #: the socket's descriptor for direct I/O; -1 for TLS and test streams, and once closed
        self.fd = stream.socket.fileno() if type(stream) is trio.SocketStream else -1
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_RESPONSE_HEADER_BYTES)
        self.fast: FastClient | None = None  # this exchange through llhttp; None: through ``h11``
        self.target = target
        self.pool = pool
        self.idle = False
        self.idle_since = 0.0
        self.reused = False
        self.got_bytes = False  # in the current exchange; a dead reused socket shows none
        self.closed = False
        self.requests = 0

    def __repr__(self) -> str:
        state = "CLOSED" if self.closed else "IDLE" if self.idle else "ACTIVE"
        return f"<UpstreamConnection {self.target} {state} requests={self.requests}>"

    # --- I/O --------------------------------------------------------------------------------

    # A plain TCP stream's socket is used directly (direct_io.py): a write the socket takes whole
    # needs no ``send_all``, and the response head is waited for before the first ``recv`` (a
    # backend never answers within the microseconds after the request went out).

    async def send(self, data: bytes) -> None:
        fd = self.fd
        try:
            sent = direct_io.send_now(fd, data) if fd >= 0 else 0
            if sent < len(data):
                await self.stream.send_all(memoryview(data)[sent:])
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise BackendUnreachable(f"upstream connection reset while sending: {exc}") from None

    async def _receive(self, *, wait_first: bool) -> bytes:
        fd = self.fd
        if fd < 0:
            return cast(bytes, await self.stream.receive_some(READ_SIZE))
        return await direct_io.receive(fd, READ_SIZE, wait_first=wait_first)

    def parse(self) -> h11.Event | type[h11.NEED_DATA]:
        """The next event from the bytes already received (no I/O), or ``NEED_DATA``."""
        fast = self.fast
        if fast is not None:
            try:
                return fast.next_event()  # type: ignore[no-any-return]  # (``cast`` is a call per event)
            except BadResponse as exc:
                raise BadUpstreamResponse(str(exc)) from None
        try:
            event = self.h11.next_event()
        except h11.RemoteProtocolError as exc:
            if "ConnectionClosed" in str(exc):  # EOF before any response: h11 words it for its own state
                raise BadUpstreamResponse("upstream closed the connection before the response completed") from None
            raise BadUpstreamResponse(f"invalid upstream response: {exc}") from None
        if type(event) is h11.ConnectionClosed:
            raise BadUpstreamResponse("upstream closed the connection before the response completed")
        return cast("h11.Event | type[h11.NEED_DATA]", event)  # PAUSED cannot happen to a client mid-response

    async def next_event(self) -> h11.Event:
        conn = self.h11
        fast = self.fast
        while True:
            event = self.parse()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            try:
                data = await self._receive(wait_first=fast.awaiting_head if fast is not None
                                           else conn.their_state is h11.SEND_RESPONSE)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise BadUpstreamResponse(f"upstream connection reset: {exc}") from None
            if data:
                self.got_bytes = True
            if fast is not None:
                fast.receive_data(data)
            else:
                conn.receive_data(data)

    def is_readable(self) -> bool:
        """Stale: EOF or unasked-for bytes arrived while the connection sat in the pool."""
        fd = self.fd
        return fd_readable(fd) if fd >= 0 else is_readable(self.stream)

    # --- one exchange -----------------------------------------------------------------------

    async def request(self, method: bytes, path: bytes, headers: Sequence[Header],
                      body: bytes | AsyncIterator[bytes], nursery: trio.Nursery | None) -> UpstreamResponse:
        """Send the request and read up to the final response headers. On failure the caller
        closes the connection (``UpstreamPool.request`` does)."""
        self.requests += 1
        try:
            if FAST and method != b"HEAD" and method != b"CONNECT":
                fast = self.fast = FastClient(MAX_RESPONSE_HEADER_BYTES)
                head = fast.request(method, path, list(headers))
            else:  # llhttp cannot be told that a HEAD's answer has no body: h11 reads it
                self.fast = None
                head = self.h11.send(h11.Request(method=method, target=path, headers=list(headers)))
        except LocalProtocolError as exc:
            raise BadUpstreamResponse(f"cannot forward request: {exc}") from None
        upload = None
        if isinstance(body, bytes):
            try:
                data = head + (self.encode(body) if body else b"") + self.encode_end()
            except LocalProtocolError as exc:
                raise BadUpstreamResponse(f"cannot forward request: {exc}") from None
            await self.send(data)
        else:
            await self.send(head)
            upload = _Upload(self, body)
            if nursery is None:
                await upload.run()
                if upload.error is not None:
                    raise upload.error
            else:
                nursery.start_soon(upload.run)
        try:
            while True:
                event = await self.next_event()
                if type(event) is h11.Response:
                    return UpstreamResponse(self, event, upload)
                if type(event) is not h11.InformationalResponse:  # pragma: no cover
                    raise BadUpstreamResponse(f"unexpected upstream event {type(event).__name__}")
        except BadUpstreamResponse:
            if upload is not None and upload.error is not None:
                raise upload.error from None
            raise

    def encode(self, data: bytes) -> bytes:
        """A piece of the request body, framed (``LocalProtocolError`` past its Content-Length)."""
        fast = self.fast
        return fast.data(data) if fast is not None else self.h11.send(h11.Data(data=data)) or b""

    def encode_end(self) -> bytes:
        fast = self.fast
        return fast.end() if fast is not None else self.h11.send(h11.EndOfMessage()) or b""

    # --- end of an exchange -----------------------------------------------------------------

    def release(self) -> None:
        """Back to the pool when both sides are DONE and nothing follows the response; otherwise
        it cannot be reused: closed."""
        if self.closed:
            return
        fast = self.fast
        if fast is not None:
            if fast.reusable:
                self.fast = None
                self.got_bytes = False
                if self.pool is not None:
                    self.pool._returned(self)
                    return
        elif self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE \
                and not self.h11.trailing_data[0]:  # bytes after the response answer no request
            self.h11.start_next_cycle()
            self.got_bytes = False
            if self.pool is not None:
                self.pool._returned(self)
                return
        self.close()

    def close(self) -> None:
        """Close at once (idempotent); the pool stops counting it."""
        if self.closed:
            return
        self.closed = True
        self.idle = False
        self.fd = -1
        _close_stream_now(self.stream)
        if self.pool is not None:
            self.pool._returned(self)

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> UpstreamConnection:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


class _Upload:
    """Sends a streamed request body while the response is read (full duplex, as Envoy does):
    a backend that answers while it still reads, such as a mirror, must not deadlock us.

    The connection is released by whichever finishes last, the response body or this upload,
    so a response that completes while the upload's last write is still in flight keeps the
    connection (no guess at how many checkpoints that write needs)."""

    __slots__ = ("body", "conn", "error", "finished", "release_when_done")

    def __init__(self, conn: UpstreamConnection, body: AsyncIterator[bytes]) -> None:
        self.conn = conn
        self.body = body
        self.error: BaseException | None = None
        self.finished = False
        self.release_when_done = False  # set by the response once its body is complete

    async def run(self) -> None:
        conn = self.conn
        try:
            async for chunk in self.body:
                if chunk:
                    await conn.send(conn.encode(chunk))
            await conn.send(conn.encode_end())
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which re-raises it
            self.error = exc
            conn.close()  # wakes the reader with ClosedResourceError
        except BaseException:
            conn.close()  # cancelled: part of the body may be unsent
            raise
        else:
            if self.release_when_done:
                conn.release()
        finally:
            self.finished = True


class UpstreamResponse:
    """A response whose body is still on the wire; iterate ``body()`` once, or ``aclose()``."""

    __slots__ = ("_conn", "_early", "_early_end", "_error", "_upload", "headers", "reason", "status")

    def __init__(self, conn: UpstreamConnection, event: h11.Response, upload: _Upload | None = None) -> None:
        self._upload = upload
        self._error: BadUpstreamResponse | None = None  # met by ``ready``; ``body()`` raises it
        self.status: int = event.status_code
        # (lower-cased name, value) as iterating h11's ``Headers`` gives them, without its Python
        # ``__getitem__`` per line
        self.headers: list[Header] = [(name, value) for _, name, value in event.headers._full_items]
        self.reason: bytes = event.reason
        self._conn: UpstreamConnection | None = conn
        self._early: list[bytes] = []  # read by ``prefetch``, not yet handed on
        self._early_end = False  # ``prefetch`` met the body's end

    def __repr__(self) -> str:
        state = "open" if self._conn is not None else "done"
        return f"<UpstreamResponse {self.status} {state}>"

    def ready(self) -> tuple[list[bytes], bool]:
        """The body chunks already received (no I/O: they came with the headers), and whether
        that is the whole body; if it is, the connection returns to the pool (as ``body()``
        does at the end) and there is no ``body()`` to read. Lets the gateway answer a small
        response in one write instead of one per piece (bench/README.md, issue 20)."""
        conn = self._conn
        chunks, self._early = self._early, []
        if self._early_end:
            return chunks, True
        if conn is None or self._error is not None:
            return chunks, False
        while True:
            try:
                event = conn.parse()
            except BadUpstreamResponse as error:
                self._error = error
                return chunks, False
            if type(event) is h11.Data:
                chunks.append(event.data)
            elif type(event) is h11.EndOfMessage:
                self._conn = None
                self._complete(conn)
                return chunks, True
            elif event is h11.NEED_DATA:
                return chunks, False
            else:  # pragma: no cover - h11 yields nothing else after Response
                self._error = BadUpstreamResponse(f"unexpected upstream event {type(event).__name__}")
                return chunks, False

    def _complete(self, conn: UpstreamConnection) -> None:
        upload = self._upload
        if upload is None or upload.finished:
            conn.release()  # not DONE both ways → closed, not pooled
        else:
            upload.release_when_done = True  # its last write is still going

    async def prefetch(self) -> None:
        """Wait for the first body bytes (or the body's end), kept for ``ready``/``body``: a
        first-token timeout is decided before anything goes to the client (proxy/attempts.py)."""
        conn = self._conn
        if conn is None or self._error is not None or self._early or self._early_end:
            return
        while True:
            try:
                event = await conn.next_event()
            except BadUpstreamResponse as error:
                self._error = error
                return
            if type(event) is h11.Data:
                if event.data:
                    self._early.append(event.data)
                    return
            elif type(event) is h11.EndOfMessage:
                self._conn = None
                self._early_end = True
                self._complete(conn)
                return
            else:  # pragma: no cover - h11 yields nothing else after Response
                self._error = BadUpstreamResponse(f"unexpected upstream event {type(event).__name__}")
                return

    def prefetch_error(self) -> BadUpstreamResponse | None:
        """The failure ``prefetch`` met before any body byte (a reset right after the head)."""
        return self._error if not self._early and not self._early_end else None

    async def body(self) -> AsyncGenerator[bytes, None]:
        """Yield body chunks as they arrive; on completion the connection returns to the pool."""
        early, self._early = self._early, []
        for chunk in early:
            yield chunk
        if self._early_end:
            return
        conn = self._conn
        assert conn is not None, "body() already consumed"
        try:
            while True:
                try:
                    if self._error is not None:
                        raise self._error
                    event = await conn.next_event()
                except BadUpstreamResponse:
                    if self._upload is not None and self._upload.error is not None:
                        raise self._upload.error from None
                    raise
                if type(event) is h11.Data:
                    yield event.data
                elif type(event) is h11.EndOfMessage:
                    self._conn = None
                    self._complete(conn)
                    return
                else:  # pragma: no cover - h11 yields nothing else after Response
                    raise BadUpstreamResponse(f"unexpected upstream event {type(event).__name__}")
        finally:
            if self._conn is not None:
                # Not fully read (error, cancellation, early exit): the connection is unusable.
                self._conn = None
                conn.close()

    async def read(self) -> bytes:
        async with aclosing(self.body()) as chunks:
            return b"".join([chunk async for chunk in chunks])

    def close(self) -> None:
        """``aclose`` without its checkpoint: for a caller that just awaited (the gateway, at a
        response's end), where one more scheduling round per request buys nothing."""
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()


class UpstreamPool:
    """Keep-alive connections per target, most recently used first."""

    def __init__(self, *, max_idle_per_target: int = 256, idle_timeout: float = 90.0, connect_timeout: float = 10.0,
                 connect: Connect = open_tcp) -> None:
        self._idle: dict[Address, deque[UpstreamConnection]] = {}
        self.max_idle_per_target = max_idle_per_target
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self.connect = connect
        self.open_connections = 0
        self.connections_created = 0
        self.closed = False
        self.deadlines = FdDeadlines()  # ``request``'s deadline on a pooled connection's answer

    def __repr__(self) -> str:
        idle = {str(target): len(conns) for target, conns in self._idle.items() if conns}
        return f"<UpstreamPool open={self.open_connections} idle={idle}{' closed' if self.closed else ''}>"

    def idle_connections(self, target: Address) -> list[UpstreamConnection]:
        """The pooled connections to ``target``, least recently used first (for tests and stats)."""
        return list(self._idle.get(target, ()))

    # --- the pool's state: only these three change it, and none of them awaits ---------------

    def _checkout(self, target: Address) -> UpstreamConnection | None:
        idle = self._idle.get(target)
        now = trio.current_time()
        while idle:
            conn = idle.pop()
            conn.idle = False
            if now - conn.idle_since > self.idle_timeout or conn.is_readable():
                conn.close()
                continue
            conn.reused = True
            return conn
        return None

    def _opened(self, stream: trio.abc.Stream, target: Address) -> UpstreamConnection:
        self.open_connections += 1
        self.connections_created += 1
        return UpstreamConnection(stream, target, self)

    def _returned(self, conn: UpstreamConnection) -> None:
        """A connection came back: closed (forget it) or reusable (pool it if there is room)."""
        if conn.closed:
            self.open_connections -= 1
            return
        idle = self._idle.get(conn.target)
        if idle is None:
            idle = self._idle[conn.target] = deque()
        if self.closed or len(idle) >= self.max_idle_per_target:
            conn.close()  # comes back here, closed
            return
        conn.idle = True
        conn.idle_since = trio.current_time()
        idle.append(conn)

    # --- connections --------------------------------------------------------------------------

    async def _connect(self, target: Address) -> UpstreamConnection:
        try:
            with trio.fail_after(self.connect_timeout):
                stream = await self.connect(target)
        except trio.TooSlowError:
            raise BackendUnreachable(f"upstream connect timeout ({target})") from None
        except OSError as exc:
            reason = exc.strerror or str(exc) or type(exc).__name__
            raise BackendUnreachable(f"upstream connect error: {reason} ({target})") from None
        return self._opened(stream, target)

    def close_idle(self) -> None:
        for idle in self._idle.values():
            while idle:
                idle.pop().close()

    async def aclose(self) -> None:
        """Close the idle connections; those in use are closed when they come back."""
        self.closed = True
        self.close_idle()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> UpstreamPool:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    # --- the exchange -------------------------------------------------------------------------

    async def request(
        self,
        target: Address,
        method: bytes,
        path: bytes,
        headers: Sequence[Header],
        body: bytes | AsyncIterator[bytes] = b"",
        *,
        nursery: trio.Nursery | None = None,
        deadline: float | None = None,
    ) -> UpstreamResponse:
        """Send one request and return once the response headers arrived; ``trio.TooSlowError``
        if they have not by ``deadline`` (None: no limit here).

        With a ``nursery``, a streamed body is uploaded by a task of it while the response is
        read; without one, it is sent before reading. A buffered body (``bytes``) can be
        replayed, so a reused connection that turns out to be dead before any response byte is
        retried once on a fresh one; a streamed body cannot.
        """
        conn = self._checkout(target)
        if conn is not None and deadline is not None and type(body) is bytes and (fd := conn.fd) >= 0:
            # The common case, a pooled plain connection and the whole body at hand: its only wait
            # is for this socket, so the deadline needs no cancel scope (fd_deadlines.py).
            deadlines = self.deadlines
            timer = deadlines.arm(fd, deadline)
            try:
                return await conn.request(method, path, headers, body, nursery)
            except (BackendUnreachable, BadUpstreamResponse):
                deadlines.disarm(timer)
                conn.close()
                if timer.fired:  # the wait was ended by the deadline, not by the backend
                    raise trio.TooSlowError from None
                if not (conn.reused and not conn.got_bytes):
                    raise
                conn = None  # dead before any answer: a fresh connection, below
            except BaseException:
                deadlines.disarm(timer)
                conn.close()
                raise
            finally:
                deadlines.disarm(timer)
        if deadline is None:
            return await self._request(conn, target, method, path, headers, body, nursery)
        with trio.CancelScope(deadline=deadline):
            return await self._request(conn, target, method, path, headers, body, nursery)
        raise trio.TooSlowError  # the deadline cancelled the call

    async def _request(self, conn: UpstreamConnection | None, target: Address, method: bytes, path: bytes,
                       headers: Sequence[Header], body: bytes | AsyncIterator[bytes],
                       nursery: trio.Nursery | None) -> UpstreamResponse:
        """``request`` on ``conn`` (None: a new connection), retried once on a fresh connection."""
        if conn is None:
            conn = await self._connect(target)
        while True:
            try:
                return await conn.request(method, path, headers, body, nursery)
            except (BackendUnreachable, BadUpstreamResponse):
                conn.close()
                if not (isinstance(body, bytes) and conn.reused and not conn.got_bytes):
                    raise
                conn = await self._connect(target)
            except BaseException:
                conn.close()
                raise
