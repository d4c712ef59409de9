"""The supervisor of ``--workers N``: binds once, runs N workers on the same sockets, keeps the rest.

It binds every socket (errors name the config place, as in one process), creates the shared
rate-limit slots and the trace watcher table, and starts N ``python -m trioproxy.workers.worker``
processes that inherit the bind sockets: the kernel's one accept queue per socket, shared by
the workers (docs/workers.md says why not ``SO_REUSEPORT``). Admin, stats and readiness run
here: ``/debug/trace`` claims requests of every worker (``trace_relay``), ``/metrics`` sums them
(``metrics_merge``). The config watcher validates a changed file here first; only a config
that passed is sent to the workers, as the compiled object, so a rejected reload is rejected
for all and every worker serves the same config. A worker that exits is started again (a log
line, ``trioproxy_worker_restarts_total``); SIGINT/SIGTERM drain every worker, exit code 0.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio
from prometheus_client import Counter, Gauge
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from ..admin.servers import stats_app
from ..config.model import Config
from ..config.scalars import parse_workers
from ..frontend.server import (
    ServerInfo,
    StartupError,
    bind_sockets,
    check_admin_token,
    print_listening,
    register_gateway,
    serve_own_servers,
)
from ..frontend.server import watch_config as server_watch_config
from ..mcp.session import SESSION_KEY_ENV
from ..proxy.runtime import Runtime
from ..settle import POLL_SECONDS, SettledFile
from ..telemetry.history import Summary
from .control import Control
from .metrics_merge import merge
from .shared_limits import SharedLimits
from .trace_relay import SupervisorTraceHub, TraceTable

log = logging.getLogger("trioproxy")

START_TIMEOUT = 60.0  # a worker that is not serving by then is reported as a startup error
RESTART_BRAKE = 1.0  # a worker that dies sooner than this after its start waits this long before the next
SCRAPE_TIMEOUT = 2.0  # a worker that does not answer a /metrics scrape in time is left out of it


def resolve_workers(flag: str | None, config: Config) -> int:
    """``--workers`` (else ``config.workers``) as a count; ``auto`` = the CPUs this process may use."""
    count = parse_workers(flag) if flag is not None else config.workers
    if count == 0:
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return count


@attrs.define(eq=False)
class WorkerHandle:
    index: int
    process: trio.Process
    control: Control
    ready: trio.Event = attrs.Factory(trio.Event)
    settled: trio.Event = attrs.Factory(trio.Event)  # ready, or the channel closed first
    pending: dict[int, tuple[trio.Event, list[tuple[int, bytes]]]] = attrs.Factory(dict)


class WorkerPool:
    """Starts, watches and restarts the workers; talks to them over their control channels."""

    def __init__(self, count: int, runtime: Runtime, bind_socks: list[tuple[int, socket.socket]],
                 limits: SharedLimits, table: TraceTable, *, drain_timeout: float, log_level: str | None) -> None:
        self.count = count
        self.runtime = runtime
        self.bind_socks = bind_socks
        self.limits = limits
        self.table = table
        self.drain_timeout = drain_timeout
        self.log_level = log_level
        self.handles: dict[int, WorkerHandle] = {}
        self.stopping = False
        self._next_request = 0
        registry_ = runtime.metrics.registry
        self.restarts = Counter("trioproxy_worker_restarts", "Worker processes that exited and were started again.",
                                ["worker"], registry=registry_)
        self.running = Gauge("trioproxy_workers_running", "Worker processes serving now.", registry=registry_)
        self.running.set_function(lambda: sum(1 for h in self.handles.values() if h.ready.is_set()))
        assert isinstance(runtime.trace, SupervisorTraceHub)
        self.hub: SupervisorTraceHub = runtime.trace

    async def _spawn(self, index: int) -> WorkerHandle:
        parent, child = socket.socketpair()
        binds = [(port, sock.fileno()) for port, sock in self.bind_socks]
        spec = {
            "index": index,
            "binds": binds,
            "control": child.fileno(),
            "limits": self.limits.fd,
            "trace": self.table.fd,
            "drain_timeout": self.drain_timeout,
            "log_level": self.log_level,
        }
        fds = [fd for _, fd in binds] + [child.fileno(), self.limits.fd, self.table.fd]
        os.environ.setdefault(SESSION_KEY_ENV, secrets.token_hex(32))  # one MCP session key for all workers
        try:
            process = await trio.lowlevel.open_process(
                [sys.executable, "-m", "trioproxy.workers.worker", json.dumps(spec)], pass_fds=fds,
                stdin=subprocess.DEVNULL, start_new_session=True)  # Ctrl-C reaches the supervisor only
        finally:
            child.close()
        handle = WorkerHandle(index, process, Control(parent))
        await handle.control.send({"t": "config", "config": self.runtime.state.config})
        return handle

    async def _read(self, handle: WorkerHandle) -> None:
        while (message := await handle.control.receive()) is not None:
            kind = message["t"]
            if kind == "trace":
                self.hub.deliver(message["w"], message["e"], handle.index, message["s"])
            elif kind == "trace_end":
                self.hub.finished(message["w"], message["dropped"], message["s"])
            elif kind == "history":  # one history for all workers (/api/requests)
                history = self.runtime.history
                if history.size:
                    for entry in message["entries"]:
                        history.record(Summary(*entry))
            elif kind == "metrics":
                waiting = handle.pending.pop(message["id"], None)
                if waiting is not None:
                    waiting[1].append((handle.index, message["text"]))
                    waiting[0].set()
            elif kind == "ready":
                handle.ready.set()
                handle.settled.set()
                print(f"trioproxy: worker {handle.index} serving (pid {handle.process.pid})", file=sys.stderr,
                      flush=True)
        handle.settled.set()

    async def keep(self, index: int, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run worker ``index`` until the pool stops; start it again whenever it exits."""
        first = True
        while True:
            started = trio.current_time()
            handle = await self._spawn(index)
            self.handles[index] = handle
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._read, handle)
                    if first:
                        with trio.move_on_after(START_TIMEOUT):
                            await handle.settled.wait()
                        if not handle.ready.is_set():
                            handle.process.kill()
                            await handle.process.wait()
                            raise StartupError(f"--workers: worker {index} exited before serving "
                                               f"(exit code {handle.process.returncode})")
                        first = False
                        task_status.started()
                    await handle.process.wait()
                    nursery.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True):
                    await handle.control.aclose()
            self.hub.worker_gone(index)
            if self.stopping:
                return
            log.error("worker %d (pid %d) exited with code %s; starting a new one", index, handle.process.pid,
                      handle.process.returncode)
            self.restarts.labels(str(index)).inc()
            if trio.current_time() - started < RESTART_BRAKE:
                await trio.sleep(RESTART_BRAKE)  # a worker that dies at start: not a busy loop
            if self.stopping:
                return

    def any_ready(self) -> bool:
        return any(h.ready.is_set() and h.process.returncode is None for h in self.handles.values())

    async def broadcast(self, message: dict[str, Any]) -> None:
        for handle in list(self.handles.values()):
            try:
                await handle.control.send(message)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # exiting: its replacement starts from the current config

    async def expositions(self) -> list[tuple[int, bytes]]:
        """Every serving worker's ``/metrics`` text (one round trip each, in parallel)."""
        texts: list[tuple[int, bytes]] = []
        waits = []
        for handle in list(self.handles.values()):
            if not handle.ready.is_set():
                continue
            self._next_request += 1
            event = trio.Event()
            handle.pending[self._next_request] = (event, texts)
            try:
                await handle.control.send({"t": "metrics", "id": self._next_request})
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                continue
            waits.append(event)
        with trio.move_on_after(SCRAPE_TIMEOUT):
            for event in waits:
                await event.wait()
        return texts

    async def stop(self) -> None:
        """Drain every worker; kill those still running past the drain deadline (plus a margin)."""
        self.stopping = True
        await self.broadcast({"t": "stop"})
        with trio.move_on_after(self.drain_timeout + 5.0):
            for handle in list(self.handles.values()):
                await handle.process.wait()
        for handle in self.handles.values():
            if handle.process.returncode is None:
                log.error("worker %d (pid %d) did not drain in time; killed", handle.index, handle.process.pid)
                handle.process.kill()


