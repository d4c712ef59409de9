"""The root nursery: every bind, the admin, stats and readiness servers, and the config watcher.

Sockets are bound here, before any server starts, so a busy port is a one-line error naming
the config place instead of a traceback from inside a server task, and so port 0 (tests)
resolves to a real port that callers learn through ``task_status``. Each server is
``hypercorn``'s trio worker on those sockets (``connections.py``), except a plain bind's HTTP/1.1,
served by ``http1.py``; on shutdown (SIGINT/SIGTERM or ``shutdown``)
readiness turns 503 first, then each bind stops accepting and lets requests in flight finish
until the drain deadline (hypercorn's graceful pattern).
"""

from __future__ import annotations

import errno
import logging
import math
import os
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.utils import wrap_app

from ..config import ConfigError, load_config, parse_config
from ..config.model import Address, Config, FrontendSpec
from ..proxy.gateway import Gateway
from ..proxy.runtime import Runtime
from ..settle import POLL_SECONDS, SETTLE_SECONDS, SettledFile
from . import gc_tuning, registry
from .connections import DEFAULT_MAX_CONNECTIONS, ConnectionCounter, raise_nofile_limit, serve
from .front_door import FrontDoor

log = logging.getLogger("trioproxy")


class StartupError(Exception):
    """A server could not start; the message names the config place."""


@attrs.define
class ServerInfo:
    """What a started gateway tells its caller (tests, the CLI)."""

    runtime: Runtime
    ports: dict[int, int]  # configured bind port -> listening port
    admin: Address | None  # None: set to off
    stats: Address | None
    readiness: Address | None
    shutdown: trio.Event


def listen_socket(address: Address, where: str) -> socket.socket:
    host = "127.0.0.1" if address.host == "localhost" else address.host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, address.port))
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
            reason = f"address not available ({exc})"
        elif exc.errno == errno.EADDRINUSE and (holder := registry.holder_of_port(address.port)) is not None:
            reason = f"port in use by trioproxy (pid {holder})"
        raise StartupError(f"{where}: cannot listen on {host}:{address.port}: {reason}") from None
    sock.setblocking(False)
    return sock


def hypercorn_config(*, graceful_timeout: float, idle_timeout: float = 60.0,
                     websocket_max_message_size: int = FrontendSpec().websocket_max_message_size) -> HypercornConfig:
    config = HypercornConfig()
    config.accesslog = None
    config.loglevel = "WARNING"
    config.include_server_header = False
    config.include_date_header = True
    config.graceful_timeout = graceful_timeout
    # An idle connection, including one still sending its request headers (slowloris), is
    # closed after this: hypercorn's idle timer runs until a complete request head arrives.
    config.keep_alive_timeout = idle_timeout  # frontendPolicies.http.http1IdleTimeout on binds
    # No read_timeout: hypercorn applies it while a response streams too, which would cut an
    # LLM stream or a trace stream whose client has nothing to send for a minute.
    config.read_timeout = None
    config.h11_max_incomplete_size = 32 * 1024  # request line + headers; larger → 400/431 by h11
    config.keep_alive_max_requests = 100_000
    config.websocket_max_message_size = websocket_max_message_size  # client → gateway (docs/protocols.md)
    config.ssl_handshake_timeout = 10.0  # a TLS bind's client that stalls its handshake is dropped
    return config


