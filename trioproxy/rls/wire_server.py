"""gRPC unary and server-streaming calls framed by hand on HTTP/2 (RFC 9113) over Trio streams:
the transport of ``trioproxy ratelimit-server``.

Why not grpcio's server: its Python layer costs 340-540 µs of CPU per call on the bench machine,
more than the whole budget of a check (bench/README.md, "Global rate limiting"). A rate-limit call
is one tiny request and one tiny answer, so this module does what a gRPC server needs of HTTP/2
and no more, the server-side mirror of the gateway's client (``wire_client.py``):

- connection: the client preface is checked, and must arrive within ``preface_timeout`` (5 s) of
  the accept, or the connection is closed: a peer that connects and sends nothing held its socket
  and its task for ever; our SETTINGS (MAX_CONCURRENT_STREAMS, a big
  INITIAL_WINDOW_SIZE, MAX_HEADER_LIST_SIZE) and a connection WINDOW_UPDATE go first; the peer's
  SETTINGS are applied and acknowledged, PINGs answered, our receive window topped up;
- requests: HEADERS (+ CONTINUATION; PADDED and PRIORITY flags) decoded with ``hpack.Decoder``,
  which follows the peer's dynamic table (Envoy uses it and Huffman); a block whose decoding left
  the table as it was is cached with what we read from it (path, deadline), and the cache is
  emptied whenever the table changes, so a cached block means what it meant; DATA collected up to
  ``max_message`` (past it: RESOURCE_EXHAUSTED);
- answers: HEADERS (``:status 200``, ``content-type: application/grpc``) + DATA + trailers
  (``grpc-status``, ``grpc-message``) in one write, every header block pre-encoded with static
  table indices and literals never indexed (we keep no dynamic table). DATA respects the peer's
  connection and stream windows (what does not fit waits for its WINDOW_UPDATE);
- ``grpc-timeout``: a call not answered by its deadline gets DEADLINE_EXCEEDED (the handler's late
  answer is dropped); an unknown method UNIMPLEMENTED; RST_STREAM from the peer drops the call;
- a protocol error: GOAWAY with the RFC's error code, then the connection closes (one line on
  stderr, never a traceback); ``shutdown()``: GOAWAY, calls already started finish (bounded by the
  caller), then the connections close.

Handlers: a unary handler is a plain function ``(call, message bytes) -> None`` that answers later
with ``call.reply(bytes)`` or ``call.fail(code, text)``, from any task: so a server can gather the
requests of many reads and connections and answer them together (the ratelimit-server's batches).
A streaming handler is ``async (call, message)``, run in its own task; it sends with
``await call.send(bytes)`` and its return ends the call with OK (``GrpcError``: that status).

One task reads each connection and one writes it (everything sent goes through the writer, which
also fires deadlines); a handler's answers are queued bytes and a wake-up of the writer.
"""

from __future__ import annotations

import heapq
import math
import struct
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import hpack
import trio

from .h2_frames import (
    ACK,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    FRAME_HEAD,
    FRAME_SIZE_ERROR,
    GOAWAY,
    HEADERS,
    MAX_FRAME,
    MAX_WINDOW,
    NO_ERROR,
    PADDED,
    PING,
    PREFACE,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    TOP_UP,
    WINDOW_UPDATE,
    frame,
    hpack_int,
    hpack_literal,
)

# gRPC status codes
OK, CANCELLED, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND = 0, 1, 3, 4, 5
RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL, UNAVAILABLE = 8, 12, 13, 14

MAX_STREAMS = 1000  # SETTINGS_MAX_CONCURRENT_STREAMS we announce
MAX_HEADER_LIST = 16384  # SETTINGS_MAX_HEADER_LIST_SIZE we announce (decoded size, RFC 9113 §6.5.2)
MAX_MESSAGE = 4 * 1024 * 1024  # grpcio's default limit on a received message
#: unfinished request messages one connection may hold; our windows are large (a check is tiny),
#: so without it one client could park max_message bytes on each of MAX_STREAMS streams
MAX_BUFFERED = 4 * MAX_MESSAGE
LARGE_BODY = 65536  # a body past this makes the connection's total be checked
KNOWN_BLOCKS = 256  # decoded request header blocks cached per connection
PREFACE_TIMEOUT = 5.0  # seconds from the accept to the end of the client preface