async def summed_exposition(pool: WorkerPool, own: bytes) -> bytes:
    """What ``/metrics`` serves: the supervisor's families (``own``) plus every worker's, summed."""
    return merge(own, await pool.expositions())


async def summed_metric_families(runtime: Runtime, pool: WorkerPool) -> list[Metric]:
    """``summed_exposition`` parsed back for the admin API's summary (``/api/metrics``, the web UI's
    traffic page)."""
    own, _ = runtime.metrics.exposition()
    return list(text_string_to_metric_families((await summed_exposition(pool, own)).decode()))


async def _watch_config(path: Path, runtime: Runtime, pool: WorkerPool, limits: SharedLimits, *,
                        interval: float = POLL_SECONDS, watched: SettledFile | None = None) -> None:
    """``server.watch_config`` for a supervisor: validated here once, then the compiled config
    goes to every worker (and budgets no entry uses any more are retired from shared memory)."""
    async def to_workers(config: Config) -> str:
        limits.retire_except(limits.digests(runtime.state.limiters))
        await pool.broadcast({"t": "reload", "config": config})
        return f" (sent to {len(pool.handles)} workers)"

    await server_watch_config(path, runtime, interval=interval, applied=to_workers, watched=watched)


async def serve_supervisor(config: Config, *, workers: int, bind_host: str = "0.0.0.0", drain_timeout: float = 10.0,
                           config_path: str | os.PathLike[str] | None = None, shutdown: trio.Event | None = None,
                           log_level: str | None = None,
                           task_status: trio.TaskStatus[tuple[ServerInfo, WorkerPool]] = trio.TASK_STATUS_IGNORED,
                           ) -> None:
    """``server.serve_gateway`` with N worker processes serving the binds."""
    shutdown = shutdown if shutdown is not None else trio.Event()
    token = check_admin_token(config)
    watched = None if config_path is None else SettledFile(Path(config_path))  # before anyone can see a bind
    bound = bind_sockets(config, bind_host)
    bind_socks = list(bound.binds.items())
    limits = SharedLimits.create()
    table = TraceTable.create()
    runtime = Runtime(config, trace=SupervisorTraceHub(table), limiter_factory=limits.limiter)
    runtime.config_file = None if config_path is None else str(config_path)
    pool = WorkerPool(workers, runtime, bind_socks, limits, table, drain_timeout=drain_timeout, log_level=log_level)
    runtime.metric_families = partial(summed_metric_families, runtime, pool)
    info = bound.server_info(runtime, shutdown)
    ready = {"value": False}
    drained = trio.Event()
    try:
        async with runtime.keys_host.serving(), trio.open_nursery() as aux:  # the admin API's keys
            stats = stats_app(runtime.metrics, add=partial(summed_exposition, pool))
            await serve_own_servers(aux, bound, config, runtime, token, stats=stats,
                                    is_ready=lambda: ready["value"] and not shutdown.is_set() and pool.any_ready(),
                                    drained=drained)
            try:
                async with trio.open_nursery() as running:
                    for index in range(workers):
                        await running.start(pool.keep, index)
                    async with trio.open_nursery() as background:
                        if config_path is not None:
                            background.start_soon(partial(_watch_config, Path(config_path), runtime, pool, limits,
                                                          watched=watched))
                        with register_gateway(config, info):
                            ready["value"] = True
                            task_status.started((info, pool))
                            await shutdown.wait()
                        background.cancel_scope.cancel()
                    log.info("draining %d workers", len(pool.handles))
                    await pool.stop()
                log.info("drained")
            finally:
                drained.set()
    finally:
        for _, sock in bind_socks:
            sock.close()
        os.close(limits.fd)
        os.close(table.fd)
    await trio.to_thread.run_sync(runtime.close)


