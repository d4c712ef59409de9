"""Client disconnects through the process's epoll set (trioproxy/proxy/disconnect_monitor.py), with real
socket pairs: the monitor itself, and a request whose server hands over its socket (asgi.CLIENT_FD)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import trio
import trio.testing

from trioproxy.asgi import CLIENT_FD
from trioproxy.config import parse_config
from trioproxy.proxy.disconnect_monitor import DisconnectMonitor, available
from trioproxy.proxy.gateway import Gateway
from trioproxy.proxy.runtime import Runtime
from trioproxy.upstream.pool import UpstreamPool

pytestmark = pytest.mark.skipif(not available(), reason="epoll is Linux only")


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


async def test_a_peer_that_closes_is_reported_once(pair) -> None:
    ours, theirs = pair
    monitor = DisconnectMonitor()
    calls = []
    gone = trio.Event()
    assert monitor.watch(ours.fileno(), lambda: (calls.append(1), gone.set()))
    theirs.close()
    with trio.fail_after(5):
        await gone.wait()
    await trio.testing.wait_all_tasks_blocked()
    assert calls == [1] and monitor.watching == 0


async def test_bytes_sent_ahead_are_not_a_disconnect_and_a_half_close_is(pair) -> None:
    ours, theirs = pair
    monitor = DisconnectMonitor()
    gone = trio.Event()
    monitor.watch(ours.fileno(), gone.set)
    theirs.sendall(b"GET /next HTTP/1.1\r\n\r\n")  # a pipelined request: stays unread
    await trio.testing.wait_all_tasks_blocked()
    assert not gone.is_set()
    theirs.shutdown(socket.SHUT_WR)
    with trio.fail_after(5):
        await gone.wait()
    assert ours.recv(100) == b"GET /next HTTP/1.1\r\n\r\n"


def test_a_monitor_outlives_its_trio_run_and_serves_the_next_one() -> None:
    """The epoll descriptor and its task end with the Trio run that started them, and what was
    still watched is dropped; the next run's first ``watch`` opens new ones and is reported."""
    monitor = DisconnectMonitor()
    first, second = socket.socketpair(), socket.socketpair()
    calls: list[str] = []

    async def leave_one_watched() -> None:
        assert monitor.watch(first[0].fileno(), lambda: calls.append("first"))

    async def watch_and_close() -> None:
        gone = trio.Event()
        assert monitor.watch(second[0].fileno(), lambda: (calls.append("second"), gone.set()))
        second[1].close()
        with trio.fail_after(5):
            await gone.wait()

    try:
        trio.run(leave_one_watched)
        assert monitor.watching == 0  # dropped with the run
        first[1].close()  # its peer leaves after the run: nobody is called
        trio.run(watch_and_close)
        assert calls == ["second"]
    finally:
        for s in (*first, second[0]):
            s.close()


async def test_an_unwatched_socket_is_not_reported_and_one_socket_is_watched_once(pair) -> None:
    ours, theirs = pair
    monitor = DisconnectMonitor()
    calls: list[int] = []
    assert monitor.watch(ours.fileno(), lambda: calls.append(1))
    assert not monitor.watch(ours.fileno(), lambda: calls.append(2))  # the caller watches another way
    monitor.unwatch(ours.fileno())
    monitor.unwatch(ours.fileno())  # twice: nothing to do
    theirs.close()
    await trio.testing.wait_all_tasks_blocked()
    assert calls == [] and monitor.watching == 0


class _Counting:
    """The monitor's epoll object, counting the ``epoll_ctl`` calls ``watch`` makes through it."""

    def __init__(self, epoll: Any) -> None:
        self.epoll = epoll
        self.calls: list[str] = []

    def register(self, fd: int, events: int) -> None:
        self.calls.append("register")
        self.epoll.register(fd, events)

    def modify(self, fd: int, events: int) -> None:
        self.calls.append("modify")
        self.epoll.modify(fd, events)


async def test_a_connections_next_request_keeps_its_registration(pair) -> None:
    """A keep-alive request costs no ``epoll_ctl``: the registration made by the connection's
    first request stays armed (one-shot) after ``unwatch``; a peer that leaves between two
    requests disarms it, and the next ``watch`` re-arms it and is told at once."""
    ours, theirs = pair
    fd = ours.fileno()
    monitor = DisconnectMonitor()
    calls: list[str] = []
    assert monitor.watch(fd, lambda: calls.append("first"), connection=7)
    counting = monitor._epoll = _Counting(monitor._epoll)
    monitor.unwatch(fd)
    for _ in range(3):  # later requests of connection 7
        assert monitor.watch(fd, lambda: calls.append("later"), connection=7)
        monitor.unwatch(fd)
    assert counting.calls == []
    assert monitor.watch(fd, lambda: calls.append("other"), connection=8)  # another connection: re-registered
    assert counting.calls == ["register", "modify"]  # (still registered: modified instead)
    monitor.unwatch(fd)
    theirs.shutdown(socket.SHUT_WR)  # the peer leaves between two requests: nobody to tell
    await trio.testing.wait_all_tasks_blocked()
    assert calls == []
    gone = trio.Event()
    assert monitor.watch(fd, lambda: (calls.append("next"), gone.set()), connection=8)  # disarmed: re-armed
    with trio.fail_after(5):
        await gone.wait()
    assert calls == ["next"] and counting.calls == ["register", "modify", "register", "modify"]


