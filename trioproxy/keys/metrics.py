"""Prometheus metrics of runtime keys (docs/keys.md, "Metrics"): what each key and team spent, and
how much of each budget is left.

The counters grow as requests settle (no I/O). ``trioproxy_budget_remaining`` is read from a
snapshot of the store's counters for every key and team with limits, taken every
``SNAPSHOT_INTERVAL`` seconds by ``snapshots`` (one store read for all of them), never at scrape
time: a scrape must not wait on the database. Replicas report the same remaining budget (the store
is shared); the counters are per process, so sum them across replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import trio
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from .service import KeyService

__all__ = ["SNAPSHOT_INTERVAL", "KeysMetrics"]

log = logging.getLogger("trioproxy.keys")

SNAPSHOT_INTERVAL = 2.0


class KeysMetrics:
    """The key metrics of one process, registered once in its registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["key", "team"]
        self.requests = Counter("trioproxy_key_requests", "Requests settled against a runtime key.",
                                labels, registry=registry)
        self.tokens = Counter("trioproxy_key_tokens", "LLM tokens (input and output) used by a runtime key.",
                              labels, registry=registry)
        self.spend = Counter("trioproxy_key_spend_usd", "USD spent by a runtime key, by model (price catalog).",
                             [*labels, "model"], registry=registry)
        #: (subject kind, id, name, metric, window, limit, used, reserved) of the last snapshot
        self.budgets: list[tuple[str, str, str, str, str, float, float, float]] = []
        registry.register(_BudgetCollector(self))

    def settled(self, key: str, team: str, model: str, tokens: int, cost: float) -> None:
        self.requests.labels(key, team).inc()
        if tokens:
            self.tokens.labels(key, team).inc(tokens)
        if cost:
            self.spend.labels(key, team, model).inc(cost)

    async def snapshot(self, service: KeyService) -> None:
        """The remaining budgets of every cached key and team with limits, from one store read."""
        keys = [k for k in service.cached_keys() if k.limits]
        teams = [t for t in service.cached_teams() if t.limits]
        subjects = [("key", k.id, k.name, k.limits) for k in keys] + [("team", t.id, t.name, t.limits) for t in teams]
        usages = await service.usage((f"{kind}:{ident}", limits) for kind, ident, _, limits in subjects)
        budgets = []
        for (kind, ident, name, _), usage in zip(subjects, usages):
            for metric, windows in usage.items():
                for window, values in windows.items():
                    budgets.append((kind, ident, name, metric, window, float(values["limit"]),
                                    float(values["used"]), float(values["reserved"])))
        self.budgets = budgets

    async def snapshots(self, service: KeyService, interval: float = SNAPSHOT_INTERVAL) -> None:
        """``snapshot`` every ``interval`` seconds while the service runs; a store that is down
        leaves the last snapshot in place (the service logs the outage)."""
        while True:
            try:
                await self.snapshot(service)
            except Exception as error:  # KeyStoreUnavailable and the like: keep the last numbers
                log.debug("budget snapshot failed: %s", error)
            await trio.sleep(interval)


class _BudgetCollector:
    """``trioproxy_budget_remaining`` and ``trioproxy_budget_limit`` from the last snapshot."""

    def __init__(self, metrics: KeysMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # registered before the first snapshot: nothing to check names against

    def collect(self) -> Iterator[Metric]:
        labels = ["subject", "id", "name", "metric", "window"]
        remaining = GaugeMetricFamily("trioproxy_budget_remaining",
                                      "What is left of a runtime key's or team's limit in its current window "
                                      "(limit - used - reserved; requests, tokens or USD).", labels=labels)
        limit = GaugeMetricFamily("trioproxy_budget_limit", "A runtime key's or team's limit.", labels=labels)
        for kind, ident, name, metric, window, cap, used, reserved in self.metrics.budgets:
            values: Any = [kind, ident, name, metric, window]
            remaining.add_metric(values, max(cap - used - reserved, 0.0))
            limit.add_metric(values, cap)
        yield remaining
        yield limit