async def run_supervisor(config: Config, *, workers: int, config_path: str | None, drain_timeout: float,
                         log_level: str | None = None) -> None:
    """The CLI's main for ``--workers N``: serve until SIGINT/SIGTERM, then drain every worker; a
    second signal kills the workers and stops at once."""
    shutdown = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            pools: list[WorkerPool] = []

            async def on_signals() -> None:
                async for _ in signals:
                    if shutdown.is_set():
                        for pool in pools:
                            for handle in pool.handles.values():
                                if handle.process.returncode is None:
                                    handle.process.kill()
                        nursery.cancel_scope.cancel()
                        return
                    print("trioproxy: shutting down, draining requests in flight", file=sys.stderr, flush=True)
                    shutdown.set()

            async def supervisor(task_status: trio.TaskStatus[tuple[ServerInfo, WorkerPool]]
                                 = trio.TASK_STATUS_IGNORED) -> None:
                try:
                    await serve_supervisor(config, workers=workers, config_path=config_path,
                                           drain_timeout=drain_timeout, shutdown=shutdown, log_level=log_level,
                                           task_status=task_status)
                finally:
                    nursery.cancel_scope.cancel()

            nursery.start_soon(on_signals)
            info, pool = await nursery.start(supervisor)
            pools.append(pool)
            print_listening(config, info)
