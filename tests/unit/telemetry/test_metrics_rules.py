"""``telemetry/metrics.py`` in-process: the histograms' bisecting ``observe`` fills the buckets
prometheus-client's own loop fills, and ``Metrics.gen_ai`` makes each child on its first use only
(a child is a series in ``/metrics`` from then on) and observes into the one its labels name."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, Histogram

from trioproxy.telemetry.metrics import DURATION_BUCKETS, TOKEN_BUCKETS, Metrics, _Histogram

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
