"""gRPC unary calls framed by hand on HTTP/2 over one Trio stream: the gateway's RLS transport.

Why not the ``h2`` library (bench/rls_h2_client.py, the previous transport): a rate-limit check is one
tiny request and one tiny answer, and h2's general state machine (header validation and
normalisation, HPACK encoding with its dynamic table, an event object per frame) cost most of the
gateway's CPU per check (bench/README.md, "Global rate limiting"). This module does only what a
unary gRPC client needs, with the request's header block encoded once:

- connection: the preface, SETTINGS (no push, stream windows of 2^31-1) and a connection
  WINDOW_UPDATE, in one write; the server's SETTINGS are applied and acknowledged, PINGs answered,
  our connection receive window topped up as answers arrive;
- a call: one HEADERS frame (HPACK static-table indices and literals never added to a table, so
  the block is the same bytes every time and cached per timeout) and one DATA frame with
  END_STREAM, in one write; it waits while the server's flow-control windows or stream limit
  leave no room;
- answers: HEADERS/CONTINUATION blocks are decoded with ``hpack.Decoder`` (the server's dynamic
  table must be followed), DATA collected, the trailers' ``grpc-status`` decides; RST_STREAM
  fails the call; GOAWAY fails the calls past its last stream and sends new ones to a new
  connection; a protocol or socket error fails every call on the connection (UNAVAILABLE), and
  the next call reconnects.

One connection per service target, opened on first use; calls are concurrent streams on it. Each
call sends ``grpc-timeout`` and gives up at its deadline (the stream is reset).

Who reads the socket (one task at a time: Trio lets one task wait for a socket to be readable):

- a call made while nobody reads (the common case: one check at a time per connection) *leads*:
  it waits for readability itself and routes what arrives, its own answer and any other call's,
  until its own answer is in (``_Connection.lead``). Parking and being rescheduled by a reader
  task cost a second task step per call: ~100k instructions for a bare Trio round trip that
  way, ~60k led (bench/README.md, "Global rate limiting");
- a call made while someone reads parks and is rescheduled when its answer is routed;
- a leader that leaves (answered, timed out, cancelled, the connection failed) while other calls
  still wait hands the socket to the reader task, a Trio system task (it outlives any one
  request), which reads until no call waits, then parks again;
- an idle connection is read by nobody: whatever came meanwhile (GOAWAY, PING, the server
  closing) is read without waiting just before the next call's request is sent (``open_stream``),
  so a closed or retiring connection is replaced before a call is lost on it.

Per call the event loop does as little as possible, because at this size Trio's conveniences
were most of the cost (docs/ratelimit-server.md, bench/README.md): the socket is non-blocking and
written and read directly (``write``, ``lead``, ``read_loop``: no lock, no
``send_all``/``receive_some`` checkpoints), a lone call reads its own answer and a follower parks
and is rescheduled by whoever reads (no ``trio.Event``), and one timer task per connection keeps
the deadlines (no cancel scope per call: even without a deadline, entering and leaving one cost
~47k instructions, half a bare round trip; the timer wakes a leader with ``notify_closing`` on
its own descriptor of the socket instead).
"""

from __future__ import annotations

import os
import select
import socket
from collections.abc import Sequence
from typing import Any

import hpack
import trio

from .h2_frames import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    MAX_FRAME,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    PRIORITY_FLAG,
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

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
PATH = METHOD.encode()
MAX_MESSAGE = 4 * 1024 * 1024
KNOWN_BLOCKS = 256  # decoded header blocks kept per connection


def header_block(authority: bytes, timeout_ms: int) -> bytes:
    """The request's HPACK block: indexed ``:method POST`` (3) and ``:scheme http`` (6), names
    indexed from the static table for ``:path`` (4) and ``:authority`` (1), the rest literal; all
    "without indexing", so the server's table never changes and the block can be reused."""
    return (b"\x83\x86" + hpack_int(4, 4, 0) + hpack_literal(PATH) + hpack_int(1, 4, 0) + hpack_literal(authority)
            + b"\x00" + hpack_literal(b"content-type") + hpack_literal(b"application/grpc")
            + b"\x00" + hpack_literal(b"te") + hpack_literal(b"trailers")
            + b"\x00" + hpack_literal(b"grpc-timeout") + hpack_literal(b"%dm" % timeout_ms))


