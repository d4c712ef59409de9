"""Smoke test of bench/keys_bench.py (issue 30's bench): its --quick run works.

No timing assertions: the script itself fails unless every variant answered only 200s (wrk's
non-2xx count), a keyed variant refused a request without its key (401), and each runtime-key
variant's requests (and, with budgets, their cost) showed up in GET /api/spend.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from tests.e2e.test_bench_smoke import NGINX, run_quick
from tests.postgres_helpers import find_bin_dir

pytestmark = [
    pytest.mark.bench,  # deselected by default (pyproject addopts); .ci/run selects it
    pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk not installed (apt-get install wrk)"),
    pytest.mark.skipif(NGINX is None, reason="nginx not installed (apt-get install nginx)"),  # the shared tool check
    pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset not installed"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

VARIANTS = ("no-key", "static-key", "runtime-key", "runtime-budget")


def test_quick_keys_bench_prints_every_variant_and_checks_spend(tmp_path: Path) -> None:
    lines = run_quick("keys_bench.py", tmp_path / "keys.json")
    stdout = "\n".join(lines)
    assert any(line.startswith("| variant") and "CPU ms/req" in line and "+p50 ms" in line for line in lines), stdout
    with_pg = find_bin_dir() is not None
    if not with_pg and os.environ.get("CI"):
        pytest.fail("PostgreSQL is not installed (.ci/run installs it)")
    for variant in (*VARIANTS, "direct") + (("runtime-budget-pg",) if with_pg else ()):
        assert sum(line.startswith(f"| {variant} ") for line in lines) == 2, (variant, stdout)  # 20 and 1 conns
    for variant in ("runtime-key", "runtime-budget") + (("runtime-budget-pg",) if with_pg else ()):
        assert any(line.startswith(f"check: {variant}: /api/spend shows ") for line in lines), (variant, stdout)
    if not with_pg:
        assert any("runtime-budget-pg skipped" in line for line in lines), stdout
