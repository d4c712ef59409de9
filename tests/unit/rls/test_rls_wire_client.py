"""The hand-framed gRPC client (trioproxy/rls/wire_client.py) against an independent HTTP/2 server.

The server here is the ``h2`` library's server side, so the client meets another implementation's
framing: CONTINUATION frames, padding, PINGs, a server that keeps an HPACK dynamic table anyway, a
stream limit of one, GOAWAY and RST_STREAM. (Against grpcio's real server: test_ratelimit_remote.py
and test_ratelimit_e2e.py, through the gateway.)
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, NamedTuple

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
import trio
import trio.testing

from trioproxy.rls.protos import rls_pb2
from trioproxy.rls.wire_client import RlsCallFailed, WireRlsClient, encode_request, header_block


class FakeRls:
    """Answers each ShouldRateLimit with OK and a response header echoing the first entry's value."""

    def __init__(self, *, dynamic_table: bool = False, max_streams: int | None = None, goaway_after: int = 0,
                 big_header: int = 0, pad: int = 0, ping: bool = False, reset: bool = False,
                 big_window: bool = False, silent: str = "", grpc_status: str = "0", grpc_message: str = "",
                 http_status: str = "200", hold: trio.Event | None = None, dribble: int = 0,
                 late_window_update: bool = False, idle_goaway: bool = False) -> None:
        self.dynamic_table = dynamic_table
        self.max_streams = max_streams
        self.goaway_after = goaway_after
        self.big_header = big_header
        self.pad = pad
        self.ping = ping
        self.reset = reset
        self.big_window = big_window
        self.silent = silent  # requests whose first entry has this value are never answered
        self.resets: list[int] = []
        self.reset_codes: list[int] = []
        self.requests: list[tuple[dict[str, str], rls_pb2.RateLimitRequest]] = []  # (headers, message)
        self.headers: dict[int, dict[str, str]] = {}
        self.grpc_status, self.grpc_message, self.http_status = grpc_status, grpc_message, http_status
        self.hold = hold  # answers wait for it
        self.dribble = dribble  # answers sent in pieces of this many bytes, each read on its own
        self.late_window_update = late_window_update  # a stream's data acknowledged once it is answered
        self.idle_goaway = idle_goaway  # GOAWAY sent once the client has read the answers before it
        self.answered = 0
        self.connections = 0
        self.ping_acks = 0
        self.most_open = 0
        self.closed_by_client = 0

    async def serve(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        conn.initiate_connection()
        if self.max_streams is not None:
            conn.update_settings({h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: self.max_streams})
        if self.big_window:  # requests larger than the default 64 KiB windows
            conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 2**31 - 1})
            conn.increment_flow_control_window(2**31 - 1 - 65535)
        if self.ping:
            conn.ping(b"12345678")
        await stream.send_all(conn.data_to_send())
        bodies: dict[int, bytes] = {}
        unacknowledged: list[tuple[int, int]] = []
        pending: list[int] = []
        answered = self.answered
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    bodies[event.stream_id] = b""
                    self.headers[event.stream_id] = {n.decode(): v.decode() for n, v in event.headers}
                    self.most_open = max(self.most_open, len(bodies))
                elif isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] += event.data
                    unacknowledged.append((event.flow_controlled_length, event.stream_id))
                    if not self.late_window_update:
                        conn.acknowledge_received_data(*unacknowledged.pop())
                elif isinstance(event, h2.events.StreamEnded):
                    pending.append(event.stream_id)
                elif isinstance(event, h2.events.PingAckReceived):
                    self.ping_acks += 1
                elif isinstance(event, h2.events.StreamReset):
                    self.resets.append(event.stream_id)
                    self.reset_codes.append(event.error_code)
            if self.dynamic_table:  # against our SETTINGS_HEADER_TABLE_SIZE 0: a table anyway
                conn.encoder.header_table_size = 4096
            await stream.send_all(conn.data_to_send())
            await trio.sleep(0)  # let other calls open streams meanwhile (the stream limit test)
            if self.hold is not None and pending:
                await self.hold.wait()
            for sid in pending:
                self._answer(conn, sid, bodies.pop(sid))
            last = max(pending, default=0)
            pending.clear()
            for length, sid in [u for u in unacknowledged if u[1] not in bodies]:  # the answered streams'
                conn.acknowledge_received_data(length, sid)
                unacknowledged.remove((length, sid))
            out = conn.data_to_send()
            for i in range(0, len(out), self.dribble or len(out) or 1):
                await stream.send_all(out[i:i + (self.dribble or len(out))])
                if self.dribble:
                    await trio.testing.wait_all_tasks_blocked()  # the client has read this piece
            if self.goaway_after and self.answered - answered >= self.goaway_after:  # on this connection
                # A graceful server: the streams it got but did not answer are past last_stream_id.
                if self.idle_goaway:
                    await trio.testing.wait_all_tasks_blocked()
                conn.close_connection(last_stream_id=last)
                await stream.send_all(conn.data_to_send())
                while await stream.receive_some(65536):  # until the client closes (no RST race)
                    pass
                self.closed_by_client += 1
                return

    def _answer(self, conn: h2.connection.H2Connection, sid: int, body: bytes) -> None:
        self.requests.append((self.headers.pop(sid, {}), rls_pb2.RateLimitRequest.FromString(body[5:])))
        if self.silent and rls_pb2.RateLimitRequest.FromString(body[5:]).descriptors[0].entries[0].value == self.silent:
            return
        self.answered += 1
        if self.reset:
            conn.reset_stream(sid, error_code=2)
            return
        request = rls_pb2.RateLimitRequest.FromString(body[5:])
        value = request.descriptors[0].entries[0].value
        response = rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)
        response.response_headers_to_add.add(key="x-echo", value=value)
        message = response.SerializeToString()
        headers = [(":status", self.http_status), ("content-type", "application/grpc"), ("x-value", value)]
        if self.big_header:
            headers.append(("x-big", "b" * self.big_header))
        conn.send_headers(sid, headers)
        conn.send_data(sid, b"\x00" + len(message).to_bytes(4, "big") + message, pad_length=self.pad or None)
        trailers = [("grpc-status", self.grpc_status), ("x-trailer", value)]
        if self.grpc_message:
            trailers.append(("grpc-message", self.grpc_message))
        conn.send_headers(sid, trailers, end_stream=True)


