"""Every command's failures start ``trioproxy: error:`` (the README's promise), one line each.

``--validate-only`` printed ``error: ProxyPolicy ... rejected``, ``status`` printed ``error: ...``
and argparse ``trioproxy status: error: ...`` after a usage block; ``status`` on a standalone config
printed ``[]`` after a warning about ``apiVersion=None``.
"""

from __future__ import annotations

import pytest

from tests.conftest import ROOT, run_cli

MANIFEST = ROOT / "fixtures" / "configs" / "manifests" / "local-llm.yaml"


@pytest.mark.parametrize("argv", [
    ["status"],
    ["status", "--config", "/nonexistent/m.yaml"],
    ["status", "--config", "fixtures/configs/local.yaml", "-o", "xml"],
    ["--bogus"],
    ["ratelimit-server"],
    ["idp", "setup", "--realm", "demo"],
    ["--config", "/nonexistent/gw.yaml", "--validate-only"],
])
def test_failures_are_one_trioproxy_error_line(argv):
    done = run_cli(*argv)
    assert done.returncode in (1, 2)
    assert done.stderr.startswith("trioproxy: error: ") and done.stderr.count("\n") == 1, done.stderr


def test_validate_only_names_a_rejected_resource_with_the_prefix(tmp_path):
    broken = tmp_path / "m.yaml"
    broken.write_text(MANIFEST.read_text().replace("{tokens: 5000, unit: Hours}", "{tokens: 5000, unit: Weeks}"))
    done = run_cli("--config", str(broken), "--validate-only")
    assert done.returncode == 1
    assert done.stderr.startswith("trioproxy: error: ProxyPolicy gateway-system/llm-limits rejected: ")


def test_status_warnings_have_the_prefix_too(tmp_path):
    broken = tmp_path / "m.yaml"
    broken.write_text(MANIFEST.read_text().replace("{tokens: 5000, unit: Hours}", "{tokens: 5000, unit: Weeks}"))
    done = run_cli("status", "--config", str(broken))
    assert done.returncode == 0
    assert done.stderr.startswith("trioproxy: warning: ProxyPolicy gateway-system/llm-limits rejected: ")


def test_status_of_a_standalone_config_says_it_is_not_a_manifest():
    done = run_cli("status", "--config", "fixtures/configs/local.yaml")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == (
        "trioproxy: error: fixtures/configs/local.yaml: not a manifest (no document has apiVersion and kind); "
        "status reads Gateway, HTTPRoute and ProxyPolicy resources. A standalone config: "
        "trioproxy --config fixtures/configs/local.yaml --validate-only\n")