def _field(name: bytes, value: bytes) -> bytes:
    """A literal header field never added to a table, its name literal too (RFC 7541 §6.2.2)."""
    return b"\x00" + hpack_literal(name) + hpack_literal(value)


#: ``:status 200`` (static index 8) and ``content-type`` (static name 31) ``application/grpc``
RESPONSE_HEADERS = b"\x88" + hpack_int(31, 4, 0) + hpack_literal(b"application/grpc")


def _percent(text: str) -> bytes:
    """grpc-message's percent-encoding: bytes outside printable ASCII, and ``%``."""
    return b"".join(bytes((c,)) if 0x20 <= c <= 0x7E and c != 0x25 else b"%%%02X" % c for c in text.encode())


def trailers(status: int, message: str = "") -> bytes:
    block = _field(b"grpc-status", b"%d" % status)
    return block + _field(b"grpc-message", _percent(message)) if message else block


TRAILERS_OK = trailers(OK)
_SETTINGS = b"".join(struct.pack(">HI", ident, value) for ident, value in (
    (0x2, 0),  # ENABLE_PUSH: a server never pushes anyway
    (0x3, MAX_STREAMS), (0x4, MAX_WINDOW), (0x6, MAX_HEADER_LIST)))
_TIMEOUT_UNITS = {ord("H"): 3600.0, ord("M"): 60.0, ord("S"): 1.0, ord("m"): 1e-3, ord("u"): 1e-6, ord("n"): 1e-9}


def parse_timeout(value: bytes) -> float | None:
    """``grpc-timeout`` (1-8 digits and a unit) in seconds; None when malformed."""
    if not 2 <= len(value) <= 9 or not value[:-1].isdigit():
        return None
    unit = _TIMEOUT_UNITS.get(value[-1])
    return None if unit is None else int(value[:-1]) * unit


class GrpcError(Exception):
    """Raised by a streaming handler: the call ends with this status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class H2Error(Exception):
    """A connection error (RFC 9113 §5.4.1): GOAWAY with ``code``, then close."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


UnaryHandler = Callable[["Call", bytes], None]
StreamHandler = Callable[["Call", bytes], Awaitable[None]]


class Call:
    """One stream: the request being received, then the answer."""

    __slots__ = ("body", "conn", "deadline", "done", "handler", "headers_sent", "path", "scope", "sid", "window")

    def __init__(self, conn: Connection, sid: int, path: bytes, deadline: float, window: int) -> None:
        self.conn, self.sid, self.path, self.deadline = conn, sid, path, deadline
        self.body: bytes | bytearray = b""
        self.window = window  # the peer's flow-control window for our DATA on this stream
        self.done = False  # answered (or reset): anything later is dropped
        self.headers_sent = False
        self.scope: trio.CancelScope | None = None  # a streaming handler's task
        self.handler: Any = None

    def reply(self, message: bytes) -> None:
        """Answer a unary call with one message and status OK (dropped if the call is over)."""
        if not self.done:
            self.conn.answer(self, b"\x00" + len(message).to_bytes(4, "big") + message, TRAILERS_OK)

    def fail(self, code: int, message: str) -> None:
        if not self.done:
            self.conn.answer(self, b"", trailers(code, message))

    async def send(self, message: bytes) -> None:
        """A streaming call's next message (waits only for the writer, not for the peer)."""
        if self.done:
            raise GrpcError(CANCELLED, "the call is over")
        self.conn.answer(self, b"\x00" + len(message).to_bytes(4, "big") + message, None)


class _Pending:
    """An answer waiting for the peer's flow-control windows."""

    __slots__ = ("call", "data", "trailer")

    def __init__(self, call: Call, data: bytes, trailer: bytes | None) -> None:
        self.call, self.data, self.trailer = call, data, trailer


