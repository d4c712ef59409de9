"""``trioproxy ratelimit-server``: the Envoy RLS protocol over gRPC, counters in Redis.

The transport is ``wire_server`` (gRPC framed by hand on HTTP/2, on Trio): grpcio's server spent
340-540 µs of CPU per call in its Python layer alone, more than a check's whole budget
(docs/ratelimit-server.md and bench/README.md, "Global rate limiting", have the figures).

The cheap path: a ``ShouldRateLimit`` request is queued (``CheckBatcher.submit``) as soon as its
frames are read; one task takes everything queued, across connections, and gives it ONE store
round trip (a group commit: a redis-py pipeline's fixed cost is paid once per batch, in one worker
thread hop; requests arriving meanwhile form the next batch), then answers each call.
``service.Plan`` holds the behaviour; this module only moves bytes and counts.

Redis down: the batch's calls answer gRPC UNAVAILABLE and the next batch tries Redis again
(redis-py reconnects), so the server recovers by itself. ``--config`` is a file or a directory of
domain files (``limits.load_domains``); it is re-read once a change has settled
(``trioproxy/settle.py``: unchanged for a second; a single file renamed into place at once), and a
file that comes or goes in a directory is a change like any other; a bad new config is reported on
stderr and the previous one stays. ``x-ratelimit-*`` response headers only with
``--response-headers`` or ``LIMIT_RESPONSE_HEADERS_ENABLED`` (as envoyproxy/ratelimit).
SIGTERM/SIGINT: health watchers hear NOT_SERVING, every connection gets GOAWAY, calls already
started finish (at most ``GRACE_SECONDS``), then the process exits.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import sys
import time
from collections import Counter as Tally
from typing import Any

import trio
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from grpc_health.v1 import health_pb2  # type: ignore[import-untyped]
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from ..settle import SettledFile, Stamp, read
from .health import Health
from .limits import Domains, LimitsError, domain_files, load_domains, parse_domains
from .protos import rls_pb2
from .service import OVER_LIMIT, Plan, UnknownDomain
from .store import MemoryStore, RedisStore, StoreUnavailable
from .wire_server import INTERNAL, INVALID_ARGUMENT, NOT_FOUND, UNAVAILABLE, Call, WireServer

SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
RLS_PATH = b"/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
HEALTH_CHECK = b"/grpc.health.v1.Health/Check"
HEALTH_WATCH = b"/grpc.health.v1.Health/Watch"
RELOAD_POLL_SECONDS = 0.5
GRACE_SECONDS = 5.0  # calls in flight at shutdown get this long to finish
#: descriptors one ShouldRateLimit call may carry: a gateway sends one per rate-limit action of a
#: route (a handful); one call with 60,000 of them held the server's single thread 2.2 s
MAX_DESCRIPTORS = 256


def split_address(addr: str, flag: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{flag}: expected HOST:PORT, got {addr!r}")
    if int(port) > 65535:
        raise ValueError(f"{flag}: port {port} is over 65535")
    return host or "127.0.0.1", int(port)


class RlsMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter("ratelimit_server_calls", "ShouldRateLimit calls, by overall code (error when "
                             "the call failed).", ["domain", "code"], registry=self.registry)
        self.descriptors = Counter("ratelimit_server_descriptors", "Limited descriptors, by limit name/unit and "
                                   "whether over (shadow mode counts as over).", ["limit", "over"],
                                   registry=self.registry)
        self.store_errors = Counter("ratelimit_server_store_errors", "Calls answered UNAVAILABLE because the "
                                    "counter store failed.", registry=self.registry)
        self.reloads = Counter("ratelimit_server_config_reloads", "Config reloads, by result.", ["result"],
                               registry=self.registry)
        self.config_ok = Gauge("ratelimit_server_config_loaded", "1 when the config file in use parsed.",
                               registry=self.registry)


def read_config(path: str) -> tuple[Stamp, dict[str, bytes] | None]:
    """The config's stamp and the bytes of each of its files, for ``SettledFile``.

    A directory's stamp covers every domain file (name and content), so a file that is written,
    comes or goes is a change that must settle; its identity is fixed (no rename fast path: a
    rename into a directory is a file that comes, and the next file may still be on its way).
    """
    if not os.path.isdir(path):
        stamp, content = read(path)
        return stamp, None if content is None else {path: content}
    try:
        files = domain_files(path)
    except LimitsError:
        return Stamp(None), None
    contents: dict[str, bytes] = {}
    digest = hashlib.sha256()
    for file in files:
        file_stamp, content = read(file)
        if content is None:
            return Stamp(None), None
        contents[file] = content
        digest.update(file.encode() + b"\0" + file_stamp.digest)
    return Stamp((0, 0), 0, sum(map(len, contents.values())), digest.digest()), contents


def _parse_settled(path: str, contents: dict[str, bytes] | None) -> Domains:
    """The domains in ``contents``, the bytes that settled (not a second read)."""
    if contents is None:
        return load_domains(path)  # gone or unreadable: its error says why
    return parse_domains(contents, path)


class RateLimitServer:
    """The server's state (config, store, metrics, health) and its gRPC methods."""

    def __init__(self, config_path: str, store: Any, metrics: RlsMetrics | None = None,
                 health_watchers: int = 8, *, response_headers: bool = False) -> None:
        self.config_path = config_path
        self.health = Health((SERVICE,), health_watchers)
        self.store = store
        self.metrics = metrics or RlsMetrics()
        self.response_headers = response_headers
        self.domains: Domains = load_domains(config_path)
        self.metrics.config_ok.set(1)
        self._watched = SettledFile(config_path, reader=read_config)
        self.batcher = CheckBatcher(self)

    async def watch_config(self) -> None:
        while True:
            await trio.sleep(RELOAD_POLL_SECONDS)
            self.reload_if_changed(trio.current_time())

    def reload_if_changed(self, now: float | None = None) -> None:
        """Re-read the file once a change has settled, so a file caught half-written (a valid
        prefix without the limits written later) is never loaded."""
        if not self._watched.poll(time.monotonic() if now is None else now):
            return
        try:
            self.domains = _parse_settled(self.config_path, self._watched.content)
        except LimitsError as exc:
            print(f"ratelimit-server: reload rejected, keeping the previous config: {exc}", file=sys.stderr,
                  flush=True)
            self.metrics.reloads.labels("error").inc()
            return
        self.metrics.reloads.labels("ok").inc()
        print(f"ratelimit-server: reloaded {self.config_path}", file=sys.stderr, flush=True)

    async def check_batch(self, batch: list[tuple[Call, bytes]]) -> None:
        """Answer a batch of ShouldRateLimit calls with one store round trip."""
        domains = self.domains
        now = time.time()
        calls = Tally[tuple[str, str]]()
        planned: list[tuple[Call, Plan, int]] = []
        items: list[tuple[str, int, int]] = []
        for call, message in batch:
            if call.done:
                continue  # reset or past its deadline while queued
            try:
                request = rls_pb2.RateLimitRequest.FromString(message)
            except DecodeError:
                call.fail(INTERNAL, "cannot parse the RateLimitRequest")
                calls[("", "error")] += 1
                continue
            if len(request.descriptors) > MAX_DESCRIPTORS:
                call.fail(INVALID_ARGUMENT, f"too many descriptors: {len(request.descriptors)} (at most {MAX_DESCRIPTORS})")
                calls[(request.domain[:64], "error")] += 1
                continue
            try:
                config = domains.find(request.domain)
                if config is None:
                    raise UnknownDomain(request.domain)
                plan = Plan(config, request, now, headers=self.response_headers)
            except UnknownDomain:
                call.fail(INVALID_ARGUMENT, f"unknown domain {request.domain!r}")
                calls[(request.domain[:64], "error")] += 1
                continue
            planned.append((call, plan, len(items)))
            items.extend(plan.items)
        counts: list[int] = []
        if items:
            try:
                counts = await self._incr(items)
            except StoreUnavailable as exc:
                for call, plan, _ in planned:
                    call.fail(UNAVAILABLE, str(exc))
                    calls[(plan.config.domain, "error")] += 1
                self.metrics.store_errors.inc(len(planned))
                planned = []
        descriptors = Tally[tuple[str, str]]()
        for call, plan, at in planned:
            response, seen = plan.respond(counts[at:at + len(plan.limited)])
            call.reply(response.SerializeToString())
            calls[(plan.config.domain, "over_limit" if response.overall_code == OVER_LIMIT else "ok")] += 1
            for limit, over in seen:
                descriptors[(limit.name or limit.unit, "true" if over else "false")] += 1
        for labels, n in calls.items():
            self.metrics.calls.labels(*labels).inc(n)
        for labels, n in descriptors.items():
            self.metrics.descriptors.labels(*labels).inc(n)

    async def _incr(self, items: list[tuple[str, int, int]]) -> list[int]:
        if not getattr(self.store, "blocking", False):
            result: list[int] = self.store.incr(items)
            return result
        return await trio.to_thread.run_sync(self.store.incr, items)

    def health_check(self, call: Call, message: bytes) -> None:
        try:
            service = health_pb2.HealthCheckRequest.FromString(message).service
        except DecodeError:
            call.fail(INTERNAL, "cannot parse the HealthCheckRequest")
            return
        status = self.health.check(service)
        if status is None:
            call.fail(NOT_FOUND, "unknown service")
        else:
            call.reply(health_pb2.HealthCheckResponse(status=status).SerializeToString())

    async def health_watch(self, call: Call, message: bytes) -> None:
        try:
            service = health_pb2.HealthCheckRequest.FromString(message).service
        except DecodeError:
            call.fail(INTERNAL, "cannot parse the HealthCheckRequest")
            return

        async def send(status: int) -> None:
            await call.send(health_pb2.HealthCheckResponse(status=status).SerializeToString())

        await self.health.watch(service, send)

    def wire_server(self) -> WireServer:
        return WireServer({RLS_PATH: self.batcher.submit, HEALTH_CHECK: self.health_check},
                          {HEALTH_WATCH: self.health_watch})


