"""Fault and hostile-input suite (docs/reliability.md): raw sockets, real backends misbehaving on purpose.

Each test names the row of the reliability table it covers; each failed on the code before the fix.
"""

from __future__ import annotations

import errno
import logging
import socket
import subprocess
import sys

import httpx
import trio

from tests.conftest import ROOT, free_port, start_gateway, start_routes
from tests.fault_helpers import RecordingBackend, open_fds, raw_exchange, status_line, wait_until
from trioproxy.frontend import connections
from trioproxy.frontend.connections import ConnectionCounter, _serve_listener

DENY_ADMIN = """
        - name: admin
          matches: [{{path: {{pathPrefix: /admin}}}}]
          policies: {{directResponse: {{status: 403, body: "denied"}}}}
        - name: rest
          backends: [{{host: "127.0.0.1:{backend}"}}]
"""


# Row 1: descriptors --------------------------------------------------------------------------

async def test_row1_closed_client_connections_release_their_fd_at_once(gateway):
    port = gateway.info.ports[gateway.port]
    async with gateway.client() as client:  # warm: the backend pool holds its connection
        assert (await client.get("/")).status_code == 200
    await wait_until(lambda: True)
    baseline = open_fds()
    for i in range(150):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        if i % 2:  # half close idle before a request, half after one complete exchange
            await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await stream.receive_some(65536)).startswith(b"HTTP/1.1 200")
        await stream.aclose()
    # Before the fix each stayed in CLOSE_WAIT until the 60 s keep-alive timer.
    await wait_until(lambda: open_fds() <= baseline + 2, timeout=5, what="fds back to baseline")


async def test_row1_connections_past_the_cap_get_503_overloaded_and_close(nursery, backend):
    gw = await start_gateway(nursery, """
        frontendPolicies: {{http: {{maxConnections: 4}}}}
        binds:
        - port: {port}
          listeners: [{{routes: [{{backends: [{{host: "127.0.0.1:{backend}"}}]}}]}}]
        """, port=free_port(), backend=backend.port)
    port = gw.info.ports[gw.port]
    held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(4)]
    await held[0].send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # all 4 accepted and counted
    assert (await held[0].receive_some(65536)).startswith(b"HTTP/1.1 200")
    refused = await raw_exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_line(refused) == b"HTTP/1.1 503 Service Unavailable"
    assert b"connection: close" in refused.lower() and refused.endswith(b"overloaded\n")
    for stream in held:
        await stream.aclose()

    async def one_gets_through() -> bool:
        return status_line(await raw_exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")) \
            == b"HTTP/1.1 200 OK"

    with trio.fail_after(5):
        while not await one_gets_through():
            await trio.sleep(0.02)
    async with httpx.AsyncClient() as client:
        metrics = (await client.get(f"http://{gw.info.stats}/metrics")).text
    assert f'trioproxy_connection_events_total{{event="over_cap",server="{gw.port}"}} 1.0' in metrics


class _FailingSocket:
    """A listening socket whose accept fails with EMFILE a few times, then is cancelled."""

    def __init__(self, failures: int) -> None:
        self.failures = failures

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    async def accept(self):
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        await trio.sleep_forever()


async def test_row1_emfile_at_accept_is_one_log_line_and_a_metric_not_a_traceback(caplog, autojump_clock):
    events: list[str] = []
    counter = ConnectionCounter("3000", 10, lambda name, what: events.append(what))
    with caplog.at_level(logging.ERROR):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_serve_listener, _FailingSocket(40), None, counter, nursery)
            await trio.sleep(40 * connections.ACCEPT_RETRY_SECONDS + 1)
            nursery.cancel_scope.cancel()
    assert counter.accept_errors == 40 and events == ["accept_error"] * 40
    lines = [r for r in caplog.records if "accept failed" in r.getMessage()]
    assert 1 <= len(lines) <= 3  # once per second at most
    assert all(r.exc_info is None for r in caplog.records)


