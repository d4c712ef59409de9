"""Client connections: a cap per bind, EMFILE survived, and a closed connection's fd freed at once.

This is hypercorn's trio ``worker_serve`` (HTTP/1.1 and HTTP/2, over plain sockets or a bind's TLS,
docs/protocols.md; a plain data-plane bind's HTTP/1.1 is served by ``http1.py`` instead, which
hands upgrades and HTTP/2 to the connection task here) with these changes, each for a fault found by hostile-client runs (docs/reliability.md):

- **cap**: at most ``max_connections`` client connections per server. One past the cap is
  accepted, answered ``503 overloaded`` with ``connection: close`` and closed, so a flood of
  connections can never take the process to its descriptor limit.
- **cap per client**: at most ``per_client`` of them from one peer IP address
  (``frontendPolicies.http.maxConnectionsPerClient``), refused the same way, so one client
  cannot hold every slot and lock the others out.
- **EMFILE/ENFILE/ENOMEM/ENOBUFS from accept**: one log line per second at most and a metric,
  then a short pause; trio's own loop logs a traceback for every failed accept.
- **head size however it arrives** and **reason phrases** on status lines (h11 leaves them empty).
- **request head timeout** (slowloris): from the first byte of a request head to its end, at
  most ``header_timeout`` seconds (``frontendPolicies.http.requestHeaderTimeout``); past it
  ``408`` and the connection is closed. hypercorn's idle timer (``http1IdleTimeout``) still
  bounds the time from the last response to a complete head.
- **EOF while idle**: hypercorn's connection task waits for its keep-alive timer (60 s) after the
  client has gone, holding the socket in CLOSE_WAIT; here the timer is stopped as soon as the
  read side ends, so the descriptor is released at once.
- **``Expect: 100-continue``**: hypercorn sends ``100 Continue`` as soon as it has the request
  head, so the client uploads its body even when a policy then refuses it. Here the ``100`` is
  sent when the app first asks for the body (``receive``): a request refused before that (401,
  429, a 503 from the backend's connect) gets its answer instead of a ``100``, and the body is
  never sent (docs/protocols.md).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from http import HTTPStatus
from typing import Any

import h11
import trio
from hypercorn.config import Config
from hypercorn.events import Closed, Event, RawData, Updated
from hypercorn.trio.lifespan import Lifespan
from hypercorn.trio.tcp_server import MAX_RECV, TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.typing import ConnectionState
from hypercorn.utils import ShutdownError, raise_shutdown

from ..asgi import CORK, Cork, expects_continue
from . import hypercorn_fixes  # noqa: F401 - hypercorn protocol faults fixed before any server starts
from .http1 import Http1Server

log = logging.getLogger("trioproxy")

CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})
OVERLOADED = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: 11\r\n"
              b"connection: close\r\n\r\noverloaded\n")
DEFAULT_MAX_CONNECTIONS = 10_000  # per bind; docs/reliability.md
ACCEPT_RETRY_SECONDS = 0.05
HEAD_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\ncontent-length: 21\r\n"
                b"connection: close\r\n\r\nrequest head timeout\n")
HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\n"
                  b"content-length: 32\r\nconnection: close\r\n\r\nrequest header fields too large\n")


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as Go and Envoy do); returns the soft limit now."""
    try:
        import resource
    except ImportError:  # not POSIX
        return 1 << 16
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, hard, exc)
    return soft


class ConnectionCounter:
    """Open connections of one server and what happened at its accept loop (for metrics and tests)."""

    def __init__(self, name: str, limit: int, on_event: Callable[[str, str], None] = lambda name, what: None,
                 *, per_client: int | None = None):
        self.name = name
        self.limit = limit
        self.per_client = per_client if per_client is not None else limit
        self.open = 0
        self.by_client: dict[str, int] = {}  # peer address → its open connections (none: no entry)
        self.refused = 0
        self.accept_errors = 0
        self.cut = 0  # connections cancelled by the drain deadline with a request in flight
        self._on_event = on_event
        self._last_log = -1e9

    def accept_failed(self, exc: OSError) -> None:
        self.accept_errors += 1
        self._on_event(self.name, "accept_error")
        now = trio.current_time()
        if now - self._last_log >= 1.0:
            self._last_log = now
            log.error("%s: accept failed: %s (%s); %d so far, pausing accepts %.2fs", self.name,
                      errno.errorcode.get(exc.errno or 0, exc.errno), os.strerror(exc.errno or 0),
                      self.accept_errors, ACCEPT_RETRY_SECONDS)


