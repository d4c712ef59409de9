"""Load balancing among the targets a request may go to (docs/resilience.md, "Balancing").

- ``weighted``: a target at random in proportion to its weight (the route's ``weight``s).
- ``leastRequest``: power of two choices: two distinct targets drawn by weight, the one with the
  lower cost wins; cost = (peak-EWMA latency + 1 ms) × (requests in flight + 1), as Finagle's and
  Helicone's P2C + PeakEWMA. The latency average jumps up to a slower sample at once (peak) and
  moves toward a faster one by ``1 - exp(-dt/decay)``; and it **fades with time** when the target is
  not used (× ``exp(-idle/decay)``), so a target that was slow once is tried again later rather
  than starved forever.

The random source is injected (``random.Random``), so a test can make every pick deterministic.
State per target key lives in ``Balancer.loads`` across config reloads.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Sequence
from itertools import accumulate

__all__ = ["Balancer", "TargetLoad"]

#: added to every latency, so an unknown (0) latency still counts requests in flight
LATENCY_FLOOR = 0.001


class TargetLoad:
    """Requests in flight and the peak-EWMA latency (seconds) of one target."""

    __slots__ = ("ewma", "in_flight", "stamp")

    def __init__(self) -> None:
        self.in_flight = 0
        self.ewma = 0.0
        self.stamp = 0.0

    def latency(self, now: float, decay: float) -> float:
        """The average as of ``now``: faded by the time since it was last fed."""
        idle = now - self.stamp
        return self.ewma * math.exp(-idle / decay) if idle > 0 else self.ewma

    def observe(self, now: float, seconds: float, decay: float) -> None:
        current = self.latency(now, decay)
        if seconds >= current:
            self.ewma = seconds  # peak: a slower answer counts at once
        else:
            w = math.exp(-max(0.0, now - self.stamp) / decay)
            self.ewma = current * w + seconds * (1.0 - w)
        self.stamp = now

    def cost(self, now: float, decay: float) -> float:
        return (self.latency(now, decay) + LATENCY_FLOOR) * (self.in_flight + 1)


class Balancer:
    """Picks among candidate targets; keeps their load (``start``/``finish`` around each call)."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.rng = rng if rng is not None else random.Random()
        self.loads: dict[str, TargetLoad] = {}

    def load(self, key: str) -> TargetLoad:
        load = self.loads.get(key)
        if load is None:
            load = self.loads[key] = TargetLoad()
        return load

    def _by_weight(self, weights: Sequence[int], exclude: int = -1) -> int:
        cumulative = list(accumulate(0 if i == exclude else max(w, 0) for i, w in enumerate(weights)))
        total = cumulative[-1]
        if total <= 0:  # every weight 0 (or the one left excluded): uniformly
            choices = [i for i in range(len(weights)) if i != exclude]
            return choices[self.rng.randrange(len(choices))]
        return bisect.bisect_right(cumulative, self.rng.randrange(total))

    def pick(self, keys: Sequence[str], weights: Sequence[int], mode: str, now: float, decay: float = 10.0) -> int:
        """The index of the chosen candidate (``keys`` is not empty)."""
        n = len(keys)
        if n == 1:
            return 0
        first = self._by_weight(weights)
        if mode != "leastRequest":
            return first
        second = self._by_weight(weights, exclude=first)
        a, b = self.load(keys[first]), self.load(keys[second])
        return second if b.cost(now, decay) < a.cost(now, decay) else first

    def start(self, key: str) -> TargetLoad:
        load = self.load(key)
        load.in_flight += 1
        return load

    @staticmethod
    def finish(load: TargetLoad, now: float, seconds: float | None, decay: float = 10.0) -> None:
        """A call ended; ``seconds`` its latency to the response head (None: failed, no sample)."""
        load.in_flight -= 1
        if seconds is not None:
            load.observe(now, seconds, decay)
