"""The ``trioproxy`` command as users run it: a subprocess, real ports, real signals."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap

import httpx
import pytest
import trio

from tests.conftest import LOOPBACK_SERVERS, ROOT, SIMPLE, free_port, run_cli, start_gateway


def write(tmp_path, text: str, name: str = "gw.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_validate_only_accepts_the_bundled_example():
    result = run_cli("--config", "fixtures/configs/local.yaml", "--validate-only")
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout


def test_validate_only_prints_every_problem_and_fails(tmp_path):
    path = write(tmp_path, """
        binds:
        - port: notaport
        - port: 3000
          listeners:
          - routes:
            - backends: [{host: nope}]
    """)
    result = run_cli("-f", path, "--validate-only")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        f"trioproxy: error: {path}:3:9: binds[0].port: expected an integer, got 'notaport'",
        f"trioproxy: error: {path}:7:25: binds[1].listeners[0].routes[0].backends[0].host: expected HOST:PORT, got 'nope'",
    ]
    assert "Traceback" not in result.stderr


def test_missing_config_file_and_missing_flag():
    missing = run_cli("--config", "/nonexistent/gw.yaml")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "trioproxy: error: /nonexistent/gw.yaml: cannot read config file: No such file or directory"
    no_flag = run_cli()
    assert no_flag.returncode == 2
    assert "--config FILE is required" in no_flag.stderr


def test_busy_port_is_one_line_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        path = write(tmp_path, f"binds:\n- port: {port}\n")
        result = run_cli("--config", path, env=LOOPBACK_SERVERS)
    assert result.returncode == 1
    assert result.stderr.strip() == f"trioproxy: error: binds[0].port: cannot listen on 0.0.0.0:{port}: Address already in use"


async def test_second_start_names_the_trioproxy_holding_the_port(tmp_path):
    """Running the quick start twice: the second one says who has the port, in one line."""
    port = free_port()
    path = write(tmp_path, f"binds:\n- port: {port}\n")
    first = subprocess.Popen([sys.executable, "-m", "trioproxy", "--config", path], cwd=ROOT, text=True,
                             stderr=subprocess.PIPE, env={**os.environ, **LOOPBACK_SERVERS})
    try:
        with trio.fail_after(20):
            await _wait_ports(first)
        second = run_cli("--config", path, env=LOOPBACK_SERVERS)
        assert second.returncode == 1
        assert second.stderr.strip().endswith(
            f"binds[0].port: cannot listen on 0.0.0.0:{port}: port in use by trioproxy (pid {first.pid})"), second.stderr
        assert second.stderr.count("\n") == 1
    finally:
        first.terminate()
        first.wait()


async def _wait_ports(proc: subprocess.Popen) -> dict[str, int]:
    """Read the startup lines (``... listening on http://HOST:PORT``) from stderr."""
    ports = {}
    while "readiness" not in ports:
        line = await trio.to_thread.run_sync(proc.stderr.readline)
        if not line:
            raise AssertionError("gateway exited before it was ready")
        found = re.match(r"trioproxy: (bind \d+|admin|stats|readiness) listening on http://[^:]+:(\d+)", line)
        if found:
            ports[found.group(1)] = int(found.group(2))
    return ports


async def test_sigterm_drains_the_request_in_flight_and_exits_0(tmp_path, backend):
    port = free_port()
    path = write(tmp_path, SIMPLE.format(port=port, backend=backend.port))
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "--config", path], cwd=ROOT, text=True,
                            stderr=subprocess.PIPE, env={**os.environ, **LOOPBACK_SERVERS})
    try:
        with trio.fail_after(20):
            ports = await _wait_ports(proc)
            assert ports[f"bind {port}"] == port
            results = {}

            async def slow() -> None:
                async with httpx.AsyncClient() as client:
                    results["slow"] = await client.get(f"http://127.0.0.1:{port}/slow?ms=700")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(slow)
                while backend.requests == 0:
                    await trio.sleep(0.01)
                proc.send_signal(signal.SIGTERM)
            code = await trio.to_thread.run_sync(proc.wait)
        assert results["slow"].status_code == 200
        assert code == 0
        rest = proc.stderr.read()
        assert "Traceback" not in rest
        messages = [json.loads(line)["message"] for line in rest.splitlines() if line.startswith("{")]
        assert messages == ["draining 1 requests", "request", "drained"], rest  # the slow one's access line
    finally:
        proc.kill()
        proc.wait()


async def test_a_second_signal_stops_at_once_without_waiting_for_the_drain(tmp_path, backend):
    port = free_port()
    path = write(tmp_path, SIMPLE.format(port=port, backend=backend.port))
    # A drain that would outlast the test: only the second signal can end the process in time.
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "--config", path, "--drain-timeout", "600"],
                            cwd=ROOT, text=True, stderr=subprocess.PIPE, env={**os.environ, **LOOPBACK_SERVERS})
    try:
        with trio.fail_after(20):
            await _wait_ports(proc)

            async def hang() -> None:
                async with httpx.AsyncClient(timeout=None) as client:
                    try:
                        await client.get(f"http://127.0.0.1:{port}/hang")
                    except httpx.HTTPError:
                        pass

            async with trio.open_nursery() as nursery:
                nursery.start_soon(hang)
                await backend.hang_started.wait()
                proc.send_signal(signal.SIGTERM)
                while "shutting down" not in await trio.to_thread.run_sync(proc.stderr.readline):
                    pass
                proc.send_signal(signal.SIGTERM)
                code = await trio.to_thread.run_sync(proc.wait)
                nursery.cancel_scope.cancel()
        assert code == 0
        assert "Traceback" not in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