async def start(nursery, fake: FakeRls) -> WireRlsClient:
    listeners = await nursery.start(trio.serve_tcp, fake.serve, 0)
    return WireRlsClient(f"127.0.0.1:{listeners[0].socket.getsockname()[1]}")


async def echo(client: WireRlsClient, value: str) -> str:
    response = await client.should_rate_limit("d", [([("k", value)], None)], 5)
    return response.response_headers_to_add[0].value


def test_request_encoding_and_reusable_header_block():
    request = rls_pb2.RateLimitRequest.FromString(encode_request("d", [([("a", "1")], 0), ([("b", "2")], None),
                                                                    ([("c", "3")], 7)]))
    assert [(d.entries[0].key, d.HasField("hits_addend"), d.hits_addend.value) for d in request.descriptors] == [
        ("a", True, 0), ("b", False, 0), ("c", True, 7)]  # 0 = only look: present, not absent
    import hpack

    assert hpack.Decoder().decode(header_block(b"h:1", 1500)) == [
        (":method", "POST"), (":scheme", "http"), (":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"),
        (":authority", "h:1"), ("content-type", "application/grpc"), ("te", "trailers"), ("grpc-timeout", "1500m")]


async def test_a_server_keeping_a_dynamic_table_is_followed(nursery):
    fake = FakeRls(dynamic_table=True)
    client = await start(nursery, fake)
    values = [f"v{i % 7}-{'x' * (i % 3)}" for i in range(40)]
    assert [await echo(client, v) for v in values] == values


async def test_continuation_padding_and_ping(nursery):
    fake = FakeRls(big_header=40000, pad=20, ping=True)
    client = await start(nursery, fake)
    assert [await echo(client, v) for v in ("a", "b")] == ["a", "b"]
    assert fake.ping_acks == 1


async def test_the_servers_stream_limit_is_kept(nursery):
    fake = FakeRls(max_streams=1)
    client = await start(nursery, fake)
    await echo(client, "warm")  # the server's SETTINGS are in
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        results[i] = await echo(client, str(i))

    async with trio.open_nursery() as calls:
        for i in range(6):
            calls.start_soon(one, i)
    assert results == {i: str(i) for i in range(6)}
    assert fake.most_open == 1


