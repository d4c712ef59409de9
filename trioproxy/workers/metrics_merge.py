"""``/metrics`` of a supervisor: its own families plus the sum of every worker's.

"Equivalent" to prometheus-client's multiprocess mode, chosen because that mode switches the
whole process to file-backed values at import and drops ``Gauge.set_function`` (used for open
connections): it would change the single-process gateway too. Here each worker keeps its
in-memory registry, the supervisor asks every worker for its exposition when scraped (one
local round trip per worker per scrape, never per request) and adds samples with equal names
and labels. Counters of a worker that died restart from 0 with its replacement, which
Prometheus' ``rate()`` reads as a counter reset.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

#: families only the supervisor knows the truth of (the config is loaded and reloaded there)
SUPERVISOR_ONLY = frozenset({
    "trioproxy_build_info", "trioproxy_config_synchronized",
    "trioproxy_config_last_reload_success_timestamp_seconds", "trioproxy_config_reloads",
})


class _Merged(Collector):
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def merge(supervisor: bytes, workers: Iterable[tuple[int, bytes]]) -> bytes:
    """One exposition: the supervisor's families, plus every worker's summed by (sample name, labels),
    plus ``trioproxy_worker_requests_total{worker}`` (how evenly the kernel spreads connections)."""
    order: list[str] = []
    per_worker: dict[int, float] = {}
    families: dict[str, Metric] = {}
    values: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}

    def add(text: bytes, worker: int | None) -> None:
        for family in text_string_to_metric_families(text.decode()):
            if worker is not None and family.name in SUPERVISOR_ONLY:
                continue
            if family.name not in families:
                order.append(family.name)
                families[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
                values[family.name] = {}
            samples = values[family.name]
            for sample in family.samples:
                key = (sample.name, tuple(sample.labels.items()))
                samples[key] = samples.get(key, 0.0) + sample.value
                if worker is not None and sample.name == "trioproxy_requests_total":
                    per_worker[worker] = per_worker.get(worker, 0.0) + sample.value

    add(supervisor, None)
    for index, text in workers:
        per_worker.setdefault(index, 0.0)
        add(text, index)
    out = []
    for name in order:
        metric = families[name]
        for (sample_name, labels), value in values[name].items():
            metric.add_sample(sample_name, dict(labels), value)
        out.append(metric)
    spread = Metric("trioproxy_worker_requests", "Requests handled by each worker process now running.", "counter")
    for index, total in sorted(per_worker.items()):
        spread.add_sample("trioproxy_worker_requests_total", {"worker": str(index)}, total)
    out.append(spread)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Merged(out))
    return generate_latest(registry)
