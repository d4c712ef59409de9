"""``telemetry/metrics.py`` in-process: the histograms' bisecting ``observe`` fills the buckets
prometheus-client's own loop fills, and ``Metrics.gen_ai`` makes each child on its first use only
(a child is a series in ``/metrics`` from then on) and observes into the one its labels name."""

from __future__ import annotations

import math
import platform
import re
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.metrics import MetricWrapperBase

from trioproxy.telemetry.metrics import (
    DURATION_BUCKETS,
    GEN_AI_DURATION_BUCKETS,
    TOKEN_BUCKETS,
    TPOT_BUCKETS,
    TTFT_BUCKETS,
    Metrics,
    _Histogram,
)
from trioproxy.version import __version__

ROOT = Path(__file__).resolve().parents[3]
LABELS = ("chat", "openai", "m", "m-001", "gw", "gw/bind/l", "ns/r")


def _samples(histogram: Histogram) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for metric in histogram.collect() for s in metric.samples]


@pytest.mark.parametrize("buckets", [TOKEN_BUCKETS, DURATION_BUCKETS])
def test_bisection_fills_the_buckets_prometheus_clients_loop_fills(buckets):
    ours = _Histogram("h", "h", ["k"], buckets=buckets, registry=CollectorRegistry())
    theirs = Histogram("h", "h", ["k"], buckets=buckets, registry=CollectorRegistry())
    amounts = [0, -1, 0.0005, math.inf, *buckets, *(b * 1.001 for b in buckets),
               *(b * 0.999 for b in buckets), 10**9]
    for amount in amounts:
        ours.labels("a").observe(amount)
        theirs.labels("a").observe(amount)
    assert _samples(ours) == _samples(theirs)
    ours.labels("a").observe(math.nan)  # no bucket, a NaN sum: as prometheus-client
    theirs.labels("a").observe(math.nan)
    assert [s[:2] for s in _samples(ours)] == [s[:2] for s in _samples(theirs)]
    assert [s[2] for s in _samples(ours) if s[0] != "h_sum"] == [s[2] for s in _samples(theirs) if s[0] != "h_sum"]
    with pytest.raises(ValueError, match="label"):  # the parent of labelled children is not observable
        ours.observe(1)
    ours.labels("e").observe(3, {"trace_id": "abc"})  # an exemplar: prometheus-client's own path
    assert ("h_count", {"k": "e"}, 1.0) in _samples(ours)


def _series(metrics: Metrics, name: str) -> dict[tuple[str, ...], float]:
    families = {f.name: f for f in metrics.registry.collect()}
    return {tuple(s.labels.values()): s.value for s in families[name].samples if s.name.endswith("_count")}


def test_gen_ai_makes_each_child_on_first_use_and_observes_by_labels():
    metrics = Metrics()
    tokens = (("input", 10), ("output", 5), ("cached_input", None), ("reasoning", None))
    metrics.gen_ai(LABELS, tokens, 0.3, None, 5)
    metrics.gen_ai(LABELS, tokens, 0.4, None, 5)
    other = (*LABELS[:3], "m-002", *LABELS[4:])
    metrics.gen_ai(other, (("input", 1), ("output", None), ("cached_input", 2), ("reasoning", None)), 0.1, 0.05, 9)
    usage = _series(metrics, "trioproxy_gen_ai_client_token_usage")
    assert usage == {("input", *LABELS): 2.0, ("output", *LABELS): 2.0, ("input", *other): 1.0,
                     ("cached_input", *other): 1.0}  # no series for a type never counted
    assert _series(metrics, "trioproxy_gen_ai_server_request_duration") == {LABELS: 2.0, other: 1.0}
    assert _series(metrics, "trioproxy_gen_ai_server_time_to_first_token") == {other: 1.0}  # streamed only
    assert _series(metrics, "trioproxy_gen_ai_server_time_per_output_token") == {other: 1.0}
    families = {f.name: f for f in metrics.registry.collect()}
    per_token = [s.value for s in families["trioproxy_gen_ai_server_time_per_output_token"].samples
                 if s.name.endswith("_sum")]
    assert per_token == [pytest.approx((0.1 - 0.05) / 8)]


