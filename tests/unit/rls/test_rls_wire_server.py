"""The hand-framed gRPC server (trioproxy/rls/wire_server.py) against independent HTTP/2 clients.

Most tests drive it with the ``h2`` library's client side (which checks our frames against its
own state machine: flow-control windows, stream states, header validity); the rest send raw
frames for what h2 would never send (CONTINUATION with padding and priority, a bad preface,
garbage frames, a dynamic table whose indices change meaning). In-process over memory streams,
with Trio's autojumping MockClock: no sleeps. (grpcio's client and real Envoy against the whole
server: test_ratelimit_server.py, test_ratelimit_envoy.py.)
"""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.settings
import hpack
import pytest
import trio
import trio.testing

from trioproxy.rls import h2_frames as hf
from trioproxy.rls import wire_server as ws
from trioproxy.rls.h2_frames import PREFACE, frame
from trioproxy.rls.wire_server import WireServer

STUCK = 60  # virtual seconds: with the autojump clock a hang fails at once instead of blocking


def grpc_message(payload: bytes) -> bytes:
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


class Harness:
    """A WireServer with test methods: Echo answers at once, Hold when the test says so, Watch
    streams what the test puts in its channel."""

    def __init__(self, **kwargs) -> None:
        self.held: list[ws.Call] = []
        self.held_event = trio.Event()
        self.watch_send, self.watch_receive = trio.open_memory_channel(10)
        self.logs: list[str] = []
        self.watch_cancelled = 0
        self.server = WireServer({b"/t.S/Echo": self.echo, b"/t.S/Hold": self.hold},
                                 {b"/t.S/Watch": self.watch}, log=self.logs.append, **kwargs)

    def echo(self, call: ws.Call, message: bytes) -> None:
        call.reply(b"echo:" + message)

    def hold(self, call: ws.Call, message: bytes) -> None:
        self.held.append(call)
        self.held_event.set()

    async def watch(self, call: ws.Call, message: bytes) -> None:
        if message == b"fail":
            raise ws.GrpcError(ws.RESOURCE_EXHAUSTED, "too many watchers")
        try:
            await call.send(b"first")
            async for item in self.watch_receive:
                if item is None:
                    return
                await call.send(item)
        except trio.Cancelled:
            self.watch_cancelled += 1
            raise

    async def wait_held(self, n: int) -> None:
        with trio.fail_after(STUCK):
            while len(self.held) < n:
                self.held_event = trio.Event()
                await self.held_event.wait()

    def connect(self, nursery: trio.Nursery) -> trio.testing.MemoryReceiveStream:
        client, server_side = trio.testing.memory_stream_pair()
        nursery.start_soon(self.server.handle, server_side)
        return client


