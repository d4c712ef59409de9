"""The README's configuration examples validate as written (a new user copies them first)."""

from __future__ import annotations

import re

import pytest

from tests.conftest import ROOT
from trioproxy.config import parse_config

README = (ROOT / "README.md").read_text()
BLOCKS = [block for block in re.findall(r"```yaml\n(.*?)```", README, re.S)
          if re.match(r"(#[^\n]*\n)*(config|binds|llm):", block)]


def test_the_readme_has_a_full_configuration_example():
    assert any("binds:" in block and "routes:" in block for block in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_standalone_config_block_in_the_readme_validates(block):
    parse_config(block, env={"API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"})


def test_constraints_pin_every_direct_dependency_and_a_safe_h11():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    for requirement in [*project["dependencies"], *project["optional-dependencies"]["test"]]:
        name = re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pins, f"{name} is not pinned in constraints.txt (python scripts/update_constraints.py)"
    assert tuple(int(p) for p in pins["h11"].split(".")[:2]) >= (0, 16)
