"""``trioproxy ratelimit-server``: the Envoy RLS protocol over gRPC, counters in Redis.

Why grpcio's sync server on threads (not Trio, not grpc.aio): this is its own process, the gRPC
framing runs in grpcio's C core either way, and a redis-py call is one blocking round trip per
check; threads overlap those round trips without an event loop's per-call overhead. The figures
that chose it are in bench/README.md ("Global rate limiting").

Redis down: the call answers gRPC UNAVAILABLE and the next call tries Redis again (redis-py
reconnects), so the server recovers by itself. The config file is re-read when its mtime or size
changes; a bad new file is reported on stderr and the previous config stays.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from concurrent import futures
from typing import Any

import grpc  # type: ignore[import-untyped]
from grpc_health.v1 import health_pb2  # type: ignore[import-untyped]
from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from .health import NOT_SERVING, Health
from .limits import LimitsConfig, LimitsError, load_limits
from .protos import rls_pb2
from .service import UnknownDomain, should_rate_limit
from .store import MemoryStore, RedisStore, StoreUnavailable

SERVICE = "envoy.service.ratelimit.v3.RateLimitService"
RELOAD_POLL_SECONDS = 0.5


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


class RateLimitServer:
    def __init__(self, config_path: str, store: Any, metrics: RlsMetrics | None = None,
                 health_watchers: int = 8) -> None:
        self.config_path = config_path
        self.health = Health((SERVICE,), health_watchers)
        self.store = store
        self.metrics = metrics or RlsMetrics()
        self.config: LimitsConfig = load_limits(config_path)
        self.metrics.config_ok.set(1)
        self._stamp = self._file_stamp()
        self._stop = threading.Event()

    def _file_stamp(self) -> tuple[float, int] | None:
        try:
            st = os.stat(self.config_path)
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    def watch_config(self) -> None:
        while not self._stop.wait(RELOAD_POLL_SECONDS):
            stamp = self._file_stamp()
            if stamp is None or stamp == self._stamp:
                continue
            self._stamp = stamp
            try:
                self.config = load_limits(self.config_path)
            except LimitsError as exc:
                print(f"ratelimit-server: reload rejected, keeping the previous config: {exc}", file=sys.stderr,
                      flush=True)
                self.metrics.reloads.labels("error").inc()
                continue
            self.metrics.reloads.labels("ok").inc()
            print(f"ratelimit-server: reloaded {self.config_path}", file=sys.stderr, flush=True)

    def should_rate_limit(self, request: Any, context: grpc.ServicerContext) -> Any:
        config = self.config
        try:
            response, seen = should_rate_limit(config, self.store, request, time.time())
        except UnknownDomain:
            self.metrics.calls.labels(request.domain[:64], "error").inc()
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown domain {request.domain!r}")
        except StoreUnavailable as exc:
            self.metrics.store_errors.inc()
            self.metrics.calls.labels(config.domain, "error").inc()
            context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        code = "over_limit" if response.overall_code == rls_pb2.RateLimitResponse.OVER_LIMIT else "ok"
        self.metrics.calls.labels(config.domain, code).inc()
        for limit, over in seen:
            self.metrics.descriptors.labels(limit.name or limit.unit, "true" if over else "false").inc()
        return response

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        rls = grpc.method_handlers_generic_handler(SERVICE, {
            "ShouldRateLimit": grpc.unary_unary_rpc_method_handler(
                self.should_rate_limit, request_deserializer=rls_pb2.RateLimitRequest.FromString,
                response_serializer=rls_pb2.RateLimitResponse.SerializeToString),
        })
        health = grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
            "Check": grpc.unary_unary_rpc_method_handler(
                self.health.check, request_deserializer=health_pb2.HealthCheckRequest.FromString,
                response_serializer=health_pb2.HealthCheckResponse.SerializeToString),
            "Watch": grpc.unary_stream_rpc_method_handler(
                self.health.watch, request_deserializer=health_pb2.HealthCheckRequest.FromString,
                response_serializer=health_pb2.HealthCheckResponse.SerializeToString),
        })
        return [rls, health]

    def stop(self) -> None:
        self.health.set(NOT_SERVING)  # watchers hear it before their streams end
        self._stop.set()


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="envoyproxy/ratelimit YAML (domain, descriptors)")
    parser.add_argument("--addr", default="127.0.0.1:8081", help="gRPC listen address HOST:PORT (port 0: any)")
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--redis", metavar="URL", help="redis:// or rediss:// URL of the counter store")
    store.add_argument("--redis-cluster", metavar="URL", help="URL of any node of a Redis Cluster")
    store.add_argument("--store", choices=["memory"], help="in-process counters (one server only; the default)")
    parser.add_argument("--stats-addr", metavar="HOST:PORT", help="serve Prometheus /metrics here")
    parser.add_argument("--threads", type=int, default=16, help="worker threads (default 16)")
    parser.add_argument("--health-watchers", type=int, default=8, metavar="N",
                        help="grpc.health.v1 Watch streams served at once, each on its own extra thread (default 8)")
    parser.set_defaults(handler=run)


def _split(addr: str, flag: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{flag}: expected HOST:PORT, got {addr!r}")
    return host or "127.0.0.1", int(port)


def run(args: argparse.Namespace) -> int:
    try:
        host, port = _split(args.addr, "--addr")
        stats = _split(args.stats_addr, "--stats-addr") if args.stats_addr else None
        if args.redis:
            store: Any = RedisStore(args.redis)
        elif args.redis_cluster:
            store = RedisStore(args.redis_cluster, cluster=True)
        else:
            store = MemoryStore()
        if args.threads < 1 or args.health_watchers < 0:
            raise ValueError("--threads must be at least 1 and --health-watchers at least 0")
        server_state = RateLimitServer(args.config, store, health_watchers=args.health_watchers)
    except (ValueError, LimitsError) as exc:
        print(f"ratelimit-server: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 -- redis-py's many errors (cluster unreachable at start): one line
        print(f"ratelimit-server: cannot start the store: {exc}", file=sys.stderr)
        return 1
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=args.threads + args.health_watchers),
                         options=[("grpc.so_reuseport", 0)])
    server.add_generic_rpc_handlers(server_state.handlers())
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        print(f"ratelimit-server: --addr: cannot listen on {args.addr}", file=sys.stderr)
        return 1
    if stats is not None:
        try:
            httpd, _ = start_http_server(stats[1], stats[0], registry=server_state.metrics.registry)
            stats = (stats[0], httpd.server_port)
        except OSError as exc:
            print(f"ratelimit-server: --stats-addr: {exc.strerror}", file=sys.stderr)
            return 1
    server.start()
    threading.Thread(target=server_state.watch_config, name="config-watch", daemon=True).start()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    print(f"ratelimit-server: domain {server_state.config.domain!r} listening on {host}:{bound}"
          + (f", metrics on http://{stats[0]}:{stats[1]}/metrics" if stats else ""), flush=True)
    done.wait()
    server_state.stop()
    server.stop(1).wait()
    store.close()
    return 0