class H2Client:
    def __init__(self, stream, settings: dict | None = None) -> None:
        self.stream = stream
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.settings = settings or {}
        self.headers: dict[int, dict[bytes, bytes]] = {}
        self.trailers: dict[int, dict[bytes, bytes]] = {}
        self.data: dict[int, bytes] = {}
        self.resets: dict[int, int] = {}
        self.ended: set[int] = set()
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.pings = 0
        self.got_settings = False
        self.eof = False
        self.ack = True  # acknowledge received DATA at once (flow control)

    async def start(self) -> None:
        self.conn.initiate_connection()
        if self.settings:
            self.conn.update_settings(self.settings)
        await self.pump(lambda: self.got_settings)  # and the server's connection WINDOW_UPDATE with them

    async def flush(self) -> None:
        data = self.conn.data_to_send()
        if data:
            await self.stream.send_all(data)

    def call(self, path: str, message: bytes, timeout: str | None = None) -> int:
        sid = self.conn.get_next_available_stream_id()
        headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "rls"),
                   ("content-type", "application/grpc"), ("te", "trailers")]
        if timeout is not None:
            headers.append(("grpc-timeout", timeout))
        self.conn.send_headers(sid, headers)
        body = grpc_message(message)
        for i in range(0, len(body), 16384):
            self.conn.send_data(sid, body[i:i + 16384], end_stream=i + 16384 >= len(body))
        return sid

    async def pump(self, until) -> None:
        """Read and handle frames until ``until()`` holds (or the server closes)."""
        await self.flush()
        while not until():
            with trio.fail_after(STUCK):
                data = await self.stream.receive_some(65536)
            if not data:
                self.eof = True
                return
            for event in self.conn.receive_data(data):
                self._event(event)
            await self.flush()

    def _event(self, event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            self.headers[event.stream_id] = dict(event.headers)
        elif isinstance(event, h2.events.TrailersReceived):
            self.trailers[event.stream_id] = dict(event.headers)
        elif isinstance(event, h2.events.DataReceived):
            self.data[event.stream_id] = self.data.get(event.stream_id, b"") + event.data
            if self.ack:
                self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self.ended.add(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self.resets[event.stream_id] = event.error_code
            self.ended.add(event.stream_id)
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event
        elif isinstance(event, h2.events.PingAckReceived):
            self.pings += 1
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            self.got_settings = True

    def status(self, sid: int) -> bytes | None:
        """grpc-status, from the trailers or a trailers-only answer."""
        return self.trailers.get(sid, self.headers.get(sid, {})).get(b"grpc-status")


async def test_unary_calls_many_concurrent_streams_and_ping(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    sids = [client.call("/t.S/Echo", b"m%d" % i) for i in range(200)]
    client.conn.ping(b"12345678")
    await client.pump(lambda: all(s in client.ended for s in sids) and client.pings)
    for i, sid in enumerate(sids):
        assert client.headers[sid] == {b":status": b"200", b"content-type": b"application/grpc"}
        assert client.data[sid] == grpc_message(b"echo:m%d" % i)
        assert client.trailers[sid] == {b"grpc-status": b"0"}
    assert client.pings == 1
    assert client.conn.remote_settings.max_concurrent_streams == ws.MAX_STREAMS
    assert client.conn.remote_settings.initial_window_size == hf.MAX_WINDOW
    assert client.conn.remote_settings.max_header_list_size == ws.MAX_HEADER_LIST
    sent = sum(len(grpc_message(b"m%d" % i)) for i in range(200))
    assert client.conn.outbound_flow_control_window == hf.MAX_WINDOW - sent  # our connection WINDOW_UPDATE


async def test_a_tiny_peer_window_is_respected_and_data_resumes_on_window_update(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery), {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 7})
    client.ack = False  # no WINDOW_UPDATE until the test sends one
    await client.start()
    sid = client.call("/t.S/Echo", b"x" * 40)
    other = client.call("/t.S/Echo", b"y")
    whole, other_whole = grpc_message(b"echo:" + b"x" * 40), grpc_message(b"echo:y")
    await client.pump(lambda: len(client.data.get(sid, b"")) == 7 and len(client.data.get(other, b"")) == 7)
    assert client.data[sid] == whole[:7] and client.data[other] == other_whole[:7]  # h2 raises past a window
    assert sid not in client.ended and other not in client.ended
    client.conn.increment_flow_control_window(100, other)  # windows are per stream: other ends, sid waits
    await client.pump(lambda: other in client.ended)
    assert client.data[other] == other_whole and client.trailers[other] == {b"grpc-status": b"0"}
    assert client.data[sid] == whole[:7]
    while sid not in client.ended:  # now open sid's window bit by bit
        target = min(len(client.data[sid]) + 7, len(whole))
        client.conn.increment_flow_control_window(7, sid)
        await client.pump(lambda target=target: len(client.data[sid]) == target)
        if len(client.data[sid]) == len(whole):
            await client.pump(lambda: sid in client.ended)
    assert client.data[sid] == whole
    assert client.trailers[sid] == {b"grpc-status": b"0"}


async def test_a_blocked_stream_keeps_its_order_and_a_reset_one_frees_the_others(nursery, autojump_clock):
    """A watch stream's message waiting for window goes before its trailers; a reset stream's
    waiting answer is dropped and the others still go out."""
    h = Harness()
    client = H2Client(h.connect(nursery), {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 7})
    client.ack = False
    await client.start()
    watch = client.call("/t.S/Watch", b"")
    await client.pump(lambda: len(client.data.get(watch, b"")) == 7)
    await h.watch_send.send(None)  # the handler returns: OK trailers queue behind the waiting message
    await trio.testing.wait_all_tasks_blocked()
    reset, other = client.call("/t.S/Echo", b"r" * 20), client.call("/t.S/Echo", b"o" * 20)
    await client.pump(lambda: len(client.data.get(reset, b"")) == 7 and len(client.data.get(other, b"")) == 7)
    assert watch not in client.ended
    client.conn.reset_stream(reset, error_code=8)
    for sid in (watch, other):
        client.conn.increment_flow_control_window(100, sid)
    await client.pump(lambda: watch in client.ended and other in client.ended)
    assert client.data[watch] == grpc_message(b"first") and client.status(watch) == b"0"
    assert client.data[other] == grpc_message(b"echo:" + b"o" * 20) and client.status(other) == b"0"
    (conn,) = h.server.connections
    assert not conn.blocked and not conn.calls


async def test_connection_window_is_respected_too(nursery, autojump_clock):
    """The peer's connection window (65,535 until it sends WINDOW_UPDATE) holds every stream."""
    h = Harness()
    client = H2Client(h.connect(nursery), {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**20})
    client.ack = False
    await client.start()
    big = b"z" * 40000
    a, b = client.call("/t.S/Echo", big), client.call("/t.S/Echo", big)
    await client.pump(lambda: sum(map(len, client.data.values())) == 65535)
    assert a in client.ended and b not in client.ended  # a fit whole; b waits for the connection window
    client.conn.increment_flow_control_window(65535)
    await client.pump(lambda: b in client.ended)
    assert client.data[b] == grpc_message(b"echo:" + big)


async def test_unknown_method_oversize_message_and_not_grpc(nursery, autojump_clock):
    h = Harness(max_message=100)
    client = H2Client(h.connect(nursery))
    await client.start()
    unknown = client.call("/t.S/Nope", b"")
    big = client.call("/t.S/Echo", b"b" * 101)
    fits = client.call("/t.S/Echo", b"b" * 100)
    sid = client.conn.get_next_available_stream_id()
    client.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", "/t.S/Echo"),
                                   (":authority", "rls"), ("content-type", "text/plain")], end_stream=True)
    await client.pump(lambda: {unknown, big, fits, sid} <= client.ended)
    assert client.status(unknown) == b"12"
    assert client.headers[unknown][b"grpc-message"] == b"unknown method /t.S/Nope"
    assert client.status(big) == b"8"  # RESOURCE_EXHAUSTED
    assert client.status(fits) == b"0"
    assert client.headers[sid][b":status"] == b"415"


