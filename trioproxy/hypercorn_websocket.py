"""hypercorn's WebSocket stream, told the client's close code (imported once by ``connections``).

hypercorn 0.18 answers a client's close frame and then reports ``websocket.disconnect`` with
code 1006 (abnormal) whatever the client sent, so the gateway could not forward the code to the
backend (docs/protocols.md: either side's close code reaches the other). This subclass records
the code and reason of the client's close frame and reports them instead. It replaces
``WSStream`` in hypercorn's HTTP/1.1 and HTTP/2 protocol modules, the only places that build it.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import hypercorn.protocol.h2
import hypercorn.protocol.h11
from hypercorn.protocol.events import Event, StreamClosed
from hypercorn.protocol.ws_stream import ASGIWebsocketState, WSStream
from wsproto.events import CloseConnection


class ClientCloseWSStream(WSStream):
    """``WSStream`` whose ``websocket.disconnect`` carries the client's close code and reason."""

    client_close: tuple[int, str | None] | None = None

    async def _accept(self, message: Any) -> None:
        await super()._accept(message)
        events = self.connection.events

        def recording() -> Generator[Any, None, None]:
            for event in events():
                if isinstance(event, CloseConnection) and self.client_close is None:
                    self.client_close = (event.code, event.reason or None)
                yield event

        self.connection.events = recording  # type: ignore[method-assign]

    async def handle(self, event: Event) -> None:
        close = self.client_close
        if (isinstance(event, StreamClosed) and close is not None and not self.closed
                and self.app_put is not None and self.state == ASGIWebsocketState.CONNECTED):
            self.closed = True
            await self.app_put({"type": "websocket.disconnect", "code": close[0], "reason": close[1]})
            return
        await super().handle(event)


hypercorn.protocol.h11.WSStream = ClientCloseWSStream  # type: ignore[attr-defined]
hypercorn.protocol.h2.WSStream = ClientCloseWSStream  # type: ignore[attr-defined]
