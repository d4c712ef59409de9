""".ci/run does what the README says, in a new ``python3 -m venv``, and a bare install is smoke-tested.

Installing into the interpreter's own site-packages hid what the README's commands miss in a fresh
venv (``wheel`` for the packaging test); installing only ``.[test]`` hid a runtime import that came
from the test extra. The smoke script itself runs in CI (it installs from the package index).
"""

from __future__ import annotations

import importlib.util
import inspect
import re

from tests.conftest import ROOT

CI = (ROOT / ".ci" / "run").read_text()
README = (ROOT / "README.md").read_text()


def _commands(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_the_readme_test_command_in_a_new_venv():
    lines = _commands(CI)
    venv = next(i for i, line in enumerate(lines) if re.match(r'python3 -m venv( --clear)? "?\$venv"?$', line))
    activate = next(i for i, line in enumerate(lines) if line.startswith(". ") and "bin/activate" in line)
    install = lines.index("python -m pip install -q -e '.[test]'")
    pytest_line = next(i for i, line in enumerate(lines) if "python -m pytest" in line)
    assert venv < activate < install < pytest_line
    assert "pip install -e '.[test]' && python -m pytest" in README
    assert 'python -m pytest -q -m "bench or not bench"' in lines[pytest_line]
    assert lines[0] == "set -euo pipefail"  # a failing step fails CI


def test_ci_runs_the_bare_install_smoke():
    assert "python3 scripts/bare_install_smoke.py" in _commands(CI)


def test_bare_install_smoke_runs_every_command_of_the_readme_table():
    spec = importlib.util.spec_from_file_location("bare_install_smoke", ROOT / "scripts" / "bare_install_smoke.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    steps = inspect.getsource(module.smoke)
    table = README.split("## Commands", 1)[1].split("\n\n", 2)[1]
    commands = re.findall(r"^\| `trioproxy ([^`]*)`", table, re.M)
    assert len(commands) >= 8
    for command in commands:
        word = command.split()[0]  # --config, proxy (trace), demo, schema, status, idp, ratelimit-server
        if word == "--config":
            word = "--validate-only" if "--validate-only" in command else "--config"
        if word == "proxy":
            word = "trace"
        assert f'"{word}"' in steps, f"scripts/bare_install_smoke.py does not run `trioproxy {command}`"
    assert '"--raw"' in steps and '"memory"' in steps and '"--help"' in steps
    assert "Traceback" in inspect.getsource(module.Smoke._check)
