"""Smoke tests for bench/soak.py --short runs and reports no unexpected outcome."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT


def test_soak_short_has_no_unexpected_outcomes_and_no_traceback():
    done = subprocess.run([sys.executable, "-m", "bench.soak", "--short"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0, report
    assert report["unexpected"] == {} and report["tracebacks_in_log"] == 0
    assert report["outcomes"]["disconnect"]["cut"] > 0 and report["outcomes"]["limited"].get("429", 0) > 0

