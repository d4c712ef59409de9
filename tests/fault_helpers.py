"""Raw-socket clients and misbehaving backends for the fault suite (docs/reliability.md)."""

from __future__ import annotations

import os

import trio


def open_fds() -> int:
    """Descriptors this process holds now (Linux)."""
    return len(os.listdir("/proc/self/fd"))


async def raw_exchange(port: int, data: bytes, *, timeout: float = 5.0) -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes (or the head + a bit arrived)."""
    with trio.fail_after(timeout):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(data)
            received = b""
            while True:
                try:
                    chunk = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    break
                if not chunk:
                    break
                received += chunk
                if _complete(received):
                    break
            return received


def _complete(data: bytes) -> bool:
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return len(body) >= int(value)
    return False


def status_line(response: bytes) -> bytes:
    return response.split(b"\r\n", 1)[0]


async def wait_until(predicate, *, timeout: float = 5.0, what: str = "condition") -> None:
    """Poll ``predicate`` until true (for effects outside this process: the kernel, another server)."""
    with trio.move_on_after(timeout):
        while not predicate():
            await trio.sleep(0.02)
        return
    raise AssertionError(f"{what}: not reached within {timeout}s")


class HangingBackend:
    """Accepts connections and reads, never answers (a hung backend)."""

    def __init__(self) -> None:
        self.port = 0
        self.connections = 0

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]

        async def handler(stream: trio.SocketStream) -> None:
            self.connections += 1
            async with stream:
                while await stream.receive_some(65536):
                    pass

        async with trio.open_nursery() as nursery:
            task_status.started(self)
            await trio.serve_listeners(handler, listeners, handler_nursery=nursery)


class PlannedBackend:
    """A real backend on 127.0.0.1 whose i-th request (bodiless, over all its connections) gets
    ``plan[i]``: ``"ok"`` (200 ``ok``, kept alive), ``"hang"`` (read, never answered) or ``"close"``
    (the connection closed unanswered); requests past the plan get ``then``."""

    def __init__(self, *plan: str, then: str = "hang") -> None:
        self.plan = list(plan)
        self.then = then
        self.port = 0
        self.connections = 0
        self.requests = 0

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]

        async def handler(stream: trio.SocketStream) -> None:
            self.connections += 1
            buffer = b""
            async with stream:
                while data := await stream.receive_some(65536):
                    buffer += data
                    while b"\r\n\r\n" in buffer:
                        _, _, buffer = buffer.partition(b"\r\n\r\n")
                        what = self.plan[self.requests] if self.requests < len(self.plan) else self.then
                        self.requests += 1
                        if what == "ok":
                            await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        elif what == "close":
                            return

        async with trio.open_nursery() as nursery:
            task_status.started(self)
            await trio.serve_listeners(handler, listeners, handler_nursery=nursery)


class RecordingBackend:
    """Answers 200 to each request and records the request line it parsed (h11, as a backend would)."""

    def __init__(self) -> None:
        self.port = 0
        self.targets: list[bytes] = []
        self.requests: list[tuple[bytes, bytes, list[tuple[bytes, bytes]], bytes]] = []

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        import h11

        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]

        async def handler(stream: trio.SocketStream) -> None:
            conn = h11.Connection(h11.SERVER)
            async with stream:
                request = None
                body = b""
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await stream.receive_some(65536)
                        conn.receive_data(data)
                        if not data:
                            return
                        continue
                    if isinstance(event, h11.Request):
                        request, body = event, b""
                    elif isinstance(event, h11.Data):
                        body += bytes(event.data)
                    elif isinstance(event, h11.EndOfMessage):
                        assert request is not None
                        self.targets.append(bytes(request.target))
                        self.requests.append((bytes(request.method), bytes(request.target),
                                              [(bytes(k), bytes(v)) for k, v in request.headers], body))
                        payload = b"ok"
                        await stream.send_all(conn.send(h11.Response(status_code=200, headers=[
                            ("content-length", str(len(payload)))])) + conn.send(h11.Data(data=payload))
                            + conn.send(h11.EndOfMessage()))
                        if conn.our_state is h11.MUST_CLOSE:
                            return
                        conn.start_next_cycle()
                    elif isinstance(event, h11.ConnectionClosed):
                        return

        async with trio.open_nursery() as nursery:
            task_status.started(self)
            await trio.serve_listeners(handler, listeners, handler_nursery=nursery)


class BacklogFullBackend:
    """A listener whose accept queue is full: a new connect hangs (SYNs are dropped), as to a
    backend host that is down behind a firewall. Use as a context manager."""

    def __init__(self) -> None:
        import socket

        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.port = self.listener.getsockname()[1]
        self.fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            try:
                filler.connect(("127.0.0.1", self.port))
            except BlockingIOError:
                pass
            self.fillers.append(filler)

    def __enter__(self) -> BacklogFullBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        for sock in [*self.fillers, self.listener]:
            sock.close()
