"""The README's configuration examples validate as written (a new user copies them first)."""

from __future__ import annotations

import re

import pytest

from trioproxy.config import parse_config

from .conftest import ROOT

README = (ROOT / "README.md").read_text()
BLOCKS = [block for block in re.findall(r"```yaml\n(.*?)```", README, re.S)
          if re.match(r"(#[^\n]*\n)*(config|binds):", block)]


def test_the_readme_has_a_full_configuration_example():
    assert any("binds:" in block and "routes:" in block for block in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_every_standalone_config_block_in_the_readme_validates(block):
    parse_config(block, env={"API_KEY": "sk-test"})
