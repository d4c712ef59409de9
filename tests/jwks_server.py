"""A JWKS endpoint for tests: trio + h11 on 127.0.0.1 port 0, keys swappable, can go down.

``document`` is what ``GET /jwks`` answers (JSON-encoded unless bytes); ``down = True`` makes it answer 503 (an IdP outage);
``fetches`` counts the requests, so a test sees how often the gateway fetched; ``GET /moved``
answers a 302 to ``/jwks`` (an IdP that moved its keys).
"""

from __future__ import annotations

import json
from typing import Any

import h11
import trio


class JwksServer:
    def __init__(self, document: dict[str, Any] | bytes) -> None:
        self.document = document
        self.down = False
        self.fetches = 0
        self.request_headers: dict[bytes, bytes] = {}  # of the latest request
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jwks"

    def _body(self) -> bytes:
        return self.document if isinstance(self.document, bytes) else json.dumps(self.document).encode()

    async def serve(self, task_status: trio.TaskStatus[JwksServer] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        async with trio.open_nursery() as nursery:
            task_status.started(self)
            await trio.serve_listeners(self._connection, listeners, handler_nursery=nursery)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    self.fetches += 1
                    self.request_headers = dict(event.headers)
                    status, body = (503, b"down") if self.down else (200, self._body())
                    headers = [("content-type", "application/json"), ("content-length", str(len(body))),
                               ("connection", "close")]
                    if event.target == b"/moved":
                        status, body = 302, b""
                        headers = [("location", "/jwks"), ("content-length", "0"), ("connection", "close")]
                    await stream.send_all(conn.send(h11.Response(status_code=status, headers=headers)))
                    await stream.send_all(conn.send(h11.Data(data=body)))
                    await stream.send_all(conn.send(h11.EndOfMessage()))
                    return
                if isinstance(event, (h11.ConnectionClosed, h11.PAUSED)):
                    return
