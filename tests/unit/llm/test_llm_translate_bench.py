"""bench/llm_translate.py runs (a few iterations) and reports every case, streamed and not."""

from __future__ import annotations

import json

from bench import llm_translate


def test_bench_reports_each_case_beside_passthrough(tmp_path, capsys):
    out = tmp_path / "report.json"
    assert llm_translate.main(["--iterations", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["case"], r["streamed"]) for r in rows} == {
        (case, streamed) for case in ("openai -> anthropic", "openai -> gemini", "openai -> bedrock",
                                      "anthropic -> openai") for streamed in (False, True)}
    assert all(r["translated_us"] > 0 and r["passthrough_us"] > 0 for r in rows)
    assert "| openai -> bedrock | yes |" in capsys.readouterr().out