def encode_request(domain: str, descriptors: Sequence[tuple[Sequence[tuple[str, str]], int | None]]) -> bytes:
    """``descriptors``: ``(entries, hits)``; hits None: one hit; 0: only look; n: add n (tokens)."""
    from .protos import rls_pb2  # late: a gateway without remote limits never loads protobuf (docs/reliability.md RSS)

    request = rls_pb2.RateLimitRequest(domain=domain)
    for entries, hits in descriptors:
        d = request.descriptors.add()
        for key, value in entries:
            d.entries.add(key=key, value=value)
        if hits is not None:
            d.hits_addend.SetInParent()  # present even with value 0 ("only look")
            d.hits_addend.value = hits
    return request.SerializeToString()  # type: ignore[no-any-return]


class RlsCallFailed(Exception):
    """The service was unreachable, too slow or answered an error (the failure mode decides)."""


class RlsCallError(Exception):
    pass




DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED: no answer within the timeout"


class _Call:
    """One call's answer as it arrives. A follower parks on it (``_Connection.wait``) and
    whoever reads (or the timer, at ``deadline``) wakes it with ``trio.lowlevel.reschedule``:
    cheaper than a ``trio.Event`` and a cancel scope with a deadline per call (their deadline
    bookkeeping alone was ~8% of a call). A leader reads until ``done``."""

    __slots__ = ("body", "deadline", "done", "error", "message", "refused", "status", "task")

    def __init__(self, deadline: float) -> None:
        self.body = bytearray()
        self.deadline = deadline
        self.done = False
        self.task: Any = None  # the caller, while it is parked
        self.refused = False  # REFUSED_STREAM or past GOAWAY's last stream: not processed, send again
        self.error: str | None = None
        self.status: bytes | None = None
        self.message = b""

    def finish(self) -> None:
        self.done = True
        task, self.task = self.task, None
        if task is not None:
            trio.lowlevel.reschedule(task)