def documented_metrics() -> dict[str, set[str]]:
    """docs/observability.md's metrics table: each metric name (as exposed: counters end in
    ``_total``) and its label names (the backticked names of its labels column, outside parentheses)."""
    text = (ROOT / "docs" / "observability.md").read_text()
    table = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    out: dict[str, set[str]] = {}
    for line in table.splitlines():
        if not line.startswith("| `"):
            continue
        names, labels = line.split(" | ")[:2]
        outside = re.sub(r"\([^()]*\)", "", re.sub(r"\([^()]*\)", "", labels))  # one level of nesting
        label_names = {name for quoted in re.findall(r"`([^`]+)`", outside) for name in quoted.split(", ")}
        for name in re.findall(r"`(trioproxy_[a-z_]+)`", names):
            out[name] = label_names
    return out


def test_every_metric_is_registered_and_documented_with_its_labels():
    """Dashboards and alerts are written against the names and labels docs/observability.md lists:
    each metric ``Metrics`` makes is in its registry and in that table, with the same labels."""
    metrics = Metrics()
    families = {family.name: family for family in metrics.registry.collect()}
    docs = documented_metrics()
    made = [value for value in vars(metrics).values() if isinstance(value, MetricWrapperBase)]
    assert len(made) == 20
    for metric in made:
        name = metric._name  # type: ignore[attr-defined]
        exposed = name + "_total" if metric._type == "counter" else name  # type: ignore[attr-defined]
        assert exposed in docs, f"{exposed} is not in docs/observability.md's metrics table"
        assert set(metric._labelnames) == docs[exposed], exposed  # type: ignore[attr-defined]
        assert families[name].type == metric._type and families[name].documentation  # type: ignore[attr-defined]
    assert len(families) == len(made)  # each registered once, in this registry


def _values(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in metrics.registry.collect() for s in family.samples}


def test_each_recording_method_counts_into_its_own_series():
    metrics = Metrics(open_upstream_connections=lambda: 7)
    request = ("8080", "gw", "l", "r", "b", "GET")
    metrics.observe(*request, 200, "", 0.003)
    metrics.observe(*request, 200, "", 0.2)  # the same child, from the cache
    metrics.observe(*request, 503, "BackendUnreachable", 0.001)
    metrics.upstream_error("8080", "r", "BackendUnreachable")
    metrics.ratelimit_decision("localRateLimit", "r", "allowed")
    metrics.ratelimit_decision("localRateLimit", "r", "allowed")
    metrics.ratelimit_decision("localRateLimit", "r", "rejected")
    metrics.cost("r", "openai", "gpt-4o", 0.25)
    metrics.cost("r", "openai", "gpt-4o", 0.5)
    metrics.requests_active = 3
    values = _values(metrics)
    labels = tuple(sorted(zip(("bind", "gateway", "listener", "route", "backend", "method"), request, strict=True)))

    def requests(status: str, reason: str) -> float:
        return values[("trioproxy_requests_total", tuple(sorted((*labels, ("status", status), ("reason", reason)))))]

    assert (requests("200", ""), requests("503", "BackendUnreachable")) == (2.0, 1.0)
    duration = tuple(sorted((*labels, ("status", "200"))))
    assert values[("trioproxy_request_duration_seconds_count", duration)] == 2.0
    assert values[("trioproxy_request_duration_seconds_sum", duration)] == pytest.approx(0.203)
    assert values[("trioproxy_request_duration_seconds_bucket", tuple(sorted((*duration, ("le", "0.005")))))] == 1.0
    assert values[("trioproxy_upstream_errors_total", (("bind", "8080"), ("reason", "BackendUnreachable"),
                                                       ("route", "r")))] == 1.0
    decisions = {dict(k[1])["result"]: v for k, v in values.items() if k[0] == "trioproxy_ratelimit_decisions_total"}
    assert decisions == {"allowed": 2.0, "rejected": 1.0}
    assert values[("trioproxy_gen_ai_cost_usd_total", (("model", "gpt-4o"), ("provider", "openai"),
                                                       ("route", "r")))] == 0.75
    assert values[("trioproxy_requests_in_flight", ())] == 3.0 and metrics.requests_in_flight() == 3
    assert values[("trioproxy_upstream_connections_open", ())] == 7.0


def test_a_new_metrics_starts_synchronized_idle_and_says_its_build():
    metrics = Metrics()
    values = _values(metrics)
    assert values[("trioproxy_config_synchronized", ())] == 1.0
    assert values[("trioproxy_requests_in_flight", ())] == 0.0 and values[("trioproxy_upstream_connections_open", ())] == 0.0
    [(labels, one)] = [(k[1], v) for k, v in values.items() if k[0] == "trioproxy_build_info"]
    assert one == 1.0 and dict(labels) == {"version": __version__, "python": platform.python_version()}
    assert values[("trioproxy_config_last_reload_success_timestamp_seconds", ())] == pytest.approx(time.time(), abs=5)


