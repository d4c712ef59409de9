"""A ``#`` in the request target (issue 27): a fragment is never part of one (RFC 9112 §3.2).

Before the fix ``GET /admin#x`` skipped a route on ``/admin`` and was forwarded verbatim, and a
backend such as nginx served ``/admin``. Now it is ``400 bad request: fragment in request target``
over HTTP/1.1 and HTTP/2 (``:path``) alike, and nothing reaches the backend.
"""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import trio

from tests.conftest import free_port, start_routes
from tests.fault_helpers import RecordingBackend, raw_exchange, status_line

DENY_ADMIN = """
- name: admin
  matches: [{{path: {{exact: /admin}}}}]
  policies: {{directResponse: {{status: 403, body: "denied"}}}}
- name: rest
  backends: [{{host: "127.0.0.1:{backend}"}}]
"""

TARGETS = (b"/admin#x", b"/admin#", b"/x/../admin#x", b"/admin?a=1#x", b"http://x/admin#x")


async def test_http1_target_with_a_fragment_is_400_and_never_forwarded(nursery):
    recorder = await nursery.start(RecordingBackend().serve)
    gw = await start_routes(nursery, DENY_ADMIN, port=free_port(), backend=recorder.port)
    port = gw.info.ports[gw.port]
    for target in TARGETS:
        response = await raw_exchange(port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_line(response) == b"HTTP/1.1 400 Bad Request", target
        assert response.endswith(b"bad request: fragment in request target\n"), target
    assert recorder.targets == []
    ok = await raw_exchange(port, b"GET /a%23b?q=%23 HTTP/1.1\r\nHost: x\r\n\r\n")  # an encoded # is data
    assert status_line(ok) == b"HTTP/1.1 200 OK"
    assert recorder.targets == [b"/a%23b?q=%23"]


async def _h2_get(port: int, path: bytes) -> tuple[int, bytes]:
    """One HTTP/2 (h2c, prior knowledge) GET with ``:path`` sent exactly as given."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.initiate_connection()
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            conn.send_headers(1, [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x"),
                                  (b":path", path)], end_stream=True)
            await stream.send_all(conn.data_to_send())
            status, body = 0, b""
            while True:
                data = await stream.receive_some(65536)
                assert data, "connection closed before the answer"
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived):
                        status = int(dict(event.headers)[b":status"])
                    elif isinstance(event, h2.events.DataReceived):
                        body += event.data
                        conn.acknowledge_received_data(event.flow_controlled_length, 1)
                    elif isinstance(event, h2.events.StreamEnded | h2.events.StreamReset):
                        return status, body
                await stream.send_all(conn.data_to_send())


async def test_http2_path_with_a_fragment_is_400_and_never_forwarded(nursery):
    recorder = await nursery.start(RecordingBackend().serve)
    gw = await start_routes(nursery, DENY_ADMIN, port=free_port(), backend=recorder.port)
    port = gw.info.ports[gw.port]
    for path in (b"/admin#x", b"/admin?a#x"):
        status, body = await _h2_get(port, path)
        assert (status, body) == (400, b"bad request: fragment in request target\n"), path
    assert recorder.targets == []
    assert await _h2_get(port, b"/admin") == (403, b"denied")
    status, _ = await _h2_get(port, b"/ok")
    assert status == 200 and recorder.targets == [b"/ok"]