async def test_bad_messages_are_answered_with_a_status(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    sids = []
    for body in (b"\x00\x00\x00", b"\x00\x00\x00\x00\x09abc", b"\x01\x00\x00\x00\x01a", grpc_message(b"a") * 2):
        sid = client.conn.get_next_available_stream_id()
        client.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"), (":path", "/t.S/Echo"),
                                       (":authority", "rls"), ("content-type", "application/grpc")])
        client.conn.send_data(sid, body, end_stream=True)
        sids.append(sid)
    await client.pump(lambda: set(sids) <= client.ended)
    assert [client.status(s) for s in sids] == [b"13", b"13", b"12", b"13"]  # INTERNAL; compressed: UNIMPLEMENTED
    assert client.headers[sids[2]][b"grpc-message"] == b"compressed messages are not supported"


async def test_grpc_timeout_gives_deadline_exceeded_and_drops_the_late_answer(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    slow = client.call("/t.S/Hold", b"", timeout="100m")
    twin = client.call("/t.S/Hold", b"", timeout="100m")  # the same deadline: both fire
    later = client.call("/t.S/Hold", b"", timeout="1S")
    none = client.call("/t.S/Hold", b"")
    await client.flush()
    await h.wait_held(4)
    start = trio.current_time()
    await client.pump(lambda: slow in client.ended and twin in client.ended)
    assert client.status(twin) == b"4"
    assert client.status(slow) == b"4" and client.headers[slow][b"grpc-message"] == b"deadline exceeded"
    assert 0.1 <= trio.current_time() - start < 0.2 and later not in client.ended
    h.held[0].reply(b"too late")  # dropped: the stream is over
    h.held[3].reply(b"in time")
    await client.pump(lambda: later in client.ended and none in client.ended)
    assert slow not in client.data and client.status(later) == b"4"
    assert client.data[none] == grpc_message(b"in time") and client.status(none) == b"0"
    assert 1.0 <= trio.current_time() - start < 1.1


def test_grpc_timeout_units():
    assert ws.parse_timeout(b"100m") == pytest.approx(0.1)
    assert ws.parse_timeout(b"2S") == 2.0 and ws.parse_timeout(b"1M") == 60.0 and ws.parse_timeout(b"1H") == 3600.0
    assert ws.parse_timeout(b"5u") == pytest.approx(5e-6) and ws.parse_timeout(b"7n") == pytest.approx(7e-9)
    assert ws.parse_timeout(b"99999999S") == 99999999.0
    for bad in (b"", b"m", b"1", b"123456789S", b"1x", b"-1S", b"1.5S"):
        assert ws.parse_timeout(bad) is None, bad


async def test_rst_stream_mid_call_drops_the_answer(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    held = client.call("/t.S/Hold", b"")
    await client.flush()
    await h.wait_held(1)
    client.conn.reset_stream(held, error_code=8)
    await client.flush()
    await trio.testing.wait_all_tasks_blocked()
    assert h.held[0].done  # the server knows: the answer below goes nowhere
    h.held[0].reply(b"answer")
    with pytest.raises(ws.GrpcError) as err:
        await h.held[0].send(b"more")  # what a streaming handler meets: the call is over
    assert err.value.code == ws.CANCELLED
    after = client.call("/t.S/Echo", b"after")
    await client.pump(lambda: after in client.ended)
    assert held not in client.data and held not in client.headers  # (h2 raises on frames of a reset stream)
    assert client.status(after) == b"0"


async def test_watch_stream_sends_messages_and_ends_with_ok(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    sid = client.call("/t.S/Watch", b"")
    await client.pump(lambda: client.data.get(sid) == grpc_message(b"first"))
    await h.watch_send.send(b"second")
    await client.pump(lambda: client.data[sid].endswith(grpc_message(b"second")))
    await h.watch_send.send(None)
    await client.pump(lambda: sid in client.ended)
    assert client.status(sid) == b"0" and client.data[sid] == grpc_message(b"first") + grpc_message(b"second")
    failing = client.call("/t.S/Watch", b"fail")
    await client.pump(lambda: failing in client.ended)
    assert client.status(failing) == b"8" and client.headers[failing][b"grpc-message"] == b"too many watchers"


async def test_a_call_failed_later_is_sent_at_once(nursery, autojump_clock):
    """What a failed store round trip does: the answer (trailers only) leaves without other traffic."""
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    sid = client.call("/t.S/Hold", b"")
    await client.flush()
    await h.wait_held(1)
    h.held[0].fail(ws.UNAVAILABLE, "redis: down 100%")
    await client.pump(lambda: sid in client.ended)
    assert client.status(sid) == b"14" and client.headers[sid][b"grpc-message"] == b"redis: down 100%25"


async def test_a_reset_watch_stream_cancels_its_handler(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    sid = client.call("/t.S/Watch", b"")
    await client.pump(lambda: client.data.get(sid) == grpc_message(b"first"))
    client.conn.reset_stream(sid, error_code=8)
    await client.flush()
    await trio.testing.wait_all_tasks_blocked()
    assert h.watch_cancelled == 1
    (conn,) = h.server.connections
    assert not conn.calls


async def test_deadlines_pass_over_answered_calls_waiting_for_window(nursery, autojump_clock):
    """An answered call still waiting for the peer's window is not cut by its deadline, and the
    deadlines after it still fire."""
    h = Harness()
    client = H2Client(h.connect(nursery), {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 7})
    client.ack = False
    await client.start()
    answered = client.call("/t.S/Echo", b"x" * 20, timeout="100m")
    held = client.call("/t.S/Hold", b"", timeout="200m")
    await client.pump(lambda: held in client.ended)
    assert client.status(held) == b"4" and len(client.data[answered]) == 7 and answered not in client.ended
    client.conn.increment_flow_control_window(100, answered)
    await client.pump(lambda: answered in client.ended)
    assert client.data[answered] == grpc_message(b"echo:" + b"x" * 20) and client.status(answered) == b"0"


async def test_shutdown_goaway_lets_calls_in_flight_finish_then_closes(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    held = client.call("/t.S/Hold", b"")
    await client.flush()
    await h.wait_held(1)
    h.server.shutdown()
    await client.pump(lambda: client.goaway is not None)
    assert client.goaway.error_code == 0 and client.goaway.last_stream_id == held
    assert not client.eof
    h.held[0].reply(b"finished")
    raw = RawClient(client.stream, started=True)  # h2 takes its connection as closed after GOAWAY
    headers, body, trailers = await raw.answer(held)
    assert headers[b":status"] == b"200" and body == grpc_message(b"finished") and trailers[b"grpc-status"] == b"0"
    assert await raw.next_frame() is None  # then the server closes the connection
    await trio.testing.wait_all_tasks_blocked()
    assert not h.server.connections


async def test_a_connection_after_shutdown_gets_goaway_at_once(nursery, autojump_clock):
    h = Harness()
    h.server.shutdown()
    raw = RawClient(h.connect(nursery))
    await raw.start()
    kind, _, _, payload = await raw.next_frame()
    assert kind == hf.GOAWAY and payload == b"\x00" * 8
    assert await raw.next_frame() is None


async def test_a_stream_opened_after_goaway_is_refused(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    held = client.call("/t.S/Hold", b"")
    await client.flush()
    await h.wait_held(1)
    h.server.shutdown()
    await client.pump(lambda: client.goaway is not None)
    raw = RawClient(client.stream, started=True)  # h2 would refuse to open a stream after GOAWAY
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS | hf.END_STREAM, held + 2, raw.request_block()))
    kind, flags, sid, payload = await raw.next_frame()
    assert (kind, sid, int.from_bytes(payload, "big")) == (hf.RST_STREAM, held + 2, hf.REFUSED_STREAM)
    h.held[0].reply(b"done")


class RawClient:
    """Frames by hand, for what a well-behaved library never sends."""

    def __init__(self, stream, started: bool = False) -> None:
        self.stream = stream
        self.buf = bytearray()
        self.decoder = hpack.Decoder()
        self.started = started

    async def start(self) -> None:
        await self.stream.send_all(PREFACE + frame(hf.SETTINGS, 0, 0, b""))
        self.started = True

    async def send(self, *frames: bytes) -> None:
        await self.stream.send_all(b"".join(frames))

    @staticmethod
    def request_block(path: bytes = b"/t.S/Echo", index_path: bool = False) -> bytes:
        path_field = b"\x44" + hf.hpack_literal(path) if index_path else b"\x04" + hf.hpack_literal(path)
        return b"\x83\x86" + path_field + b"\x0f\x10" + hf.hpack_literal(b"application/grpc")

    async def next_frame_any(self) -> tuple[int, int, int, bytes] | None:
        """The next frame, the server's SETTINGS and WINDOW_UPDATEs included."""
        while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
            with trio.fail_after(STUCK):
                data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.buf += data
        length = int.from_bytes(self.buf[:3], "big")
        got = (self.buf[3], self.buf[4], int.from_bytes(self.buf[5:9], "big"), bytes(self.buf[9:9 + length]))
        del self.buf[:9 + length]
        return got

    async def next_frame(self) -> tuple[int, int, int, bytes] | None:
        while True:
            if len(self.buf) >= 9:
                length = int.from_bytes(self.buf[:3], "big")
                if len(self.buf) >= 9 + length:
                    kind, flags = self.buf[3], self.buf[4]
                    sid = int.from_bytes(self.buf[5:9], "big")
                    payload = bytes(self.buf[9:9 + length])
                    del self.buf[:9 + length]
                    if kind in (hf.SETTINGS, hf.WINDOW_UPDATE) and sid == 0:
                        continue  # the server's opening frames and acks
                    return kind, flags, sid, payload
            with trio.fail_after(STUCK):
                data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.buf += data

    async def answer(self, sid: int) -> tuple[dict[bytes, bytes], bytes, dict[bytes, bytes]]:
        """Headers, body and trailers of stream ``sid`` (skipping other frames)."""
        headers: dict[bytes, bytes] = {}
        body = b""
        while True:
            got = await self.next_frame()
            assert got is not None, "connection closed"
            kind, flags, fsid, payload = got
            if fsid != sid:
                continue
            if kind == hf.HEADERS:
                block = dict(self.decoder.decode(payload, raw=True))
                if flags & hf.END_STREAM:
                    return headers or block, body, block
                headers = block
            elif kind == hf.DATA:
                body += payload


async def test_continuation_padding_and_priority_flags(nursery, autojump_clock):
    h = Harness()
    raw = RawClient(h.connect(nursery))
    await raw.start()
    encoder = hpack.Encoder()  # Huffman and the dynamic table, like Envoy
    block = encoder.encode([(":method", "POST"), (":scheme", "http"), (":path", "/t.S/Echo"),
                            (":authority", "rls"), ("content-type", "application/grpc"), ("te", "trailers"),
                            ("x-pad", "p" * 300)])
    head = b"\x03" + b"\x00\x00\x00\x00\x10" + block[:20] + b"PAD"  # pad length 3, priority fields
    await raw.send(frame(hf.HEADERS, hf.PADDED | hf.PRIORITY_FLAG, 1, head),
                   frame(hf.CONTINUATION, 0, 1, block[20:100]),
                   frame(hf.CONTINUATION, hf.END_HEADERS, 1, block[100:]),
                   frame(hf.DATA, hf.PADDED, 1, b"\x02" + grpc_message(b"a")[:3] + b"\x00\x00"),
                   frame(hf.DATA, hf.END_STREAM, 1, grpc_message(b"a")[3:]))
    headers, body, trailers = await raw.answer(1)
    assert headers[b":status"] == b"200" and body == grpc_message(b"echo:a") and trailers[b"grpc-status"] == b"0"
    # the same headers again: now mostly indices into the dynamic table
    block2 = encoder.encode([(":method", "POST"), (":scheme", "http"), (":path", "/t.S/Echo"),
                             (":authority", "rls"), ("content-type", "application/grpc"), ("te", "trailers"),
                             ("x-pad", "p" * 300)])
    assert len(block2) < 20
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS, 3, block2), frame(hf.DATA, hf.END_STREAM, 3, grpc_message(b"b")))
    assert (await raw.answer(3))[1] == grpc_message(b"echo:b")


async def test_cached_header_blocks_follow_the_dynamic_table(nursery, autojump_clock):
    """The same block bytes mean another path once the table changed: never answered from the cache."""
    h = Harness()
    raw = RawClient(h.connect(nursery))
    await raw.start()
    indexed = b"\x83\x86\xbe\x0f\x10" + hf.hpack_literal(b"application/grpc")  # :path = dynamic entry 62
    sends = [(RawClient.request_block(b"/t.S/Echo", index_path=True), b"0"),  # adds /t.S/Echo as entry 62
             (indexed, b"0"), (indexed, b"0"),  # decoded, then from the cache
             (RawClient.request_block(b"/t.S/Nope", index_path=True), b"12"),  # entry 62 is now /t.S/Nope
             (indexed, b"12"),
             (RawClient.request_block(b"/t.S/Echo"), b"0"), (RawClient.request_block(b"/t.S/Echo"), b"0")]
    for i, (block, status) in enumerate(sends):
        sid = 1 + 2 * i
        await raw.send(frame(hf.HEADERS, hf.END_HEADERS, sid, block), frame(hf.DATA, hf.END_STREAM, sid, grpc_message(b"")))
        _, _, trailers = await raw.answer(sid)
        assert trailers[b"grpc-status"] == status, (i, trailers)
    (conn,) = h.server.connections
    assert set(conn.known_blocks) == {indexed, RawClient.request_block(b"/t.S/Echo")}  # never a block that adds
    decoded = []
    decode = conn.decoder.decode
    conn.decoder.decode = lambda *a, **k: decoded.append(1) or decode(*a, **k)
    sid = 1 + 2 * len(sends)
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS, sid, indexed), frame(hf.DATA, hf.END_STREAM, sid, grpc_message(b"")))
    assert (await raw.answer(sid))[2][b"grpc-status"] == b"12" and not decoded  # from the cache