def test_a_rejected_reload_unsynchronizes_and_an_applied_one_restores(monkeypatch):
    metrics = Metrics()
    metrics.reload(False)
    values = _values(metrics)
    assert values[("trioproxy_config_synchronized", ())] == 0.0
    assert values[("trioproxy_config_reloads_total", (("result", "rejected"),))] == 1.0
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.0)
    metrics.reload(True)
    values = _values(metrics)
    assert values[("trioproxy_config_synchronized", ())] == 1.0
    assert values[("trioproxy_config_reloads_total", (("result", "applied"),))] == 1.0
    assert values[("trioproxy_config_last_reload_success_timestamp_seconds", ())] == 1_800_000_000.0
    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain; version=")  # the Prometheus text format
    assert b'trioproxy_config_reloads_total{result="applied"} 1.0\n' in body
    assert b"# HELP trioproxy_config_synchronized " in body and b"_created" not in body


def test_each_histogram_has_its_own_buckets():
    metrics = Metrics()
    expected = {
        "trioproxy_request_duration_seconds": DURATION_BUCKETS, "trioproxy_gen_ai_client_token_usage": TOKEN_BUCKETS,
        "trioproxy_gen_ai_server_request_duration": GEN_AI_DURATION_BUCKETS,
        "trioproxy_gen_ai_server_time_to_first_token": TTFT_BUCKETS,
        "trioproxy_gen_ai_server_time_per_output_token": TPOT_BUCKETS,
    }
    histograms = {m._name: m for m in vars(metrics).values() if isinstance(m, Histogram)}  # type: ignore[attr-defined]
    assert set(histograms) == set(expected)
    for name, histogram in histograms.items():
        assert histogram._upper_bounds == [*map(float, expected[name]), math.inf], name  # type: ignore[attr-defined]


@pytest.mark.parametrize("output_tokens, per_token", [(None, None), (0, None), (1, None), (2, 0.25), (5, 0.0625)])
def test_time_per_output_token_needs_two_tokens_after_a_first(output_tokens, per_token):
    metrics = Metrics()
    metrics.gen_ai(LABELS, (("output", output_tokens),), 0.5, 0.25, output_tokens)  # first token at 0.25 s of 0.5 s
    assert _series(metrics, "trioproxy_gen_ai_server_time_to_first_token") == {LABELS: 1.0}
    families = {f.name: f for f in metrics.registry.collect()}
    sums = [s.value for s in families["trioproxy_gen_ai_server_time_per_output_token"].samples if s.name.endswith("_sum")]
    assert sums == ([] if per_token is None else [per_token])


def test_the_children_the_request_path_changes_take_no_lock_and_keep_what_they_had():
    """``_unlocked``: a cached child's values are ``_Value``s (no lock per change), starting from
    what the child held, and the exposition reads them as before."""
    from trioproxy.telemetry.metrics import _unlocked, _Value

    metrics = Metrics()
    child = metrics.requests.labels("8080", "gw", "l", "r", "b", "GET", "200", "")
    child.inc(2)  # before it is cached: a locked value
    metrics.observe("8080", "gw", "l", "r", "b", "GET", 200, "", 0.003)
    assert type(child._value) is _Value and child._value.get() == 3.0
    histogram = metrics.duration.labels("8080", "gw", "l", "r", "b", "GET", "200")
    assert type(histogram._sum) is _Value and all(type(b) is _Value for b in histogram._buckets)
    metrics.ratelimit_decision("localRateLimit", "r", "allowed")
    assert type(metrics.ratelimit_decisions.labels("localRateLimit", "r", "allowed")._value) is _Value
    metrics.gen_ai(LABELS, (("input", 3),), 0.5, 0.1, 4)
    assert type(metrics.token_usage.labels("input", *LABELS)._sum) is _Value
    assert type(metrics.time_per_output_token.labels(*LABELS)._sum) is _Value
    metrics.cost("r", "openai", "m", 0.5)
    assert type(metrics.gen_ai_cost.labels("r", "openai", "m")._value) is _Value
    value = _unlocked(metrics.requests.labels("x", "gw", "l", "r", "b", "GET", "200", ""))._value
    value.set(5.0)
    value.set_exemplar("e")
    assert (value.get(), value.get_exemplar()) == (5.0, "e")
    assert b'trioproxy_requests_total{backend="b",bind="8080",gateway="gw",listener="l",method="GET",reason="",' \
           b'route="r",status="200"} 3.0' in metrics.exposition()[0]
