"""Active health checks of host backends (``health.activeCheck``, docs/resilience.md): a task in the
root nursery sends ``GET path`` to each checked target every ``interval`` over the upstream pool;
the results go to the target's ``TargetHealth.checked`` (upstream/health.py), which takes it out
after ``unhealthyThreshold`` failures in a row and back after ``healthyThreshold`` passes."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import trio

from ..config.model import Address
from ..errors import ProxyError
from ..policies.resilience import HealthSpec
from .health import HealthRegistry
from .pool import UpstreamPool

__all__ = ["HealthChecker"]

#: how often the due checks are looked for (only while some target has a check)
TICK = 0.25

Target = tuple[str, Address, HealthSpec]  # key, address, spec with ``check`` set


class HealthChecker:
    """Runs the checks of ``targets()`` (read at each tick: a reload's new targets are picked up)."""

    def __init__(self, pool: UpstreamPool, registry: HealthRegistry, targets: Callable[[], Iterable[Target]]) -> None:
        self.pool = pool
        self.registry = registry
        self.targets = targets
        self.due: dict[str, float] = {}
        self.running: set[str] = set()
        self._changed = trio.Event()

    def targets_changed(self) -> None:
        """A reload may have added checks: look again (``run`` waits for this while there are none)."""
        self._changed.set()

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                now = trio.current_time()
                targets = list(self.targets())
                for key, address, spec in targets:
                    check = spec.check
                    assert check is not None
                    if key in self.running:
                        continue
                    due = self.due.setdefault(key, now)
                    if now >= due:
                        self.due[key] = now + check.interval
                        self.running.add(key)
                        nursery.start_soon(self._check, key, address, spec)
                if targets:
                    await trio.sleep(TICK)
                else:  # no wake-ups 4 times a second for nothing: until a reload brings checks
                    await self._changed.wait()
                    self._changed = trio.Event()

    async def _check(self, key: str, address: Address, spec: HealthSpec) -> None:
        check = spec.check
        assert check is not None
        passed = False
        try:
            with trio.move_on_after(check.timeout):
                headers = [(b"host", str(address).encode()), (b"user-agent", b"trioproxy-health-check")]
                response = await self.pool.request(address, b"GET", check.path.encode(), headers, b"")
                async with response:
                    await response.read()
                passed = 200 <= response.status < 300
        except (ProxyError, OSError):
            passed = False
        finally:
            self.running.discard(key)
        self.registry.checked(key, spec, passed)
