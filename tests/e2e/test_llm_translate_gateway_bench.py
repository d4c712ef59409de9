"""bench/llm_translate_gateway.py's --quick run works: a gateway and both provider mocks start, every
case (passthrough and translated, streamed and not) is measured, the table is printed, nothing is left
running. No timing assertions."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench import llm_translate_gateway

pytestmark = [
    pytest.mark.bench,  # deselected by default (pyproject addopts); .ci/run selects it
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


def test_quick_run_reports_each_case_beside_passthrough(tmp_path: Path, capsys) -> None:
    out = tmp_path / "report.json"
    assert llm_translate_gateway.main(["--quick", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["case"], r["streamed"]) for r in rows} == {
        (case, streamed) for case in ("anthropic", "openai -> anthropic", "openai", "anthropic -> openai")
        for streamed in (False, True)}
    assert all(r["requests"] == 40 and r["rps"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0 for r in rows)
    assert "| openai -> anthropic | yes |" in capsys.readouterr().out