@pytest.mark.parametrize("data, code", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", hf.PROTOCOL_ERROR),  # not the preface
    (PREFACE + frame(hf.PING, 0, 0, b"1234"), hf.FRAME_SIZE_ERROR),
    (PREFACE + frame(hf.PING, 0, 1, b"12345678"), hf.PROTOCOL_ERROR),
    (PREFACE + b"\x00\x40\x01" + bytes((hf.DATA, 0)) + b"\x00\x00\x00\x01", hf.FRAME_SIZE_ERROR),  # > 16384
    (PREFACE + frame(hf.HEADERS, hf.END_HEADERS, 2, RawClient.request_block()), hf.PROTOCOL_ERROR),  # even id
    (PREFACE + frame(hf.HEADERS, hf.END_HEADERS, 1, b"\xff\xff\xff\xff"), hf.COMPRESSION_ERROR),
    (PREFACE + frame(hf.HEADERS, 0, 1, b"\x83") + frame(hf.PING, 0, 0, b"12345678"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.CONTINUATION, hf.END_HEADERS, 1, b"\x83"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.DATA, 0, 5, b"x"), hf.PROTOCOL_ERROR),  # idle stream
    (PREFACE + frame(hf.DATA, 0, 0, b"x"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.SETTINGS, 0, 0, b"\x00\x04\x80\x00\x00\x00"), hf.FLOW_CONTROL_ERROR),
    (PREFACE + frame(hf.SETTINGS, 0, 0, b"\x00\x05\x00\x00\x00\x01"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.SETTINGS, 0, 0, b"\x00\x02\x00\x00\x00\x02"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.SETTINGS, 0, 0, b"\x00\x04\x00"), hf.FRAME_SIZE_ERROR),
    (PREFACE + frame(hf.SETTINGS, hf.ACK, 0, b"\x00\x04\x00\x00\x00\x00"), hf.FRAME_SIZE_ERROR),
    (PREFACE + frame(hf.SETTINGS, 0, 1, b""), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.WINDOW_UPDATE, 0, 0, b"\x00\x00\x00\x00"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.WINDOW_UPDATE, 0, 0, b"\x7f\xff\xff\xff"), hf.FLOW_CONTROL_ERROR),
    (PREFACE + frame(hf.WINDOW_UPDATE, 0, 0, b"\x01"), hf.FRAME_SIZE_ERROR),
    (PREFACE + frame(hf.RST_STREAM, 0, 9, b"\x00\x00\x00\x08"), hf.PROTOCOL_ERROR),  # idle stream
    (PREFACE + frame(hf.RST_STREAM, 0, 0, b"\x00\x00\x00\x08"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.PUSH_PROMISE, hf.END_HEADERS, 1, b"\x00\x00\x00\x02"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.PRIORITY, 0, 1, b"\x00"), hf.FRAME_SIZE_ERROR),
    (PREFACE + frame(hf.HEADERS, hf.END_HEADERS | hf.PADDED, 1, b"\x05ab"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.HEADERS, hf.END_HEADERS | hf.PADDED, 1, b"\x03\x00\x00"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.HEADERS, hf.END_HEADERS | hf.PRIORITY_FLAG, 1, b"\x00\x00"), hf.FRAME_SIZE_ERROR),
    (PREFACE + frame(hf.HEADERS, hf.END_HEADERS, 0, b"\x83"), hf.PROTOCOL_ERROR),
    (PREFACE + frame(hf.HEADERS, hf.END_HEADERS, 1, RawClient.request_block()) + frame(hf.DATA, hf.PADDED, 1, b"\x02x"),
     hf.PROTOCOL_ERROR),  # padding as long as the frame
    (PREFACE + frame(hf.HEADERS, hf.END_HEADERS, 1, RawClient.request_block()) + frame(hf.DATA, hf.PADDED, 1, b""),
     hf.PROTOCOL_ERROR),
])
async def test_protocol_errors_get_goaway_then_close(nursery, autojump_clock, data, code):
    h = Harness()
    raw = RawClient(h.connect(nursery))
    await raw.send(data)
    got = await raw.next_frame()
    assert got is not None and got[0] == hf.GOAWAY and got[1] == 0 and got[2] == 0, got
    assert int.from_bytes(got[3][4:8], "big") == code, got[3][8:]
    assert got[3][:4] in (b"\x00" * 4, b"\x00\x00\x00\x01") and got[3][8:] and got[3][8:].decode() in h.logs[0]  # debug data: why
    assert await raw.next_frame() is None  # then the server closes
    assert h.logs and h.logs[0].startswith("connection error: ")  # one line, no traceback


