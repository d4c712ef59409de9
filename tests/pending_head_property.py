"""Property: random request heads through a real bind never yield a gateway-made 5xx, a traceback,
or a request the backend parses differently from the gateway (docs/reliability.md)."""

from __future__ import annotations

import logging

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import free_port, start_routes
from tests.fault_helpers import RecordingBackend, raw_exchange
from trioproxy.paths import normalize_path

TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
VALUE = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
SEGMENT = st.sampled_from(["a", "b", ".", "..", "", "%2e", "%2F", "x y", "%", "c%20d", "\\"])
PATH = st.one_of(
    st.lists(SEGMENT, max_size=5).map(lambda parts: "/" + "/".join(parts)),
    st.sampled_from(["*", "admin", "http://x/a/../b", "http://x", "/?q=1", "/a?x=../y"]),
)
FRAMING = st.sampled_from(["none", "length", "chunked", "both", "bad-length", "two-lengths"])


def build(method: str, path: str, version: str, headers: list[tuple[str, str]], framing: str, body: bytes) -> bytes:
    lines = [f"{method} {path} {version}", "Host: prop"]
    lines += [f"{k}: {v}" for k, v in headers]
    payload = b""
    if framing in ("length", "both"):
        lines.append(f"Content-Length: {len(body)}")
        payload = body
    if framing in ("chunked", "both"):
        lines.append("Transfer-Encoding: chunked")
        payload = (f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n") if body else b"0\r\n\r\n"
    if framing == "bad-length":
        lines.append("Content-Length: 1x")
    if framing == "two-lengths":
        lines += [f"Content-Length: {len(body)}", f"Content-Length: {len(body) + 1}"]
        payload = body
    if "connection" not in {k.lower() for k, _ in headers}:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get", "G=T"]),
    path=PATH,
    version=st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 x"]),
    headers=st.lists(st.tuples(TOKEN, VALUE), max_size=5),
    framing=FRAMING,
    body=st.binary(max_size=64),
)
async def test_random_heads_never_get_a_gateway_5xx_or_a_divergent_backend_request(
        nursery, caplog, method, path, version, headers, framing, body):
    recorder = await nursery.start(RecordingBackend().serve)
    gw = await start_routes(nursery, """
            - backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=recorder.port)
    with caplog.at_level(logging.WARNING):
        response = await raw_exchange(gw.info.ports[gw.port], build(method, path, version, headers, framing, body))
    status = int(response[9:12]) if response.startswith(b"HTTP/1.") else 0
    assert not 500 <= status < 600, response[:200]
    assert "Traceback" not in caplog.text and "Error in ASGI" not in caplog.text
    if recorder.requests:
        assert status == 200
        got_method, got_target, _, got_body = recorder.requests[0]
        assert got_method == method.encode()
        sent_path, _, query = path.partition("?")
        assert got_target.partition(b"?")[0].decode() == normalize_path(sent_path)
        assert got_body == (body if framing in ("length", "chunked") else b"")
    else:
        assert status != 200 or method == "OPTIONS"
    nursery.cancel_scope.cancel()
