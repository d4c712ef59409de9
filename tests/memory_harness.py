"""The whole gateway in memory: no sockets, so a test runs under ``autojump_clock`` (virtual time).

What is real: the config (``parse_config``), the ``Runtime``, ``FrontDoor`` around ``Gateway``, and
the plain bind's HTTP/1.1 frontend (``http1.Http1Connection``, limits as ``connections.serve`` sets
them): the bytes a client writes are parsed by the code that parses a socket's. What is not: each
client connection and each backend connection is a ``trio.testing.memory_stream_pair``, and the
upstream pool opens backend connections through its ``connect`` hook, which hands them to scripted
backends (``Backend``: a handler per connection, reading requests with h11 and answering, hanging or
closing). Nothing leaves the Trio run, so deadlines, backoffs and idle timers fire at exact virtual
times, as trio's own suite tests its timeouts (docs/testing.md, "In-memory harness")::

    async def test_hung_backend(autojump_clock):
        async with memory_gateway(CONFIG, {"b.test:80": Backend(hang)}) as gw:
            response = await gw.request("GET", "/")
        assert response.status == 504 and response.at == 2.0
"""

from __future__ import annotations

import errno
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager

import attrs
import h11
import trio
import trio.testing

from trioproxy.config import parse_config
from trioproxy.config.model import Address
from trioproxy.frontend.front_door import FrontDoor
from trioproxy.frontend.http1 import Http1Connection, Http1Server
from trioproxy.frontend.server import hypercorn_config
from trioproxy.proxy.gateway import Gateway
from trioproxy.proxy.runtime import Runtime
from trioproxy.upstream.pool import UpstreamPool

Header = tuple[bytes, bytes]
MemoryPair = trio.StapledStream[trio.testing.MemorySendStream, trio.testing.MemoryReceiveStream]
CLIENT = ("192.0.2.10", 40000)  # a client's address as the gateway's scope shows it


# --- backends ---------------------------------------------------------------------------------


@attrs.define
class Received:
    """One request as a backend read it, and when (virtual time) its last byte arrived."""

    method: str
    target: str
    headers: list[Header]
    body: bytes
    at: float
    connection: int  # index of the backend connection it came on (0: the first one opened)

    def header(self, name: str) -> str | None:
        key = name.lower().encode()
        return next((v.decode("latin-1") for k, v in self.headers if k == key), None)


class _PoolEnd(trio.abc.HalfCloseableStream):
    """The pool's end of a backend connection. It answers the pool's staleness probe
    (``is_readable``: EOF or bytes nobody asked for) as a socket's ``poll`` would."""

    def __init__(self, inner: MemoryPair) -> None:
        self.inner = inner
        self.unread = 0  # bytes the backend sent that the pool has not received
        self.eof = False

    def is_readable(self) -> bool:
        return self.unread > 0 or self.eof

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        self.unread -= len(data)
        return data

    async def send_eof(self) -> None:
        await self.inner.send_eof()

    def close(self) -> None:
        self.inner.send_stream.close()
        self.inner.receive_stream.close()

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()


class BackendConnection:
    """The backend's end of one connection the gateway's pool opened: h11 parses the requests;
    answers are framed by h11 (``respond``) or raw bytes (``send_raw``)."""

    def __init__(self, backend: Backend, stream: MemoryPair, pool_end: _PoolEnd, index: int) -> None:
        self.backend = backend
        self.stream = stream
        self.pool_end = pool_end
        self.index = index
        self.h11 = h11.Connection(h11.SERVER)
        self.closed_by_gateway = False  # the gateway closed (or dropped) this connection
        self.closed_at: float | None = None  # when this end read the gateway's close (virtual time)

    async def _event(self) -> h11.Event:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            try:
                data = await self.stream.receive_some()
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                data = b""
            if not data and not self.closed_by_gateway:
                self.closed_by_gateway = True
                self.closed_at = trio.current_time()
            self.h11.receive_data(bytes(data))

    async def request(self) -> Received | None:
        """The next whole request; None once the gateway closed the connection."""
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
        elif self.h11.our_state is h11.DONE or self.h11.their_state is h11.DONE:
            return None  # the last exchange ended half-way (a raw answer, connection: close)
        try:
            event = await self._event()
            if type(event) is h11.ConnectionClosed:
                return None
            assert type(event) is h11.Request, event
            body = b""
            while type(part := await self._event()) is h11.Data:
                body += part.data
        except h11.RemoteProtocolError:  # the gateway gave up mid-request
            return None
        received = Received(event.method.decode(), event.target.decode(), list(event.headers), body,
                            trio.current_time(), self.index)
        self.backend.received.append(received)
        return received

    async def respond(self, status: int = 200, body: bytes = b"ok", headers: Sequence[Header] = ()) -> None:
        """A whole answer (content-length framing unless ``headers`` say otherwise)."""
        head = list(headers)
        if not any(k.lower() in (b"content-length", b"transfer-encoding") for k, _ in head):
            head.append((b"content-length", str(len(body)).encode()))
        data = self.h11.send(h11.Response(status_code=status, headers=head)) or b""
        data += (self.h11.send(h11.Data(data=body)) or b"") if body else b""
        data += self.h11.send(h11.EndOfMessage()) or b""
        await self.send_raw(data)

    async def send_raw(self, data: bytes) -> None:
        """Bytes as they are (a response head, then body pieces, ...); lost if the gateway left."""
        self.pool_end.unread += len(data)
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed_by_gateway = True

    async def wait_closed(self) -> None:
        """Until the gateway closes the connection (what it still sends is read and dropped)."""
        while not self.closed_by_gateway:
            try:
                await self._event()
            except h11.RemoteProtocolError:
                self.h11 = h11.Connection(h11.SERVER)  # bytes after a request it did not answer: drop them

    def close(self) -> None:
        """EOF to the gateway (it sees a pooled connection readable: stale)."""
        self.pool_end.eof = True
        self.stream.send_stream.close()


