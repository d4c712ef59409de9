"""What a config compiles into, and the state shared by every bind of one gateway process."""

from __future__ import annotations

import bisect
import random
import threading
from collections.abc import Awaitable, Callable, Iterable
from itertools import accumulate
from math import inf
from typing import TYPE_CHECKING, Any

from prometheus_client.metrics_core import Metric

from ..config.model import Backend, Config, Listener, Route
from ..keys.metrics import KeysMetrics
from ..keys.service import KeyService
from ..llm.pricing import PriceCatalog
from ..llm.providers import UNREAD_KINDS
from ..policies.jwks import JwksRegistry
from ..policies.ratelimit_local import LocalRateLimiter, LocalRateLimitSpec
from ..redaction import DEFAULT as REDACT_BY_DEFAULT
from ..redaction import Redaction
from ..telemetry.access_log import AccessLog
from ..telemetry.history import History
from ..telemetry.metrics import Metrics
from ..telemetry.otel import OtelTracing
from ..telemetry.trace import TraceHub
from ..upstream.pool import UpstreamPool
from .attempts import Resilience
from .disconnect_monitor import DisconnectMonitor
from .disconnect_monitor import available as disconnect_monitor_available
from .keys_host import KeysHost
from .mcp_stage import McpHub
from .mirror_sender import MirrorSender
from .routing import BindTable
from .stage import Phase
from .stages import STAGE_ORDER as STAGE_ORDER
from .stages import LimiterFactory as LimiterFactory
from .stages import StageCompiler as StageCompiler
from .stages import compile_phase, local_limiter

if TYPE_CHECKING:
    from .exchange import Exchange


class CompiledRoute:
    """A route plus its phases and what choosing among its backends needs, computed once."""

    __slots__ = ("backend_phases", "backends", "buffers_llm_body", "cumulative", "limiter", "llm", "mcp", "mcp_peek",
                 "phase", "phases_by_index", "request_timeout", "route", "target_limiters")

    def __init__(self, route: Route, phase: Phase, backend_phases: tuple[Phase, ...],
                 limiter: LocalRateLimiter | None = None,
                 target_limiters: tuple[LocalRateLimiter | None, ...] = ()) -> None:
        self.route = route
        self.phase = phase
        #: a route to LLM providers: endpoint kinds, and the gateway's errors in the provider's dialect
        self.llm = bool(route.models) or any(b.ai is not None for b in route.backends)
        #: a route to MCP servers whose authorization rules or remoteRateLimit descriptors may read CEL
        #: ``mcp``: its JSON-RPC call is read before the route phase (else only once authenticated)
        self.mcp_peek = next((b.mcp for b in route.backends if b.mcp is not None), None) \
            if route.policies.authorization is not None or route.policies.remote_rate_limit is not None else None
        #: an MCP backend may keep a listening stream open in the request's nursery (mcp/relay.py)
        self.mcp = any(b.mcp is not None for b in route.backends)
        #: every target is a provider whose endpoint kind is the route's: a body of a kind the gateway
        #: reads (chat, messages, responses...) is buffered, never uploaded by a task of its own
        self.buffers_llm_body = bool(route.backends) and all(
            b.ai is not None and not b.ai.routes for b in route.backends)
        self.phases_by_index = backend_phases  # route.backends[i]'s phase (the llm: format picks by model)
        chosen = [(b, p) for b, p in zip(route.backends, backend_phases) if b.weight > 0]
        self.backends = tuple(b for b, _ in chosen)
        self.backend_phases = tuple(p for _, p in chosen)
        self.cumulative = list(accumulate(b.weight for b in self.backends))
        self.limiter = limiter
        #: route.backends[i]'s own quota (``llm.models[].localRateLimit``), by backend index; () when none has one
        self.target_limiters = target_limiters
        timeout = route.policies.timeout
        self.request_timeout = timeout.request_timeout if timeout and timeout.request_timeout else None

    def needs_tasks(self, x: Exchange) -> bool:
        """May this request start a task beside it (gateway.py opens a nursery for it then)? An
        MCP route (a listening stream), or a body the attempt may stream to the backend (an upload
        task, so that the backend's answer is read while the body still goes out). A request
        without a body, or with one an ``ai`` route reads whole, needs none."""
        if self.mcp:
            return True
        if not x.has_body() and x.scope.get("http_version", "1.1").startswith("1"):
            return False  # HTTP/1 declares its body (HTTP/2's may come without content-length)
        return not (self.buffers_llm_body and x.llm_kind not in UNREAD_KINDS)

    def request_deadline(self, arrival: float) -> float:
        """When ``requestTimeout``, counted from the request's arrival, runs out; ``inf`` without one."""
        return arrival + self.request_timeout if self.request_timeout is not None else inf

    def choose_backend(self) -> tuple[Backend, Phase] | None:
        """A backend by weight, with its compiled phase."""
        if not self.backends:
            return None
        if len(self.backends) == 1:
            return self.backends[0], self.backend_phases[0]
        i = bisect.bisect_right(self.cumulative, random.randrange(self.cumulative[-1]))
        return self.backends[i], self.backend_phases[i]


