"""docs/cli.md shows every command's ``--help`` as it is (it lacked ``status``, ``ratelimit-server``
and ``--workers``), says ``--config`` takes manifests, and gives the one error prefix."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT

CLI_MD = (ROOT / "docs" / "cli.md").read_text()
COMMANDS = [(), ("proxy", "trace"), ("requests",), ("replay",), ("keys",), ("keys", "create"), ("demo",), ("schema",), ("status",), ("idp", "setup"), ("ratelimit-server",)]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda argv: " ".join(argv) or "trioproxy")
def test_cli_md_shows_the_help_of(argv):
    shown = subprocess.run([sys.executable, "-m", "trioproxy", *argv, "--help"], cwd=ROOT, capture_output=True,
                           text=True, env={**os.environ, "COLUMNS": "80"}, check=True).stdout
    assert f"```text\n{shown}```" in CLI_MD, f"docs/cli.md: the help of `trioproxy {' '.join(argv)}` differs"
    if argv:
        assert f"\n## trioproxy {' '.join(argv)}\n" in CLI_MD


def test_every_subcommand_is_documented():
    top = subprocess.run([sys.executable, "-m", "trioproxy", "--help"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "COLUMNS": "80"}, check=True).stdout
    listed = top.split("positional arguments:", 1)[1].split("options:", 1)[0]
    names = {line.split()[0] for line in listed.splitlines() if re.match(r"^    [a-z]", line)}
    assert names == {"proxy", "trace", "requests", "replay", "keys", "demo", "schema", "status", "idp", "ratelimit-server"}
    assert names - {"proxy", "idp", "trace"} <= {argv[0] for argv in COMMANDS if argv}


def test_cli_md_gives_manifests_and_the_error_prefix():
    assert "manifest" in CLI_MD.split("```text")[0]
    assert "`trioproxy: error:`" in CLI_MD and "`trioproxy: warning:`" in CLI_MD
    assert "`trioproxy: error: ...`" in (ROOT / "README.md").read_text()
