"""Property: random request heads through a real bind never yield a gateway-made 5xx, a traceback,
or a request the backend parses differently from the gateway (docs/reliability.md).

One gateway and one recording backend (h11, as a backend would parse) run in a Trio loop on a
thread for the whole test; each hypothesis example is one blocking raw-socket exchange with it,
so the run stays at a few seconds.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from functools import partial

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import LOOPBACK_SERVERS, free_port
from tests.fault_helpers import RecordingBackend, _complete
from trioproxy.config import parse_config
from trioproxy.frontend.paths import PathError, normalize_path
from trioproxy.frontend.server import serve_gateway
from trioproxy.policies.headers import HOP_BY_HOP

TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12)
VALUE = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)
SEGMENT = st.sampled_from(["a", "b", ".", "..", "", "%2e", "%2F", "x y", "%", "c%20d", "\\", "%41"])
PATH = st.one_of(
    st.lists(SEGMENT, max_size=5).map(lambda parts: "/" + "/".join(parts)),
    st.sampled_from(["*", "admin", "http://x/a/../b", "http://x", "/?q=1", "/a?x=../y", "//a//b"]),
)
#: framing and hop-by-hop names the test sets itself or the gateway rewrites by design
RESERVED = HOP_BY_HOP | {b"host", b"content-length", b"x-forwarded-for", b"x-forwarded-proto"}
FRAMING = st.sampled_from(["none", "length", "chunked", "both", "bad-length", "two-lengths"])


class Captured(logging.Handler):
    """Every log record of the gateway's loggers while the test runs (tracebacks included)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


class ThreadGateway:
    """A gateway and a RecordingBackend on a Trio loop in a thread."""

    def __init__(self) -> None:
        self.recorder = RecordingBackend()
        self.port = 0
        self._ready = threading.Event()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self._thread = threading.Thread(target=trio.run, args=(self._main,), daemon=True)

    async def _main(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            await nursery.start(self.recorder.serve)
            text = (f"binds:\n- port: {free_port()}\n  listeners:\n  - routes:\n"
                    f"    - backends: [{{host: \"127.0.0.1:{self.recorder.port}\"}}]\n")
            config = parse_config(text, env={**os.environ, **LOOPBACK_SERVERS})
            info = await nursery.start(partial(serve_gateway, config, bind_host="127.0.0.1", drain_timeout=0.5))
            self.port = info.ports[config.binds[0].port]
            self._ready.set()
            await self._stop.wait()
            info.shutdown.set()
            nursery.cancel_scope.deadline = trio.current_time() + 2

    def __enter__(self) -> ThreadGateway:
        self._thread.start()
        assert self._ready.wait(10), "gateway did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._token is not None and self._stop is not None
        trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(10)


@pytest.fixture(scope="module")
def head_gateway() -> Iterator[tuple[ThreadGateway, Captured]]:
    captured = Captured()
    loggers = [logging.getLogger(name) for name in ("trioproxy", "hypercorn.error", "hypercorn.access", "")]
    for logger in loggers:
        logger.addHandler(captured)
    try:
        with ThreadGateway() as gateway:
            yield gateway, captured
    finally:
        for logger in loggers:
            logger.removeHandler(captured)


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
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + payload


def exchange(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(data)
        received = b""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            received += chunk
            if _complete(received):
                break
        return received


def _expected_path(path: str) -> str | None:
    """What the backend must see as the path: the normalised one (None: the gateway must refuse)."""
    raw = path.partition("?")[0]
    try:
        return normalize_path(raw)
    except PathError:
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "get", "G=T"]),
    path=PATH,
    version=st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 x"]),
    headers=st.lists(st.tuples(TOKEN, VALUE).filter(lambda h: h[0].encode() not in RESERVED), max_size=5),
    framing=FRAMING,
    body=st.binary(max_size=64),
)
def test_random_heads_never_get_a_gateway_5xx_or_a_divergent_backend_request(
        head_gateway, method, path, version, headers, framing, body):
    gateway, captured = head_gateway
    gateway.recorder.requests.clear()
    captured.lines.clear()
    response = exchange(gateway.port, build(method, path, version, headers, framing, body))
    assert response.startswith(b"HTTP/1.1 "), response[:200]
    status = int(response[9:12])
    # 505 is the right answer to an HTTP version the gateway does not speak; every other 5xx of
    # the gateway's own making (the backend always answers 200) is a bug.
    assert not 500 <= status < 600 or (status == 505 and version == "HTTP/2.0"), response[:300]
    assert not any("Traceback" in line or "Error in ASGI" in line for line in captured.lines), captured.lines
    if gateway.recorder.requests:
        assert status == 200, response[:300]
        assert len(gateway.recorder.requests) == 1
        got_method, got_target, got_headers, got_body = gateway.recorder.requests[0]
        assert got_method == method.upper().encode()  # hypercorn's scope (and so routing) reads it upper-case
        expected = _expected_path(path if path.startswith("/") else path.partition("//x")[2] or "/")
        assert got_target.partition(b"?")[0].decode() == expected
        assert got_target.partition(b"?")[2] == path.partition("?")[2].encode()
        assert got_body == (body if framing in ("length", "chunked") else b"")
        sent = {(k.lower().encode(), v.strip().encode()) for k, v in headers}
        assert sent <= {(k.lower(), v) for k, v in got_headers}
    else:
        assert status != 200, response[:300]
        # Refusing is right only for what is invalid; a valid request must reach the backend.
        assert not _valid(method, path, version, framing), (status, response[:300])


def _valid(method: str, path: str, version: str, framing: str) -> bool:
    """A request HTTP/1.1 (RFC 9112) and the path rules (docs/reliability.md row 2) both accept."""
    if framing not in ("none", "length", "chunked") or version not in ("HTTP/1.1", "HTTP/1.0"):
        return False
    if method == "G=T" or " " in path or "\\" in path:
        return False
    if path.startswith("http://x/"):
        path = path[len("http://x"):]
    elif path == "http://x":
        path = "/"
    return path.startswith("/") and _expected_path(path) is not None
