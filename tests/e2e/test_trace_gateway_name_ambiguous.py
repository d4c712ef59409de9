"""``trioproxy trace gateway/NAME`` with two live gateways of that name (every standalone config
serves ``default``): an error listing both, never a silent attach to one of them."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.admin_helpers import GatewayProcess
from tests.conftest import ROOT


def _trace(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trioproxy", "trace", *args], cwd=ROOT, capture_output=True,
                          text=True, env=env, timeout=30)


def test_two_gateways_named_default_are_listed_not_guessed(tmp_path):
    (tmp_path / "a" / "runtime").mkdir(parents=True)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "runtime").symlink_to(tmp_path / "a" / "runtime")  # one registry for both
    first = GatewayProcess(tmp_path / "a")
    try:
        second = GatewayProcess(tmp_path / "b")
        try:
            # A stale entry (a pid that has exited) must not count as a third.
            dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                                  text=True, check=True)
            pid = int(dead.stdout)
            (tmp_path / "a" / "runtime" / f"{pid}.json").write_text(
                json.dumps({"pid": pid, "gateways": ["default"], "admin": "127.0.0.1:1"}))

            result = _trace(first.env, "gateway/default", "--raw")
            assert result.returncode == 1, result.stdout
            err = result.stderr
            assert err.startswith("trioproxy: error: 2 running trioproxy processes serve gateway/default")
            assert "Traceback" not in err
            for gw in (first, second):
                pid_of = gw.procs[1].pid
                assert any(f"pid {pid_of}" in line and f"admin 127.0.0.1:{gw.admin_port}" in line
                           and "gateway/default" in line for line in err.splitlines()), err
            assert "127.0.0.1:1" not in err
        finally:
            second.close()
        # With one left, the name is unambiguous again: the trace attaches to it.
        result = _trace(first.env, "gateway/default", "--raw", "--port", str(first.port), "--",
                        "http://svc.local/only-one")
        assert result.returncode == 0, result.stderr
        assert any('"/only-one"' in line for line in result.stdout.splitlines())
    finally:
        first.close()
