"""WebSocket upgrades through a running gateway: trio-websocket client → gateway → trio-websocket backend."""

from __future__ import annotations

import pytest
import trio
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket_url

from fixtures.ws_echo_backend import WebSocketEchoBackend
from tests.conftest import free_port, start_gateway
from trioproxy.proxy import websocket

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: limited
      matches: [{{path: {{pathPrefix: /limited}}}}]
      policies:
        localRateLimit: [{{maxTokens: 1, tokensPerFill: 1, fillInterval: 1h}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: denied
      matches: [{{path: {{pathPrefix: /denied}}}}]
      policies:
        directResponse: {{status: 401, body: "no token"}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: down
      matches: [{{path: {{pathPrefix: /down}}}}]
      backends: [{{host: "127.0.0.1:{dead}"}}]
    - name: ws
      policies:
        requestHeaderModifier: {{set: {{x-gateway: "yes"}}}}
        responseHeaderModifier: {{set: {{x-route: ws}}}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""

CAPPED = "frontendPolicies: {{http: {{websocketMaxMessageSize: 1000}}}}\n" + CONFIG


@pytest.fixture
async def ws_backend(nursery) -> WebSocketEchoBackend:
    return await nursery.start(WebSocketEchoBackend().serve)


@pytest.fixture
async def gw(nursery, ws_backend):
    return await start_gateway(nursery, CONFIG, port=free_port(), backend=ws_backend.port, dead=free_port())


def url(gw, path: str) -> str:
    return f"ws://127.0.0.1:{gw.info.ports[gw.port]}{path}"


def rejection(excinfo: BaseException) -> ConnectionRejected:
    """trio-websocket raises a refusal bare or inside an exception group."""
    while isinstance(excinfo, BaseExceptionGroup):
        excinfo = excinfo.exceptions[0]
    assert isinstance(excinfo, ConnectionRejected), excinfo
    return excinfo


async def rejected(gw, path: str) -> ConnectionRejected:
    try:
        async with open_websocket_url(url(gw, path)):
            pass
    except BaseException as error:  # noqa: BLE001 - the refusal is what the test reads
        return rejection(error)
    raise AssertionError("the upgrade was accepted")


async def test_echo_through_the_gateway_with_header_policies(gw, ws_backend):
    async with open_websocket_url(url(gw, "/chat?room=1"), subprotocols=["chat.v1", "chat.v2"]) as ws:
        assert ws.subprotocol == "chat.v1"
        headers = {k.lower(): v for k, v in ws.handshake_headers}
        assert headers[b"x-route"] == b"ws"  # the response header modifier ran on the 101
        assert headers[b"x-backend"] == b"accepted"  # the backend's own handshake header passed
        await ws.send_message("hello")
        assert await ws.get_message() == "hello"
        await ws.send_message(b"\x00\x01binary")
        assert await ws.get_message() == b"\x00\x01binary"
    path, seen = ws_backend.requests[0]
    assert path == "/chat?room=1"
    assert seen["x-gateway"] == "yes"  # the request header modifier ran at the upgrade
    assert seen["x-forwarded-for"] == "127.0.0.1"


async def test_a_local_rate_limit_refuses_the_second_upgrade_with_429(gw, ws_backend):
    async with open_websocket_url(url(gw, "/limited")) as ws:
        await ws.send_message("one")
        assert await ws.get_message() == "one"
    refused = await rejected(gw, "/limited")
    assert refused.status_code == 429
    assert refused.body == b"rate limit exceeded"
    assert len(ws_backend.requests) == 1  # the refused upgrade never reached the backend


async def test_a_stage_answer_replaces_the_upgrade(gw, ws_backend):
    refused = await rejected(gw, "/denied")
    assert (refused.status_code, refused.body) == (401, b"no token")
    assert ws_backend.requests == []


async def test_the_backends_refusal_reaches_the_client_unchanged(gw):
    refused = await rejected(gw, "/reject")
    assert refused.status_code == 403
    assert refused.body == b"backend says no"
    assert (b"x-backend", b"refused") in refused.headers
    assert (b"x-route", b"ws") in refused.headers  # response policies still shape it


async def test_an_unreachable_backend_is_a_503(gw):
    refused = await rejected(gw, "/down")
    assert refused.status_code == 503
    assert refused.body.startswith(b"upstream connect error")


async def test_backend_close_code_and_reason_reach_the_client(gw):
    async with open_websocket_url(url(gw, "/x")) as ws:
        await ws.send_message("close 4001 done here")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
    assert (closed.value.reason.code, closed.value.reason.reason) == (4001, "done here")


async def test_client_close_code_and_reason_reach_the_backend(gw, ws_backend):
    async with open_websocket_url(url(gw, "/x")) as ws:
        await ws.send_message("ping")
        assert await ws.get_message() == "ping"
        await ws.aclose(4002, "client leaves")
    with trio.fail_after(5):
        await ws_backend.closed.wait()
    assert ws_backend.closes == [(4002, "client leaves")]


async def test_a_backend_message_over_the_limit_closes_with_1009(nursery, ws_backend):
    gw = await start_gateway(nursery, CAPPED, port=free_port(), backend=ws_backend.port, dead=free_port())
    async with open_websocket_url(url(gw, "/x")) as ws:
        await ws.send_message("big 999")
        assert len(await ws.get_message()) == 999
        await ws.send_message("big 5000")
        with pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
    assert closed.value.reason.code == 1009


async def test_a_client_message_over_the_limit_closes_with_1009(nursery, ws_backend):
    gw = await start_gateway(nursery, CAPPED, port=free_port(), backend=ws_backend.port, dead=free_port())
    async with open_websocket_url(url(gw, "/x")) as ws:
        await ws.send_message(b"y" * 1000)
        assert len(await ws.get_message()) == 1000
        await ws.send_message(b"y" * 1001)
        with pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
    assert closed.value.reason.code == 1009
    with trio.fail_after(5):
        await ws_backend.closed.wait()
    assert ws_backend.closes[0][0] == 1009  # the client's answering close frame is forwarded


async def test_idle_session_is_closed_on_both_sides(gw, ws_backend, monkeypatch):
    monkeypatch.setattr(websocket, "WEBSOCKET_IDLE_TIMEOUT", 0.2)
    async with open_websocket_url(url(gw, "/x")) as ws:
        with trio.fail_after(5), pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
    assert (closed.value.reason.code, closed.value.reason.reason) == (1001, "idle timeout")
    with trio.fail_after(5):
        await ws_backend.closed.wait()
    assert ws_backend.closes == [(1001, "idle timeout")]


async def test_trace_shows_the_upgrade_and_the_close(gw):
    watcher = gw.info.runtime.trace.watch()
    async with open_websocket_url(url(gw, "/x"), subprotocols=["chat.v1"]) as ws:
        await ws.send_message("a")
        assert await ws.get_message() == "a"
        await ws.send_message("close 4003 bye")
        with pytest.raises(ConnectionClosed):
            await ws.get_message()
    events = []
    with trio.fail_after(5):
        async for event in watcher.receive:
            events.append(event["message"])
    types = [e["type"] for e in events]
    assert types.index("websocketUpgrade") < types.index("websocketClosed") < types.index("requestFinished")
    upgrade = next(e for e in events if e["type"] == "websocketUpgrade")
    assert upgrade["subprotocol"] == "chat.v1"
    closed = next(e for e in events if e["type"] == "websocketClosed")
    assert (closed["closedBy"], closed["code"], closed["reason"]) == ("backend", 4003, "bye")
    assert (closed["messagesFromClient"], closed["messagesFromBackend"]) == (2, 1)
    assert events[-1]["status"] == 101
