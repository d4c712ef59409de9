"""The README quick start, run as a new user runs it: a fresh venv, its one command, Ctrl-C.

The install is real (``python -m venv`` + ``pip install -e``; PyPI or a local wheel cache must be
reachable, as for any install), so this is the slowest test of the suite (~40 s).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess

import httpx
import pytest
import trio

from tests.conftest import LOOPBACK_SERVERS, ROOT, free_port

README = (ROOT / "README.md").read_text()


def _quick_start_command() -> str:
    section = README[README.index("## Quick start"):]
    return re.search(r"```sh\n(python3 -m venv [^\n]+)\n```", section).group(1)


def test_the_quick_start_is_one_command_with_a_venv_and_the_demo():
    command = _quick_start_command()
    assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && pip install -e .")
    assert command.endswith("&& trioproxy demo")


@pytest.mark.skipif(os.environ.get("TRIOPROXY_SKIP_VENV_TEST") == "1", reason="TRIOPROXY_SKIP_VENV_TEST=1")
async def test_quick_start_in_a_fresh_venv_then_ctrl_c_leaves_no_process(tmp_path):
    venv = tmp_path / "venv"
    install = _quick_start_command().replace(" && trioproxy demo", "").replace(".venv", str(venv))
    install = install.replace("pip install -e .", f"pip install -q -e {ROOT}")
    done = await trio.to_thread.run_sync(lambda: subprocess.run(
        ["bash", "-c", install], cwd=tmp_path, capture_output=True, text=True, timeout=600))
    assert done.returncode == 0, done.stderr[-2000:]
    port = free_port()
    env = {**os.environ, **LOOPBACK_SERVERS, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}"}
    proc = subprocess.Popen(["bash", "-c", f". {venv}/bin/activate && exec trioproxy demo --port {port}"],
                            cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        lines: list[str] = []
        with trio.fail_after(60):
            while not any("readiness listening" in line for line in lines):
                line = await trio.to_thread.run_sync(proc.stderr.readline)
                assert line, "".join(lines)
                lines.append(line)
        async with httpx.AsyncClient(timeout=10) as client:
            assert (await client.get(f"http://127.0.0.1:{port}/hello")).status_code == 200
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole foreground process group
        assert await trio.to_thread.run_sync(proc.wait, 30) == 0
        with socket.socket() as sock:
            assert sock.connect_ex(("127.0.0.1", port)) != 0
        survivors = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True)
        assert survivors.stdout == "", "processes left behind: " + survivors.stdout
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