async def test_a_descriptor_number_reused_by_a_new_connection_is_registered_again() -> None:
    """Closing a socket removes it from every epoll set; the next socket may get its number. The
    new connection's disconnect is reported although the number was armed for the old one."""
    monitor = DisconnectMonitor()
    old, old_peer = socket.socketpair()
    fd = old.fileno()
    assert monitor.watch(fd, lambda: None, connection=1)
    monitor.unwatch(fd)
    old.close()
    old_peer.close()
    new, new_peer = socket.socketpair()
    try:
        if new.fileno() != fd:
            new, new_peer = new_peer, new  # the lower number of the pair is the one reused
        assert new.fileno() == fd
        gone = trio.Event()
        assert monitor.watch(fd, gone.set, connection=2)
        new_peer.close()
        with trio.fail_after(5):
            await gone.wait()
    finally:
        new.close()
        new_peer.close()


async def test_without_a_connection_each_watch_rearms(pair) -> None:
    ours, theirs = pair
    monitor = DisconnectMonitor()
    assert monitor.watch(ours.fileno(), lambda: None)
    monitor.unwatch(ours.fileno())
    gone = trio.Event()
    assert monitor.watch(ours.fileno(), gone.set)  # registered already: modified, armed again
    theirs.close()
    with trio.fail_after(5):
        await gone.wait()


CONFIG = """binds:
- port: 3000
  listeners:
  - routes:
    - name: llm
      backends:
      - ai: {name: mock, provider: {openAI: {model: m}}, hostOverride: "127.0.0.1:9"}
"""


BODY = b'{"model": "m", "messages": []}'
ANSWER = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")


class _Backend(trio.abc.Stream):
    """A backend that reads the whole request, then answers ``answer``, or never (None). Like a
    socket, a write checkpoints before its bytes are taken, not after: the upload that wrote the
    last byte has nothing left to be cancelled at when the answer comes."""

    def __init__(self, answer: bytes | None) -> None:
        self.answer = answer
        self.received = b""
        self.complete = trio.Event()
        self.closed = False

    async def send_all(self, data: Any) -> None:
        await trio.lowlevel.checkpoint()
        self.received += bytes(data)
        if self.received.endswith(b"\r\n\r\n" + BODY):
            self.complete.set()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.answer is None:
            await trio.sleep_forever()
        await self.complete.wait()
        self.received, self.complete = b"", trio.Event()
        return self.answer or b""

    async def aclose(self) -> None:
        self.closed = True

    def close(self) -> None:
        self.closed = True


def _gateway(answer: bytes | None) -> tuple[Runtime, Gateway, list[_Backend]]:
    backends: list[_Backend] = []

    async def connect(target: Any) -> trio.abc.Stream:
        backends.append(_Backend(answer))
        return backends[-1]

    runtime = Runtime(parse_config(CONFIG, env={}), pool=UpstreamPool(connect=connect))
    return runtime, Gateway(runtime, 3000), backends



def _scope(fd: int) -> dict[str, Any]:
    return {"type": "http", "http_version": "1.1", "method": "POST", "scheme": "http", "path": "/v1/chat",
            "raw_path": b"/v1/chat", "query_string": b"", "headers": [
                (b"host", b"x"), (b"content-length", str(len(BODY)).encode())],
            "client": ("127.0.0.1", 5000), "extensions": {CLIENT_FD: fd}}


def _client() -> tuple[Any, Any, list[dict[str, Any]]]:
    """(receive, send, what was sent): the body once, then no more reads (the monitor watches)."""
    sent: list[dict[str, Any]] = []
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if reads == 1:
            return {"type": "http.request", "body": BODY, "more_body": False}
        raise AssertionError("receive after the body: the monitor, not a task, watches")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    return receive, send, sent


async def test_a_request_whose_client_leaves_stops_at_once_without_a_watcher_task(pair) -> None:
    ours, theirs = pair
    runtime, app, backends = _gateway(None)
    assert runtime.disconnects is not None
    receive, send, sent = _client()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(app, _scope(ours.fileno()), receive, send)
        await trio.testing.wait_all_tasks_blocked()
        assert runtime.disconnects.watching == 1 and backends and runtime.metrics.requests_in_flight() == 1
        theirs.close()
        with trio.fail_after(5):
            while runtime.metrics.requests_in_flight():
                await trio.sleep(0.001)
    assert sent == [] and runtime.disconnects.watching == 0 and backends[0].closed


async def test_a_finished_request_lets_go_of_the_socket_for_the_next_one(pair) -> None:
    ours, theirs = pair
    runtime, app, backends = _gateway(ANSWER)
    assert runtime.disconnects is not None
    for _ in range(2):  # the same connection, one request after the other
        receive, send, sent = _client()
        await app(_scope(ours.fileno()), receive, send)
        assert sent[0]["status"] == 200 and sent[-1]["more_body"] is False
        assert runtime.disconnects.watching == 0
    assert len(backends) == 1  # the backend connection was pooled and reused
