"""The README's shell snippets run as written, from a fresh shell, and leave nothing behind.

A snippet that serves is started in a new bash (its own process group, as a terminal's foreground
job), given a request, then stopped as Ctrl-C stops it: SIGINT to the process group. Afterwards no
process of it may be left and none of its ports may listen: the example config's echo backend,
started with ``&``, once outlived Ctrl-C and then held port 8080, which the IdP walkthrough needs.

The quick start (``python3 -m venv .venv && ... pip install -e . && trioproxy demo``) installs
from the package index, so it runs only with ``TRIOPROXY_README_INSTALL=1`` (``.ci/run`` sets it).
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import shutil
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ROOT

FIXED_PORTS = (3000, 8080, 15000, 15020, 15021, 6379, 8081, 9091)

# Every ```sh block of the README, by its first line: how this test runs it, or why it does not.
QUICK_START = "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && trioproxy demo"
EXAMPLE_CONFIG = "(python -m fixtures.echo_backend --port 8080 & trap 'kill $!' EXIT; trioproxy --config fixtures/configs/local.yaml)"
RLS = "(redis-server --port 6379 & trap 'kill $!' EXIT"
IDP_START = "python -m fixtures.keycloak --port 8080 --realm demo"
IDP_SETUP = "trioproxy idp setup --idp-url http://localhost:8080 --realm demo --admin-user admin \\"
NOT_RUN = {
    "pip install -e '.[test]' && python -m pytest": "the test command itself: .ci/run runs it in a new venv",
    "curl -N -X POST 'localhost:15000/debug/trace?expression=request.path.startsWith(\"/v1\")'":
        "a request to a running gateway (tests/e2e/test_trace*.py)",
    "trioproxy proxy trace --local                        # watch: the next request from any client":
        "commands against a running gateway (tests/e2e/test_trace_cli*.py)",
    "TOKEN=$(curl -s http://localhost:8080/realms/demo/protocol/openid-connect/token -d grant_type=password \\":
        "needs the gateway of step 3 (tests/e2e/test_idp_walkthrough.py)",
}


def sh_snippets() -> list[str]:
    """The README's ```sh blocks, dedented (some sit inside a numbered list)."""
    blocks = re.findall(r"^( *)```sh\n(.*?)^\1```$", (ROOT / "README.md").read_text(), re.S | re.M)
    return ["\n".join(line[len(indent):] for line in body.splitlines()) for indent, body in blocks]


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _shim(tmp_path: Path) -> dict[str, str]:
    """A shell whose ``python`` and ``trioproxy`` are this checkout's (an activated venv's, in the README)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # a script, not a symlink: a symlinked venv python outside the venv's bin/ finds no pyvenv.cfg
    # and runs as the base interpreter, without the venv's packages
    python = bin_dir / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    trioproxy = bin_dir / "trioproxy"
    trioproxy.write_text(f'#!/bin/sh\nPYTHONPATH="{ROOT}" exec "{sys.executable}" -m trioproxy "$@"\n')
    trioproxy.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


class Terminal:
    """A fresh interactive bash on a pseudo-terminal, as a user has: Ctrl-C is the terminal's, so
    it reaches the foreground job only, never a job started with ``&``."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        pid, fd = pty.fork()
        if pid == 0:  # the child: a new session whose controlling terminal is the pty
            os.chdir(cwd)
            os.execve("/bin/bash", ["bash", "--norc", "--noprofile", "-i"], {**env, "PS1": "$ "})
        self.pid, self.fd = pid, fd
        self.output = bytearray()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        with contextlib.suppress(OSError):
            while chunk := os.read(self.fd, 65536):
                self.output += chunk

    def text(self) -> str:
        return self.output.decode(errors="replace")

    def type(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\n")

    def wait_listening(self, *ports: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not all(_listening(p) for p in ports):
            assert time.monotonic() < deadline, f"not listening on {ports}:\n{self.text()}"
            time.sleep(0.1)

    def others(self) -> dict[int, str]:
        """The processes of this terminal's session besides its shell: pid -> command line."""
        found = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            with contextlib.suppress(OSError):
                fields = stat.read_text().rsplit(")", 1)[1].split()
                if int(fields[3]) == self.pid and int(stat.parent.name) != self.pid:  # field 6: session
                    found[int(stat.parent.name)] = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        return found

    def ctrl_c(self) -> None:
        """Ctrl-C; then, once the command ended, nothing it started may be left."""
        os.write(self.fd, b"\x03")
        deadline = time.monotonic() + 30
        while self.others() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = self.others()
        assert not left, f"outlived Ctrl-C: {list(left.values())}\n{self.text()}"
        assert "Traceback" not in self.text(), self.text()

    def close(self) -> None:
        """Kill whatever is left (a failed test's), then the shell."""
        for pid in [*self.others(), self.pid]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _get(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


@pytest.fixture
def fixed_ports_free():
    busy = [p for p in FIXED_PORTS if _listening(p)]
    assert not busy, f"the README's ports are in use: {busy}"
    yield
    busy = [p for p in FIXED_PORTS if _listening(p)]
    assert not busy, f"left listening: {busy}"


def test_every_sh_snippet_is_run_here_or_says_why_not():
    known = {QUICK_START, EXAMPLE_CONFIG, RLS, IDP_START, IDP_SETUP, *NOT_RUN}
    unknown = [s for s in sh_snippets() if s.splitlines()[0] not in known]
    assert not unknown, "README snippets this test does not know (run them here, or add to NOT_RUN):\n" + "\n".join(unknown)


@pytest.fixture
def terminals(tmp_path):
    opened: list[Terminal] = []
    env = _shim(tmp_path)

    def open_terminal(cwd: Path = ROOT) -> Terminal:
        opened.append(Terminal(cwd, env))
        return opened[-1]

    yield open_terminal
    for terminal in opened:
        terminal.close()


def test_example_config_then_idp_walkthrough_leave_nothing_listening(fixed_ports_free, terminals):
    snippets = {s.splitlines()[0]: s for s in sh_snippets()}
    shell = terminals()
    shell.type(snippets[EXAMPLE_CONFIG])
    shell.wait_listening(3000, 8080)
    assert _get("http://127.0.0.1:3000/hello") == 200
    shell.ctrl_c()
    assert not _listening(8080), "port 8080 still held after Ctrl-C: the walkthrough's IdP cannot start"

    shell.type(snippets[IDP_START])
    shell.wait_listening(8080)
    other = terminals()
    other.type(snippets[IDP_SETUP] + "; echo setup-exit=$?")
    deadline = time.monotonic() + 60
    while "setup-exit=" not in other.text().replace("setup-exit=$?", "") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "setup-exit=0" in other.text() and "jwtAuth:" in other.text(), other.text()
    shell.ctrl_c()


def test_global_ratelimit_snippet_leaves_nothing_listening(fixed_ports_free, terminals, tmp_path):
    readme = (ROOT / "README.md").read_text()
    (tmp_path / "rls.yaml").write_text(re.search(r"```yaml\n(# rls.yaml.*?)```", readme, re.S).group(1))
    shell = terminals(tmp_path)
    shell.type([s for s in sh_snippets() if s.startswith(RLS)][0])
    shell.wait_listening(6379, 8081, 9091)
    shell.ctrl_c()


@pytest.mark.skipif(os.environ.get("TRIOPROXY_README_INSTALL") != "1",
                    reason="installs from the package index: set TRIOPROXY_README_INSTALL=1 (.ci/run does)")
def test_quick_start_installs_serves_and_stops_on_ctrl_c(fixed_ports_free, terminals, tmp_path):
    checkout = tmp_path / "trioproxy"
    shutil.copytree(ROOT, checkout, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".ci-venv", "__pycache__", "build", "*.egg-info", "test-artifacts", "mutants", "bench"))
    (snippet,) = [s for s in sh_snippets() if s.startswith(QUICK_START)]
    shell = terminals(checkout)
    shell.type(snippet)
    shell.wait_listening(3000, timeout=600)
    assert _get("http://127.0.0.1:3000/hello") == 200
    shell.ctrl_c()