class _Connection:
    def __init__(self, sock: socket.socket, authority: str) -> None:
        self.sock = sock  # non-blocking; see write() and read_loop() for why not a trio.SocketStream
        #: a second descriptor of the same socket, the one readers wait on: the timer wakes a
        #: leader past its deadline with ``notify_closing`` on it, which leaves a task waiting to
        #: write (on ``sock``) alone
        self.rfd = os.dup(sock.fileno())
        self.idle_poll = select.poll()  # is anything there? (cheaper than a recv raising BlockingIOError)
        self.idle_poll.register(self.rfd, select.POLLIN)
        self.rbuf = bytearray()  # an unfinished frame, for the next read (whoever reads)
        self.reading = False  # a leader or the reader task owns the read side
        self.reader_turn = False  # ...the reader task (see read_loop)
        self.parked: Any = None  # the reader task while it waits for its turn
        self.leader: _Call | None = None  # the call whose task reads for it (see lead)
        self.leader_waiting = False  # ...while it waits for the socket (only then is it woken)
        self.authority = authority.encode("latin-1")
        self.decoder = hpack.Decoder()
        #: header block bytes -> what it says (grpc-status, grpc-message, HTTP error), for blocks
        #: that mean the same whatever the table
        self.known_blocks: dict[bytes, tuple[bytes | None, bytes | None, str | None]] = {}
        self.calls: dict[int, _Call] = {}
        self.unsent = bytearray()  # bytes queued behind a write that is waiting for the socket
        self.flushing = False
        self.closed = False
        self.next_sid = 1
        self.blocks: dict[int, bytes] = {}  # timeout ms -> header block
        # The server's limits on what we send (RFC 9113 defaults until its SETTINGS arrive).
        self.send_window = 65535
        self.stream_window = 65535  # SETTINGS_INITIAL_WINDOW_SIZE
        self.max_streams = 2**31
        self.max_frame = 16384
        self.room = trio.Event()  # set (and replaced) when windows or stream slots open
        self.room_waiters = 0  # calls waiting on it (grpcio sends a WINDOW_UPDATE per answer)
        self.consumed = 0
        self.goaway_last: int | None = None
        self._headers: tuple[int, bytearray, bool] | None = None  # an unfinished header block
        #: the timer task's deadline (the earliest of the calls' when it last looked) and scope
        self.next_deadline = float("inf")
        self.timer_scope: trio.CancelScope | None = None

    def start_bytes(self) -> bytes:
        settings = (b"\x00\x01" + (0).to_bytes(4, "big")  # HEADER_TABLE_SIZE 0: see _header_block
                    + b"\x00\x02" + (0).to_bytes(4, "big")  # ENABLE_PUSH 0
                    + b"\x00\x04" + MAX_WINDOW.to_bytes(4, "big"))  # INITIAL_WINDOW_SIZE
        return (PREFACE + frame(SETTINGS, 0, 0, settings)
                + frame(WINDOW_UPDATE, 0, 0, (MAX_WINDOW - 65535).to_bytes(4, "big")))

    def fail_all(self, reason: str) -> None:
        self.closed = True
        for call in self.calls.values():
            if not call.done:
                call.error = reason
                call.finish()
        self.calls.clear()
        self._wake()
        if self.timer_scope is not None:
            self.timer_scope.cancel()  # the timer ends with the connection
        self._reader_turn()  # it closes the socket, which wakes a leader (notify_closing)

    def close(self) -> None:
        """No new calls; the socket closes once the calls on it are answered."""
        self.closed = True
        if not self.reading:
            self._reader_turn()

    def _reader_turn(self) -> None:
        """The reader task reads from now on (it parks again once no call waits)."""
        self.reading = self.reader_turn = True
        task, self.parked = self.parked, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    def _wake_leader(self) -> None:
        """The leader's call was finished by someone else (the timer at its deadline, a failed
        write): wake it out of ``wait_readable`` (``ClosedResourceError`` on ``rfd`` only;
        ``lead`` takes it as "look at your call again")."""
        if self.leader_waiting:
            trio.lowlevel.notify_closing(self.rfd)

    async def wait(self, call: _Call) -> None:
        """Park until ``call`` is answered, failed or past its deadline (the timer task fails it
        then). Cancelled from outside, the call is left to be answered and ignored, or timed out."""
        if call.done:
            await trio.lowlevel.checkpoint()
            return
        call.task = trio.lowlevel.current_task()

        def abort(_: Any) -> Any:
            call.task = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def timer_loop(self) -> None:
        """Fails the calls past their deadline and resets their streams. It sleeps until the
        earliest deadline it knows; a call whose deadline is earlier moves that (open_stream). With
        one timeout per stage it wakes about once per timeout while calls flow, never per call."""
        while not (self.closed and not self.calls):
            with trio.CancelScope(deadline=self.next_deadline) as self.timer_scope:
                await trio.sleep_forever()
            now = trio.current_time()
            expired = [(sid, call) for sid, call in self.calls.items() if call.deadline <= now]
            for sid, call in expired:
                call.error = DEADLINE_EXCEEDED
                self._finish(sid, call)
            self.next_deadline = min((call.deadline for call in self.calls.values()), default=float("inf"))
            try:
                for sid, _ in expired:
                    await self.write(frame(RST_STREAM, 0, sid, (8).to_bytes(4, "big")))  # CANCEL
            except Exception:  # noqa: BLE001 -- write() failed the connection already
                break

    def _wake(self) -> None:
        if self.room_waiters:
            self.room.set()
            self.room = trio.Event()

    async def write(self, data: bytes | bytearray) -> None:
        """Send ``data`` after what is queued. The socket takes a few hundred bytes at once
        (almost always), so this normally returns without yielding to the scheduler: no lock, no
        checkpoint, no trip through the run loop per call (``trio.SocketStream.send_all`` and
        ``trio.Lock`` each cost one; they were a third of the gateway's CPU per check). Frames
        stay whole and in order: while one task waits for the socket, the others queue behind it
        (the order of stream ids on the wire is the order they were taken). Cancelled or failed
        mid-write, the stream may hold half a frame: the connection is done."""
        if self.flushing:
            self.unsent += data
            return
        try:
            sent = self.sock.send(data)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            self.fail_all(f"UNAVAILABLE: {exc}")
            raise
        if sent == len(data):
            return
        self.unsent += data[sent:]
        self.flushing = True
        try:
            while self.unsent:
                await trio.lowlevel.wait_writable(self.sock)
                try:
                    del self.unsent[:self.sock.send(self.unsent)]
                except BlockingIOError:
                    pass
        except BaseException as exc:
            self.fail_all(f"UNAVAILABLE: a write was interrupted ({exc or type(exc).__name__})")
            raise
        finally:
            self.flushing = False

    async def read_loop(self) -> None:
        """The reader task: parked until a leader leaves with other calls still waiting (or the
        connection closes), then it reads until no call waits. Reading is: wait until the socket
        is readable, take what is there in one ``recv``, route its frames (``receive_some``
        would add a checkpoint to each read). It owns the socket: it closes it when it ends."""
        sock, rfd = self.sock, self.rfd

        def abort(_: Any) -> Any:
            self.parked = None
            return trio.lowlevel.Abort.SUCCEEDED

        try:
            while True:
                if not self.reader_turn:
                    self.parked = trio.lowlevel.current_task()
                    await trio.lowlevel.wait_task_rescheduled(abort)
                    continue
                if not self.calls:
                    if self.closed:
                        break  # after GOAWAY (or close()), once its last call is answered
                    if not self.room_waiters:  # (their room comes in frames someone must read)
                        self.reader_turn = self.reading = False  # the next call leads
                        continue
                await trio.lowlevel.wait_readable(rfd)
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    continue
                if not data:
                    break
                out = self._take(data)
                if out:
                    await self.write(out)
        except Exception as exc:  # noqa: BLE001 -- socket errors, RlsCallError, hpack errors, and any
            # malformed frame (a system task that raised would end the gateway's whole Trio run)
            self.fail_all(f"UNAVAILABLE: connection failed: {exc or type(exc).__name__}")
        finally:
            self.fail_all("UNAVAILABLE: connection closed")
            trio.lowlevel.notify_closing(rfd)
            os.close(rfd)
            trio.lowlevel.notify_closing(sock)
            sock.close()

    async def lead(self, call: _Call) -> None:
        """Read for ``call`` (and route whatever else arrives) until it is answered, failed or
        past its deadline, then hand the socket to the reader task if other calls still wait.
        The caller must have found ``reading`` false; nothing yields between that and here.
        Cancelled, it leaves as it came: frames are routed whole as they are read (an unfinished
        one waits in ``rbuf``), its own call stays to be answered and ignored, or timed out."""
        self.reading = True
        self.leader = call
        sock, rfd = self.sock, self.rfd
        try:
            if call.done:
                await trio.lowlevel.checkpoint()
            while not call.done:
                self.leader_waiting = True
                try:
                    await trio.lowlevel.wait_readable(rfd)
                except trio.ClosedResourceError:
                    continue  # woken (_wake_leader): the call is finished, or the socket is gone
                finally:
                    self.leader_waiting = False
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    continue
                if not data:
                    self.fail_all("UNAVAILABLE: connection closed")
                    break
                out = self._take(data)
                if out:
                    await self.write(out)
        except Exception as exc:  # noqa: BLE001 -- what would end the reader task ends the connection
            self.fail_all(f"UNAVAILABLE: connection failed: {exc or type(exc).__name__}")
        finally:
            self.leader = None
            self.reading = False
            if self.calls or self.closed or self.room_waiters:
                self._reader_turn()

    def _take(self, data: bytes) -> bytearray:
        """Route the whole frames in ``data`` (after the start of one an earlier read left);
        returns what to send back (SETTINGS and PING acks, WINDOW_UPDATE)."""
        buf = self.rbuf
        if buf:
            buf += data
            data = bytes(buf)
        out = bytearray()
        pos, size = 0, len(data)
        while size - pos >= 9:
            length = int.from_bytes(data[pos:pos + 3], "big")
            if length > MAX_FRAME:
                raise RlsCallError(f"frame of {length} bytes is larger than SETTINGS_MAX_FRAME_SIZE")
            end = pos + 9 + length
            if end > size:
                break
            self._frame(data[pos + 3], data[pos + 4], int.from_bytes(data[pos + 5:pos + 9], "big") & 0x7FFFFFFF,
                        data[pos + 9:end], out)
            pos = end
        buf[:] = data[pos:]  # an unfinished frame waits for the next read
        return out

    def _frame(self, kind: int, flags: int, sid: int, payload: bytes, out: bytearray) -> None:
        if self._headers is not None and kind != CONTINUATION:
            raise RlsCallError("header block interrupted")
        if kind == DATA:
            self.consumed += len(payload)
            if self.consumed >= TOP_UP:
                out += frame(WINDOW_UPDATE, 0, 0, self.consumed.to_bytes(4, "big"))
                self.consumed = 0
            call = self.calls.get(sid)
            if call is not None:
                if flags & PADDED:
                    payload = payload[1:len(payload) - payload[0]]
                call.body += payload
                if len(call.body) > MAX_MESSAGE + 5:
                    call.error = "RESOURCE_EXHAUSTED: response too large"
                    self._finish(sid, call)
                    out += frame(RST_STREAM, 0, sid, (8).to_bytes(4, "big"))  # CANCEL
                    return
                if flags & END_STREAM:
                    self._finish(sid, call)
        elif kind == HEADERS:
            start, stop = 0, len(payload)
            if flags & PADDED:
                start, stop = 1, stop - payload[0]
            if flags & PRIORITY_FLAG:
                start += 5
            if flags & END_HEADERS:  # (the common case: the block as bytes, no copy to gather it)
                self._header_block(sid, payload[start:stop] if start or flags & PADDED else payload,
                                   bool(flags & END_STREAM))
            else:
                self._headers = (sid, bytearray(payload[start:stop]), bool(flags & END_STREAM))
        elif kind == CONTINUATION:
            if self._headers is None or self._headers[0] != sid:
                raise RlsCallError("unexpected CONTINUATION")
            self._headers[1].extend(payload)
            if flags & END_HEADERS:
                sid, block, end = self._headers
                self._headers = None
                self._header_block(sid, block, end)
        elif kind == RST_STREAM:
            call = self.calls.get(sid)
            if call is not None:
                code = int.from_bytes(payload[:4], "big")
                call.refused = code == REFUSED_STREAM
                call.error = call.error or f"UNAVAILABLE: stream reset ({code})"
                self._finish(sid, call)
        elif kind == SETTINGS:
            if not flags & ACK:
                self._settings(payload)
                out += frame(SETTINGS, ACK, 0, b"")
        elif kind == PING:
            if not flags & ACK:
                out += frame(PING, ACK, 0, payload)
        elif kind == GOAWAY:
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            self.goaway_last = last
            self.closed = True  # new calls go to a new connection
            for s in [s for s in self.calls if s > last]:
                call = self.calls[s]
                call.error = "UNAVAILABLE: the service is going away"
                call.refused = True  # past the last stream it processes: safe to send again
                self._finish(s, call)
            self._wake()
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if sid == 0:
                self.send_window += increment
                self._wake()
            # A stream's window only matters for its one DATA frame, sent whole when it opens.
        elif kind == PUSH_PROMISE:
            raise RlsCallError("PUSH_PROMISE although push is disabled")
        # PRIORITY and unknown kinds are ignored (RFC 9113 §5.5).

    def _settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - len(payload) % 6, 6):
            ident, value = int.from_bytes(payload[i:i + 2], "big"), int.from_bytes(payload[i + 2:i + 6], "big")
            if ident == 0x3:
                self.max_streams = value
            elif ident == 0x4:
                self.stream_window = value
            elif ident == 0x5:
                self.max_frame = value
        self._wake()

    def _header_block(self, sid: int, block: bytes | bytearray, end_stream: bool) -> None:
        """Answers repeat the same header blocks (``:status 200``..., trailers ``grpc-status 0``), and
        with the table size 0 we announce the server's encoder keeps no dynamic table, so a block
        decoded with the table empty before and after means the same every time: it is decoded
        once and then looked up. Any other block goes through the decoder, which follows the
        server's table should it keep one anyway."""
        raw = block if type(block) is bytes else bytes(block)
        meaning = self.known_blocks.get(raw)
        if meaning is None:
            table = self.decoder.header_table.dynamic_entries
            empty = not table
            status = message = error = None
            for name, value in self.decoder.decode(raw, raw=True):
                if name == b"grpc-status":
                    status = bytes(value)
                elif name == b"grpc-message":
                    message = bytes(value)
                elif name == b":status" and value != b"200":
                    error = f"UNAVAILABLE: HTTP status {bytes(value).decode('latin-1')}"
            meaning = (status, message, error)
            if empty and not table and len(self.known_blocks) < KNOWN_BLOCKS:
                self.known_blocks[raw] = meaning
        call = self.calls.get(sid)
        if call is None:
            return
        status, message, error = meaning
        if status is not None:
            call.status = status
        if message is not None:
            call.message = message
        if error is not None:
            call.error = error
        if end_stream:
            self._finish(sid, call)

    def _finish(self, sid: int, call: _Call) -> None:
        del self.calls[sid]
        call.finish()
        if call is self.leader:
            self._wake_leader()
        if len(self.calls) + 1 >= self.max_streams:
            self._wake()

    def _caught_up(self) -> bytes | None:
        """Nobody reads an idle connection: route what came meanwhile, without waiting, before
        a call is sent on it. The acks to send with the call's request, or None when the
        connection turned out closed or retiring (EOF, a failed read, a malformed frame, GOAWAY:
        nothing of the call was sent, the caller takes a new connection)."""
        if self.closed:  # (its descriptors may be closed already)
            return None
        if not self.idle_poll.poll(0):
            return b""
        try:
            data = self.sock.recv(65536)
            out = self._take(data) if data else None
        except BlockingIOError:
            return b""
        except Exception:  # noqa: BLE001 -- a failed read, a malformed frame: as the reader, the connection is done
            out = None
        if out is None:
            self.fail_all("UNAVAILABLE: connection closed")  # (no call waits on an idle connection)
            return None
        if self.closed:
            self.close()  # GOAWAY: the reader task closes the socket
            return None
        return bytes(out)

    async def open_stream(self, message: bytes, timeout_ms: int, call: _Call) -> int | None:
        """Send HEADERS + DATA for a new stream, once windows and the stream limit allow (by the
        call's deadline); None when the connection closed first (nothing was sent: the caller
        takes a new one)."""
        body = b"\x00" + len(message).to_bytes(4, "big") + message
        size = len(body)
        acks = b""
        if not self.reading:
            caught_up = self._caught_up()
            if caught_up is None:
                return None
            acks = caught_up
        if self.send_window < size or self.stream_window < size or len(self.calls) >= self.max_streams:
            self.room_waiters += 1
            if not self.reading:
                self._reader_turn()  # the WINDOW_UPDATE or SETTINGS that gives room must be read
            try:
                with trio.move_on_at(call.deadline):
                    while (self.send_window < size or self.stream_window < size
                           or len(self.calls) >= self.max_streams) and not self.closed:
                        await self.room.wait()
            finally:
                self.room_waiters -= 1
            if (self.send_window < size or self.stream_window < size
                    or len(self.calls) >= self.max_streams) and not self.closed:
                raise RlsCallFailed(DEADLINE_EXCEEDED)
            if not self.reading:  # (the reader parked meanwhile)
                caught_up = self._caught_up()
                if caught_up is None:
                    return None
                acks += caught_up
        if self.closed or self.next_sid > MAX_WINDOW:
            self.close()
            return None
        # From here to write() nothing yields: stream ids reach the wire in the order taken.
        sid = self.next_sid
        self.next_sid += 2
        block = self.blocks.get(timeout_ms)
        if block is None:
            block = self.blocks[timeout_ms] = header_block(self.authority, timeout_ms)
        out = acks + frame(HEADERS, END_HEADERS, sid, block)
        if size <= self.max_frame:  # (a check: always one DATA frame)
            out += frame(DATA, END_STREAM, sid, body)
        else:
            for i in range(0, size, self.max_frame):
                out += frame(DATA, END_STREAM if i + self.max_frame >= size else 0, sid, body[i:i + self.max_frame])
        self.send_window -= size
        self.calls[sid] = call
        if call.deadline < self.next_deadline:  # earlier than the timer will look: wake it then
            self.next_deadline = call.deadline
            if self.timer_scope is not None:
                self.timer_scope.deadline = call.deadline
        await self.write(out)
        return sid


