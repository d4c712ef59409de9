"""Smoke tests for bench/soak.py --short runs and reports no unexpected outcome."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def test_soak_short_has_no_unexpected_outcomes_and_no_traceback():
    done = subprocess.run([sys.executable, "-m", "bench.soak", "--short"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == 0, report
    assert report["unexpected"] == {} and report["tracebacks_in_log"] == 0
    assert report["outcomes"]["disconnect"]["cut"] > 0 and report["outcomes"]["limited"].get("429", 0) > 0



def test_llm_load_short_run_succeeds_through_trioproxy_and_direct():
    """The open-loop generator and the bench mock (keep-alive, usage in the answer) work end to end:
    every request answered 200 through the gateway and straight to the mock, and the table names both."""
    done = subprocess.run([sys.executable, "-m", "bench.llm_load", "--rate", "40", "--duration", "3",
                           "--compare", "direct", "--no-pin"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [(line["target"], line["requests"], line["success"]) for line in lines] == [
        ("trioproxy", 120, 100.0), ("direct", 120, 100.0)]
    assert lines[0]["client_connections"] < 90  # reused: ~60 in flight (1.5 s answers at 40/s)
    assert lines[0]["gateway_cpu_ms_per_request"] > 0 and lines[0]["p50_added_ms"] >= 0
    assert done.stdout.splitlines()[-2].startswith("| trioproxy")


def test_llm_load_gateway_gc_sets_the_collector_and_reports_its_pauses():
    """``--gateway-gc``: the gateway's collector runs as asked (bench/gc_probe) and the result line
    carries its pauses per generation: young collections run during the load under ``automatic``,
    none under ``off`` (both count the same startup collections). The full collection asked for
    after the load frees nothing: the requests served left no reference cycles (docs/reliability.md,
    "Pauses": why the gateway can run with the collector off)."""
    pauses = {}
    for mode in ("automatic", "off"):
        done = subprocess.run([sys.executable, "-m", "bench.llm_load", "--rate", "100", "--duration", "2", "--no-pin",
                               "--gateway-gc", mode], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        line = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
        assert line["success"] == 100.0
        pauses[mode] = line["gc_pauses"]
        assert all(len(v) == 3 and v[2] <= v[1] for v in pauses[mode].values())
        full = line["gc_full_after_load"]
        assert full["walked"] > 0 and full["freed"] == 0, full
    assert pauses["automatic"]["0"][0] > pauses["off"]["0"][0] + 10, pauses
    assert pauses["automatic"]["2"][0] == pauses["off"]["2"][0], pauses  # no full collection under load


def test_llm_load_with_workers_reports_per_process_rss_and_the_whole_trees_cpu():
    """``--workers 2``: RSS is the largest process's (the per-process target), the sum is beside
    it, and the CPU is the supervisor's and both workers' (not the supervisor's alone)."""
    done = subprocess.run([sys.executable, "-m", "bench.llm_load", "--rate", "40", "--duration", "3", "--workers", "2"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (line,) = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert (line["requests"], line["success"]) == (120, 100.0)
    assert line["rss_all_processes_mb"] > 2 * line["rss_mb"] > 0  # supervisor + two workers
    assert line["gateway_cpu_ms_per_request"] > 0.2  # the workers' CPU counted


def test_a_target_whose_mock_died_is_named_not_a_traceback():
    from bench.llm_load import Target, TargetDied

    target = Target.__new__(Target)  # no processes started: the mock is one that has already exited
    target.name, target.gateway, target.port = "direct", None, 1
    target.mock = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    target.mock.wait(30)
    target.mock.output_lines = ["llm-mock: too many open files\n"]
    with pytest.raises(TargetDied, match=r"direct: the mock exited with code 3; its last output: llm-mock: too many"):
        target.run(100, argparse.Namespace(duration=1, timeout=1))
