"""HTTP/1.1 on a plain data-plane bind: one loop per client connection around h11, calling the
gateway's ASGI app inline.

Why not hypercorn here: its HTTP/1.1 path takes every request through four layers (``TCPServer``,
``ProtocolWrapper``, ``H11Protocol``, ``HTTPStream``), a new task per request fed through a memory
channel, and a lock around every write. This loop does what those layers did for the gateway and
nothing more (the instructions it saves per request: docs/protocols.md, bench/README.md):

- **framing**: h11's state machine parses each request (head, Content-Length or chunked body,
  keep-alive, HTTP/1.0) and frames each response, as the upstream pool uses it. One h11 connection
  per request: the bytes after a request (pipelined ones) are carried to the next.
- **the ASGI scope hypercorn builds** (``type``, ``http_version``, ``method``, ``scheme``, ``path``,
  ``raw_path``, ``query_string``, ``headers``, ``client``, ``server``), with the app run in the
  connection's own task. ``receive`` reads the socket when the app asks for body; once the body is
  read it waits for the client's close and reports ``http.disconnect``, as hypercorn's does.
  ``send`` never raises for a client that left: the app learns it from ``receive``, or from
  ``disconnect_monitor.py`` watching the socket the scope hands it (``asgi.CLIENT_FD``).
- **what connections.py adds to hypercorn**, the same here: the head size limit however the bytes
  arrive (431), the head timeout from a head's first byte (408), the idle timeout between requests
  (close), a client's EOF while idle frees the socket at once, ``100 Continue`` only when the app
  first reads the body, a reason phrase on every status line, and ``asgi.CORK``.
- **everything else goes to hypercorn**: a request head carrying ``Upgrade`` (WebSocket, h2c) or the
  HTTP/2 preface (h2c prior knowledge) hands the connection, with every byte read so far, to
  hypercorn's connection task (``connections.py``), which serves it from then on.

A stream without a socket (``trio.testing`` memory streams) is served too, through trio's stream
calls and without ``CLIENT_FD``: tests/memory_harness.py drives the whole gateway that way, under a
virtual clock (docs/testing.md).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import re
import select
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

import h11
import trio

from .. import direct_io
from ..asgi import CLIENT_CONNECTION, CLIENT_FD, CONNECTION_SCOPE, CORK, RECEIVE_WITHIN, Cork, Scope
from ..fd_deadlines import FdDeadlines, Timer
from ..upstream.pool import is_readable
from ..upstream.wire import END, NEED_DATA, FastExchange, LocalProtocolError, WireError

log = logging.getLogger("trioproxy")
_SERIALS = itertools.count(1)  # asgi.CLIENT_CONNECTION: one number per connection of the process

MAX_RECV = 65536
#: bytes a client may send ahead (pipelined) while its request is served; past it nothing more is read
MAX_AHEAD = 65536
HEAD_END = re.compile(rb"\n\r?\n")  # where h11 ends a head too
BLANK_LINES = re.compile(rb"[\r\n]*")  # h11 skips these before a head
HANDOFF = re.compile(rb"\nupgrade[ \t]*:", re.IGNORECASE)
PREFACE = b"PRI * HTTP/2.0"
ASGI_VERSION = {"spec_version": "2.1", "version": "3.0"}
REASONS = {status.value: status.phrase.encode() for status in HTTPStatus}

HEAD_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\ncontent-length: 21\r\n"
                b"connection: close\r\n\r\nrequest head timeout\n")
HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
                  b"content-length: 32\r\nconnection: close\r\n\r\nrequest header fields too large\n")
DISCONNECT = {"type": "http.disconnect"}
#: ``h11`` serves requests through h11 instead of llhttp (``upstream/wire.py``): the fallback, and the
#: reference the differential test compares with
PARSER = os.environ.get("TRIOPROXY_HTTP1_PARSER", "llhttp")


def suppress_body(method: str, status: int) -> bool:
    """A response that carries no body whatever the app sends (RFC 9110 §6.4.1)."""
    return method == "HEAD" or status < 200 or status in (204, 304)


def error_answer(status: int, what: str) -> bytes:
    """The server's own answer, then a close: plain text naming the fault (docs/reliability.md),
    never h11's message, which can quote the client's bytes as a Python repr."""
    phrase = REASONS.get(status, b"Error")
    body = phrase.lower() + b": " + what.encode() + b"\n"
    return (b"HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
            % (status, phrase, len(body), body))


class PrefixedStream(trio.abc.HalfCloseableStream):
    """A socket stream whose first reads return bytes already read from it (the hand-off)."""

    def __init__(self, stream: trio.abc.HalfCloseableStream, prefix: bytes) -> None:
        self.stream = stream
        self.socket = getattr(stream, "socket", None)  # hypercorn reads the peer's address from it
        self._prefix = prefix

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._prefix:
            await trio.lowlevel.checkpoint()
            data, self._prefix = self._prefix, b""
            return data
        return await self.stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self) -> None:
        await self.stream.aclose()


class H11Exchange:
    """``FastExchange``'s interface over h11: one request through an ``h11.Connection``."""

    __slots__ = ("conn", "method", "target", "http_version", "headers", "expects_continue")

    def __init__(self, conn: h11.Connection, request: h11.Request) -> None:
        self.conn = conn
        self.method = request.method
        self.target = request.target
        self.http_version = request.http_version
        self.headers = list(request.headers)
        self.expects_continue = conn.they_are_waiting_for_100_continue

    @classmethod
    def parse(cls, data: bytes, head_end: int, max_head: int = 32 * 1024) -> H11Exchange:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=max_head)
        conn.receive_data(data)
        try:
            request = conn.next_event()
        except h11.RemoteProtocolError as error:
            raise WireError(error.error_status_hint, str(error)) from None
        if type(request) is not h11.Request:  # pragma: no cover - a complete head is a request or an error
            raise WireError(400, "incomplete head")
        return cls(conn, request)

    def receive_data(self, data: bytes) -> None:
        self.conn.receive_data(data)

    def next_body(self) -> bytes | str:
        try:
            event = self.conn.next_event()
        except h11.RemoteProtocolError as error:
            raise WireError(error.error_status_hint, str(error)) from None
        kind = type(event)
        if kind is h11.Data:
            return bytes(event.data)  # type: ignore[union-attr]
        if kind is h11.EndOfMessage:
            return END
        return NEED_DATA

    @property
    def request_done(self) -> bool:
        return self.conn.their_state is not h11.SEND_BODY

    def informational(self, status: int, reason: bytes) -> bytes:
        return self.conn.send(h11.InformationalResponse(status_code=status, headers=[], reason=reason)) or b""

    def response_head(self, status: int, headers: list[tuple[bytes, bytes]], reason: bytes) -> bytes:
        # h11 validates the headers when the event is made, before the connection sees it
        return self.conn.send(h11.Response(status_code=status, headers=headers, reason=reason)) or b""

    def body(self, data: bytes) -> bytes:
        return self.conn.send(h11.Data(data=data)) or b""

    def end(self) -> bytes:
        return self.conn.send(h11.EndOfMessage()) or b""

    @property
    def reusable(self) -> bool:
        return self.conn.our_state is h11.DONE and self.conn.their_state is h11.DONE

    @property
    def trailing(self) -> bytes:
        return bytes(self.conn.trailing_data[0])


