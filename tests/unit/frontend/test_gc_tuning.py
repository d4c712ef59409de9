"""The serving process's GC settings (trioproxy/frontend/gc_tuning.py, docs/reliability.md "Pauses")."""

from __future__ import annotations

import gc
import os

import trio

from tests.conftest import LOOPBACK_SERVERS, free_port
from trioproxy.config import parse_config
from trioproxy.frontend import gc_tuning, server


def test_after_startup_freezes_the_live_objects_and_turns_automatic_collection_off():
    try:
        gc_tuning.after_startup()
        assert gc.get_freeze_count() > 1000  # this test process's imports, at least
        assert not gc.isenabled()
    finally:
        gc.unfreeze()
        gc.enable()


async def test_full_collections_run_on_the_clock_or_early_past_the_count(monkeypatch, autojump_clock):
    collected: list[float] = []
    count = [0]
    monkeypatch.setattr(gc_tuning.gc, "collect", lambda: collected.append(trio.current_time()) or 0)
    monkeypatch.setattr(gc_tuning.gc, "get_count", lambda: (count[0], 0, 0))
    async with trio.open_nursery() as nursery:
        start = trio.current_time()
        nursery.start_soon(gc_tuning.collect_periodically, 30.0, 1000)
        await trio.sleep(95)
        assert [round(t - start) for t in collected] == [30, 60, 90]
        count[0] = 1000  # a burst of new objects: collected at the next check, not at 120 s
        await trio.sleep(1.5)
        assert round(collected[-1] - start) == 96
        nursery.cancel_scope.cancel()


async def test_the_cli_gateway_tunes_the_gc_once_its_binds_listen(monkeypatch):
    listening: list[bool] = []
    tuned = trio.Event()

    def after_startup() -> None:
        listening.append(runtime_ready())
        tuned.set()

    monkeypatch.setattr(gc_tuning, "after_startup", after_startup)
    port = free_port()
    config = parse_config(f"binds:\n- port: {port}\n  listeners:\n  - routes:\n    - policies: {{directResponse: {{status: 200}}}}\n",
                          env={**os.environ, **LOOPBACK_SERVERS})

    def runtime_ready() -> bool:
        import socket

        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: server.run_until_signalled(config, config_path=None, drain_timeout=1))
        with trio.fail_after(20):
            await tuned.wait()
        nursery.cancel_scope.cancel()
    assert listening == [True]