Handler = Callable[[BackendConnection], Awaitable[None]]


class Backend:
    """One target's scripted server: ``handler`` runs once per connection the gateway opens.
    The next ``refuse`` connects fail as a refused TCP connect does (``ECONNREFUSED``)."""

    def __init__(self, handler: Handler, *, refuse: int = 0) -> None:
        self.handler = handler
        self.refuse = refuse
        self.connects = 0  # attempts, refused ones included
        self.connections: list[BackendConnection] = []
        self.received: list[Received] = []  # every request read, on any connection, in order


def answer(status: int = 200, body: bytes = b"ok", headers: Sequence[Header] = ()) -> Handler:
    """A handler answering every request on its connection the same way (keep-alive)."""
    async def handler(conn: BackendConnection) -> None:
        while await conn.request() is not None:
            await conn.respond(status, body, headers)
    return handler


def answers(*statuses: int, body: bytes = b"ok") -> Handler:
    """The backend's n-th request (over all connections) gets ``statuses[n]``; the last repeats."""
    async def handler(conn: BackendConnection) -> None:
        while await conn.request() is not None:
            n = len(conn.backend.received) - 1
            await conn.respond(statuses[min(n, len(statuses) - 1)], body)
    return handler


async def hang(conn: BackendConnection) -> None:
    """Reads the request, never answers; notes when the gateway gives up (``closed_at``)."""
    await conn.request()
    await conn.wait_closed()


# --- the client side --------------------------------------------------------------------------


@attrs.define
class Response:
    status: int
    headers: list[Header]
    body: bytes
    at: float  # virtual time its last byte was read
    informational: list[int] = attrs.Factory(list)  # the 1xx statuses that came before it

    def header(self, name: str) -> str | None:
        key = name.lower().encode()
        return next((v.decode("latin-1") for k, v in self.headers if k == key), None)

    @property
    def text(self) -> str:
        return self.body.decode()


class MemoryClient:
    """One client connection to the bind, framed by h11 (keep-alive: one request after another)."""

    def __init__(self, stream: MemoryPair, served: trio.Event) -> None:
        self.stream = stream
        self.served = served  # set when the gateway's connection loop ended
        self.h11 = h11.Connection(h11.CLIENT)

    async def send_head(self, method: str, path: str, headers: Sequence[Header] = (), *,
                        host: str = "gw.test") -> None:
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
        head = [(b"host", host.encode()), *headers]
        await self.send_raw(self.h11.send(h11.Request(method=method, target=path, headers=head)) or b"")

    async def send_body(self, data: bytes, *, end: bool = False) -> None:
        """A piece of the body (``end``: and the end of the message)."""
        out = (self.h11.send(h11.Data(data=data)) or b"") if data else b""
        if end:
            out += self.h11.send(h11.EndOfMessage()) or b""
        await self.send_raw(out)

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def request(self, method: str = "GET", path: str = "/", *, headers: Sequence[Header] = (),
                      body: bytes = b"", host: str = "gw.test") -> Response:
        extra = [(b"content-length", str(len(body)).encode())] if body or method in ("POST", "PUT") else []
        await self.send_head(method, path, [*headers, *extra], host=host)
        await self.send_body(body, end=True)
        return await self.response()

    async def response(self) -> Response:
        """The next whole response (AssertionError if the gateway closes first)."""
        response = None
        body = b""
        informational = []
        while True:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                self.h11.receive_data(bytes(await self.stream.receive_some()))
                continue
            if type(event) is h11.InformationalResponse:
                informational.append(event.status_code)
            elif type(event) is h11.Response:
                response = event
            elif type(event) is h11.Data:
                body += event.data
            elif type(event) is h11.EndOfMessage:
                assert response is not None
                return Response(response.status_code, list(response.headers), body, trio.current_time(),
                                informational)
            elif type(event) is h11.ConnectionClosed:
                raise AssertionError("the gateway closed the connection without a (whole) response")

    async def closed(self) -> bytes:
        """Waits for the gateway to close the connection; what it sent before (raw)."""
        data = b""
        while chunk := await self.stream.receive_some():
            data += chunk
        return data

    async def aclose(self) -> None:
        await self.stream.aclose()