async def serve_app(app: Any, sock: socket.socket, graceful: float, shutdown: trio.Event,
                 counter: ConnectionCounter | None = None, frontend: FrontendSpec | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """One server on ``sock``; a bind's ``frontend`` limits (``frontendPolicies.http``) are read here,
    at start: a reload changes them for the data plane's requests, not for this accept loop."""
    counter = counter or ConnectionCounter(f"{_address_of(sock)}", DEFAULT_MAX_CONNECTIONS)
    config = hypercorn_config(graceful_timeout=graceful, idle_timeout=frontend.idle_timeout if frontend else 60.0,
                              **({"websocket_max_message_size": frontend.websocket_max_message_size} if frontend else {}))
    config.include_date_header = not getattr(app, "sets_date_header", False)  # http_date.py
    await serve(wrap_app(app, config.wsgi_max_body_size, "asgi"), config, sock, counter,
                shutdown_trigger=shutdown.wait, task_status=task_status,
                header_timeout=frontend.header_timeout if frontend else math.inf, ssl_context=ssl_context,
                http1_app=app if frontend is not None else None)  # a bind's HTTP/1.1: http1.py


def listener_tls_contexts(config: Config) -> dict[int, ssl.SSLContext]:
    """bind port → its server SSL context (files checked at load; a file gone since is named here)."""
    from ..config.listener_tls import TlsFileError, server_context

    contexts = {}
    for i, bind in enumerate(config.binds):
        tls = bind.tls
        if tls is None:
            continue
        try:
            contexts[bind.port] = server_context(tls)
        except TlsFileError as error:
            j = next(j for j, listener in enumerate(bind.listeners) if listener.tls is not None)
            raise StartupError(f"binds[{i}].listeners[{j}].tls.{error.field}: {error}") from None
    return contexts


def count_reject(metrics: Any, bind: str, reason: str) -> None:
    metrics.front_door_rejects.labels(bind, reason).inc()


def connection_counter(name: str, limit: int, metrics: Any, per_client: int | None = None) -> ConnectionCounter:
    """A server's connection counter, exported as ``trioproxy_connections_open{server=name}``."""
    counter = ConnectionCounter(name, limit, lambda server, event: metrics.connection_events.labels(server, event).inc(),
                                per_client=per_client)
    metrics.connections_open.labels(name).set_function(lambda: counter.open)
    return counter


def _address_of(sock: socket.socket) -> Address:
    host, port = sock.getsockname()[:2]
    return Address(host, port)


def check_admin_token(config: Config) -> str | None:
    """The admin token; an admin server off loopback without one is a startup error."""
    from ..admin.auth import admin_token, is_loopback

    servers = config.servers
    token = admin_token(config)
    if not token and "admin" not in servers.off and not is_loopback(servers.admin.host):
        raise StartupError(f"config.adminAddr: the admin server on {servers.admin} is not loopback-only and"
                           " needs a bearer token: set ADMIN_TOKEN (or config.adminToken)")
    return token


@attrs.define
class BoundSockets:
    """Every socket a gateway (or a supervisor) serves on, bound before anything runs."""

    binds: dict[int, socket.socket]  # configured bind port -> its listening socket
    own: dict[str, socket.socket]  # the admin, stats and readiness servers not set to off

    def server_info(self, runtime: Runtime, shutdown: trio.Event) -> ServerInfo:
        own = {name: _address_of(sock) for name, sock in self.own.items()}
        return ServerInfo(runtime=runtime, ports={port: _address_of(sock).port for port, sock in self.binds.items()},
                          admin=own.get("admin"), stats=own.get("stats"), readiness=own.get("readiness"),
                          shutdown=shutdown)


def bind_sockets(config: Config, bind_host: str) -> BoundSockets:
    """Bind every socket up front: errors name the config place, and nothing runs half-started
    (on an error the sockets bound so far are closed again)."""
    servers = config.servers
    sockets: list[socket.socket] = []
    try:
        binds = {}
        for i, bind in enumerate(config.binds):
            binds[bind.port] = listen_socket(Address(bind_host, bind.port), f"binds[{i}].port")
            sockets.append(binds[bind.port])
        own = {}
        for name, address in (("admin", servers.admin), ("stats", servers.stats), ("readiness", servers.readiness)):
            if name not in servers.off:
                own[name] = listen_socket(address, f"config.{name}Addr")
                sockets.append(own[name])
    except StartupError:
        for sock in sockets:
            sock.close()
        raise
    return BoundSockets(binds, own)


async def serve_own_servers(nursery: trio.Nursery, bound: BoundSockets, config: Config, runtime: Runtime,
                            token: str | None, *, is_ready: Callable[[], bool], stats: Any,
                            drained: trio.Event) -> None:
    """Start the readiness, stats (the ASGI app ``stats``) and admin servers that are not off; each
    stops once ``drained`` is set, after the binds (readiness answers 503 while they drain)."""
    from ..admin.app import create_admin_app
    from ..admin.auth import is_loopback
    from ..admin.host_check import refuse_cross_site_writes, require_loopback_host
    from ..admin.servers import readiness_app

    own, metrics = bound.own, runtime.metrics
    servers = config.servers

    def guarded(app: Any, name: str, host: str) -> Any:
        # DNS rebinding: on loopback, 421 for other Host names (admin, stats and readiness alike)
        return require_loopback_host(app, name) if is_loopback(host) else app

    if "readiness" in own:
        await nursery.start(serve_app, guarded(readiness_app(is_ready), "readiness", servers.readiness.host),
                            own["readiness"], 1.0, drained, connection_counter("readiness", 256, metrics))
    if "stats" in own:
        await nursery.start(serve_app, guarded(stats, "stats", servers.stats.host), own["stats"], 1.0, drained,
                            connection_counter("stats", 256, metrics))
    if "admin" in own:
        admin_app = refuse_cross_site_writes(create_admin_app(runtime, token=token))  # CSRF: 403
        await nursery.start(serve_app, guarded(admin_app, "admin", servers.admin.host), own["admin"], 1.0, drained,
                            connection_counter("admin", 1024, metrics))


def register_gateway(config: Config, info: ServerInfo) -> registry.Registration:
    """Let ``trioproxy trace gateway/NAME`` find this gateway's admin server (until closed)."""
    admin = info.admin
    admin_addr = "" if admin is None else \
        f"{'127.0.0.1' if admin.host in ('0.0.0.0', '::') else admin.host}:{admin.port}"
    ports = [*info.ports.values(), *(a.port for a in (info.admin, info.stats, info.readiness) if a)]
    return registry.register(config.gateway_names, admin_addr, ports)


def print_listening(config: Config, info: ServerInfo) -> None:
    """The CLI's start lines: one per bind and per admin, stats and readiness server."""
    schemes = {bind.port: "https" if bind.tls else "http" for bind in config.binds}
    for port, actual in info.ports.items():
        print(f"trioproxy: bind {port} listening on {schemes[port]}://0.0.0.0:{actual}", file=sys.stderr, flush=True)
    for name, address in (("admin", info.admin), ("stats", info.stats), ("readiness", info.readiness)):
        if address is not None:
            print(f"trioproxy: {name} listening on http://{address}", file=sys.stderr, flush=True)


async def watch_config(path: Path, runtime: Runtime, *, interval: float = POLL_SECONDS,
                        settle: float = SETTLE_SECONDS,
                        applied: Callable[[Config], Awaitable[str]] | None = None,
                        watched: SettledFile | None = None) -> None:
    """Reload the config file once a change has settled; an invalid one is reported and ignored.
    ``applied``: what else a valid config must reach (a supervisor's workers); it returns the log
    line's suffix.

    An in-place change is loaded once the file has stayed the same (inode, mtime, size, content
    hash) for ``settle`` seconds, a rename into place at the next poll (``settle.py``): a writer
    that pauses mid-file must not get its valid-looking prefix applied. ``watched``: the file as
    read before the binds listened, so a change written once the gateway answers is never taken
    for the version already loaded (the watcher task starts a moment later).
    """
    watched = watched if watched is not None else SettledFile(path, settle=settle)
    while True:
        await trio.sleep(interval)
        if not watched.poll(trio.current_time()):
            continue
        old = runtime.state.config
        try:
            config = _parse_settled(path, watched.content, old)
            problems = reload_problems(old, config)
            if problems:
                raise ConfigError(problems)
        except ConfigError as error:
            for problem in error.problems:
                log.error("config reload rejected, keeping the previous config: %s", problem)
            runtime.reload_errors = error.problems
            runtime.metrics.reload(applied=False)
            continue
        runtime.apply(config)
        suffix = await applied(config) if applied is not None else ""
        runtime.metrics.reload(applied=True)
        log.info("config reloaded from %s%s", path, suffix)
        for line in restart_only_changes(old, config):
            log.warning("%s", line)
        log_rejected(config)


def log_rejected(config: Config) -> None:
    """One line per manifest resource left out: the gateway serves the valid ones (docs/manifests.md)."""
    for line in config.rejected:
        log.warning("resource not applied: %s", line)


def check_binds_can_listen(config: Config, bind_host: str = "0.0.0.0") -> list[str]:
    """``--validate-only``: every bind port can be bound now (each socket is closed again)."""
    problems = []
    for i, bind in enumerate(config.binds):
        try:
            listen_socket(Address(bind_host, bind.port), f"binds[{i}].port").close()
        except StartupError as error:
            problems.append(str(error))
    return problems


def reload_problems(old: Config, new: Config) -> list[str]:
    """Why a valid document must still not replace the serving one (an empty file, no binds,
    or bind ports other than the ones listening: new ports need a restart, so applying it would
    route nothing)."""
    problems = []
    if not new.binds:
        problems.append("binds: the new document has no binds (an empty or truncated file?)")
    old_ports = sorted(b.port for b in old.binds)
    new_ports = sorted(b.port for b in new.binds)
    if new.binds and old_ports != new_ports:
        problems.append(f"binds: ports changed ({old_ports} → {new_ports}); restart to listen on new ports")
    return problems


#: ``frontendPolicies.http`` settings the accept loop reads once, at start (docs/reliability.md).
START_ONLY = {"max_connections": "maxConnections", "max_connections_per_client": "maxConnectionsPerClient",
              "header_timeout": "requestHeaderTimeout", "websocket_max_message_size": "websocketMaxMessageSize",
              "idle_timeout": "http1IdleTimeout"}


def restart_only_changes(old: Config, new: Config) -> list[str]:
    """A reload applies everything else; these it cannot, so say so rather than ignore them."""
    return [f"frontendPolicies.http.{name}: changed, but it is read at start; restart to apply it"
            for attr, name in START_ONLY.items() if getattr(old.frontend, attr) != getattr(new.frontend, attr)]


def _parse_settled(path: Path, content: bytes | None, previous: Config) -> Config:
    """The config in ``content``, the bytes the watcher saw settle (not a second read)."""
    if content is None:
        return load_config(path, previous=previous)  # gone or unreadable: its error names why
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: config file is not UTF-8 text"]) from None
    return parse_config(text, source=str(path), previous=previous, base_dir=str(path.absolute().parent))


async def serve_gateway(
    config: Config,
    *,
    bind_host: str = "0.0.0.0",
    drain_timeout: float = 10.0,
    config_path: str | os.PathLike[str] | None = None,
    shutdown: trio.Event | None = None,
    extra_tasks: Callable[[trio.Nursery, ServerInfo], Awaitable[None]] | None = None,
    task_status: trio.TaskStatus[ServerInfo] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run a gateway until ``shutdown`` is set; report a ``ServerInfo`` once every bind listens."""
    from ..admin.servers import stats_app

    shutdown = shutdown if shutdown is not None else trio.Event()
    token = check_admin_token(config)
    nofile = raise_nofile_limit()
    # Keep a margin of descriptors for backend connections, the admin side and files.
    max_connections = config.frontend.max_connections or min(
        DEFAULT_MAX_CONNECTIONS, max(16, (nofile - 256) // 2 // max(1, len(config.binds))))
    tls_contexts = listener_tls_contexts(config)
    runtime = Runtime(config)
    runtime.config_file = None if config_path is None else str(config_path)
    watched = None if config_path is None else SettledFile(Path(config_path))  # before anyone can see a bind
    bound = bind_sockets(config, bind_host)
    info = bound.server_info(runtime, shutdown)
    ready = {"value": False}
    drained = trio.Event()  # the binds finished draining: now the admin side may stop too
    async with runtime.keys_host.serving(), trio.open_nursery() as aux:  # keys: flushed after the drain
        metrics = runtime.metrics
        await serve_own_servers(aux, bound, config, runtime, token, stats=stats_app(metrics),
                                is_ready=lambda: ready["value"] and not shutdown.is_set(), drained=drained)
        try:
            async with trio.open_nursery() as binds:
                for port, sock in bound.binds.items():
                    front = FrontDoor(Gateway(runtime, port),
                                      max_in_flight=lambda: runtime.state.config.frontend.max_in_flight,
                                      on_reject=partial(count_reject, metrics, str(port)))
                    await binds.start(serve_app, front, sock, drain_timeout, shutdown,
                                      connection_counter(str(port), max_connections, metrics,
                                               config.frontend.max_connections_per_client), config.frontend,
                                      tls_contexts.get(port))
                async with trio.open_nursery() as background:
                    await background.start(runtime.jwks.run)  # first JWKS fetches, then refreshes
                    await background.start(runtime.mirrors.run)  # requestMirror copies run here
                    await background.start(runtime.resilience.run_checks)  # health.activeCheck
                    await background.start(runtime.mcp.run)  # stdio MCP servers run here
                    if config_path is not None:
                        background.start_soon(partial(watch_config, Path(config_path), runtime, watched=watched))
                    if extra_tasks is not None:
                        await extra_tasks(background, info)
                    with register_gateway(config, info):
                        ready["value"] = True
                        task_status.started(info)
                        await shutdown.wait()
                    background.cancel_scope.cancel()
                    log.info("draining %d requests", runtime.metrics.requests_in_flight())
                # Leaving this block waits for every bind to drain (hypercorn's grace deadline).
            log.info("drained")
        finally:
            drained.set()
    runtime.pool.close_idle()
    await trio.to_thread.run_sync(runtime.close)  # flush spans without blocking the loop


async def run_until_signalled(config: Config, *, config_path: str | None, drain_timeout: float,
                              extra_tasks: Callable[[trio.Nursery, ServerInfo], Awaitable[None]] | None = None) -> None:
    """The CLI's main: serve until SIGINT/SIGTERM, then drain; a second signal stops at once."""
    shutdown = trio.Event()
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            async def on_signals() -> None:
                async for _ in signals:
                    if shutdown.is_set():
                        nursery.cancel_scope.cancel()
                        return
                    print("trioproxy: shutting down, draining requests in flight", file=sys.stderr, flush=True)
                    shutdown.set()

            async def gateway(task_status: trio.TaskStatus[ServerInfo] = trio.TASK_STATUS_IGNORED) -> None:
                try:
                    await serve_gateway(config, config_path=config_path, drain_timeout=drain_timeout,
                                        shutdown=shutdown, extra_tasks=extra_tasks, task_status=task_status)
                finally:
                    nursery.cancel_scope.cancel()  # drained: stop listening for signals

            nursery.start_soon(on_signals)
            info = await nursery.start(gateway)
            gc_tuning.after_startup()
            nursery.start_soon(gc_tuning.collect_periodically)
            print_listening(config, info)