class GatewayState:
    """Everything compiled from one ``Config``; replaced whole on reload."""

    def __init__(self, config: Config, previous: GatewayState | None = None,
                 jwks: JwksRegistry | None = None,
                 count_decision: Callable[[str, str, str], None] = lambda policy, key, result: None,
                 limiter_factory: LimiterFactory = local_limiter,
                 runtime_keys: Callable[[], Any] | None = None) -> None:
        self.config = config
        self.limiter_factory = limiter_factory
        self.runtime_keys = runtime_keys
        #: the bundled model prices with ``config.prices`` over them (docs/pricing.md)
        self.prices = PriceCatalog.bundled().with_overrides(config.prices)
        compiler = StageCompiler(jwks if jwks is not None else JwksRegistry(),
                                 previous.limiters if previous is not None else {}, count_decision, limiter_factory,
                                 runtime_keys)
        self.binds = {bind.port: BindTable(bind) for bind in config.binds}
        self.listeners: dict[str, Phase] = {}
        self.routes: dict[str, CompiledRoute] = {}
        for bind in config.binds:
            for listener in bind.listeners:
                self.listeners[listener.key] = compile_phase("gateway", listener.policies, listener.key, compiler)
                for route in listener.routes:
                    phase = compile_phase("route", route.policies, route.key, compiler)
                    backends = tuple(compile_phase("backend", b.policies, f"{route.key}/backend/{i}", compiler)
                                     for i, b in enumerate(route.backends))
                    entry = compiler.limiters.get(route.key)
                    self.routes[route.key] = CompiledRoute(route, phase, backends, entry[1] if entry else None,
                                                           target_limiters(route, compiler))
        # listener or route key -> (specs, limiter): kept for the next reload and the admin API
        self.limiters: dict[str, tuple[tuple[LocalRateLimitSpec, ...], LocalRateLimiter]] = compiler.limiters

    def listener_limiter(self, listener: Listener) -> LocalRateLimiter | None:
        entry = self.limiters.get(listener.key)
        return entry[1] if entry is not None else None


def target_limiters(route: Route, compiler: StageCompiler) -> tuple[LocalRateLimiter | None, ...]:
    """Each backend's ``target_limits`` as a limiter (kept across reloads while its specs are unchanged,
    as a route's), keyed ``<route>/model/<name>``; () when no backend has one."""
    if not any(b.target_limits for b in route.backends):
        return ()
    return tuple(compiler.limiter(b.target_limits, f"{route.key}/model/{b.name}") for b in route.backends)


def credential_redaction(config: Config) -> Redaction:
    """The usual credential names, plus each header and query parameter an ``apiKey`` or
    ``basicAuth`` policy of ``config`` reads its credentials from (cookies are redacted whole), and
    each header the config itself puts a credential in: an ``ai`` backend's key header (Azure's
    ``api-key``: ``backendAuth`` or the client's Bearer moved there) and a header modifier's value
    read from ``$VAR``."""
    headers: set[bytes] = set()
    params: set[str] = set()
    for bind in config.binds:
        for listener in bind.listeners:
            backends = [backend for route in listener.routes for backend in route.backends]
            headers.update(backend.ai.key_header for backend in backends if backend.ai is not None)
            for policies in (listener.policies, *(route.policies for route in listener.routes),
                             *(backend.policies for backend in backends)):
                for modifier in (policies.request_header_modifier, policies.response_header_modifier):
                    if modifier is not None:
                        headers.update(modifier.from_env)
                for auth in (policies.api_key, policies.basic_auth):
                    where = auth.location if auth is not None else None
                    if where is not None and where.kind == "header":
                        headers.add(where.name.lower().encode("latin-1"))
                    elif where is not None and where.kind == "queryParameter":
                        params.add(where.name.lower())
    return REDACT_BY_DEFAULT.also(frozenset(headers), frozenset(params))


