"""What one WebSocket message may cost: ``frontendPolicies.http.websocketMaxMessageSize``, through
a real gateway to a real trio-websocket backend.

Both hops buffer a message whole before relaying it, so the cap per message is the memory bound.
It was 16 MiB, fixed: ten clients sending 15 MiB messages at once took the process 470 MB up. The
default is now 1 MiB (the ``websockets`` library's), configurable; past it both sides get 1009.
The tests measure sizes (what passes, what is refused), not memory."""

from __future__ import annotations

import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from fixtures.ws_echo_backend import WebSocketEchoBackend
from tests.conftest import free_port, start_gateway

MIB = 1024 * 1024
CONFIG = """
{frontend}binds:
- port: {port}
  listeners:
  - routes:
    - backends: [{{host: "127.0.0.1:{backend}"}}]
"""


@pytest.fixture
async def ws_backend(nursery) -> WebSocketEchoBackend:
    return await nursery.start(WebSocketEchoBackend().serve)


async def _gateway(nursery, ws_backend, frontend: str = "") -> str:
    gw = await start_gateway(nursery, CONFIG, frontend=frontend, port=free_port(), backend=ws_backend.port)
    return f"ws://127.0.0.1:{gw.info.ports[gw.port]}/x"


async def _closed_code(ws) -> int:
    with pytest.raises(ConnectionClosed) as closed, trio.fail_after(10):
        await ws.get_message()
    return closed.value.reason.code


async def _close_reason(ws):
    with pytest.raises(ConnectionClosed) as closed, trio.fail_after(10):
        await ws.get_message()
    return closed.value.reason


async def test_a_15_mib_client_message_is_refused_by_default_and_1_mib_passes(nursery, ws_backend):
    url = await _gateway(nursery, ws_backend)
    with trio.CancelScope() as session:
        async with open_websocket_url(url, max_message_size=32 * MIB) as ws:
            await ws.send_message(b"y" * MIB)
            assert len(await ws.get_message()) == MIB
            # the message; the gateway stops reading it at the cap, so its sender (and the
            # client's closing handshake behind it) never ends: the session is cancelled once closed
            nursery.start_soon(ws.send_message, b"y" * (15 * MIB))
            reason = await _close_reason(ws)
            session.cancel()
    # 1009 from the gateway itself (hypercorn, no reason), not the backend's refusal forwarded
    # ("Exceeded maximum message size": before, the gateway relayed the 15 MiB on to it)
    assert (reason.code, reason.reason) == (1009, None)


async def test_a_backend_message_past_the_default_cap_closes_the_client_with_1009(nursery, ws_backend):
    url = await _gateway(nursery, ws_backend)
    async with open_websocket_url(url, max_message_size=32 * MIB) as ws:
        await ws.send_message(f"big {MIB + 1}")
        assert await _closed_code(ws) == 1009


async def test_the_cap_is_configurable(nursery, ws_backend):
    url = await _gateway(nursery, ws_backend, "frontendPolicies: {http: {websocketMaxMessageSize: 2097152}}\n")
    async with open_websocket_url(url, max_message_size=32 * MIB) as ws:
        await ws.send_message(f"big {2 * MIB}")  # (the test backend's own cap on what it reads is 1 MiB)
        assert len(await ws.get_message()) == 2 * MIB
        await ws.send_message(b"y" * (2 * MIB + 1))
        assert await _closed_code(ws) == 1009