async def test_writes_the_socket_cannot_take_at_once_stay_whole_and_in_order(nursery):
    """With tiny socket buffers a large request needs many sends; calls made meanwhile queue
    behind it (WireRlsClient writes without a lock) and every frame still arrives whole."""
    fake = FakeRls(big_window=True)
    client = await start(nursery, fake)
    await echo(client, "warm")  # connected, the server's SETTINGS are in
    assert client._conn is not None
    client._conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    pads = [300_000, 0, 100_000, 0]
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        entries = [("k", str(i)), ("pad", "p" * pads[i])]
        response = await client.should_rate_limit("d", [(entries, None)], 5)
        results[i] = response.response_headers_to_add[0].value

    async with trio.open_nursery() as calls:
        for i in range(len(pads)):
            calls.start_soon(one, i)
    assert results == {i: str(i) for i in range(len(pads))}
    assert fake.connections == 1
    assert not client._conn.unsent and not client._conn.flushing


async def test_an_unanswered_call_fails_at_its_deadline_and_its_stream_is_reset(nursery, autojump_clock):
    """No cancel scope per call: the connection's timer task fails calls at their deadline. A
    call with an earlier deadline than those already waiting moves the timer's wake-up."""
    fake = FakeRls(silent="slow")
    client = await start(nursery, fake)
    await echo(client, "warm")
    failures: dict[str, float] = {}

    async def slow(timeout: float) -> None:
        start = trio.current_time()
        with pytest.raises(RlsCallFailed, match="DEADLINE_EXCEEDED"):
            await client.should_rate_limit("d", [([("k", "slow")], None)], timeout)
        failures[f"{timeout}"] = trio.current_time() - start

    async with trio.open_nursery() as calls:
        calls.start_soon(slow, 60.0)
        await trio.sleep(1)
        calls.start_soon(slow, 0.5)
    assert 0.5 <= failures["0.5"] < 0.6  # not at the 60 s call's deadline
    assert 60 <= failures["60.0"] < 60.1
    await trio.sleep(0.1)  # (mock clock) the resets reach the server
    assert sorted(fake.resets) == [3, 5] and fake.reset_codes == [8, 8]  # CANCEL
    assert await echo(client, "after") == "after"  # the connection is still in use
    t0 = trio.current_time()  # and its timer still runs once no call was waiting
    with pytest.raises(RlsCallFailed, match="DEADLINE_EXCEEDED"):
        await client.should_rate_limit("d", [([("k", "slow")], None)], 0.5)
    assert trio.current_time() - t0 < 0.6
    assert fake.connections == 1


async def test_frames_split_across_reads_are_put_back_together(nursery):
    fake = FakeRls(dribble=7, pad=3)  # pieces that end inside frame headers and payloads
    client = await start(nursery, fake)
    assert [await echo(client, v) for v in ("a", "bb", "c" * 50)] == ["a", "bb", "c" * 50]