Exchange = FastExchange | H11Exchange


class Http1Server:
    """What the connections of one bind share: the app, the limits, and the shutdown signal."""

    def __init__(self, app: Any, *, idle_timeout: float, header_timeout: float, max_head: int,
                 handoff: Callable[[trio.abc.Stream], Awaitable[None]], parser: str | None = None) -> None:
        self.app = app
        self.h11 = (parser or PARSER) == "h11"
        self.idle_timeout = idle_timeout  # from a response's end (or the accept) to the next head's end
        self.header_timeout = header_timeout  # from a head's first byte to its end
        self.max_head = max_head
        self.handoff = handoff  # hypercorn's connection task, for what this loop does not serve
        self.terminated = False
        #: the idle and head timeouts of connections with a socket (no cancel scope per wait)
        self.deadlines = FdDeadlines()
        self._waiting: set[Timer | trio.CancelScope] = set()  # connections idle between requests

    def terminate(self) -> None:
        """Shutting down: idle connections close now, busy ones after their response."""
        self.terminated = True
        for wait in list(self._waiting):
            if isinstance(wait, Timer):
                self.deadlines.fire(wait)
            else:
                wait.cancel()

    async def __call__(self, stream: trio.SocketStream) -> None:
        await Http1Connection(self, stream).run()