async def test_a_huge_header_block_is_refused(nursery, autojump_clock):
    h = Harness()
    raw = RawClient(h.connect(nursery))
    await raw.start()
    frames = [frame(hf.HEADERS, 0, 1, b"\x83")] + [frame(hf.CONTINUATION, 0, 1, b"\x00" * 16000)] * 3
    await raw.send(*frames)
    kind, _, _, payload = await raw.next_frame()
    assert kind == hf.GOAWAY and int.from_bytes(payload[4:8], "big") == hf.ENHANCE_YOUR_CALM


async def test_peer_goaway_and_eof_end_the_connection_quietly(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    sid = client.call("/t.S/Echo", b"x")
    await client.pump(lambda: sid in client.ended)
    client.conn.close_connection()
    await client.pump(lambda: False)
    assert client.eof and client.status(sid) == b"0"  # the server closes after the peer's GOAWAY
    await client.stream.aclose()
    raw = RawClient(h.connect(nursery))
    await raw.start()
    await raw.stream.aclose()  # EOF in the middle: no log line
    await trio.testing.wait_all_tasks_blocked()
    assert not h.logs and not h.server.connections


async def test_frames_queued_before_a_protocol_error_still_go_out(nursery, autojump_clock):
    h = Harness()
    raw = RawClient(h.connect(nursery))
    await raw.send(PREFACE + frame(hf.PING, 0, 0, b"pingpong") + frame(hf.PING, 0, 0, b"short"))
    assert await raw.next_frame() == (hf.PING, hf.ACK, 0, b"pingpong")
    kind, _, _, payload = await raw.next_frame()
    assert kind == hf.GOAWAY and int.from_bytes(payload[4:8], "big") == hf.FRAME_SIZE_ERROR


async def test_a_call_is_answered_once(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    sid = client.call("/t.S/Hold", b"")
    await client.flush()
    await h.wait_held(1)
    h.held[0].reply(b"one")
    h.held[0].reply(b"two")
    h.held[0].fail(ws.INTERNAL, "three")
    after = client.call("/t.S/Echo", b"")
    await client.pump(lambda: after in client.ended)
    assert client.data[sid] == grpc_message(b"one") and client.trailers[sid] == {b"grpc-status": b"0"}


def test_header_encoding_decodes_with_an_independent_decoder():
    decoder = hpack.Decoder()
    long = "x" * 300 + " é%\x7f\x1f ~"
    block = ws.RESPONSE_HEADERS + ws.trailers(ws.INTERNAL, long)
    assert decoder.decode(block, raw=True) == [
        (b":status", b"200"), (b"content-type", b"application/grpc"), (b"grpc-status", b"13"),
        (b"grpc-message", b"x" * 300 + b" %C3%A9%25%7F%1F ~")]
    assert not decoder.header_table.dynamic_entries  # never indexed: we keep no table on our side
    assert ws.trailers(ws.OK) == ws.TRAILERS_OK and decoder.decode(ws.TRAILERS_OK, raw=True) == [(b"grpc-status", b"0")]
    for value, prefix in ((0, 7), (126, 7), (127, 7), (128, 7), (300, 7), (2**20, 7), (14, 4), (15, 4), (16, 4)):
        encoded = hf.hpack_int(value, prefix, 0)
        limit = (1 << prefix) - 1
        if value < limit:
            assert encoded == bytes((value,))
        else:  # RFC 7541 5.1: the prefix full, then 7-bit groups, low first
            rest, decoded, shift = encoded[1:], limit, 0
            assert encoded[0] == limit
            for byte in rest:
                decoded += (byte & 0x7F) << shift
                shift += 7
            assert decoded == value and all(b & 0x80 for b in rest[:-1]) and not rest[-1] & 0x80


def test_log_lines_go_to_stderr_by_default(capsys):
    WireServer({}, {}).log("connection error: test")
    assert capsys.readouterr().err == "ratelimit-server: connection error: test\n"


async def test_answered_calls_leave_no_deadline_behind(nursery, autojump_clock):
    """A client that sends long timeouts (here a day) on every call: the deadline heap stays
    about as big as the calls open, not as the calls made."""
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    (conn,) = h.server.connections
    client.call("/t.S/Hold", b"", timeout="1H")  # open, at the top of the heap, for the whole test
    for _ in range(5):
        sids = [client.call("/t.S/Echo", b"", timeout="24H") for _ in range(100)]
        await client.pump(lambda sids=sids: set(sids) <= client.ended)
    assert len(conn.deadlines) <= 64 + 2 * 100 + 1


async def test_request_trailers_early_answers_and_closed_streams(nursery, autojump_clock):
    """A request ended by a trailers HEADERS frame is served; a call answered before its request
    ended (unknown method, not gRPC) is followed by RST_STREAM NO_ERROR; HEADERS on a closed
    stream are decoded (the table must be followed) and otherwise ignored."""
    h = Harness()
    raw = RawClient(h.connect(nursery))
    await raw.start()
    trailer_block = b"\x00" + hf.hpack_literal(b"x-trailer") + hf.hpack_literal(b"1")
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS, 1, RawClient.request_block()),
                   frame(hf.DATA, 0, 1, grpc_message(b"t")),
                   frame(hf.HEADERS, hf.END_HEADERS | hf.END_STREAM, 1, trailer_block))
    assert (await raw.answer(1))[1] == grpc_message(b"echo:t")
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS, 3, RawClient.request_block(b"/t.S/Nope")))
    kind, flags, sid, payload = await raw.next_frame()
    assert (kind, sid) == (hf.HEADERS, 3) and dict(raw.decoder.decode(payload, raw=True))[b"grpc-status"] == b"12"
    assert await raw.next_frame() == (hf.RST_STREAM, 0, 3, b"\x00" * 4)
    not_grpc = b"\x83\x86\x04" + hf.hpack_literal(b"/t.S/Echo") + b"\x0f\x10" + hf.hpack_literal(b"text/plain")
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS, 5, not_grpc))
    kind, flags, sid, payload = await raw.next_frame()
    assert (kind, sid) == (hf.HEADERS, 5) and dict(raw.decoder.decode(payload, raw=True)) == {b":status": b"415"}
    assert await raw.next_frame() == (hf.RST_STREAM, 0, 5, b"\x00" * 4)
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS | hf.END_STREAM, 5, RawClient.request_block()),
                   frame(hf.HEADERS, hf.END_HEADERS, 7, RawClient.request_block()),
                   frame(hf.DATA, hf.END_STREAM, 7, grpc_message(b"7")))
    assert await raw.next_frame() == (hf.HEADERS, hf.END_HEADERS, 7, ws.RESPONSE_HEADERS)  # nothing for 5


