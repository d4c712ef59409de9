"""The rate limit service against hostile clients, on real sockets (port 0).

- A client that connects and never sends the HTTP/2 preface held its socket and its task for
  ever; it is now closed ``PREFACE_TIMEOUT`` (5 s) after the accept (autojumping MockClock).
- One ``ShouldRateLimit`` call with 60,000 descriptors held the server's thread 2.2 s (every
  other client waited); a call with more than ``MAX_DESCRIPTORS`` (256) is answered
  INVALID_ARGUMENT naming the cap, before any matching or store round trip.
"""

from __future__ import annotations

import grpc
import pytest
import trio

from tests.rls_helpers import ratelimit_server
from trioproxy.rls.h2_frames import PREFACE
from trioproxy.rls.server import MAX_DESCRIPTORS
from trioproxy.rls.wire_server import PREFACE_TIMEOUT, WireServer


async def _read_until_eof(stream: trio.SocketStream) -> bytes:
    received = b""
    try:
        while chunk := await stream.receive_some(65536):
            received += chunk
    except trio.BrokenResourceError:
        pass
    return received


@pytest.mark.parametrize("sent", [b"", PREFACE[:10]])
async def test_a_client_without_a_preface_is_closed_after_the_preface_timeout(nursery, autojump_clock, sent):
    server = WireServer({}, {}, log=lambda line: None)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    await nursery.start(server.serve, listeners)
    start = trio.current_time()
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    await stream.send_all(sent)
    with trio.fail_after(PREFACE_TIMEOUT * 10):  # virtual seconds; before the fix: never closed
        await _read_until_eof(stream)  # the server's SETTINGS (sent first), then EOF
    assert PREFACE_TIMEOUT <= trio.current_time() - start < PREFACE_TIMEOUT * 2
    await stream.aclose()


async def test_a_client_that_sends_its_preface_stays_connected(nursery, autojump_clock):
    server = WireServer({}, {}, log=lambda line: None)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    await nursery.start(server.serve, listeners)
    stream = await trio.open_tcp_stream("127.0.0.1", listeners[0].socket.getsockname()[1])
    await stream.send_all(PREFACE + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")  # + empty SETTINGS
    with trio.move_on_after(PREFACE_TIMEOUT * 10) as waited:
        while True:  # the server's SETTINGS, its ACK of ours, a WINDOW_UPDATE; never EOF
            assert await stream.receive_some(65536) != b""
    assert waited.cancelled_caught and server.connections
    await stream.aclose()


CONFIG = """
domain: gw
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000000}
"""


def test_a_call_past_the_descriptor_cap_is_invalid_argument_and_others_are_served(tmp_path):
    config = tmp_path / "rls.yaml"
    config.write_text(CONFIG)
    with ratelimit_server(config, "--store", "memory") as rls:
        at_cap = rls.call("gw", [[("user", f"u{i}")] for i in range(MAX_DESCRIPTORS)])
        assert len(at_cap.statuses) == MAX_DESCRIPTORS
        for n in (MAX_DESCRIPTORS + 1, 60_000):
            with pytest.raises(grpc.RpcError) as err:
                rls.call("gw", [[("user", "x")]] * n)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert err.value.details() == f"too many descriptors: {n} (at most {MAX_DESCRIPTORS})"
        assert rls.call("gw", [[("user", "after")]]).statuses[0].limit_remaining == 999_999
