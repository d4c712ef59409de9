"""The few raw-ASGI chores the gateway's own apps share (data plane, stats, readiness, traces)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Protocol

#: The ASGI and header aliases every module uses (one definition, imported from here).
Header = tuple[bytes, bytes]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

CORK = "trioproxy.cork"
"""ASGI scope extension our hypercorn connection sets (HTTP/1 only, ``connections.py``):
``async with scope["extensions"][CORK]():`` sends what the app writes inside the block in one
socket write when it ends, instead of one write per piece (status line and headers, body, end).
Only for what is already at hand, so nothing waits in the buffer for the network."""

class Corkable(Protocol):
    """A connection that can gather an app's writes: ``corked`` is the list being gathered (None
    when not corked), ``uncork()`` writes it in one piece and ends the gathering."""

    corked: list[bytes] | None

    async def uncork(self) -> None: ...


class Cork:
    """The ``CORK`` extension's context manager, for either server (``http1.py``, ``connections.py``)."""

    __slots__ = ("connection",)

    def __init__(self, connection: Corkable) -> None:
        self.connection = connection

    async def __aenter__(self) -> None:
        if self.connection.corked is None:
            self.connection.corked = []

    async def __aexit__(self, *exc: object) -> None:
        await self.connection.uncork()


CLIENT_FD = "trioproxy.client_fd"
"""ASGI scope extension a server may set (HTTP/1.1, one request at a time per connection): the
client socket's file descriptor, valid until the app returns. With it the gateway notices the
client leaving through ``disconnect_monitor.py`` instead of a task waiting in ``receive``."""

CLIENT_CONNECTION = "trioproxy.client_connection"
"""Set with ``CLIENT_FD``: a number naming the connection, the same for each of its requests and
never given to another connection of the process. A descriptor number is reused once its socket
is closed; this tells the disconnect monitor whether its registration is still this connection's."""

CONNECTION_SCOPE = "trioproxy.connection_scope"
"""Set with ``CLIENT_FD``: the ``trio.CancelScope`` the server runs the connection's requests in,
one per connection. Cancelling it ends the request being served and the connection after it (the
gateway's reaction to a client that left, ``exchange.py``): no cancel scope of the app's own per
request, 3-5 us each to enter and leave (``python -m bench.trio_costs``)."""

RECEIVE_WITHIN = "trioproxy.receive_within"
"""ASGI scope extension a server may set (``http1.py``): ``await scope["extensions"][RECEIVE_WITHIN](seconds)``
is ``receive()``, or None when the next message did not come within ``seconds``. The server enters
a deadline only where it must wait for the client's bytes, so a body that came with the head is
read with no cancel scope (the gateway's body-idle timeout, ``exchange.py``)."""


def expects_continue(scope: Scope) -> bool:
    """An HTTP/1.1 request whose client waits for ``100 Continue`` before sending its body."""
    return scope.get("http_version") == "1.1" and any(
        name == b"expect" and value.lower() == b"100-continue" for name, value in scope["headers"])


async def serve_lifespan(receive: Receive, send: Send) -> None:
    """Acknowledge startup and shutdown: these apps hold no state that needs either."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def read_body(receive: Receive) -> bytes:
    """The whole request body (for the small apps that answer after reading it all)."""
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body"):
            return b"".join(chunks)


async def send_text(send: Send, status: int, body: str | bytes, content_type: bytes = b"text/plain") -> None:
    """A complete response with a fixed body."""
    data = body.encode() if isinstance(body, str) else body
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})
