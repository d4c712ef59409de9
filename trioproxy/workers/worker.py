"""One worker process: today's gateway data plane on sockets the supervisor bound.

Started by the supervisor as ``python -m trioproxy.workers.worker SPEC`` (SPEC: JSON naming the
inherited descriptors). It receives the compiled ``Config`` over its control channel, serves
every bind with hypercorn exactly as a single-process gateway does (``server.serve_app``), and
answers the supervisor: reloads, ``/metrics`` scrapes, stop. It has no admin, stats or
readiness server. It drains on the supervisor's ``stop``, on SIGTERM, or when its control
channel closes (the supervisor is gone); SIGINT is the supervisor's to handle.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
from functools import partial
from typing import Any

import trio
from prometheus_client import Counter

from ..config.model import Config
from ..frontend import gc_tuning
from ..frontend.connections import DEFAULT_MAX_CONNECTIONS, raise_nofile_limit
from ..frontend.front_door import FrontDoor
from ..frontend.server import connection_counter, count_reject, listener_tls_contexts, serve_app
from ..proxy.gateway import Gateway
from ..proxy.runtime import Runtime
from ..telemetry.access_log import configure_logging
from ..telemetry.trace import Watcher
from .control import Control
from .shared_limits import SharedLimits
from .trace_relay import TraceTable, WorkerTraceHub, forward_events

HISTORY_BATCH = 0.05  # seconds a worker gathers request summaries before sending them on

log = logging.getLogger("trioproxy")


async def run_worker(spec: dict[str, Any]) -> None:
    control = Control(socket.socket(fileno=spec["control"]))
    first = await control.receive()
    if first is None or first.get("t") != "config":
        return  # the supervisor went away before sending the config
    config: Config = first["config"]
    configure_logging(spec.get("log_level"), config_level=config.logging.level if config.logging else None,
                      config_format=config.logging.format if config.logging else None)
    limits = SharedLimits(spec["limits"])
    table = TraceTable(spec["trace"])
    shutdown = trio.Event()
    nofile = raise_nofile_limit()
    max_connections = config.frontend.max_connections or min(
        DEFAULT_MAX_CONNECTIONS, max(16, (nofile - 256) // 2 // max(1, len(config.binds))))
    tls_contexts = listener_tls_contexts(config)

    async def send_quietly(message: dict[str, Any]) -> None:
        try:
            await control.send(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async with trio.open_nursery() as forwards:  # a traced request's events outlive the drain's start
        def forward(watcher_id: int, sequence: int, watcher: Watcher) -> None:
            forwards.start_soon(forward_events, watcher_id, sequence, watcher, send_quietly)

        hub = WorkerTraceHub(table, forward)
        runtime = Runtime(config, trace=hub, limiter_factory=limits.limiter)
        # the supervisor reports the remaining budgets (the store's, the same for every process):
        # workers' /metrics are summed, which would multiply them
        runtime.keys_host.metrics = None
        metrics = runtime.metrics
        claims = Counter("trioproxy_trace_claims", "Requests this gateway gave to a /debug/trace watcher.",
                         registry=metrics.registry)
        hub._on_claim = claims.inc

        async def commands() -> None:
            while (message := await control.receive()) is not None:
                kind = message["t"]
                if kind == "stop":
                    shutdown.set()
                elif kind == "reload":
                    runtime.apply(message["config"])
                    runtime.metrics.reload(applied=True)
                elif kind == "metrics":
                    await send_quietly({"t": "metrics", "id": message["id"], "text": metrics.exposition()[0]})
            shutdown.set()  # the supervisor is gone

        async def history() -> None:
            """The summaries of this worker's requests, to the supervisor's one history, in batches
            (at most one message per ``HISTORY_BATCH`` seconds, none while idle)."""
            recorded = runtime.history
            seen = recorded.total
            while True:
                await recorded.wait_new(seen)
                await trio.sleep(HISTORY_BATCH)
                entries = [tuple(s) for s in recorded.since(seen)]
                seen = recorded.total
                await send_quietly({"t": "history", "entries": entries})

        async def signals() -> None:
            with trio.open_signal_receiver(signal.SIGTERM) as received:
                async for _ in received:
                    shutdown.set()

        async with runtime.keys_host.serving(), trio.open_nursery() as binds:  # keys: flushed after the drain
            for port, fd in spec["binds"]:
                sock = socket.socket(fileno=fd)
                front = FrontDoor(Gateway(runtime, port),
                                  max_in_flight=lambda: runtime.state.config.frontend.max_in_flight,
                                  on_reject=partial(count_reject, metrics, str(port)))
                await binds.start(serve_app, front, sock, spec["drain_timeout"], shutdown,
                                  connection_counter(str(port), max_connections, metrics,
                                           config.frontend.max_connections_per_client), config.frontend,
                                  tls_contexts.get(port))
            async with trio.open_nursery() as background:
                await background.start(runtime.jwks.run)
                await background.start(runtime.mirrors.run)  # requestMirror copies
                await background.start(runtime.resilience.run_checks)  # health.activeCheck
                await background.start(runtime.mcp.run)  # stdio MCP servers
                background.start_soon(commands)
                background.start_soon(signals)
                background.start_soon(history)
                gc_tuning.after_startup()
                background.start_soon(gc_tuning.collect_periodically)
                await send_quietly({"t": "ready", "pid": os.getpid()})
                await shutdown.wait()
                background.cancel_scope.cancel()
        forwards.cancel_scope.deadline = trio.current_time() + 1.0  # last events of traced requests
    runtime.pool.close_idle()
    await trio.to_thread.run_sync(runtime.close)


def main(argv: list[str] | None = None) -> int:
    spec = json.loads((argv if argv is not None else sys.argv[1:])[0])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's: it decides when we drain
    trio.run(run_worker, spec)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