def _with_reason(data: bytes) -> bytes:
    """h11 writes ``HTTP/1.1 404 \r\n`` (no reason phrase) for hypercorn; put the standard phrase in."""
    if data.startswith(b"HTTP/1.1 ") and data[12:15] == b" \r\n":
        try:
            phrase = HTTPStatus(int(data[9:12])).phrase.encode()
        except ValueError:
            return data
        return data[:13] + phrase + data[13:]
    return data


class _LazyContinue(h11.Connection):
    """An h11 server connection that hides a waiting ``Expect: 100-continue`` from hypercorn's
    eager check; ``_Connection`` sends the ``100`` once the app reads the body."""

    @property
    def they_are_waiting_for_100_continue(self) -> bool:
        return False


class _IdleTimer:
    """hypercorn's ``TrioSingleTask`` for the keep-alive timer, as one task per connection whose
    deadline moves (``idle``) instead of a task started and cancelled around every request."""

    def __init__(self, timeout: float, terminated: Any, close: Callable[[], Awaitable[None]]) -> None:
        self.timeout = timeout
        self.terminated = terminated  # the server's "shutting down" event (hypercorn EventWrapper)
        self.close = close  # hypercorn's ``_initiate_server_close``
        self._scope = trio.CancelScope()
        self._idle = False
        self._started = False
        self._stopped = False

    def idle(self, idle: bool) -> None:
        """Idle: close after ``timeout``, or at once when the server is shutting down; busy: never."""
        self._idle = idle
        if not idle:
            self._scope.deadline = math.inf
        elif self.terminated.is_set():
            self._scope.deadline = -math.inf
        else:
            self._scope.deadline = trio.current_time() + self.timeout

    async def restart(self, task_group: Any, action: Callable[[], Awaitable[None]]) -> None:
        """``TrioSingleTask.restart``: idle from now; the first call starts the watcher (``action``
        is hypercorn's ``_idle_timeout``, whose wait the watcher replaces)."""
        self.idle(True)
        if not self._started:
            self._started = True
            task_group.spawn(self._watch)

    async def stop(self) -> None:
        """For good (the connection is closing): the watcher ends without closing anything."""
        self._stopped = True
        self._scope.cancel()

    async def _watch(self) -> None:
        with self._scope:
            await self.terminated.wait()
            while not self._idle:  # shutting down with a request in flight: close once it is done
                await trio.sleep_forever()
        if not self._stopped:
            with trio.CancelScope(shield=True):
                await self.close()