def test_row1_the_soft_open_file_limit_is_raised_to_the_hard_limit():
    code = ("import resource; from trioproxy.frontend.connections import raise_nofile_limit;"
            "s, h = resource.getrlimit(resource.RLIMIT_NOFILE); resource.setrlimit(resource.RLIMIT_NOFILE, (256, h));"
            "print(raise_nofile_limit() == h == resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


# Row 2: paths ---------------------------------------------------------------------------------

async def test_row2_path_bypass_forms_meet_the_admin_route_and_the_backend_sees_the_normal_path(nursery):
    recorder = await nursery.start(RecordingBackend().serve)
    gw = await start_routes(nursery, DENY_ADMIN, port=free_port(), backend=recorder.port)
    port = gw.info.ports[gw.port]
    for target in (b"/x/../admin", b"/./admin", b"//admin", b"http://x/admin", b"/x/%2e%2e/admin"):
        response = await raw_exchange(port, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_line(response) == b"HTTP/1.1 403 Forbidden", target
    ok = await raw_exchange(port, b"GET /a/./b//c/../d?q=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_line(ok) == b"HTTP/1.1 200 OK"
    assert recorder.targets == [b"/a/b/d?q=1"]
    bad = await raw_exchange(port, b"GET /a%2fadmin HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_line(bad) == b"HTTP/1.1 400 Bad Request" and bad.endswith(b"encoded path separator\n")
    assert recorder.targets == [b"/a/b/d?q=1"]


# Row 7: admin Host header, loopback defaults ---------------------------------------------------

async def test_row7_loopback_admin_answers_only_loopback_host_names(gateway):
    async with httpx.AsyncClient(base_url=gateway.admin_url) as client:
        rebound = await client.get("/config_dump", headers={"host": "evil.example"})
        rebound_port = await client.get("/config_dump", headers={"host": "evil.example:15000"})
        local = await client.get("/config_dump", headers={"host": "localhost:15000"})
        ip = await client.get("/config_dump")
        v6 = await client.get("/config_dump", headers={"host": "[::1]:15000"})
    assert (rebound.status_code, rebound_port.status_code) == (421, 421)
    assert "misdirected" in rebound.text
    assert (local.status_code, ip.status_code, v6.status_code) == (200, 200, 200)


def test_row7_stats_and_readiness_default_to_loopback():
    from trioproxy.config.model import ServerAddrs

    addrs = ServerAddrs()
    assert {addrs.admin.host, addrs.stats.host, addrs.readiness.host} == {"localhost"}


# Row 8: framing ---------------------------------------------------------------------------------

async def test_row8_content_length_with_transfer_encoding_is_400_and_never_forwarded(nursery, caplog):
    recorder = await nursery.start(RecordingBackend().serve)
    gw = await start_routes(nursery, """
            - backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=recorder.port)
    port = gw.info.ports[gw.port]
    for head in (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                 b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"):
        response = await raw_exchange(
            port, b"POST / HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n5\r\nhello\r\n0\r\n\r\n")
        assert status_line(response) == b"HTTP/1.1 400 Bad Request"
        assert b"connection: close" in response.lower()
    assert recorder.targets == []
    assert "Traceback" not in caplog.text and "Error in ASGI" not in caplog.text


# Row 9: head size, reason phrases --------------------------------------------------------------

async def test_row9_head_limit_holds_for_a_head_in_one_write(gateway, backend):
    port = gateway.info.ports[gateway.port]
    for size in (33 * 1024, 60 * 1024):
        one_write = await raw_exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size + b"\r\n\r\n")
        assert status_line(one_write) == b"HTTP/1.1 431 Request Header Fields Too Large", size
    assert backend.requests == 0
    fine = await raw_exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 30_000 + b"\r\n\r\n")
    assert status_line(fine) == b"HTTP/1.1 200 OK"


async def test_row9_many_keepalive_requests_with_large_heads_are_not_miscounted(gateway):
    port = gateway.info.ports[gateway.port]
    request = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n"
    with trio.fail_after(10):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            for _ in range(5):
                await stream.send_all(request)
                head = b""
                while b"\r\n\r\n" not in head:
                    head += await stream.receive_some(65536)
                assert status_line(head) == b"HTTP/1.1 200 OK"
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                body = head.split(b"\r\n\r\n", 1)[1]
                while len(body) < length:
                    body += await stream.receive_some(65536)


async def test_row9_status_lines_carry_a_reason_phrase(nursery, backend):
    gw = await start_routes(nursery, """
            - matches: [{{path: {{pathPrefix: /api}}}}]
              backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port)
    port = gw.info.ports[gw.port]
    assert status_line(await raw_exchange(port, b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")) == b"HTTP/1.1 404 Not Found"
    assert status_line(await raw_exchange(port, b"GET /api HTTP/1.1\r\nHost: x\r\n\r\n")) == b"HTTP/1.1 200 OK"


# Overload guard (requests in flight) -------------------------------------------------------------

async def test_overload_guard_answers_503_past_the_requests_in_flight_cap(nursery):
    from tests.fault_helpers import HangingBackend

    hanging = await nursery.start(HangingBackend().serve)
    gw = await start_gateway(nursery, """
        frontendPolicies: {{http: {{maxRequestsInFlight: 2}}}}
        binds:
        - port: {port}
          listeners: [{{routes: [{{backends: [{{host: "127.0.0.1:{backend}"}}]}}]}}]
        """, port=free_port(), backend=hanging.port)
    port = gw.info.ports[gw.port]
    held = []
    for _ in range(2):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        held.append(stream)
    await wait_until(lambda: hanging.connections == 2, what="two requests at the backend")
    response = await raw_exchange(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status_line(response) == b"HTTP/1.1 503 Service Unavailable"
    assert response.endswith(b"overloaded\n") and b"connection: close" in response.lower()
    for stream in held:
        await stream.aclose()


# Drain -------------------------------------------------------------------------------------------

async def test_drain_deadline_logs_the_requests_it_cut(nursery, caplog):
    from tests.fault_helpers import HangingBackend

    hanging = await nursery.start(HangingBackend().serve)
    gw = await start_gateway(nursery, """
        binds:
        - port: {port}
          listeners:
          - routes:
            - backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=hanging.port, drain_timeout=0.2)
    port = gw.info.ports[gw.port]
    streams = []
    for _ in range(3):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        streams.append(stream)
    await wait_until(lambda: hanging.connections == 3, what="three requests at the backend")
    with caplog.at_level(logging.WARNING, logger="trioproxy"):
        gw.info.shutdown.set()
        await wait_until(lambda: "were cut" in caplog.text, what="drain log line")
    assert "3 connections with requests in flight were cut" in caplog.text
    for stream in streams:
        await stream.aclose()


# Row 5: reloads and --validate-only --------------------------------------------------------------

async def test_row5_reload_to_an_empty_file_or_other_ports_is_rejected_and_the_old_config_serves(
        tmp_path, nursery, backend, caplog):
    path = tmp_path / "gw.yaml"
    text = SIMPLE_YAML.format(port=free_port(), backend=backend.port)
    path.write_text(text)
    from trioproxy.config import load_config
    from trioproxy.frontend.server import reload_problems

    old = load_config(path)
    path.write_text("")
    assert reload_problems(old, load_config(path)) == [
        "binds: the new document has no binds (an empty or truncated file?)"]
    busy = free_port()
    path.write_text(SIMPLE_YAML.format(port=busy, backend=backend.port))
    assert "restart to listen on new ports" in reload_problems(old, load_config(path))[0]


def test_row5_a_reload_names_the_start_only_settings_it_cannot_apply(tmp_path):
    from trioproxy.config import load_config
    from trioproxy.frontend.server import restart_only_changes

    path = tmp_path / "gw.yaml"
    text = SIMPLE_YAML.format(port=8080, backend=1)
    path.write_text(text)
    old = load_config(path)
    assert restart_only_changes(old, load_config(path)) == []
    path.write_text("frontendPolicies: {http: {maxConnections: 5, requestHeaderTimeout: 3s, "
                    "http1IdleTimeout: 7s, requestBodyIdleTimeout: 9s}}\n" + text)
    assert restart_only_changes(old, load_config(path)) == [
        f"frontendPolicies.http.{name}: changed, but it is read at start; restart to apply it"
        for name in ("maxConnections", "requestHeaderTimeout", "http1IdleTimeout")]


async def test_row5_the_watcher_applies_such_a_reload_and_logs_what_waits_for_a_restart(
        tmp_path, mock_clock, caplog):
    from trioproxy.config import load_config
    from trioproxy.frontend.server import watch_config
    from trioproxy.proxy.runtime import Runtime

    mock_clock.autojump_threshold = 0
    path = tmp_path / "gw.yaml"
    text = SIMPLE_YAML.format(port=8080, backend=1)
    path.write_text(text)
    runtime = Runtime(load_config(path))
    with caplog.at_level(logging.WARNING, logger="trioproxy"):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch_config, path, runtime)
            await trio.sleep(2)
            path.write_text("frontendPolicies: {http: {maxConnections: 5, requestBodyIdleTimeout: 9s}}\n" + text)
            await trio.sleep(2)
            nursery.cancel_scope.cancel()
    assert runtime.state.config.frontend.body_idle_timeout == 9.0  # the rest is applied
    assert "frontendPolicies.http.maxConnections: changed, but it is read at start" in caplog.text
    assert "requestHeaderTimeout" not in caplog.text


def test_row5_validate_only_checks_that_each_port_can_be_bound(tmp_path):
    from tests.conftest import run_cli

    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        path = tmp_path / "gw.yaml"
        path.write_text(SIMPLE_YAML.format(port=port, backend=1))
        result = run_cli("--config", str(path), "--validate-only")
    assert result.returncode == 1
    assert f"binds[0].port: cannot listen on 0.0.0.0:{port}" in result.stderr
    assert "Traceback" not in result.stderr


SIMPLE_YAML = """binds:
- port: {port}
  listeners:
  - routes:
    - backends: [{{host: "127.0.0.1:{backend}"}}]
"""