async def test_streams_past_max_concurrent_streams_are_refused(nursery, autojump_clock, monkeypatch):
    monkeypatch.setattr(ws, "MAX_STREAMS", 2)
    h = Harness()
    raw = RawClient(h.connect(nursery))
    await raw.start()
    for sid in (1, 3, 5):
        await raw.send(frame(hf.HEADERS, hf.END_HEADERS, sid, RawClient.request_block(b"/t.S/Hold")),
                       frame(hf.DATA, hf.END_STREAM, sid, grpc_message(b"")))
    assert await raw.next_frame() == (hf.RST_STREAM, 0, 5, hf.REFUSED_STREAM.to_bytes(4, "big"))
    await h.wait_held(2)
    h.held[0].reply(b"")  # a slot frees up
    assert (await raw.answer(1))[2][b"grpc-status"] == b"0"
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS, 7, RawClient.request_block()),
                   frame(hf.DATA, hf.END_STREAM, 7, grpc_message(b"")))
    assert (await raw.answer(7))[2][b"grpc-status"] == b"0"


async def test_our_receive_window_is_enforced_and_topped_up(nursery, autojump_clock, monkeypatch):
    monkeypatch.setattr(ws, "TOP_UP", 30)
    h = Harness()
    raw = RawClient(h.connect(nursery))
    await raw.start()
    await trio.testing.wait_all_tasks_blocked()
    (conn,) = h.server.connections
    conn.recv_window = 40  # as if the peer had used the rest
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS, 1, RawClient.request_block()),
                   frame(hf.DATA, 0, 1, b"\x00\x00\x00\x00\x20" + b"a" * 15),
                   frame(hf.DATA, hf.END_STREAM, 1, b"b" * 17))  # 37 bytes: over TOP_UP
    raw.buf.clear()
    got = []
    while len(got) < 4:
        frm = await raw.next_frame_any()
        got.append(frm)
    assert (hf.WINDOW_UPDATE, 0, 0, (37).to_bytes(4, "big")) in got and conn.recv_window == 40
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS, 3, RawClient.request_block()),
                   frame(hf.DATA, 0, 3, b"c" * 41))
    kind = None
    while kind != hf.GOAWAY:
        kind, _, _, payload = await raw.next_frame()
    assert kind == hf.GOAWAY and int.from_bytes(payload[4:8], "big") == hf.FLOW_CONTROL_ERROR