async def test_reload_applies_a_valid_config_and_keeps_serving_on_an_invalid_one(tmp_path, nursery, backend):
    port = free_port()
    template = """
        binds:
        - port: {port}
          listeners:
          - routes:
            - matches: [{{path: {{pathPrefix: {prefix}}}}}]
              backends: [{{host: "127.0.0.1:{backend}"}}]
    """
    path = write(tmp_path, template.format(port=port, prefix="/old", backend=backend.port))
    gw = await start_gateway(nursery, template, config_path=path, port=port, prefix="/old", backend=backend.port)
    state = gw.info.runtime.state

    async def wait_for_new_state() -> None:
        nonlocal state
        with trio.fail_after(10):
            while gw.info.runtime.state is state:
                await trio.sleep(0.05)
        state = gw.info.runtime.state

    async with gw.client() as client:
        assert (await client.get("/old")).status_code == 200
        write(tmp_path, template.format(port=port, prefix="/new", backend=backend.port))
        await wait_for_new_state()
        assert (await client.get("/new")).status_code == 200
        assert (await client.get("/old")).status_code == 404
        write(tmp_path, "binds:\n- port: broken\n")
        with trio.fail_after(10):
            while not gw.info.runtime.reload_errors:
                await trio.sleep(0.05)
        assert gw.info.runtime.reload_errors == [f"{path}:2:9: binds[0].port: expected an integer, got 'broken'"]
        assert gw.info.runtime.state is state
        registry = gw.info.runtime.metrics.registry
        assert registry.get_sample_value("trioproxy_config_reloads_total", {"result": "rejected"}) == 1
        assert registry.get_sample_value("trioproxy_config_reloads_total", {"result": "applied"}) == 1
        assert registry.get_sample_value("trioproxy_config_synchronized") == 0
        assert (await client.get("/new")).status_code == 200


def test_admin_listens_on_loopback_by_default():
    """docs/cli.md: the unauthenticated admin server is reachable from this host only."""
    from trioproxy.config import parse_config
    from trioproxy.frontend.server import listen_socket

    admin = parse_config("binds: []", env={}).servers.admin
    assert (admin.host, admin.port) == ("localhost", 15000)
    sock = listen_socket(type(admin)(admin.host, 0), "config.adminAddr")  # same host, any free port
    try:
        assert sock.getsockname()[0] == "127.0.0.1"
    finally:
        sock.close()


@pytest.mark.parametrize("module", ["fixtures.echo_backend", "fixtures.mock_openai"])
def test_fixture_programs_busy_port_and_bad_flag_are_one_line(module):
    """A demo backend started twice, or with a typo, says so in one line: no traceback."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", module, "--port", str(port)], cwd=ROOT, capture_output=True,
                              text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in proc.stderr
    bad = subprocess.run([sys.executable, "-m", module, "--port", "abc"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "invalid int value" in bad.stderr


async def test_the_config_watcher_reloads_on_content_even_with_the_same_mtime(tmp_path, mock_clock):
    """Polling runs on virtual time; a rewrite that keeps size and mtime is still seen."""
    from pathlib import Path

    from trioproxy.config import load_config
    from trioproxy.frontend.server import watch_config
    from trioproxy.proxy.runtime import Runtime

    mock_clock.autojump_threshold = 0
    text = "binds:\n- port: 3001\n  listeners:\n  - routes:\n    - backends: [{{host: \"127.0.0.1:{port}\"}}]\n"
    path = Path(write(tmp_path, text.format(port=1)))
    stat = path.stat()
    runtime = Runtime(load_config(path))
    first = runtime.state
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_config, path, runtime)
        await trio.sleep(5)
        assert runtime.state is first  # nothing changed: nothing reloaded
        path.write_text(text.format(port=2))  # same size
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same mtime
        await trio.sleep(1.5)
        assert runtime.state is not first
        backend = runtime.state.config.binds[0].listeners[0].routes[0].backends[0]
        assert backend.target.port == 2
        path.write_text("binds: [")
        await trio.sleep(1.5)
        registry = runtime.metrics.registry
        assert registry.get_sample_value("trioproxy_config_reloads_total", {"result": "rejected"}) == 1
        assert runtime.state.config.binds[0].listeners[0].routes[0].backends[0].target.port == 2
        nursery.cancel_scope.cancel()


def test_a_gateway_process_does_not_load_what_only_other_commands_use():
    """RSS per process is a published figure (docs/reliability.md): the CEL package's own CLI
    (typer, rich, prompt_toolkit) and the ratelimit-server's protobuf messages stay out of it."""
    probe = ("import sys, trioproxy.cli.main, trioproxy.frontend.server\n"
             "from trioproxy.cel import compile_expression\n"
             "assert compile_expression('1 + 1').evaluate({}) == 2\n"
             "print(sorted({m.split('.')[0] for m in sys.modules} & {'typer', 'prompt_toolkit', 'grpc_health', 'google'}))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