class WireRlsClient:
    """``should_rate_limit`` and ``close``; the bench/ alternatives have the same surface."""

    def __init__(self, target: str) -> None:
        self.target = target
        host, _, port = target.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self._conn: _Connection | None = None
        self._connect_lock: trio.Lock | None = None
        self._root: Any = None  # the Trio run the connection belongs to (tests run many)

    async def _connection(self, deadline: float) -> _Connection:
        root = trio.lowlevel.current_root_task()
        if root is not self._root:
            self._root, self._conn, self._connect_lock = root, None, None
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._connect_lock is None:
            self._connect_lock = trio.Lock()
        async with self._connect_lock:
            conn = self._conn
            if conn is not None and not conn.closed:
                return conn
            stream = None
            with trio.move_on_at(deadline):
                stream = await trio.open_tcp_stream(self.host, self.port)  # happy eyeballs, TCP_NODELAY
            if stream is None:
                raise RlsCallFailed(DEADLINE_EXCEEDED)
            sock = socket.socket(fileno=stream.socket.detach())
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # (kept by detach; said again)
            conn = _Connection(sock, self.target)
            try:
                await conn.write(conn.start_bytes())
            except BaseException:
                trio.lowlevel.notify_closing(sock)
                sock.close()
                os.close(conn.rfd)  # (no task waited on it yet)
                raise
            trio.lowlevel.spawn_system_task(conn.read_loop, name=f"rls-wire-reader {self.target}")
            trio.lowlevel.spawn_system_task(conn.timer_loop, name=f"rls-wire-timer {self.target}")
            self._conn = conn
            return conn

    async def should_rate_limit(self, domain: str, descriptors: Sequence[tuple[Sequence[tuple[str, str]], int | None]],
                                timeout: float) -> Any:
        """``descriptors``: ``(entries, hits)``; hits None: one hit; 0: only look; n: add n (tokens).

        No cancel scope per call: the deadline bounds connecting and waiting for room where those
        happen (rarely), and the connection's timer task fails an unanswered call at it."""
        message = encode_request(domain, descriptors)
        deadline = trio.current_time() + timeout
        timeout_ms = max(1, int(timeout * 1000))
        while True:
            call = _Call(deadline)
            conn = None
            try:
                conn = self._conn  # (the usual case without a coroutine: see _connection)
                if conn is None or conn.closed or trio.lowlevel.current_root_task() is not self._root:
                    conn = await self._connection(deadline)
                sid = await conn.open_stream(message, timeout_ms, call)
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                if conn is not None:
                    conn.fail_all(f"UNAVAILABLE: {exc}")
                raise RlsCallFailed(f"UNAVAILABLE: {exc or type(exc).__name__}") from None
            if sid is None:
                continue
            if conn.reading:
                await conn.wait(call)
            else:
                await conn.lead(call)
            if not call.refused:  # refused (over the server's stream limit before its SETTINGS
                break  # arrived, or past a GOAWAY): not processed, so sent again
        if call.error is not None:
            raise RlsCallFailed(call.error)
        if call.status != b"0":
            status = call.status.decode("latin-1") if call.status is not None else "missing"
            raise RlsCallFailed(f"gRPC status {status}: {call.message.decode('utf-8', 'replace')}")
        body = call.body
        if len(body) < 5 or body[0] != 0:
            raise RlsCallFailed("INTERNAL: bad or compressed response message")
        from .protos import rls_pb2  # late, as in encode_request

        return rls_pb2.RateLimitResponse.FromString(bytes(body[5:5 + int.from_bytes(body[1:5], "big")]))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()


_clients: dict[str, WireRlsClient] = {}


def client_for(target: str) -> WireRlsClient:
    """The one client (one HTTP/2 connection) per service target in this process. The alternatives
    it was measured against (grpcio's future API, the ``h2`` library) live in bench/
    (bench/global_ratelimit.py, bench/README.md "Global rate limiting")."""
    client = _clients.get(target)
    if client is None:
        client = _clients[target] = WireRlsClient(target)
    return client