def _settings(*pairs: tuple[int, int]) -> bytes:
    return frame(hf.SETTINGS, 0, 0, b"".join(i.to_bytes(2, "big") + v.to_bytes(4, "big") for i, v in pairs))


async def test_settings_with_several_entries_and_window_changes_on_open_streams(nursery, autojump_clock):
    """Every entry of a SETTINGS frame is applied; a new INITIAL_WINDOW_SIZE moves the windows of
    the streams already open by the difference (RFC 9113 6.9.2); the largest legal values pass."""
    h = Harness()
    raw = RawClient(h.connect(nursery))
    await raw.send(PREFACE + _settings((0x2, 0), (0x5, 2**24 - 1), (0x4, 7), (0x3, 100)))
    await raw.send(frame(hf.HEADERS, hf.END_HEADERS, 1, RawClient.request_block(b"/t.S/Hold")),
                   frame(hf.DATA, hf.END_STREAM, 1, grpc_message(b"")))
    await h.wait_held(1)
    h.held[0].reply(b"x" * 20)  # 25 bytes, 7 fit
    headers = await raw.next_frame()
    assert headers[0] == hf.HEADERS
    assert await raw.next_frame() == (hf.DATA, 0, 1, grpc_message(b"x" * 20)[:7])
    await raw.send(_settings((0x4, 17)))  # +10 for the open stream
    assert await raw.next_frame() == (hf.DATA, 0, 1, grpc_message(b"x" * 20)[7:17])
    await raw.send(_settings((0x4, hf.MAX_WINDOW)), frame(hf.WINDOW_UPDATE, 0, 0, (hf.MAX_WINDOW - 65535).to_bytes(4, "big")))
    assert await raw.next_frame() == (hf.DATA, 0, 1, grpc_message(b"x" * 20)[17:])
    assert (await raw.next_frame())[:3] == (hf.HEADERS, hf.END_HEADERS | hf.END_STREAM, 1)
    assert not h.logs  # the largest legal window and frame size are no errors