class Connection:
    def __init__(self, server: WireServer, stream: trio.abc.Stream) -> None:
        self.server = server
        self.stream = stream
        self.decoder = hpack.Decoder(max_header_list_size=MAX_HEADER_LIST)
        #: header block bytes -> (path, grpc-timeout seconds or None, content-type is gRPC)
        self.known_blocks: dict[bytes, tuple[bytes, float | None, bool]] = {}
        self.calls: dict[int, Call] = {}  # open streams (request coming, or answer not finished)
        self.last_sid = 0  # highest stream the peer opened
        self.out = bytearray(frame(SETTINGS, 0, 0, _SETTINGS)
                             + frame(WINDOW_UPDATE, 0, 0, (MAX_WINDOW - 65535).to_bytes(4, "big")))
        self.wake = trio.Event()
        self.deadlines: list[tuple[float, int]] = []  # heap of (deadline, sid)
        self.blocked: list[_Pending] = []  # answers waiting for window, in order
        # The peer's limits on what we send (RFC defaults until its SETTINGS arrive).
        self.send_window = 65535
        self.initial_window = 65535
        self.max_frame = 16384
        self.recv_window = MAX_WINDOW  # ours, as announced by the WINDOW_UPDATE above
        self.consumed = 0
        self.going_away = False  # GOAWAY sent: no new streams; close when the calls are done
        self.closed = False
        self.waiting_until = -math.inf  # the deadline the writer sleeps until
        self.nursery: trio.Nursery = None  # type: ignore[assignment]  # set by WireServer.handle
        self._headers: tuple[int, int, bytearray] | None = None  # unfinished block: (sid, flags, bytes)

    # -- writing ------------------------------------------------------------------------------

    def _wake(self) -> None:
        self.wake.set()

    def answer(self, call: Call, data: bytes, trailer: bytes | None) -> None:
        """Queue HEADERS (first time) + DATA + trailers (None: a streaming message, no end)."""
        if call.done:
            return
        if trailer is not None:
            call.done = True
        n = len(data)
        if not self.blocked and n <= self.send_window and n <= call.window and n <= self.max_frame:
            out = self.out
            if not call.headers_sent:
                call.headers_sent = True
                if not data and trailer is not None:  # trailers-only: one HEADERS frame
                    out += frame(HEADERS, END_HEADERS | END_STREAM, call.sid, RESPONSE_HEADERS + trailer)
                    self._forget(call)
                    self._wake()
                    return
                out += frame(HEADERS, END_HEADERS, call.sid, RESPONSE_HEADERS)
            if data:
                out += frame(DATA, 0, call.sid, data)
                self.send_window -= n
                call.window -= n
            if trailer is not None:
                out += frame(HEADERS, END_HEADERS | END_STREAM, call.sid, trailer)
                self._forget(call)
        else:
            self.blocked.append(_Pending(call, data, trailer))
            self._unblock()
        self._wake()

    def _unblock(self) -> None:
        """Send what the windows now allow of the answers waiting for them, in order per stream."""
        still: list[_Pending] = []
        waiting: set[int] = set()  # streams with an earlier part still waiting
        for p in self.blocked:
            call = p.call
            if call.sid in waiting:
                still.append(p)
                continue
            if not call.headers_sent:
                call.headers_sent = True
                self.out += frame(HEADERS, END_HEADERS, call.sid, RESPONSE_HEADERS)
            while p.data:
                n = min(len(p.data), self.send_window, call.window, self.max_frame)
                if n <= 0:
                    break
                self.out += frame(DATA, 0, call.sid, p.data[:n])
                p.data = p.data[n:]
                self.send_window -= n
                call.window -= n
            if p.data:
                still.append(p)
                waiting.add(call.sid)
            elif p.trailer is not None:
                self.out += frame(HEADERS, END_HEADERS | END_STREAM, call.sid, p.trailer)
                self._forget(call)
        self.blocked = still
        self._wake()

    def _forget(self, call: Call) -> None:
        """The call's stream is finished on our side: its slot is free."""
        if self.calls.get(call.sid) is call:
            del self.calls[call.sid]
        if self.going_away and not self.calls:
            self._wake()  # the writer closes the connection once everything is out

    def _drop(self, call: Call) -> None:
        """The stream is reset (by the peer, or the connection is failing): nothing more goes out on it."""
        call.done = True
        if self.blocked:
            self.blocked = [p for p in self.blocked if p.call is not call]
        if call.scope is not None:
            call.scope.cancel()
        self._forget(call)

    def goaway(self, code: int, message: str = "") -> None:
        if not self.going_away:
            self.going_away = True
            self.out += frame(GOAWAY, 0, 0, self.last_sid.to_bytes(4, "big") + code.to_bytes(4, "big")
                              + message.encode()[:256])
            self._wake()

    async def writer(self) -> None:
        """Sends what is queued, fires deadlines, and ends once GOAWAY is out and no call is left."""
        while True:
            self.waiting_until = self._next_deadline()
            if not self.out:
                with trio.move_on_at(self.waiting_until):
                    await self.wake.wait()
            self.waiting_until = -math.inf
            self.wake = trio.Event()
            if self.deadlines and self.deadlines[0][0] <= trio.current_time():
                self._expire(trio.current_time())
            if self.out:
                data, self.out = self.out, bytearray()
                await self.stream.send_all(data)
            if self.going_away and not self.calls and not self.out and not self.blocked:
                return

    def _next_deadline(self) -> float:
        heap = self.deadlines
        while heap:
            deadline, sid = heap[0]
            call = self.calls.get(sid)
            if call is not None and call.deadline == deadline:
                return deadline
            heapq.heappop(heap)
        return math.inf

    def _expire(self, now: float) -> None:
        heap = self.deadlines
        while heap and heap[0][0] <= now:
            _, sid = heapq.heappop(heap)
            call = self.calls.get(sid)
            if call is None or call.done or call.deadline > now:
                continue  # answered already (perhaps still waiting for window: it goes out whole)
            self._drop(call)
            block = trailers(DEADLINE_EXCEEDED, "deadline exceeded")
            if not call.headers_sent:
                block = RESPONSE_HEADERS + block
            self.out += frame(HEADERS, END_HEADERS | END_STREAM, sid, block)

    # -- reading ------------------------------------------------------------------------------

    async def reader(self) -> None:
        """Reads and handles frames until EOF or a connection error (then GOAWAY)."""
        stream = self.stream
        buf = bytearray()
        try:
            with trio.move_on_after(self.server.preface_timeout):
                while len(buf) < len(PREFACE):
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buf += data
                    if not PREFACE.startswith(bytes(buf[:len(PREFACE)])):
                        raise H2Error(PROTOCOL_ERROR, "not an HTTP/2 client preface")
            if len(buf) < len(PREFACE):
                return  # no preface in time: closed, nothing to answer
            del buf[:len(PREFACE)]
            unpack = FRAME_HEAD.unpack_from
            while True:
                pos, size = 0, len(buf)
                while size - pos >= 9:
                    hi, lo, kind, flags, sid = unpack(buf, pos)
                    length = hi << 8 | lo
                    if length > MAX_FRAME:
                        raise H2Error(FRAME_SIZE_ERROR, f"frame of {length} bytes over SETTINGS_MAX_FRAME_SIZE")
                    end = pos + 9 + length
                    if end > size:
                        break
                    self._frame(kind, flags, sid & 0x7FFFFFFF, bytes(buf[pos + 9:end]))
                    pos = end
                del buf[:pos]
                if self.out:
                    self._wake()
                data = await stream.receive_some(65536)
                if not data:
                    return
                buf += data
        except H2Error as exc:
            self.server.log(f"connection error: {exc}")
            self.goaway(exc.code, str(exc))
        except hpack.HPACKError as exc:
            self.server.log(f"connection error: bad header block ({type(exc).__name__}: {exc})")
            self.goaway(COMPRESSION_ERROR, "bad header block")

    def _frame(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        if self._headers is not None and kind != CONTINUATION:
            raise H2Error(PROTOCOL_ERROR, "header block interrupted")
        if kind == DATA:
            self._data(flags, sid, payload)
        elif kind == HEADERS:
            self._headers_frame(flags, sid, payload)
        elif kind == CONTINUATION:
            self._continuation(flags, sid, payload)
        elif kind == SETTINGS:
            if sid != 0:
                raise H2Error(PROTOCOL_ERROR, "SETTINGS on a stream")
            if flags & ACK:
                if payload:
                    raise H2Error(FRAME_SIZE_ERROR, "SETTINGS ACK with a payload")
            else:
                self._settings(payload)
                self.out += frame(SETTINGS, ACK, 0, b"")
        elif kind == WINDOW_UPDATE:
            self._window_update(sid, payload)
        elif kind == PING:
            if len(payload) != 8:
                raise H2Error(FRAME_SIZE_ERROR, "PING of the wrong size")
            if sid != 0:
                raise H2Error(PROTOCOL_ERROR, "PING on a stream")
            if not flags & ACK:
                self.out += frame(PING, ACK, 0, payload)
        elif kind == RST_STREAM:
            self._rst_stream(sid, payload)
        elif kind == GOAWAY:
            self.going_away = True  # the peer opens no more streams; close when ours are answered
            self._wake()
        elif kind == PUSH_PROMISE:
            raise H2Error(PROTOCOL_ERROR, "PUSH_PROMISE from a client")
        elif kind == PRIORITY:
            if len(payload) != 5:
                raise H2Error(FRAME_SIZE_ERROR, "PRIORITY of the wrong size")
        # unknown frame types are ignored (RFC 9113 §5.5)

    def _headers_frame(self, flags: int, sid: int, payload: bytes) -> None:
        if sid == 0:
            raise H2Error(PROTOCOL_ERROR, "HEADERS on stream 0")
        start, stop = 0, len(payload)
        if flags & PADDED:
            if not payload or payload[0] >= len(payload):
                raise H2Error(PROTOCOL_ERROR, "padding longer than the frame")
            start, stop = 1, stop - payload[0]
        if flags & PRIORITY_FLAG:
            start += 5
            if start > stop:
                raise H2Error(FRAME_SIZE_ERROR, "HEADERS too short for its priority")
        if flags & END_HEADERS:
            self._header_block(sid, flags, payload[start:stop])
        else:
            self._headers = (sid, flags, bytearray(payload[start:stop]))

    def _continuation(self, flags: int, sid: int, payload: bytes) -> None:
        if self._headers is None or self._headers[0] != sid:
            raise H2Error(PROTOCOL_ERROR, "unexpected CONTINUATION")
        block = self._headers[2]
        block += payload
        if len(block) > 2 * MAX_HEADER_LIST:
            raise H2Error(ENHANCE_YOUR_CALM, "header block too large")
        if flags & END_HEADERS:
            hsid, hflags, _ = self._headers
            self._headers = None
            self._header_block(hsid, hflags, bytes(block))

    def _window_update(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise H2Error(FRAME_SIZE_ERROR, "WINDOW_UPDATE of the wrong size")
        increment = int.from_bytes(payload, "big") & 0x7FFFFFFF
        if increment == 0:
            raise H2Error(PROTOCOL_ERROR, "WINDOW_UPDATE of 0")
        if sid == 0:
            self.send_window += increment
            if self.send_window > MAX_WINDOW:
                raise H2Error(FLOW_CONTROL_ERROR, "connection window over 2^31-1")
        else:
            call = self.calls.get(sid)
            if call is None:
                return
            call.window += increment
            if call.window > MAX_WINDOW:
                raise H2Error(FLOW_CONTROL_ERROR, "stream window over 2^31-1")
        if self.blocked:
            self._unblock()

    def _rst_stream(self, sid: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise H2Error(FRAME_SIZE_ERROR, "RST_STREAM of the wrong size")
        if sid == 0 or sid > self.last_sid:
            raise H2Error(PROTOCOL_ERROR, "RST_STREAM on an idle stream")
        call = self.calls.get(sid)
        if call is not None:
            self._drop(call)

    def _data(self, flags: int, sid: int, payload: bytes) -> None:
        n = len(payload)
        self.recv_window -= n
        if self.recv_window < 0:
            raise H2Error(FLOW_CONTROL_ERROR, "DATA past our connection window")
        self.consumed += n
        if self.consumed >= TOP_UP:
            self.out += frame(WINDOW_UPDATE, 0, 0, self.consumed.to_bytes(4, "big"))
            self.recv_window += self.consumed
            self.consumed = 0
        if sid == 0:
            raise H2Error(PROTOCOL_ERROR, "DATA on stream 0")
        if sid > self.last_sid:
            raise H2Error(PROTOCOL_ERROR, "DATA on an idle stream")
        call = self.calls.get(sid)
        if call is None or call.handler is None:
            return  # a stream we closed (reset, answered early): its late DATA is dropped
        if flags & PADDED:
            if not payload or payload[0] >= n:
                raise H2Error(PROTOCOL_ERROR, "padding longer than the frame")
            payload = payload[1:n - payload[0]]
        if not call.body:
            call.body = payload
        else:  # a bytearray from the second frame on: appending stays linear in the message size
            if not isinstance(call.body, bytearray):
                call.body = bytearray(call.body)
            call.body += payload
        if len(call.body) > LARGE_BODY and sum(len(c.body) for c in self.calls.values()) > MAX_BUFFERED:
            raise H2Error(ENHANCE_YOUR_CALM, f"over {MAX_BUFFERED} bytes of unfinished request messages")
        if len(call.body) > self.server.max_message + 5:
            call.handler, call.body = None, b""
            call.fail(RESOURCE_EXHAUSTED, f"request message larger than {self.server.max_message} bytes")
            self.out += frame(RST_STREAM, 0, sid, NO_ERROR.to_bytes(4, "big"))
            return
        if flags & END_STREAM:
            self._dispatch(call)

    def _header_block(self, sid: int, flags: int, block: bytes) -> None:
        info = self.known_blocks.get(block)
        if info is None:
            info = self._decode(block)
        call = self.calls.get(sid)
        if call is not None:  # trailers from the client: only END_STREAM matters
            if flags & END_STREAM and call.handler is not None:
                self._dispatch(call)
            return
        if sid <= self.last_sid:
            return  # a stream we already closed
        if not sid & 1:
            raise H2Error(PROTOCOL_ERROR, "a client stream id must be odd")
        self.last_sid = sid
        if self.going_away or len(self.calls) >= MAX_STREAMS:
            self.out += frame(RST_STREAM, 0, sid, REFUSED_STREAM.to_bytes(4, "big"))
            return
        path, timeout, grpc_type = info
        deadline = math.inf if timeout is None else trio.current_time() + timeout
        call = Call(self, sid, path, deadline, self.initial_window)
        self.calls[sid] = call
        if timeout is not None:
            heap = self.deadlines
            if len(heap) > 2 * len(self.calls) + 64:  # answered calls' entries: drop them (amortised)
                heap[:] = [(d, s) for d, s in heap if s in self.calls and self.calls[s].deadline == d]
                heapq.heapify(heap)
            heapq.heappush(heap, (deadline, sid))
        if timeout is not None and deadline < self.waiting_until:
            self._wake()  # the writer sleeps until a later deadline
        if not grpc_type:
            call.done = call.headers_sent = True
            self._forget(call)
            self.out += frame(HEADERS, END_HEADERS | END_STREAM, sid, hpack_int(8, 4, 0) + hpack_literal(b"415"))
            if not flags & END_STREAM:
                self.out += frame(RST_STREAM, 0, sid, NO_ERROR.to_bytes(4, "big"))
            return
        handler = self.server.unary.get(path) or self.server.streaming.get(path)
        if handler is None:
            call.fail(UNIMPLEMENTED, f"unknown method {path.decode('latin-1')}")
            if not flags & END_STREAM:
                self.out += frame(RST_STREAM, 0, sid, NO_ERROR.to_bytes(4, "big"))
            return
        call.handler = handler
        if flags & END_STREAM:
            self._dispatch(call)

    def _decode(self, block: bytes) -> tuple[bytes, float | None, bool]:
        table = self.decoder.header_table.dynamic_entries
        before = (len(table), table[0] if table else None)
        path, timeout, grpc_type, method = b"", None, False, b""
        for name, value in self.decoder.decode(block, raw=True):
            if name == b":path":
                path = value
            elif name == b"grpc-timeout":
                timeout = parse_timeout(value)
            elif name == b"content-type":
                grpc_type = value.startswith(b"application/grpc")
            elif name == b":method":
                method = value
        info = (path, timeout, grpc_type and method == b"POST")
        if (len(table), table[0] if table else None) != before:
            self.known_blocks.clear()  # indices into the table now mean other headers
        elif len(self.known_blocks) < KNOWN_BLOCKS:
            self.known_blocks[block] = info
        return info

    def _dispatch(self, call: Call) -> None:
        handler, call.handler = call.handler, None
        body = bytes(call.body) if isinstance(call.body, bytearray) else call.body
        call.body = b""
        if len(body) < 5 or len(body) != 5 + int.from_bytes(body[1:5], "big"):
            call.fail(INTERNAL, "expected one length-prefixed request message")
            return
        if body[0] != 0:
            call.fail(UNIMPLEMENTED, "compressed messages are not supported")
            return
        if call.path in self.server.unary:
            handler(call, body[5:])
        else:
            self.nursery.start_soon(self._stream_task, handler, call, body[5:])

    async def _stream_task(self, handler: StreamHandler, call: Call, message: bytes) -> None:
        with trio.CancelScope() as scope:
            call.scope = scope
            if call.done:
                return
            try:
                await handler(call, message)
            except GrpcError as exc:
                call.fail(exc.code, exc.message)
                return
            if not call.done:
                self.answer(call, b"", TRAILERS_OK)

    def _settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise H2Error(FRAME_SIZE_ERROR, "SETTINGS length not a multiple of 6")
        for i in range(0, len(payload), 6):
            ident, value = struct.unpack_from(">HI", payload, i)
            if ident == 0x2 and value > 1:
                raise H2Error(PROTOCOL_ERROR, "ENABLE_PUSH must be 0 or 1")
            if ident == 0x4:
                if value > MAX_WINDOW:
                    raise H2Error(FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE over 2^31-1")
                delta = value - self.initial_window
                self.initial_window = value
                for call in self.calls.values():
                    call.window += delta
            elif ident == 0x5:
                if not 16384 <= value <= 2**24 - 1:
                    raise H2Error(PROTOCOL_ERROR, "MAX_FRAME_SIZE out of range")
                self.max_frame = value
        if self.blocked:
            self._unblock()


class WireServer:
    """Serves gRPC methods on Trio listeners: ``unary`` and ``streaming`` map a path
    (``/package.Service/Method``) to its handler (see the module docstring)."""

    def __init__(self, unary: dict[bytes, UnaryHandler], streaming: dict[bytes, StreamHandler], *,
                 max_message: int = MAX_MESSAGE, log: Callable[[str], None] | None = None,
                 preface_timeout: float = PREFACE_TIMEOUT) -> None:
        self.unary, self.streaming = unary, streaming
        self.max_message = max_message
        self.preface_timeout = preface_timeout
        self.connections: set[Connection] = set()
        self._log = log
        self.stopping = False
        self._accepting = trio.CancelScope()

    def log(self, line: str) -> None:
        if self._log is not None:
            self._log(line)
        else:
            print(f"ratelimit-server: {line}", file=sys.stderr, flush=True)

    async def serve(self, listeners: list[trio.SocketListener], *,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Accepts connections until ``shutdown`` (or cancellation)."""
        async with trio.open_nursery() as nursery:
            task_status.started()
            with self._accepting:
                await trio.serve_listeners(self.handle, listeners, handler_nursery=nursery)
            for listener in listeners:
                await listener.aclose()

    async def handle(self, stream: trio.abc.Stream) -> None:
        """One connection, until it ends; never raises (a failing connection is logged and closed)."""
        conn = Connection(self, stream)
        if self.stopping:
            conn.goaway(NO_ERROR)
        self.connections.add(conn)
        try:
            async with trio.open_nursery() as nursery:
                conn.nursery = nursery
                nursery.start_soon(self._write_then_cancel, conn, nursery.cancel_scope)
                await conn.reader()
                # EOF or a connection error: let the writer send what is queued (GOAWAY), briefly.
                conn.going_away = True
                for call in list(conn.calls.values()):
                    conn._drop(call)
                conn._wake()
                nursery.cancel_scope.deadline = trio.current_time() + 1.0
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass  # the peer went away
        except* Exception as group:  # one bad connection must not end the server
            exc = group.exceptions[0]
            self.log(f"connection failed: {type(exc).__name__}: {exc}")
        finally:
            conn.closed = True
            self.connections.discard(conn)
            for call in list(conn.calls.values()):
                conn._drop(call)
            await trio.aclose_forcefully(stream)

    @staticmethod
    async def _write_then_cancel(conn: Connection, scope: trio.CancelScope) -> None:
        try:
            await conn.writer()
        finally:
            scope.cancel()  # GOAWAY sent and every call answered (or the socket failed): done

    def shutdown(self) -> None:
        """Stop accepting; GOAWAY to every connection, whose calls already started still finish."""
        self.stopping = True
        self._accepting.cancel()
        for conn in list(self.connections):
            conn.goaway(NO_ERROR)
