"""Smoke tests for bench/proxy_compare.py, proxy_ab.py, policy_overhead.py, jwt_overhead.py, tls_compare.py and
trio_costs.py (their --quick runs work), and llm_callgrind.py's --without (through --cpu: no valgrind).

No timing assertions: only that the scripts run, clean up and print their tables.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.access("/usr/sbin/nginx", os.X_OK) else None)

pytestmark = [
    pytest.mark.bench,  # deselected by default (pyproject addopts); .ci/run selects it
    pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk not installed (apt-get install wrk)"),
    pytest.mark.skipif(NGINX is None, reason="nginx not installed (apt-get install nginx)"),
    pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset not installed"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]


def run_quick(script: str, out_json: Path, *extra: str) -> list[str]:
    """Run ``bench/<script> --quick [extra...]``; it must exit 0. Returns its stdout lines."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # Its own session: on a timeout the whole tree (gateways, nginx, wrk) is stopped, never left behind.
    proc = subprocess.Popen([sys.executable, "-m", f"bench.{script.removesuffix('.py')}", "--quick", "--json", str(out_json), *extra],
                            cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # the bench's own handler cleans up its workspace
        try:
            stdout, stderr = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        raise AssertionError(f"bench/{script} --quick took over 180 s\nstdout:\n{stdout}\nstderr:\n{stderr}") from None
    assert proc.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr}"
    assert out_json.exists()
    return stdout.splitlines()


def test_quick_bench_prints_a_table_with_trioproxy(tmp_path: Path) -> None:
    lines = run_quick("proxy_compare.py", tmp_path / "last.json")
    stdout = "\n".join(lines)
    assert any(line.startswith("| target") and "req/s" in line and "CPU ms/req" in line for line in lines), stdout
    rows = [line for line in lines if line.startswith("| trioproxy ")]
    assert len(rows) == 2, stdout  # N connections and 1 connection
    assert any(line.startswith("| direct ") for line in lines), stdout


def test_quick_proxy_ab_prints_both_routes_for_both_trees(tmp_path: Path) -> None:
    """bench/proxy_ab.py --quick, this checkout against itself: four gateways, one round each."""
    lines = run_quick("proxy_ab.py", tmp_path / "ab.json", "--against", str(ROOT))
    stdout = "\n".join(lines)
    rows = [line for line in lines if line.startswith(("| plain ", "| ai "))]
    assert len(rows) == 2 and all(line.count("|") == 7 for line in rows), stdout
    assert set(json.loads((tmp_path / "ab.json").read_text())["cpu_ms_per_req"]) == {
        "this-plain", "this-ai", "against-plain", "against-ai"}


def test_quick_policy_overhead_prints_every_variant(tmp_path: Path) -> None:
    """bench/policy_overhead.py --quick: 6 trioproxy variants (limiter, token limiter, idle tracing,
    SSE pass-through), 1 s each, one run. Only that it works and prints the rows, no timings."""
    lines = run_quick("policy_overhead.py", tmp_path / "policy.json")
    stdout = "\n".join(lines)
    heads = [line for line in lines if line.startswith("| variant") and "CPU ms/req" in line and "req/s" in line]
    assert len(heads) == 2, stdout  # the policy table and the SSE table
    for variant in ("plain", "limited", "token-limited", "tracing-idle", "sse-unlimited", "sse-token-limited"):
        assert sum(line.startswith(f"| {variant} ") for line in lines) == 1, (variant, stdout)
    assert any(line.startswith("token-limited vs plain:") for line in lines), stdout
    assert any(line.startswith("sse-token-limited vs sse-unlimited:") for line in lines), stdout


def test_quick_jwt_overhead_prints_both_parts(tmp_path: Path) -> None:
    """bench/jwt_overhead.py --quick: plain vs RS256 jwtAuth through the gateway, and the verify timings."""
    lines = run_quick("jwt_overhead.py", tmp_path / "jwt.json")
    stdout = "\n".join(lines)
    for variant in ("plain", "jwt"):
        assert sum(line.startswith(f"| {variant} ") for line in lines) == 1, (variant, stdout)
    assert any(line.startswith("jwt (RS256, cached) vs plain:") for line in lines), stdout
    assert sum("whole jwtAuth stage, cached token" in line for line in lines) == 3, stdout


def test_quick_tls_compare_prints_plain_and_tls(tmp_path: Path) -> None:
    """bench/tls_compare.py --quick: trioproxy to the backend over HTTP and over verified HTTPS."""
    lines = run_quick("tls_compare.py", tmp_path / "tls.json")
    stdout = "\n".join(lines)
    for variant in ("trioproxy-plain", "trioproxy-tls"):
        assert sum(line.startswith(f"| {variant} ") for line in lines) == 2, (variant, stdout)
    assert any(line.startswith("trioproxy @1 conns: TLS to the backend costs") for line in lines), stdout


def _run_bench(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_quick_trio_costs_prints_each_primitive() -> None:
    done = _run_bench("bench.trio_costs", "--quick")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "µs" not in line]
    assert [row.split("|")[1].strip() for row in rows] == [
        "CancelScope() entered and left", "CancelScope(deadline=...) entered and left",
        "an entered scope's deadline set and reset", "FdDeadlines.arm + disarm", "trio.current_time()"]
    assert all(float(row.split("|")[2]) > 0 for row in rows)


def test_llm_callgrind_leaves_out_what_without_names_and_only_with_as_compare() -> None:
    done = _run_bench("bench.llm_callgrind", "--cpu", "--as-compare", "--without", "log,rewrite", "--requests", "20")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("llm ") and " us" in done.stdout
    refused = _run_bench("bench.llm_callgrind", "--without", "log")
    assert refused.returncode == 2 and "--without takes limit, log, rewrite, with --as-compare" in refused.stderr
    unknown = _run_bench("bench.llm_callgrind", "--as-compare", "--without", "trace")
    assert unknown.returncode == 2
