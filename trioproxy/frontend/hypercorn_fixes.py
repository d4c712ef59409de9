"""Two hypercorn 0.18 protocol faults, fixed by subclasses swapped into its modules (imported once
by ``connections``, before any server starts).

- **WebSocket close code**: hypercorn answers a client's close frame and then reports
  ``websocket.disconnect`` with code 1006 (abnormal) whatever the client sent, so the gateway
  could not forward it to the backend (docs/protocols.md: either side's close code reaches the
  other). ``ClientCloseWSStream`` records the client's code and reason and reports them instead;
  it replaces ``WSStream`` in the HTTP/1.1 and HTTP/2 protocol modules, the only places that
  build it.
- **HTTP/2 body after the answer**: when the app answers before reading a request body (a 401,
  a 429, an upload refused), hypercorn forgets the stream, and the client's next DATA frame for
  it raises ``KeyError`` out of the connection task, which would take the whole bind's server
  down. ``AnsweredStreamsH2Protocol`` discards such frames, returns their flow-control credit and
  resets the stream with NO_ERROR (RFC 9113 §8.1: stop sending, the answer is complete).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import h2.errors
import h2.events
import h2.exceptions
import hypercorn.protocol
import hypercorn.protocol.h2
import hypercorn.protocol.h11
from hypercorn.protocol.events import Event, StreamClosed
from hypercorn.protocol.h2 import H2Protocol
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


class AnsweredStreamsH2Protocol(H2Protocol):
    """``H2Protocol`` that drops DATA for a stream already answered and forgotten."""

    async def _handle_events(self, events: list[h2.events.Event]) -> None:
        kept = []
        for event in events:
            if isinstance(event, h2.events.DataReceived) and event.stream_id not in self.streams:
                try:
                    self.connection.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    self.connection.reset_stream(event.stream_id, h2.errors.ErrorCodes.NO_ERROR)
                except h2.exceptions.ProtocolError:
                    pass  # closed on the h2 side too: nothing owed
                continue
            kept.append(event)
        await super()._handle_events(kept)


hypercorn.protocol.H2Protocol = AnsweredStreamsH2Protocol  # type: ignore[attr-defined]
hypercorn.protocol.h11.WSStream = ClientCloseWSStream  # type: ignore[attr-defined]
hypercorn.protocol.h2.WSStream = ClientCloseWSStream  # type: ignore[attr-defined]
