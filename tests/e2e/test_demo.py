"""``trioproxy demo``: the quick start's one command, as a new user runs it (a real process)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys

import httpx
import trio

from tests.conftest import LOOPBACK_SERVERS, ROOT, free_port


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


async def test_demo_serves_echo_and_llm_then_ctrl_c_leaves_nothing_listening():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "demo", "--port", str(port)], cwd=ROOT, text=True,
                            stderr=subprocess.PIPE, env={**os.environ, **LOOPBACK_SERVERS})
    try:
        lines = []
        with trio.fail_after(30):
            while not any("readiness listening" in line for line in lines):
                line = await trio.to_thread.run_sync(proc.stderr.readline)
                assert line, "".join(lines)
                lines.append(line)
        text = "".join(lines)
        backend_port = int(re.search(r"demo backend on http://127.0.0.1:(\d+)", text).group(1))
        admin_port = int(re.search(r"admin listening on http://127.0.0.1:(\d+)", text).group(1))
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            echo = await client.get("/hello", params={"q": "1"})
            assert echo.status_code == 200 and echo.json()["path"] == "/hello"
            assert echo.headers["x-ratelimit-limit"] == "5"
            chat = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
            assert chat.status_code == 200 and chat.json()["usage"]["total_tokens"] > 0
            assert chat.json()["choices"][0]["message"]["content"] == "You said: hi"
        proc.send_signal(signal.SIGINT)
        code = await trio.to_thread.run_sync(proc.wait, 30)
        assert code == 0
        assert "Traceback" not in proc.stderr.read()
        assert _refused(port) and _refused(backend_port) and _refused(admin_port)
    finally:
        proc.kill()
        proc.wait()


def test_demo_on_a_busy_port_is_one_line():
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "trioproxy", "demo", "--port", str(port)], cwd=ROOT,
                              capture_output=True, text=True, timeout=60, env={**os.environ, **LOOPBACK_SERVERS})
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == \
        f"trioproxy: error: binds[0].port: cannot listen on 0.0.0.0:{port}: Address already in use"
    assert "Traceback" not in proc.stderr