class Http1Connection:
    """One client connection: read a head, run the app, repeat while the connection may be kept."""

    __slots__ = ("server", "stream", "fd", "serial", "client", "address", "buffer", "parser", "method", "status", "headers",
                 "head_sent", "complete", "body_done", "gone", "broken", "ahead", "continue_owed", "corked", "served",
                 "cancel_scope", "_stashed")

    parser: Exchange  # this request's parser and response framing
    method: str
    status: int | None  # None until ``http.response.start``
    headers: list[tuple[bytes, bytes]]
    broken: int

    def __init__(self, server: Http1Server, stream: trio.abc.HalfCloseableStream, *,
                 client: tuple[str, int] | None = None) -> None:
        self.server = server
        self.stream = stream
        if isinstance(stream, trio.SocketStream):
            sock = stream.socket
            self.fd = sock.fileno()
            self.serial = next(_SERIALS)  # asgi.CLIENT_CONNECTION
            self.client = _address(sock.getpeername())
            self.address = _address(sock.getsockname())
        else:  # a stream without a socket (tests/memory_harness.py): trio's stream calls, ``client`` given
            self.fd = -1
            self.client = client
            self.address = None
        self.buffer = bytearray()  # bytes read and not yet given to a request's h11 connection
        self.corked: list[bytes] | None = None
        self.gone = False  # the client left (EOF, reset, a failed write)
        self.served = False  # a first request arrives with the connection; later ones are awaited

    async def run(self) -> None:
        # asgi.CONNECTION_SCOPE: the app cancels it when the client leaves mid-request
        with trio.CancelScope() as self.cancel_scope:
            try:
                while await self._serve_one():
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass  # the client reset the connection: nothing to answer

    # --- one request ------------------------------------------------------------------------

    async def _serve_one(self) -> bool:
        """Serve the next request; False when the connection is to close."""
        read = await self._read_head()
        if read is None:
            return False
        head, head_end = read
        try:
            if self.server.h11:
                request: Exchange = H11Exchange.parse(head, head_end, self.server.max_head)
            else:
                request = FastExchange.parse(head, head_end)
        except WireError as error:
            await self._write(error_answer(error.status, "malformed request head"))
            return False
        self.parser = request
        self.method = method = request.method.decode("ascii").upper()
        self.status = None
        self.headers = []
        self.head_sent = self.complete = self.body_done = self.gone = False
        self.broken = 0  # the status h11 suggests for a malformed body
        self.ahead = 0
        self.continue_owed = request.expects_continue
        self._stashed: Any = None
        path, _, query = request.target.partition(b"?")
        scope: Scope = {
            "type": "http", "asgi": ASGI_VERSION, "http_version": request.http_version.decode(),
            "method": method, "scheme": "http", "path": unquote(path.decode("ascii")), "raw_path": path,
            "query_string": query, "root_path": "", "headers": request.headers,
            "client": self.client, "server": self.address,
            # CLIENT_FD: one request at a time per socket, so the gateway may watch it for the
            # client's close itself (disconnect_monitor.py) instead of waiting in ``receive``.
            "extensions": {CORK: self._cork, RECEIVE_WITHIN: self.receive_within, CLIENT_FD: self.fd,
                           CLIENT_CONNECTION: self.serial, CONNECTION_SCOPE: self.cancel_scope} if self.fd >= 0
            else {CORK: self._cork, RECEIVE_WITHIN: self.receive_within},
        }
        try:
            await self.server.app(scope, self.receive, self.send)
        except Exception:
            log.exception("Error in ASGI Framework")
        if self.gone:
            return False
        if not self.head_sent:
            # No answer: an app error, or the client left (the app was told by the disconnect
            # monitor, not through ``receive``): a client that closed gets nothing.
            if self.fd < 0 or not peer_closed(self.fd):
                await self._write(error_answer(500, "the request was not answered"))
            return False
        while not request.request_done:  # a body the app did not ask for (none, or already here)
            event = self._next_event()
            if event is None or event is NEED_DATA:
                break  # still on the wire: the connection closes instead of reading it
        if not self.complete or not request.reusable or self.server.terminated:
            return False  # a truncated answer, a body left unread, connection: close, or shutdown
        self.buffer = bytearray(request.trailing)  # what the client sent after this request
        self.served = True
        return True

    async def _read_head(self) -> tuple[bytes, int] | None:
        """The next request head (and any bytes after it) and where the head ends, or None: the client left, the idle or
        head timeout passed, the head was too large, or the connection was handed to hypercorn."""
        server = self.server
        buffer = self.buffer
        now = trio.current_time()
        idle_deadline = now + server.idle_timeout
        head_deadline = math.inf
        searched = 0
        while True:
            if buffer:
                start = BLANK_LINES.match(buffer).end()  # type: ignore[union-attr]  # matches empty
                if head_deadline == math.inf:
                    head_deadline = now + server.header_timeout
                end = HEAD_END.search(buffer, max(start, searched - 2))
                if (end.end() if end else len(buffer)) > server.max_head:
                    await self._write(HEAD_TOO_LARGE)
                    return None
                if end is not None:
                    head = bytes(buffer)
                    if head.startswith(PREFACE, start) or HANDOFF.search(head, start, end.end()):
                        await server.handoff(PrefixedStream(self.stream, head))
                        return None
                    return head, end.end()
                searched = len(buffer)
            if server.terminated and not buffer:
                return None
            data, timed_out = await self._read_until(min(idle_deadline, head_deadline), idle=not buffer)
            if timed_out:
                if not buffer and not server.terminated and is_readable(self.stream):
                    # A request (or the client's close) arrived as the idle time ran out: take it.
                    idle_deadline = trio.current_time() + server.idle_timeout
                    continue
                if buffer and not server.terminated:
                    await self._write(HEAD_TIMEOUT)
                return None
            if not data:
                return None
            now = trio.current_time()
            buffer += data

    async def _read_until(self, deadline: float, *, idle: bool) -> tuple[bytes, bool]:
        """The client's next bytes (``b""``: it left), and whether ``deadline`` passed first;
        ``idle``: between requests, where a server shutting down ends the wait."""
        server = self.server
        wait_first = self.served or not idle
        if self.fd < 0:  # trio's stream calls: a cancel scope
            with trio.CancelScope(deadline=deadline) as scope:
                if idle:
                    server._waiting.add(scope)
                try:
                    data = await self._read(wait_first=wait_first)
                finally:
                    server._waiting.discard(scope)
            return (b"", True) if scope.cancelled_caught else (data, False)
        timer = server.deadlines.arm(self.fd, deadline)  # fd_deadlines.py: no scope to enter and leave
        if idle:
            server._waiting.add(timer)
        try:
            data = await self._read(wait_first=wait_first)
        finally:
            server.deadlines.disarm(timer)
            server._waiting.discard(timer)
        return data, timer.fired and not data

    # --- ASGI receive -----------------------------------------------------------------------

    async def receive(self) -> dict[str, Any]:
        message = await self._receive(math.inf)
        assert message is not None
        return message

    async def receive_within(self, timeout: float) -> dict[str, Any] | None:
        """``asgi.RECEIVE_WITHIN``: ``receive``, or None after ``timeout`` seconds without its message."""
        return await self._receive(trio.current_time() + timeout)

    async def _receive(self, deadline: float) -> dict[str, Any] | None:
        """The next message, or None once ``deadline`` passed (``math.inf``: never); a cancel scope
        only around what waits."""
        if self.body_done or self.continue_owed:  # rare: the whole call under the deadline
            with trio.CancelScope(deadline=deadline) as wait:
                if self.body_done:
                    return await self._wait_disconnect()
                self.continue_owed = False
                if not self.head_sent:
                    await self._write(self.parser.informational(100, b"Continue"))
            if wait.cancelled_caught:
                return None
        while True:
            event = self._next_event()
            if type(event) is bytes:
                following = self._next_event()  # a body that arrived whole is one message
                if following is END:
                    self.body_done = True
                    return {"type": "http.request", "body": event, "more_body": False}
                self._stashed = following
                return {"type": "http.request", "body": event, "more_body": True}
            if event is NEED_DATA:
                if deadline == math.inf:
                    data = await self._read(wait_first=False)
                else:
                    with trio.CancelScope(deadline=deadline) as wait:
                        data = await self._read(wait_first=False)
                    if wait.cancelled_caught:
                        return None
                if not data:
                    self.gone = True
                    return DISCONNECT
                self.parser.receive_data(data)
                continue
            if event is END:
                self.body_done = True
                return {"type": "http.request", "body": b"", "more_body": False}
            # A malformed body (the parser raised): answered here, as hypercorn does, and the connection
            # ends; to the app it is a client that left.
            if self.broken and not self.head_sent:
                await self._write(error_answer(self.broken, "malformed request body"))
            self.gone = True
            return DISCONNECT

    def _next_event(self) -> bytes | str | None:
        """The next piece of the body, ``END``, ``NEED_DATA``, or None for a malformed body."""
        event, self._stashed = self._stashed, None
        if event is not None:
            return event  # type: ignore[no-any-return]
        try:
            return self.parser.next_body()
        except WireError as error:
            self.broken = error.status
            return None

    async def _wait_disconnect(self) -> dict[str, Any]:
        """After the body: the client's close, while bytes it sends ahead wait for their turn."""
        while not self.gone:
            if self.ahead > MAX_AHEAD:
                await trio.sleep_forever()  # read no more until this request is answered
            data = await self._read(wait_first=True)
            if not data:
                self.gone = True
                break
            self.ahead += len(data)
            self.parser.receive_data(data)
        return DISCONNECT

    # --- ASGI send --------------------------------------------------------------------------

    async def send(self, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.status is not None:
                raise RuntimeError("http.response.start sent twice")
            self.status = int(message["status"])
            self.headers = message.get("headers", [])
            return
        if kind != "http.response.body" or self.status is None or self.complete:
            raise RuntimeError(f"unexpected ASGI message {kind!r} in this state")
        conn = self.parser
        parts: list[bytes] = []
        if not self.head_sent:
            parts.append(self._head(conn))
            self.head_sent = True
        body = message.get("body", b"")
        if body and not suppress_body(self.method, self.status):
            parts.append(conn.body(body))
        if not message.get("more_body", False):
            parts.append(conn.end())
            self.complete = True
        data = b"".join(parts)
        if self.corked is not None:
            self.corked.append(data)
        else:
            await self._write(data)

    def _head(self, conn: Exchange) -> bytes:
        status = self.status
        assert status is not None
        reason = REASONS.get(status, b"")
        try:
            return conn.response_head(status, self.headers, reason)
        except LocalProtocolError:
            # What hypercorn does before h11 sees them: surrounding whitespace goes.
            headers = [(bytes(name).strip(), bytes(value).strip()) for name, value in self.headers]
            return conn.response_head(status, headers, reason)

    # --- the socket (direct_io.py) ------------------------------------------------------------
    # One task reads at a time here (the head loop, then the app's body reads, then its
    # disconnect watch), and one writes (the app's task).

    async def _read(self, *, wait_first: bool) -> bytes:
        """The client's next bytes; ``b""`` once it closed or reset the connection."""
        fd = self.fd
        try:
            if fd < 0:
                return bytes(await self.stream.receive_some(MAX_RECV))
            return await direct_io.receive(fd, MAX_RECV, wait_first=wait_first)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            return b""

    async def _write(self, data: bytes) -> None:
        """All of ``data``: at once when the socket takes it (a response usually fits), else by
        ``send_all``. A client gone is recorded, never raised (the app learns it from ``receive``)."""
        if self.gone or not data:
            return
        try:
            sent = direct_io.send_now(self.fd, data) if self.fd >= 0 else 0
            if sent < len(data):
                await self.stream.send_all(memoryview(data)[sent:])
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.gone = True

    def _cork(self) -> Cork:
        return Cork(self)

    async def uncork(self) -> None:
        """``asgi.Corkable``: what the app sent while corked, in one write."""
        pending, self.corked = self.corked, None
        if pending:
            await self._write(b"".join(pending))


def peer_closed(fd: int) -> bool:
    """The client closed (or half-closed) its side, or reset: ``poll`` says so without reading
    (bytes it sent ahead stay unread)."""
    poller = select.poll()
    poller.register(fd, select.POLLRDHUP)  # POLLHUP and POLLERR are always reported
    try:
        return bool(poller.poll(0))
    except OSError:  # pragma: no cover
        return True


def _address(name: Any) -> tuple[str, int] | None:
    """hypercorn's ``parse_socket_addr`` for TCP: (host, port)."""
    if isinstance(name, tuple) and len(name) >= 2:
        return name[0], name[1]
    return None
