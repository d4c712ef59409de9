"""A gRPC unary client on the ``h2`` library over one Trio stream: the gateway's previous RLS
transport, kept as a measured alternative (bench/global_ratelimit.py) to ``wire_client``, which
frames the same calls by hand at about half the CPU. h2's header validation and normalisation
are off (the headers are our own constants): that alone saved ~11% per call. One HTTP/2
connection per service target, opened on first use and reopened after it fails; calls are
concurrent streams on it. A reader task (a Trio system task, so it outlives any one request)
routes frames to the waiting calls; writes take a lock since h2's state and the socket are shared.
Each call sends ``grpc-timeout`` and gives up at its deadline (the stream is reset).
"""

from __future__ import annotations

from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import trio

from trioproxy.rls.protos import rls_pb2
from trioproxy.rls.wire_client import encode_request

PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
MAX_MESSAGE = 4 * 1024 * 1024


class _Call:
    __slots__ = ("body", "done", "error", "message", "status")

    def __init__(self) -> None:
        self.body = bytearray()
        self.done = trio.Event()
        self.error: str | None = None
        self.status: str | None = None
        self.message = ""


class _Connection:
    def __init__(self, stream: trio.SocketStream, authority: str) -> None:
        self.stream = stream
        self.authority = authority
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, validate_outbound_headers=False, normalize_outbound_headers=False,
            validate_inbound_headers=False, normalize_inbound_headers=False))
        self.calls: dict[int, _Call] = {}
        self.lock = trio.Lock()
        self.closed = False

    async def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            await self.stream.send_all(data)

    def fail_all(self, reason: str) -> None:
        self.closed = True
        for call in self.calls.values():
            if not call.done.is_set():
                call.error = reason
                call.done.set()
        self.calls.clear()

    async def read_loop(self) -> None:
        try:
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    break
                async with self.lock:
                    for event in self.h2.receive_data(data):
                        self._dispatch(event)
                    await self.flush()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError, h2.exceptions.ProtocolError) as exc:
            self.fail_all(f"UNAVAILABLE: connection failed: {exc or type(exc).__name__}")
        finally:
            self.fail_all("UNAVAILABLE: connection closed")
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    def _dispatch(self, event: Any) -> None:
        if isinstance(event, h2.events.ConnectionTerminated):
            self.fail_all("UNAVAILABLE: connection terminated by the service")
            return
        sid: int = getattr(event, "stream_id", 0) or 0
        call = self.calls.get(sid)
        if call is None:
            return
        if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
            for raw_name, raw_value in event.headers or ():
                name, value = bytes(raw_name).decode("latin-1"), bytes(raw_value).decode("latin-1")
                if name == "grpc-status":
                    call.status = value
                elif name == "grpc-message":
                    call.message = value
                elif name == ":status" and value != "200":
                    call.error = f"UNAVAILABLE: HTTP status {value}"
        elif isinstance(event, h2.events.DataReceived):
            call.body += event.data
            self.h2.acknowledge_received_data(event.flow_controlled_length, sid)
            if len(call.body) > MAX_MESSAGE + 5:
                call.error = "RESOURCE_EXHAUSTED: response too large"
        elif isinstance(event, h2.events.StreamEnded):
            self.calls.pop(sid, None)
            call.done.set()
        elif isinstance(event, h2.events.StreamReset):
            self.calls.pop(sid, None)
            call.error = call.error or f"UNAVAILABLE: stream reset ({event.error_code})"
            call.done.set()


class H2RlsClient:
    """Same surface as ``trioproxy.rls.wire_client.WireRlsClient``: ``should_rate_limit`` and ``close``."""

    def __init__(self, target: str) -> None:
        self.target = target
        host, _, port = target.rpartition(":")
        self.host, self.port = host.strip("[]"), int(port)
        self._conn: _Connection | None = None
        self._connect_lock: trio.Lock | None = None
        self._root: Any = None  # the Trio run the connection belongs to (tests run many)

    async def _connection(self) -> _Connection:
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
            stream = await trio.open_tcp_stream(self.host, self.port)
            conn = _Connection(stream, self.target)
            conn.h2.initiate_connection()
            try:
                await conn.flush()
            except BaseException:
                await trio.aclose_forcefully(stream)
                raise
            trio.lowlevel.spawn_system_task(conn.read_loop, name=f"rls-h2-reader {self.target}")
            self._conn = conn
            return conn

    async def should_rate_limit(self, domain: str, descriptors: Any, timeout: float) -> Any:
        """``descriptors``: ``(entries, hits)``; hits None: one hit; 0: only look; n: add n (tokens)."""
        from trioproxy.rls.wire_client import RlsCallFailed

        payload = encode_request(domain, descriptors)  # the same bytes the gateway sends
        call = _Call()
        sid = None
        conn = None
        with trio.move_on_after(timeout) as scope:
            try:
                conn = await self._connection()
                async with conn.lock:
                    if conn.closed:
                        raise RlsCallFailed("UNAVAILABLE: connection closed")
                    sid = conn.h2.get_next_available_stream_id()
                    conn.calls[sid] = call
                    conn.h2.send_headers(sid, [
                        (":method", "POST"), (":scheme", "http"), (":path", PATH), (":authority", conn.authority),
                        ("content-type", "application/grpc"), ("te", "trailers"),
                        ("grpc-timeout", f"{max(1, int(timeout * 1000))}m")])
                    conn.h2.send_data(sid, b"\x00" + len(payload).to_bytes(4, "big") + payload, end_stream=True)
                    await conn.flush()
            except (OSError, trio.BrokenResourceError, trio.ClosedResourceError,
                    h2.exceptions.ProtocolError) as exc:
                if conn is not None:
                    conn.fail_all(f"UNAVAILABLE: {exc}")
                raise RlsCallFailed(f"UNAVAILABLE: {exc or type(exc).__name__}") from None
            await call.done.wait()
        if scope.cancelled_caught:
            if conn is not None and sid is not None and not conn.closed:
                conn.calls.pop(sid, None)
                with trio.CancelScope(shield=True):
                    try:
                        async with conn.lock:
                            conn.h2.reset_stream(sid, error_code=8)  # CANCEL
                            await conn.flush()
                    except Exception:  # noqa: BLE001 -- the connection is failing anyway
                        conn.fail_all("UNAVAILABLE: reset failed")
            raise RlsCallFailed("DEADLINE_EXCEEDED: no answer within the timeout")
        if call.error is not None:
            raise RlsCallFailed(call.error)
        if call.status != "0":
            raise RlsCallFailed(f"gRPC status {call.status}: {call.message}")
        body = bytes(call.body)
        if len(body) < 5 or body[0] != 0:
            raise RlsCallFailed("INTERNAL: bad or compressed response message")
        return rls_pb2.RateLimitResponse.FromString(body[5:5 + int.from_bytes(body[1:5], "big")])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.closed = True