async def test_answers_sent_at_once_use_up_the_windows(nursery, autojump_clock):
    """Whole answers sent at once count against the stream's and the connection's windows: the
    next ones wait (h2 raises if a window is overrun)."""
    h = Harness()
    client = H2Client(h.connect(nursery), {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 15})
    client.ack = False
    await client.start()
    watch = client.call("/t.S/Watch", b"")
    await client.pump(lambda: client.data.get(watch) == grpc_message(b"first"))  # 10 of 15
    await h.watch_send.send(b"second")
    await client.pump(lambda: len(client.data[watch]) == 15)
    client2 = H2Client(h.connect(nursery), {h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**20})
    client2.ack = False
    await client2.start()
    sids = [client2.call("/t.S/Echo", b"e" * 16000) for _ in range(5)]  # 16,010 bytes each
    await client2.pump(lambda: sum(map(len, client2.data.values())) == 65535)
    assert [s in client2.ended for s in sids] == [True] * 4 + [False]


async def test_a_message_in_many_frames_arrives_whole(nursery, autojump_clock):
    h = Harness()
    client = H2Client(h.connect(nursery))
    await client.start()
    message = bytes(range(256)) * 1200  # 300 KiB: about 19 DATA frames
    sid = client.call("/t.S/Echo", message)
    await client.pump(lambda: sid in client.ended)
    assert client.status(sid) == b"0"
    assert client.data[sid] == grpc_message(b"echo:" + message)


async def test_unfinished_messages_past_the_connection_budget_get_goaway(nursery, autojump_clock):
    """Each stream stays under the message limit; together they pass MAX_BUFFERED."""
    h = Harness()
    raw = RawClient(h.connect(nursery))
    await raw.start()
    chunk = b"\x00" * 16384
    per_stream = (ws.MAX_MESSAGE - 65536) // len(chunk)  # under max_message each
    streams = ws.MAX_BUFFERED // (per_stream * len(chunk)) + 1
    for i in range(streams):
        sid = 1 + 2 * i
        await raw.send(frame(hf.HEADERS, hf.END_HEADERS, sid, RawClient.request_block(b"/t.S/Hold")),
                       *[frame(hf.DATA, 0, sid, chunk)] * per_stream)
    kind, _, _, payload = await raw.next_frame()
    assert kind == hf.GOAWAY and int.from_bytes(payload[4:8], "big") == hf.ENHANCE_YOUR_CALM
    assert any("unfinished request messages" in line for line in h.logs)