class Runtime:
    """Shared by every bind of one gateway process: current state, upstream pool, metrics, tracing."""

    def __init__(self, config: Config, *, pool: UpstreamPool | None = None, metrics: Metrics | None = None,
                 trace: TraceHub | None = None, limiter_factory: LimiterFactory = local_limiter) -> None:
        self.pool = pool or UpstreamPool()
        self.metrics = metrics or Metrics(open_upstream_connections=lambda: self.pool.open_connections)
        #: remote JWKS by URL, kept across reloads; its ``run`` task lives in the root nursery
        self.jwks = JwksRegistry(self.metrics.registry)
        #: outlier detection, balancing and retry budgets of the targets, kept across reloads
        self.resilience = Resilience(self.metrics.registry, pool=self.pool, config=lambda: self.state.config)
        #: the relays of mcp backends (docs/mcp.md)
        self.mcp = McpHub(self.metrics.registry)
        #: requestMirror copies; its ``run`` task lives in the root nursery
        self.mirrors = MirrorSender(self.pool)
        #: the metric families the admin API summarises: this process's, unless a supervisor sums its
        #: workers' (workers/supervisor.py)
        self.metric_families: Callable[[], Awaitable[Iterable[Metric]]] = self._own_metric_families
        self.state = GatewayState(config, jwks=self.jwks, count_decision=self.metrics.ratelimit_decision,
                                  limiter_factory=limiter_factory, runtime_keys=lambda: self.keys)
        self.trace = trace or TraceHub()
        self.trace.on_drop = self.metrics.trace_events_dropped.inc
        self._tune_pool(config)
        self.access_log = AccessLog()
        #: the last requests' summaries (``/api/requests``); a supervisor's gets its workers'
        self.history = History(config.history.size)
        self.otel: OtelTracing | None = None
        self._observability(config)
        self.reload_errors: list[str] = []  # problems of the last rejected reload, [] after a good one
        self.config_file: str | None = None  # the watched file; None: a built-in config (the demo)
        #: client disconnects of requests whose server gives the socket (asgi.CLIENT_FD); Linux
        self.disconnects = DisconnectMonitor() if disconnect_monitor_available() else None
        #: the runtime key service (``keys``), opened when first needed; its task runs in
        #: ``keys_host.serving()`` (frontend/server.py, the workers)
        #: spend and remaining budgets of runtime keys (docs/keys.md, "Metrics")
        self.keys_metrics = KeysMetrics(self.metrics.registry)
        self.keys_host = KeysHost(lambda: self.state.config, metrics=self.keys_metrics)

    @property
    def keys(self) -> KeyService:
        """The runtime key service (``config.store``, ``config.keys``; docs/keys.md): created at the
        first use, shared by the request path (``apiKey: {runtimeKeys: true}``) and the admin API."""
        return self.keys_host.get()

    async def _own_metric_families(self) -> Iterable[Metric]:
        return self.metrics.registry.collect()

    def apply(self, config: Config) -> None:
        """Swap in a new config; requests in flight finish on the state they started with."""
        self.state = GatewayState(config, self.state, self.jwks, self.metrics.ratelimit_decision,
                                  self.state.limiter_factory, self.state.runtime_keys)
        self.reload_errors = []
        self._observability(config)
        self._tune_pool(config)
        self.keys_host.configure(config)
        self.resilience.config_changed()

    def _tune_pool(self, config: Config) -> None:
        """``config.backend``: the pool's connect timeout and idle limits (read at each connect)."""
        spec = config.backend
        self.pool.connect_timeout = spec.connect_timeout
        self.pool.idle_timeout = spec.pool_idle_timeout
        self.pool.max_idle_per_target = spec.pool_max_idle

    def _observability(self, config: Config) -> None:
        """The access-log filter and fields, the span exporter (kept when unchanged) and what traces
        redact, of ``config``."""
        self.access_log.configure(config.logging)
        self.history.resize(config.history.size)
        self.trace.redaction = credential_redaction(config)
        spec = config.tracing
        if self.otel is not None and self.otel.spec == spec:
            return
        old, self.otel = self.otel, None
        if spec is not None:
            self.otel = OtelTracing(spec, on_export_failure=self.metrics.otlp_export_failures.inc)
        if old is not None:  # flushing may wait on the collector: never on the event loop
            threading.Thread(target=old.shutdown, name="otlp-shutdown", daemon=True).start()

    def close(self) -> None:
        """Flush and stop the span exporter (at exit)."""
        if self.otel is not None:
            self.otel.shutdown()
            self.otel = None