# --- the gateway ------------------------------------------------------------------------------


class MemoryGateway:
    """A gateway (one bind) whose clients and backends are memory streams; see ``memory_gateway``."""

    def __init__(self, config_yaml: str, backends: Mapping[str, Backend | Handler], nursery: trio.Nursery,
                 *, env: Mapping[str, str] | None = None) -> None:
        self.config = parse_config(textwrap.dedent(config_yaml), env=dict(env or {}))
        self.nursery = nursery
        self.backends = {target: b if isinstance(b, Backend) else Backend(b) for target, b in backends.items()}
        self.pool = UpstreamPool(connect=self._connect)
        self.runtime = Runtime(self.config, pool=self.pool)
        bind = self.config.binds[0]
        frontend = self.config.frontend
        self.front_door = FrontDoor(Gateway(self.runtime, bind.port),
                                    max_in_flight=lambda: self.runtime.state.config.frontend.max_in_flight)
        limits = hypercorn_config(graceful_timeout=0.0, idle_timeout=frontend.idle_timeout)  # as server.py
        self.server = Http1Server(self.front_door, idle_timeout=limits.keep_alive_timeout,
                                  header_timeout=frontend.header_timeout, max_head=limits.h11_max_incomplete_size,
                                  handoff=self._handoff)

    def backend(self, target: str) -> Backend:
        return self.backends[target]

    async def _connect(self, target: Address) -> trio.abc.Stream:
        """The pool's ``connect`` hook: a memory stream to the scripted backend for ``target``."""
        await trio.lowlevel.checkpoint()
        backend = self.backends.get(str(target))
        if backend is not None:
            backend.connects += 1
        if backend is None or backend.refuse > 0:
            if backend is not None:
                backend.refuse -= 1
            raise OSError(errno.ECONNREFUSED, "Connection refused")
        pool_side, backend_side = trio.testing.memory_stream_pair()
        pool_end = _PoolEnd(pool_side)
        conn = BackendConnection(backend, backend_side, pool_end, len(backend.connections))
        backend.connections.append(conn)
        self.nursery.start_soon(backend.handler, conn)
        return pool_end

    @staticmethod
    async def _handoff(stream: trio.abc.Stream) -> None:
        raise AssertionError("upgrades and HTTP/2 are hypercorn's (connections.py): not served in memory")

    def connect(self, client: tuple[str, int] = CLIENT) -> MemoryClient:
        """A new client connection, served by the HTTP/1.1 frontend in the harness's nursery."""
        client_side, server_side = trio.testing.memory_stream_pair()
        served = trio.Event()

        async def serve() -> None:
            try:
                await Http1Connection(self.server, server_side, client=client).run()
            finally:
                await trio.aclose_forcefully(server_side)  # as connections.py does after a connection
                served.set()

        self.nursery.start_soon(serve)
        return MemoryClient(client_side, served)

    async def request(self, method: str = "GET", path: str = "/", *, headers: Sequence[Header] = (),
                      body: bytes = b"", host: str = "gw.test", client: tuple[str, int] = CLIENT) -> Response:
        """One request on a new client connection."""
        conn = self.connect(client)
        try:
            return await conn.request(method, path, headers=headers, body=body, host=host)
        finally:
            await conn.aclose()


@asynccontextmanager
async def memory_gateway(config_yaml: str, backends: Mapping[str, Backend | Handler] | None = None, *,
                         env: Mapping[str, str] | None = None) -> AsyncIterator[MemoryGateway]:
    """A gateway for ``config_yaml`` (its first bind) whose backends are the scripted ``backends``
    (``"host:port"`` → a ``Backend`` or a handler); a target not listed refuses connections.
    On exit every client, backend and mirror task is cancelled."""
    async with trio.open_nursery() as nursery:
        gateway = MemoryGateway(config_yaml, backends or {}, nursery, env=env)
        await nursery.start(gateway.runtime.mirrors.run)
        yield gateway
        nursery.cancel_scope.cancel()