class _Connection(TCPServer):
    """hypercorn's connection task with the fixes of this module's docstring."""

    def __init__(self, app: Any, config: Config, context: WorkerContext, state: ConnectionState,
                 stream: Any, *, header_timeout: float = math.inf) -> None:
        super().__init__(app, config, context, state, stream)
        self._idle_timer = _IdleTimer(config.keep_alive_timeout, context.terminated, self._initiate_server_close)
        self.idle_task = self._idle_timer  # type: ignore[assignment]  # a TrioSingleTask by shape
        self._cork = partial(Cork, self)
        self.header_timeout = header_timeout
        self._head_deadline = math.inf  # set while a request head has started and not ended

        async def continue_on_first_read(scope: Any, receive: Any, send: Any, *rest: Any) -> None:
            if scope["type"] == "http":
                if expects_continue(scope):
                    receive = self._continue_then(receive)
                if scope["http_version"] < "2":
                    scope["extensions"][CORK] = self._cork
            await app(scope, receive, send, *rest)

        self.app = continue_on_first_read  # type: ignore[assignment]  # an AppWrapper by shape

    def _continue_then(self, receive: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        asked = False

        async def receive_after_continue() -> Any:
            nonlocal asked
            if not asked:
                asked = True
                await self._send_continue()
            return await receive()

        return receive_after_continue

    async def _send_continue(self) -> None:
        protocol = getattr(self.protocol, "protocol", None)
        connection = getattr(protocol, "connection", None)
        if (isinstance(connection, h11.Connection) and connection.client_is_waiting_for_100_continue
                and connection.our_state is h11.SEND_RESPONSE):
            data = connection.send(h11.InformationalResponse(status_code=100, headers=[]))
            if data:
                await self.protocol_send(RawData(data))

    async def protocol_send(self, event: Event) -> None:
        if isinstance(event, RawData):
            if self.corked is not None:
                self.corked.append(_with_reason(event.data))
                return
            event = RawData(_with_reason(event.data))
        elif isinstance(event, Updated):
            self._idle_timer.idle(event.idle)
            return
        elif self.corked is not None:  # Closed: what the response wrote goes out first
            await self.uncork()
        await super().protocol_send(event)

    corked: list[bytes] | None = None

    async def uncork(self) -> None:
        pending, self.corked = self.corked, None
        data = b"".join(pending) if pending else b""
        if data:
            await super().protocol_send(RawData(data))

    async def _read_data(self) -> None:
        connection = getattr(getattr(self.protocol, "protocol", None), "connection", None)
        if type(connection) is h11.Connection:
            connection.__class__ = _LazyContinue
        while True:
            try:
                if self._head_deadline == math.inf:  # no head under way: no cancel scope (~4-8 us a read)
                    data = await self.stream.receive_some(MAX_RECV)
                else:
                    with trio.move_on_at(self._head_deadline) as head_wait:
                        data = await self.stream.receive_some(MAX_RECV)
                    if head_wait.cancelled_caught:
                        await self._refuse_head(HEAD_TIMEOUT)
                        break
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                break
            # h11 enforces its head-size limit only on an incomplete head: a 60 KB head in one
            # read would pass. Count the head's bytes here so the limit holds however they arrive.
            if self._awaiting_head():
                probe = self._tail + data
                end = probe.find(b"\r\n\r\n")
                seen = self._head_seen + (len(data) if end < 0 else end + 4 - len(self._tail))
                if seen > self.config.h11_max_incomplete_size:
                    await self._refuse_head(HEAD_TOO_LARGE)
                    break
                if end < 0:
                    if not self._head_seen and seen:  # the first bytes of a head: its clock starts
                        self._head_deadline = trio.current_time() + self.header_timeout
                    self._head_seen, self._tail = seen, probe[-3:]
                else:
                    self._head_seen, self._tail, self._head_deadline = 0, b"", math.inf
            else:
                self._head_seen, self._tail, self._head_deadline = 0, b"", math.inf
            await self.protocol.handle(RawData(bytes(data)))
            if data == b"":
                break
        await self.protocol.handle(Closed())
        # The client closed (or the read failed): nothing more can arrive, so the keep-alive
        # timer must not hold the task (and the socket) open until it fires.
        await self.idle_task.stop()

    _head_seen = 0
    _tail = b""

    async def _refuse_head(self, answer: bytes) -> None:
        try:
            with trio.move_on_after(1.0):
                await self.stream.send_all(answer)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    def _awaiting_head(self) -> bool:
        h11_protocol = getattr(self.protocol, "protocol", None)
        connection = getattr(h11_protocol, "connection", None)  # an h2 connection after ALPN h2 or h2c
        return isinstance(connection, h11.Connection) and connection.their_state is h11.IDLE


def _peer_address(sock: Any) -> str:
    """The client's IP address (its port left out: one client, many connections)."""
    try:
        peer = sock.getpeername()
    except OSError:  # already reset by the peer: counted under one shared key until it is closed
        return ""
    return str(peer[0]) if isinstance(peer, tuple) else str(peer)


async def _serve_listener(sock: trio.socket.SocketType, handler: Callable[[Any], Awaitable[Any]],
                          counter: ConnectionCounter, nursery: trio.Nursery,
                          ssl_context: ssl.SSLContext | None = None) -> None:
    async def run(stream: trio.SocketStream, client: str) -> None:
        try:
            # hypercorn's connection task runs the TLS handshake (ssl_handshake_timeout) itself.
            await handler(trio.SSLStream(stream, ssl_context, server_side=True) if ssl_context else stream)
        except BaseException as error:
            # The drain deadline: a bare Cancelled, or (http1.py runs the app in this task) the
            # app's nursery's group of them.
            if isinstance(error, trio.Cancelled) or (
                    isinstance(error, BaseExceptionGroup) and error.split(trio.Cancelled)[1] is None):
                counter.cut += 1
            raise
        finally:
            counter.open -= 1
            left = counter.by_client[client] - 1
            if left:
                counter.by_client[client] = left
            else:
                del counter.by_client[client]
            await trio.aclose_forcefully(stream)

    async def refuse(stream: trio.SocketStream) -> None:
        try:
            if ssl_context is not None:
                return  # no plaintext answer on a TLS port: just close
            with trio.move_on_after(1.0):
                await stream.send_all(OVERLOADED)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            await trio.aclose_forcefully(stream)

    with sock:
        while True:
            try:
                raw, _ = await sock.accept()
            except OSError as exc:
                if exc.errno not in CAPACITY_ERRNOS:
                    raise
                counter.accept_failed(exc)
                await trio.sleep(ACCEPT_RETRY_SECONDS)
                continue
            stream = trio.SocketStream(raw)
            client = _peer_address(raw)
            held = counter.by_client.get(client, 0)
            if counter.open >= counter.limit or held >= counter.per_client:
                counter.refused += 1
                counter._on_event(counter.name, "over_cap" if counter.open >= counter.limit else "over_client_cap")
                nursery.start_soon(refuse, stream)
                continue
            counter.open += 1
            counter.by_client[client] = held + 1
            nursery.start_soon(run, stream, client)


async def serve(app: Any, config: Config, sock: Any, counter: ConnectionCounter, *,
                shutdown_trigger: Callable[[], Awaitable[None]], header_timeout: float = math.inf,
                ssl_context: ssl.SSLContext | None = None, http1_app: Any = None,
                task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``app`` (hypercorn-wrapped) on a bound, listening stdlib socket until ``shutdown_trigger``.

    ``http1_app``: the same app unwrapped, for a plain socket's HTTP/1.1 to be served by ``http1.py``
    (hypercorn then serves only what that loop hands over: upgrades and HTTP/2)."""
    lifespan_state: dict[str, Any] = {}
    lifespan = Lifespan(app, config, lifespan_state)
    context = WorkerContext(None)
    async with trio.open_nursery() as lifespan_nursery:
        await lifespan_nursery.start(lifespan.handle_lifespan)
        await lifespan.wait_for_startup()
        async with trio.open_nursery() as server_nursery:
            listener = trio.socket.from_stdlib_socket(sock)
            handler: Callable[[Any], Awaitable[Any]] = partial(
                _Connection, app, config, context, ConnectionState(lifespan_state.copy()), header_timeout=header_timeout)
            http1_server = None
            if http1_app is not None and ssl_context is None:
                handler = http1_server = Http1Server(http1_app, idle_timeout=config.keep_alive_timeout,
                                             header_timeout=header_timeout,
                                             max_head=config.h11_max_incomplete_size, handoff=handler)
            task_status.started()
            try:
                async with trio.open_nursery(strict_exception_groups=True) as nursery:
                    nursery.start_soon(raise_shutdown, shutdown_trigger)
                    nursery.start_soon(raise_shutdown, context.terminate.wait)
                    nursery.start_soon(_serve_listener, listener, handler, counter, server_nursery, ssl_context)
                    await trio.sleep_forever()
            except BaseExceptionGroup as error:
                _, other = error.split((ShutdownError, KeyboardInterrupt))
                if other is not None:
                    raise other from None  # the group was only the shutdown signal and these
            finally:
                await context.terminated.set()
                if http1_server is not None:
                    http1_server.terminate()
                server_nursery.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
        if counter.cut:
            log.warning("%s: drain deadline (%.1fs) reached: %d connections with requests in flight were cut",
                        counter.name, config.graceful_timeout, counter.cut)
        await lifespan.wait_for_shutdown()
        lifespan_nursery.cancel_scope.cancel()
