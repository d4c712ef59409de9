"""``frontendPolicies.http.maxConnectionsPerClient``: one client address cannot hold every
connection slot of a bind, against a real gateway on port 0.

Before, the only cap was per bind: one client opening ``maxConnections`` idle connections (9,872
with the default open-file limit) locked every other client out with 503 ``overloaded``. The
attacker here connects from 127.0.0.2, the others from 127.0.0.1 (both loopback on Linux)."""

from __future__ import annotations

import socket

import httpx
import trio

from tests.conftest import LOOPBACK_SERVERS, free_port, start_gateway
from tests.fault_helpers import status_line
from trioproxy.config import parse_config
from trioproxy.config.dump import config_dump

REQUEST = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


async def _connect_from(source: str, port: int) -> trio.SocketStream:
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    await sock.bind((source, 0))
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)


async def _exchange(stream: trio.SocketStream, *, send: bool = True) -> bytes:
    with trio.fail_after(5):
        async with stream:
            received = b""
            try:  # a refused connection may be closed before the request is sent
                if send:
                    await stream.send_all(REQUEST)
                while chunk := await stream.receive_some(65536):
                    received += chunk
            except trio.BrokenResourceError:
                pass
            return received


async def test_one_client_past_its_share_gets_503_and_others_still_connect(nursery, backend):
    gw = await start_gateway(nursery, """
        frontendPolicies: {{http: {{maxConnections: 8, maxConnectionsPerClient: 3}}}}
        binds:
        - port: {port}
          listeners: [{{routes: [{{backends: [{{host: "127.0.0.1:{backend}"}}]}}]}}]
        """, port=free_port(), backend=backend.port)
    port = gw.info.ports[gw.port]
    held = [await _connect_from("127.0.0.2", port) for _ in range(3)]
    await held[0].send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # all 3 accepted and counted
    assert (await held[0].receive_some(65536)).startswith(b"HTTP/1.1 200")

    refused = await _exchange(await _connect_from("127.0.0.2", port), send=False)  # answered at accept
    assert status_line(refused) == b"HTTP/1.1 503 Service Unavailable"
    assert b"connection: close" in refused.lower() and refused.endswith(b"overloaded\n")
    other = await _exchange(await _connect_from("127.0.0.1", port))
    assert status_line(other) == b"HTTP/1.1 200 OK"

    for stream in held:  # the attacker's slots come back when it lets go
        await stream.aclose()
    with trio.fail_after(5):
        while status_line(await _exchange(await _connect_from("127.0.0.2", port))) != b"HTTP/1.1 200 OK":
            await trio.sleep(0.02)
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(f"http://{gw.info.stats}/metrics")).text
    assert f'trioproxy_connection_events_total{{event="over_client_cap",server="{gw.port}"}} 1.0' in metrics


def test_the_default_is_a_tenth_of_the_default_cap_and_config_dump_shows_it():
    config = parse_config("binds: []\n", env=LOOPBACK_SERVERS)
    assert config.frontend.max_connections_per_client == 1000
    assert config_dump(config)["frontendPolicies"]["http"]["maxConnectionsPerClient"] == 1000
