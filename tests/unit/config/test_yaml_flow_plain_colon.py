"""A ``:`` inside a plain scalar of a flow collection (``[{host: 127.0.0.1:8080}]``) is YAML 1.2,
read as PyYAML and agentgateway's serde_yaml read it; ruamel's C parser alone rejects it, so the
loader reads such a file again with ruamel's pure-Python parser (trioproxy/config/loader.py)."""

from __future__ import annotations

import re
import textwrap

import pytest

from tests.conftest import ROOT
from trioproxy.config import ConfigError, parse_config
from trioproxy.config.model import Address

FLOW = "binds: [{port: 3000, listeners: [{routes: [{backends: [{host: 127.0.0.1:8080}]}]}]}]\n"


def test_a_host_port_in_a_flow_mapping_is_one_plain_scalar():
    config = parse_config(FLOW)
    assert config.binds[0].listeners[0].routes[0].backends[0].target == Address("127.0.0.1", 8080)


def test_the_readmes_indented_config_blocks_validate():
    """Blocks inside a numbered step (the IdP walkthrough's step 3) are indented; tests/repo/test_readme.py
    reads only the ones at the margin."""
    readme = (ROOT / "README.md").read_text()
    blocks = [textwrap.dedent(block) for indent, block in re.findall(r"\n( +)```yaml\n(.*?)\n\1```", readme, re.S)]
    configs = [block for block in blocks if re.match(r"(#[^\n]*\n)*binds:", block)]
    assert any("backends: [{host: 127.0.0.1:8081}]" in block for block in configs)  # IdP step 3
    for block in configs:
        parse_config(block)


def test_a_later_problem_in_such_a_file_still_names_its_line_and_column():
    text = "binds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends: [{host: 127.0.0.1:8080, wieght: 2}]\n"
    with pytest.raises(ConfigError) as error:
        parse_config(text)
    assert error.value.problems[0].startswith("<config>:5:")
    assert "wieght" in error.value.problems[0]


@pytest.mark.parametrize(("text", "message"), [
    ("binds:\n- port: [1\n", "<config>:3:1: invalid YAML: did not find expected ',' or ']'"),
    ("binds: [{host: a:b, c}\n", "<config>:2:1: invalid YAML:"),
])
def test_yaml_that_neither_parser_reads_is_still_one_positioned_line(text, message):
    with pytest.raises(ConfigError) as error:
        parse_config(text)
    assert len(error.value.problems) == 1
    assert error.value.problems[0].startswith(message)