async def test_the_service_closing_the_connection_fails_the_call(nursery):
    async def closing(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.aclose()

    listeners = await nursery.start(trio.serve_tcp, closing, 0)
    client = WireRlsClient(f"127.0.0.1:{listeners[0].socket.getsockname()[1]}")
    with pytest.raises(RlsCallFailed, match="^UNAVAILABLE: connection closed$"):
        await echo(client, "x")


async def test_a_write_to_a_full_socket_waits_and_loses_nothing():
    """The socket refusing even the first byte (BlockingIOError): the bytes wait, whole and in
    order, behind nothing else, and later writes queue behind them."""
    from trioproxy.rls.wire_client import _Connection

    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    filler = 0
    try:
        while True:
            filler += a.send(b"f" * 4096)
    except BlockingIOError:
        pass
    conn = _Connection(a, "x:1")
    received = bytearray()

    async def drain() -> None:
        while len(received) < filler + 6:
            await trio.lowlevel.wait_readable(b)
            received.extend(b.recv(65536))

    async with trio.open_nursery() as n:
        n.start_soon(conn.write, b"abc")
        await trio.testing.wait_all_tasks_blocked()
        assert conn.flushing and bytes(conn.unsent) == b"abc"
        n.start_soon(conn.write, b"def")  # queued behind
        await trio.testing.wait_all_tasks_blocked()
        n.start_soon(drain)
    assert bytes(received) == b"f" * filler + b"abcdef"
    assert not conn.flushing and not conn.unsent
    a.close()
    b.close()


async def test_what_a_call_sends(nursery):
    fake = FakeRls()
    client = await start(nursery, fake)
    await client.should_rate_limit("dom", [([("k", "v"), ("k2", "w")], None), ([("t", "x")], 0)], 2.5)
    (headers, request), = fake.requests
    assert headers == {":method": "POST", ":scheme": "http", ":authority": client.target,
                       ":path": "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                       "content-type": "application/grpc", "te": "trailers", "grpc-timeout": "2500m"}
    assert request.domain == "dom"
    assert [[(e.key, e.value) for e in d.entries] for d in request.descriptors] == [[("k", "v"), ("k2", "w")], [("t", "x")]]
    assert [d.HasField("hits_addend") for d in request.descriptors] == [False, True]


async def test_requests_past_the_connection_window_wait_for_the_servers_window_update(nursery):
    """The server keeps HTTP/2's default 64 KiB connection window and opens it again only as it
    answers: three 40 KB requests must wait for its WINDOW_UPDATEs; sending past the window would
    be a flow-control error."""
    fake = FakeRls(late_window_update=True)
    client = await start(nursery, fake)
    await echo(client, "warm")
    results: dict[int, str] = {}

    async def one(i: int) -> None:
        response = await client.should_rate_limit("d", [([("k", str(i)), ("pad", "p" * 40_000)], None)], 5)
        results[i] = response.response_headers_to_add[0].value

    async with trio.open_nursery() as calls:
        for i in range(3):
            calls.start_soon(one, i)
    assert results == {0: "0", 1: "1", 2: "2"}
    assert fake.connections == 1


def _task_names() -> list[str]:
    names, todo = [], [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        names.append(task.name)
        todo.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return names


async def test_a_failed_connection_leaves_no_task_behind(nursery):
    client = await start(nursery, FakeRls(http_status="503"))
    with pytest.raises(RlsCallFailed):
        await echo(client, "x")
    assert "rls-wire-timer " + client.target in _task_names()
    assert client._conn is not None
    client._conn.fail_all("UNAVAILABLE: test")  # what the reader does when the socket fails
    await trio.testing.wait_all_tasks_blocked()
    assert "rls-wire-timer " + client.target not in _task_names()


async def test_a_caller_cancelled_while_waiting_leaves_the_connection_working(nursery):
    hold = trio.Event()
    fake = FakeRls(hold=hold)
    client = await start(nursery, fake)
    async with trio.open_nursery() as calls:
        calls.start_soon(echo, client, "abandoned")
        await trio.testing.wait_all_tasks_blocked()
        calls.cancel_scope.cancel()  # (the gateway's request cancelled: its client went away)
    hold.set()  # the answer arrives for nobody
    fake.hold = None
    assert await echo(client, "next") == "next"
    assert fake.connections == 1 and fake.answered == 2


@pytest.mark.parametrize(("answer", "error"), [
    ({"grpc_status": "14", "grpc_message": "store down"}, "gRPC status 14: store down"),
    ({"grpc_status": "8"}, "gRPC status 8: $"),
    ({"http_status": "503"}, "UNAVAILABLE: HTTP status 503"),
])
async def test_error_answers_fail_the_call_every_time(nursery, answer, error):
    """The second and third answers' header blocks come from the decoded-block cache: they must
    mean what the first meant."""
    fake = FakeRls(**answer)
    client = await start(nursery, fake)
    for _ in range(3):
        with pytest.raises(RlsCallFailed, match=error):
            await echo(client, "x")
    assert fake.connections == 1


async def test_an_ok_answer_after_an_error_answer_succeeds(nursery):
    fake = FakeRls(grpc_status="14", grpc_message="store down")
    client = await start(nursery, fake)
    with pytest.raises(RlsCallFailed, match="store down"):
        await echo(client, "x")
    fake.grpc_status, fake.grpc_message = "0", ""
    assert await echo(client, "y") == "y"


async def test_goaway_moves_calls_to_a_new_connection(nursery):
    fake = FakeRls(goaway_after=2)
    client = await start(nursery, fake)
    assert [await echo(client, str(i)) for i in range(5)] == [str(i) for i in range(5)]
    assert fake.connections >= 2
    assert fake.closed_by_client >= 1  # the client let the old connection go once it was idle


async def test_reset_stream_fails_the_call(nursery):
    client = await start(nursery, FakeRls(reset=True))
    with pytest.raises(RlsCallFailed, match="stream reset"):
        await echo(client, "x")


async def test_a_malformed_frame_fails_the_call_not_the_gateway(nursery):
    """The reader is a Trio system task: anything it raised would end the gateway's whole run."""
    from trioproxy.rls.h2_frames import END_HEADERS, HEADERS, PADDED, frame

    async def malformed(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.send_all(frame(HEADERS, END_HEADERS | PADDED, 1, b""))  # PADDED without a pad length
        while await stream.receive_some(65536):
            pass

    listeners = await nursery.start(trio.serve_tcp, malformed, 0)
    client = WireRlsClient(f"127.0.0.1:{listeners[0].socket.getsockname()[1]}")
    with pytest.raises(RlsCallFailed, match="UNAVAILABLE: connection failed"):
        await echo(client, "x")


# Who reads the socket: a call made while nobody reads leads (waits for the socket and routes
# every call's frames itself); calls made meanwhile follow (park until routed); a leader that
# leaves with followers waiting hands the socket to the reader task, which parks again once no
# call waits. An idle connection is read by nobody until the next call. (A lost hand-over would
# hang: fail_after turns that into a failure.)

async def test_concurrent_calls_follow_the_one_leading_and_each_gets_its_own_answer(nursery):
    hold = trio.Event()
    fake = FakeRls(hold=hold)
    client = await start(nursery, fake)
    results: dict[str, str] = {}

    async def one(value: str) -> None:
        results[value] = await echo(client, value)

    with trio.fail_after(10):
        async with trio.open_nursery() as calls:
            calls.start_soon(one, "lead")
            await trio.testing.wait_all_tasks_blocked()
            conn = client._conn
            assert conn is not None and conn.leader is not None and conn.reading and not conn.reader_turn
            for value in ("f1", "f2", "f3"):
                calls.start_soon(one, value)
            await trio.testing.wait_all_tasks_blocked()
            assert len(conn.calls) == 4 and not conn.reader_turn  # they follow: the leader reads for all
            hold.set()
    assert results == {v: v for v in ("lead", "f1", "f2", "f3")}
    assert not conn.reading and conn.leader is None  # idle: the next call leads again
    fake.hold = None
    assert await echo(client, "next") == "next"
    assert fake.connections == 1


async def test_a_cancelled_leader_hands_the_socket_to_the_reader_and_its_followers_are_answered(nursery):
    hold = trio.Event()
    fake = FakeRls()
    client = await start(nursery, fake)
    await echo(client, "warm")  # (the server's SETTINGS are in)
    results: dict[str, str] = {}
    leader_scope = trio.CancelScope()

    async def one(value: str) -> None:
        results[value] = await echo(client, value)

    async def leader() -> None:
        with leader_scope:
            await one("lead")

    fake.hold = hold
    with trio.fail_after(10):
        async with trio.open_nursery() as calls:
            calls.start_soon(leader)
            await trio.testing.wait_all_tasks_blocked()
            conn = client._conn
            assert conn is not None and conn.leader is not None
            calls.start_soon(one, "f1")
            calls.start_soon(one, "f2")
            await trio.testing.wait_all_tasks_blocked()
            leader_scope.cancel()  # (its request went away)
            await trio.testing.wait_all_tasks_blocked()
            assert conn.leader is None and conn.reader_turn  # the reader task reads for f1 and f2
            hold.set()  # every answer arrives; the leader's for nobody
    assert results == {"f1": "f1", "f2": "f2"}
    assert not conn.calls and not conn.reading and not conn.reader_turn  # idle again, the reader parked
    fake.hold = None
    assert await echo(client, "next") == "next"
    assert fake.connections == 1 and fake.answered == 5


async def test_a_leader_past_its_deadline_is_woken_and_its_follower_still_answered(nursery, autojump_clock):
    """The timer fails the leader's call at its deadline and wakes it out of its wait for the
    socket; the follower's answer, which the leader routed before, is not lost, and the timer's
    wake-up leaves the socket usable."""
    fake = FakeRls(silent="slow")
    client = await start(nursery, fake)
    await echo(client, "warm")
    out: dict[str, object] = {}

    async def slow() -> None:
        t0 = trio.current_time()
        with pytest.raises(RlsCallFailed, match="DEADLINE_EXCEEDED"):
            await client.should_rate_limit("d", [([("k", "slow")], None)], 0.5)
        out["slow"] = trio.current_time() - t0

    async def fast() -> None:
        out["fast"] = await echo(client, "fast")

    with trio.fail_after(5):
        async with trio.open_nursery() as calls:
            calls.start_soon(slow)
            await trio.testing.wait_all_tasks_blocked()
            conn = client._conn
            assert conn is not None and conn.leader is not None  # "slow" leads
            calls.start_soon(fast)
    assert out["fast"] == "fast"
    assert 0.5 <= out["slow"] < 0.6  # type: ignore[operator]
    assert await echo(client, "after") == "after"  # led again, on the same connection
    assert fake.connections == 1


async def test_the_connection_lost_while_leading_fails_leader_and_followers_and_the_next_call_reconnects(nursery):
    received = trio.Event()
    first = True

    async def serve(stream: trio.SocketStream) -> None:
        nonlocal first
        if not first:
            return await FakeRls().serve(stream)
        first = False
        while b"f2" not in (data := await stream.receive_some(65536)) or not data:
            if not data:
                return
        received.set()
        await stream.aclose()  # (the service crashed with three calls in flight)

    listeners = await nursery.start(trio.serve_tcp, serve, 0)
    client = WireRlsClient(f"127.0.0.1:{listeners[0].socket.getsockname()[1]}")
    errors: dict[str, str] = {}

    async def one(value: str) -> None:
        with pytest.raises(RlsCallFailed) as info:
            await echo(client, value)
        errors[value] = str(info.value)

    with trio.fail_after(10):
        async with trio.open_nursery() as calls:
            for value in ("lead", "f1", "f2"):
                calls.start_soon(one, value)
                await trio.testing.wait_all_tasks_blocked()
    assert received.is_set()
    assert errors == dict.fromkeys(("lead", "f1", "f2"), "UNAVAILABLE: connection closed")
    assert await echo(client, "next") == "next"


async def test_an_idle_connection_the_service_closed_is_replaced_before_a_call_is_lost_on_it(nursery):
    """Nobody reads an idle connection; the next call finds its end (and a GOAWAY) first."""
    fake = FakeRls()
    scopes: list[trio.CancelScope] = []

    async def serve(stream: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            scopes.append(scope)
            await fake.serve(stream)
        await stream.aclose()

    listeners = await nursery.start(trio.serve_tcp, serve, 0)
    client = WireRlsClient(f"127.0.0.1:{listeners[0].socket.getsockname()[1]}")
    assert await echo(client, "a") == "a"
    scopes[0].cancel()  # (the service restarted while the connection was idle)
    await trio.testing.wait_all_tasks_blocked()
    assert await echo(client, "b") == "b"
    assert fake.connections == 2 and fake.answered == 2


async def test_an_idle_connection_that_received_a_malformed_frame_is_replaced(nursery):
    fake = FakeRls()
    scopes: list[trio.CancelScope] = []
    junk = trio.Event()

    async def serve(stream: trio.SocketStream) -> None:
        with trio.CancelScope() as scope:
            scopes.append(scope)
            await fake.serve(stream)
        await stream.send_all(b"\xff\xff\xff" + bytes(6))  # a frame longer than SETTINGS_MAX_FRAME_SIZE
        junk.set()
        await trio.sleep_forever()  # (open: the frame, not the end of the stream, must retire it)

    listeners = await nursery.start(trio.serve_tcp, serve, 0)
    client = WireRlsClient(f"127.0.0.1:{listeners[0].socket.getsockname()[1]}")
    assert await echo(client, "a") == "a"
    scopes[0].cancel()
    await junk.wait()
    await trio.testing.wait_all_tasks_blocked()
    old = client._conn
    assert await echo(client, "b") == "b"
    assert fake.connections == 2 and old is not None and old.closed


async def test_an_idle_goaway_moves_the_next_call_to_a_new_connection_and_closes_the_old(nursery):
    fake = FakeRls(goaway_after=1, idle_goaway=True)
    client = await start(nursery, fake)
    assert await echo(client, "a") == "a"
    await trio.testing.wait_all_tasks_blocked()  # the GOAWAY came after the answer, to an idle connection
    assert client._conn is not None and not client._conn.closed  # (nobody read it yet)
    assert await echo(client, "b") == "b"
    assert fake.connections == 2 and fake.answered == 2
    await trio.testing.wait_all_tasks_blocked()
    assert fake.closed_by_client == 1  # the old connection's socket was closed


class LeaderAndFollower(NamedTuple):
    conn: Any  # wire_client._Connection
    service: socket.socket  # the other end: the test writes the service's frames into it
    lead_call: Any  # wire_client._Call on stream 1, whose task leads the read
    follow_call: Any  # on stream 3, parked
    leader_scope: trio.CancelScope  # cancels the leader
    nursery: trio.Nursery


@asynccontextmanager
async def leader_and_follower() -> AsyncIterator[LeaderAndFollower]:
    """A `_Connection` on one end of a socket pair with its reader task, a call leading the read
    and a second one following; all of them blocked when the body starts. The connection's
    tasks stay until the body ends them or cancels `nursery`."""
    from trioproxy.rls.wire_client import _Call, _Connection

    a, b = socket.socketpair()
    a.setblocking(False)
    conn = _Connection(a, "x:1")
    lead_call, follow_call = _Call(float("inf")), _Call(float("inf"))
    conn.calls[1], conn.calls[3] = lead_call, follow_call
    scope = trio.CancelScope()

    async def leader() -> None:
        with scope:
            await conn.lead(lead_call)

    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as n:
                n.start_soon(conn.read_loop)
                n.start_soon(leader)
                n.start_soon(conn.wait, follow_call)
                await trio.testing.wait_all_tasks_blocked()
                yield LeaderAndFollower(conn, b, lead_call, follow_call, scope, n)
    finally:
        b.close()


async def test_a_frame_half_read_when_the_leader_is_cancelled_is_finished_by_the_reader():
    """At the connection itself (frames written by hand): the leader routes the first half of a
    follower's answer, is cancelled, and the reader task takes the rest from where the leader
    stopped (mid-frame), so the follower's answer arrives whole."""
    from trioproxy.rls.h2_frames import DATA, END_HEADERS, END_STREAM, HEADERS, frame, hpack_literal

    message = rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK).SerializeToString()
    trailers = frame(HEADERS, END_HEADERS | END_STREAM, 3, b"\x00" + hpack_literal(b"grpc-status") + hpack_literal(b"0"))
    answer = (frame(HEADERS, END_HEADERS, 3, b"\x88")  # :status 200
              + frame(DATA, 0, 3, b"\x00" + len(message).to_bytes(4, "big") + message) + trailers)
    half = len(answer) - 10  # inside the trailers' frame
    async with leader_and_follower() as t:
        assert t.conn.leader is t.lead_call and t.conn.parked is not None  # the reader waits its turn
        t.service.sendall(answer[:half])
        await trio.testing.wait_all_tasks_blocked()
        assert t.follow_call.body and t.follow_call.status is None  # routed up to the trailers
        assert bytes(t.conn.rbuf) == trailers[:-10]  # whose first part waits
        t.leader_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert t.conn.leader is None and t.conn.reader_turn and 1 in t.conn.calls  # left to be answered
        t.service.sendall(answer[half:])
        await trio.testing.wait_all_tasks_blocked()
        assert t.follow_call.done and t.follow_call.status == b"0" and t.follow_call.error is None
        assert bytes(t.follow_call.body[5:]) == message
        t.nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("ending", "error"), [
    (b"", "UNAVAILABLE: connection closed"),
    (b"\xff\xff\xff" + bytes(6), "UNAVAILABLE: connection failed: frame of 16777215 bytes is larger than SETTINGS_MAX_FRAME_SIZE"),
])
async def test_leader_and_then_reader_answer_pings_and_the_reader_fails_the_waiting_calls(ending, error):
    """The leader acknowledges a PING; once the reader task holds the socket (the leader
    cancelled), it does, and the service closing the connection or sending a malformed frame
    fails the calls it reads for."""
    from trioproxy.rls.h2_frames import ACK, PING, frame

    async with leader_and_follower() as t:
        t.service.sendall(frame(PING, 0, 0, b"leader!!"))
        await trio.testing.wait_all_tasks_blocked()
        assert t.service.recv(100) == frame(PING, ACK, 0, b"leader!!")  # written by the leader
        t.leader_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert t.conn.reader_turn and t.conn.leader is None
        t.service.sendall(frame(PING, 0, 0, b"12345678"))
        await trio.testing.wait_all_tasks_blocked()
        assert t.service.recv(100) == frame(PING, ACK, 0, b"12345678")  # written by the reader task
        if ending:
            t.service.sendall(ending)
        else:
            t.service.shutdown(socket.SHUT_WR)
    assert t.follow_call.done and t.lead_call.done
    assert t.follow_call.error == error and t.lead_call.error == error
    assert t.conn.closed and t.conn.sock.fileno() == -1  # the reader closed the socket as it ended