class CheckBatcher:
    """The group commit: calls queued while a batch is out go together in the next one."""

    def __init__(self, server: RateLimitServer) -> None:
        self.server = server
        self.queue: list[tuple[Call, bytes]] = []
        self.ready = trio.Event()
        self.batches = 0  # round trips made (tests, the bench)

    def submit(self, call: Call, message: bytes) -> None:
        self.queue.append((call, message))
        self.ready.set()

    async def run(self) -> None:
        while True:
            await self.ready.wait()
            self.ready = trio.Event()
            batch, self.queue = self.queue, []
            self.batches += 1
            try:
                await self.server.check_batch(batch)
            except Exception as exc:  # noqa: BLE001 -- a bug must fail these calls, not the server
                print(f"ratelimit-server: batch failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                for call, _ in batch:
                    call.fail(INTERNAL, "internal error")


def env_flag(name: str) -> bool:
    """A boolean environment variable as envoyproxy/ratelimit reads it (Go's ``strconv.ParseBool``)."""
    raw = os.environ.get(name, "")
    if raw in ("", "0", "f", "F", "false", "FALSE", "False"):
        return False
    if raw in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    raise ValueError(f"{name}: expected true or false, got {raw!r}")


def run(args: argparse.Namespace) -> int:
    try:
        host, port = split_address(args.addr, "--addr")
        stats = split_address(args.stats_addr, "--stats-addr") if args.stats_addr else None
        if args.redis:
            store: Any = RedisStore(args.redis)
        elif args.redis_cluster:
            store = RedisStore(args.redis_cluster, cluster=True)
        else:
            store = MemoryStore()
        if args.threads < 1 or args.health_watchers < 0:
            raise ValueError("--threads must be at least 1 and --health-watchers at least 0")
        headers = args.response_headers or env_flag("LIMIT_RESPONSE_HEADERS_ENABLED")
        server_state = RateLimitServer(args.config, store, health_watchers=args.health_watchers,
                                       response_headers=headers)
    except (ValueError, LimitsError) as exc:
        print(f"ratelimit-server: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 -- redis-py's many errors (cluster unreachable at start): one line
        print(f"ratelimit-server: cannot start the store: {exc}", file=sys.stderr)
        return 1
    try:
        return trio.run(serve, server_state, host, port, stats, args.addr)
    finally:
        store.close()


async def serve(state: RateLimitServer, host: str, port: int, stats: tuple[str, int] | None, addr: str) -> int:
    try:
        listeners = await trio.open_tcp_listeners(port, host=host.strip("[]"))
    except OSError as exc:
        print(f"ratelimit-server: --addr: cannot listen on {addr}: {exc.strerror}", file=sys.stderr)
        return 1
    bound = listeners[0].socket.getsockname()[1]
    if stats is not None:
        try:
            httpd, _ = start_http_server(stats[1], stats[0], registry=state.metrics.registry)
            stats = (stats[0], httpd.server_port)
        except OSError as exc:
            print(f"ratelimit-server: --stats-addr: {exc.strerror}", file=sys.stderr)
            return 1
    wire = state.wire_server()
    served = trio.Event()

    async def serve_then_mark() -> None:
        try:
            await wire.serve(listeners)
        finally:
            served.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(state.batcher.run)
        nursery.start_soon(state.watch_config)
        nursery.start_soon(serve_then_mark)
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            names = ", ".join(repr(name) for name in sorted(state.domains.by_name))
            print(f"ratelimit-server: domain{'s' if len(state.domains.by_name) > 1 else ''} {names} "
                  f"listening on {host}:{bound}"
                  + (f", metrics on http://{stats[0]}:{stats[1]}/metrics" if stats else ""), flush=True)
            async for _ in signals:
                break
        state.health.stop()  # watchers hear NOT_SERVING before their streams end
        await trio.sleep(0)
        wire.shutdown()
        with trio.move_on_after(GRACE_SECONDS):
            await served.wait()
        nursery.cancel_scope.cancel()
    return 0
