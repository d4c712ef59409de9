"""The effective configuration as frozen values, built once by the loader.

Everything the data plane needs per request is precomputed here (lowercased names, compiled
regexes, resolved ports), so the hot path only reads. A reload builds a new ``Config`` and
swaps it in whole; nothing is mutated.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import attrs
from attrs import frozen

from ..policies.api_key import ApiKeySpec
from ..policies.authorization import AuthorizationSpec
from ..policies.backend_auth import BackendAuth as BackendAuth
from ..policies.basic_auth import BasicAuthSpec
from ..policies.cors import CorsSpec
from ..policies.csrf import CsrfSpec
from ..policies.delay import DelaySpec
from ..policies.direct_response import ConditionalDirectResponse as ConditionalDirectResponse
from ..policies.direct_response import DirectResponsePolicy as DirectResponsePolicy
from ..policies.headers import HeaderModifier as HeaderModifier
from ..policies.jwt import JwtAuthSpec
from ..policies.kinds import PHASES, runtime_kinds_of
from ..policies.mcp_auth import McpAuthenticationSpec
from ..policies.mirror import MirrorSpec
from ..policies.ratelimit_local import LocalRateLimitSpec
from ..policies.ratelimit_remote import RemoteRateLimitSpec
from ..policies.resilience import BalancerSpec, HealthSpec, VirtualModel
from ..policies.retry import RetrySpec
from ..policies.timeout import TimeoutPolicy as TimeoutPolicy
from ..policies.url_rewrite import RedirectSpec, UrlRewriteSpec
from .address import Address as Address
from .address import TlsAddress as TlsAddress
from .backend_tls import BackendTls

PathKind = Literal["exact", "pathPrefix", "regex"]
MatchKind = Literal["exact", "regex"]


@frozen
class LogFieldsSpec:
    add: tuple[tuple[str, str], ...] = ()  # (name, CEL source)
    remove: tuple[str, ...] = ()


@frozen
class LoggingSpec:
    """``config.logging``: level/format as written (flags and env win), a CEL filter source."""

    level: str | None = None
    format: str | None = None
    filter: str | None = None
    fields: LogFieldsSpec = LogFieldsSpec()


@frozen
class HistorySpec:
    """``config.history``: how many finished requests' summaries are kept (0: none)."""

    size: int = 1000


@frozen
class PriceOverride:
    """One ``config.prices`` entry: USD per million tokens, each field set over the catalog's entry
    (``llm/pricing.py``); ``None``: the catalog's value."""

    input: float | None = None
    output: float | None = None
    cached_input: float | None = None
    reasoning: float | None = None
    cache_write: float | None = None


@frozen
class TracingSpec:
    """``config.tracing``: where spans go and how many requests start one."""

    endpoint: str
    protocol: str = "grpc"
    headers: tuple[tuple[str, str], ...] = ()
    path: str | None = None
    random_sampling: float = 0.0
    client_sampling: float = 1.0
    fields: LogFieldsSpec = LogFieldsSpec()


@frozen
class ServerAddrs:
    """Where the admin, stats and readiness servers listen (``config:`` section)."""

    admin: Address = Address("localhost", 15000)
    stats: Address = Address("localhost", 15020)  # loopback-safe: set 0.0.0.0 for off-host scrapes and probes
    readiness: Address = Address("localhost", 15021)
    #: bearer token for the admin server off loopback (``config.adminToken`` / env ``ADMIN_TOKEN``)
    admin_token: str | None = attrs.field(default=None, repr=False)
    #: servers set to ``off`` ("admin", "stats", "readiness"): not started
    off: frozenset[str] = frozenset()


@frozen
class FrontendSpec:
    """``frontendPolicies.http``: limits and timeouts of client connections (docs/reliability.md)."""

    max_buffer_size: int = 2 * 1024 * 1024  # agentgateway's default
    max_headers: int = 100
    idle_timeout: float = 60.0
    header_timeout: float = 10.0
    body_idle_timeout: float = 60.0
    max_connections: int | None = None  # None: 10000, or fewer when RLIMIT_NOFILE needs it
    max_connections_per_client: int = 1000  # per client IP address: one client cannot hold every slot
    max_in_flight: int = 10_000
    websocket_max_message_size: int = 1024 * 1024  # bytes (characters of a text message), each way


@frozen
class BackendConnectionSpec:
    """``config.backend``: connecting to backends, pooling, and the default response-header timeout."""

    connect_timeout: float = 10.0
    pool_idle_timeout: float = 90.0
    pool_max_idle: int = 256
    response_header_timeout: float = 300.0


@frozen
class KeysSettings:
    """``config.keys``: runtime API keys, budgets and spend (``trioproxy/keys``, docs/keys.md)."""

    refresh_interval: float = 0.5  # seconds: replicas see new/revoked keys within it
    flush_interval: float = 0.2  # seconds: settlements are batched; a crash loses at most this much
    reservation_ttl: float = 300.0  # seconds: reservations of a crashed process expire
    failure_mode: Literal["closed", "open"] = "closed"
    default_max_tokens: int = 1024  # the estimate's completion part when a request sets no max_tokens
    request_log_enabled: bool = False
    request_log_retention: float = 7 * 86400.0  # seconds


#: the store when ``config.store`` is not set: beside the config file
DEFAULT_STORE = "trioproxy.db"


@frozen
class PathMatch:
    kind: PathKind
    value: str
    pattern: re.Pattern[str] | None = None

    def matches(self, path: str) -> bool:
        if self.kind == "exact":
            return path == self.value
        if self.kind == "pathPrefix":
            # Gateway API prefix semantics: element-wise, "/v1" matches "/v1" and "/v1/x", not "/v10".
            if self.value == "/" or path == self.value:
                return True
            prefix = self.value.rstrip("/")
            return path.startswith(prefix) and (len(path) == len(prefix) or path[len(prefix)] == "/")
        assert self.pattern is not None
        return self.pattern.fullmatch(path) is not None


@frozen
class ValueMatch:
    """A header or query parameter condition."""

    name: str
    kind: MatchKind
    value: str
    pattern: re.Pattern[str] | None = None

    def matches(self, actual: str | None) -> bool:
        if actual is None:
            return False
        if self.kind == "exact":
            return actual == self.value
        assert self.pattern is not None
        return self.pattern.fullmatch(actual) is not None


@frozen
class RouteMatch:
    path: PathMatch = PathMatch("pathPrefix", "/")
    method: str | None = None
    headers: tuple[ValueMatch, ...] = ()
    query: tuple[ValueMatch, ...] = ()


@frozen
class Policies:
    """Policies attached at one level (listener, route or backend); ``None``/empty = unset.

    ``TRACE_KINDS`` names every kind a phase can hold, in the order traces list them, so
    ``policySelection.effectivePolicy`` shows unset kinds as ``null``.
    """

    jwt_auth: JwtAuthSpec | None = None
    basic_auth: BasicAuthSpec | None = None
    api_key: ApiKeySpec | None = None
    authorization: AuthorizationSpec | None = None
    cors: CorsSpec | None = None
    local_rate_limit: tuple[LocalRateLimitSpec, ...] = ()
    remote_rate_limit: RemoteRateLimitSpec | None = None
    request_header_modifier: HeaderModifier | None = None
    response_header_modifier: HeaderModifier | None = None
    timeout: TimeoutPolicy | None = None
    direct_response: DirectResponsePolicy | ConditionalDirectResponse | None = None
    backend_auth: BackendAuth | None = None
    backend_tls: BackendTls | None = None
    retry: RetrySpec | None = None
    csrf: CsrfSpec | None = None
    url_rewrite: UrlRewriteSpec | None = None
    request_redirect: RedirectSpec | None = None
    request_mirror: MirrorSpec | None = None
    delay: DelaySpec | None = None
    mcp_authentication: McpAuthenticationSpec | None = None


EMPTY_POLICIES = Policies()

#: camelCase kind -> attribute, per phase, in trace order (``policies/kinds.py``'s table)
TRACE_KINDS: dict[str, tuple[tuple[str, str], ...]] = {
    phase: tuple((kind.name, kind.attribute) for kind in runtime_kinds_of(phase)) for phase in PHASES}


@frozen
class AIBackend:
    """An LLM provider reached at its backend's ``target`` (``llm_providers.py`` has the defaults)."""

    name: str
    provider: str  # openAI, anthropic, gemini, vertex, azure, bedrock, or an OpenAI-compatible preset (groq...)
    model: str | None
    #: ``pathOverride``: the upstream path whatever the endpoint (may hold ``{model}``)
    path_override: str | None
    #: (endpoint kind, path) the provider serves; empty with hostOverride (the client's path is kept)
    paths: tuple[tuple[str, str], ...] = ()
    #: chat streams report usage only when the request asks (OpenAI-style ``stream_options``)
    stream_usage_option: bool = True
    #: where the Bearer credential goes for this provider
    key_header: bytes = b"authorization"
    #: Bedrock: the AWS region its requests are signed for (llm_translate)
    region: str | None = None
    #: an ``ai`` policy's routes map: (path suffix, endpoint kind), longest suffix first, ``*`` last;
    #: empty: the kind is chosen by ``llm_providers.endpoint_kind``
    routes: tuple[tuple[str, str], ...] = ()

    def upstream_path(self, kind: str) -> str | None:
        """The path a request of endpoint ``kind`` goes to; None keeps the client's. A chat request
        to a provider without that endpoint goes to its main one (Anthropic: Messages), as before
        endpoints were told apart."""
        if self.path_override is not None:
            return self.path_override
        for k, path in self.paths:
            if k == kind:
                return path
        return self.paths[0][1] if kind == "completions" and self.paths else None


@frozen
class McpTarget:
    """One MCP server of an ``mcp`` backend (docs/mcp.md)."""

    name: str
    transport: Literal["mcp", "sse", "stdio"]
    url: str = ""                                   # http(s)://host:port/path (mcp, sse)
    cmd: str = ""                                   # stdio
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = attrs.field(default=(), metadata={"secret": True})  # redacted in dumps


@frozen
class McpBackend:
    """An ``mcp`` backend: its targets and how they are multiplexed (``trioproxy/mcp/``)."""

    targets: tuple[McpTarget, ...]
    stateful: bool = True
    prefix_mode: Literal["conditional", "always", "never"] = "conditional"
    fail_open: bool = False
    #: ``mcpAuthorization`` (the backend's, else its route's): applied to calls and listings
    authorization: AuthorizationSpec | None = None

    @property
    def prefixed(self) -> bool:
        return self.prefix_mode == "always" or (self.prefix_mode == "conditional" and len(self.targets) > 1)


@frozen
class Backend:
    name: str
    target: Address
    weight: int = 1
    policies: Policies = EMPTY_POLICIES
    ai: AIBackend | None = None
    mcp: McpBackend | None = None
    #: TLS to the backend (its or its route's backendTLS, or an ``ai`` provider's default); None: plain
    tls: BackendTls | None = None
    #: outlier detection (its or its route's ``health``; ``llm:`` models: on by default); None: off
    health: HealthSpec | None = None
    #: ``llm.models[].localRateLimit``: the target's own quota (docs/resilience.md, "Per-target limits")
    target_limits: tuple[LocalRateLimitSpec, ...] = ()

    @property
    def kind(self) -> str:
        return "ai" if self.ai is not None else "mcp" if self.mcp is not None else "host"


@frozen
class LlmModelRoute:
    """One ``llm.models`` entry: the model name pattern and the route backend serving it."""

    pattern: str                         # exact, ``prefix/*``, ``*suffix`` or ``*``
    backend: int                         # index into the route's backends
    model_expression: str | None = None  # ``transformation.model`` (CEL over ``llmRequest``)
    virtual: VirtualModel | None = None  # ``llm.virtualModels``: the targets this name stands for


@frozen
class Route:
    key: str
    name: str
    namespace: str
    hostnames: tuple[str, ...]
    matches: tuple[RouteMatch, ...]
    policies: Policies
    backends: tuple[Backend, ...]
    index: int
    #: from the ``llm:`` format: the backend is chosen by the body's model, not by weight
    models: tuple[LlmModelRoute, ...] = ()
    #: ``loadBalancer``: how a backend is picked among the healthy ones (None: by weight)
    balancer: BalancerSpec | None = None


@frozen
class ListenerTls:
    """Files of a listener's TLS (``listener_tls.server_context`` builds the SSL context)."""

    cert: str
    key: str
    root: str | None = None  # CA bundle: client certificates are required and verified


@frozen
class Listener:
    key: str
    name: str
    protocol: str
    hostname: str | None
    policies: Policies
    routes: tuple[Route, ...]
    tls: ListenerTls | None = None


@frozen
class Bind:
    port: int
    listeners: tuple[Listener, ...]

    @property
    def tls(self) -> ListenerTls | None:
        """The bind's TLS: its listeners' (config loading allows one TLS listener per bind)."""
        return next((listener.tls for listener in self.listeners if listener.tls is not None), None)

    @property
    def key(self) -> str:
        return f"bind/{self.port}"


@frozen
class Config:
    servers: ServerAddrs
    binds: tuple[Bind, ...]
    logging: LoggingSpec | None = None
    tracing: TracingSpec | None = None
    history: HistorySpec = HistorySpec()
    #: ``config.prices``: model name -> override of the price catalog, in the file's order
    prices: tuple[tuple[str, PriceOverride], ...] = ()
    frontend: FrontendSpec = FrontendSpec()
    backend: BackendConnectionSpec = BackendConnectionSpec()
    gateway_names: tuple[str, ...] = ("default",)
    #: statuses of the Kubernetes-style resources it was translated from (``config/manifest.py``);
    #: ``()`` for a standalone file. Not part of equality: a status is about the config, not in it.
    statuses: tuple[Any, ...] = attrs.field(default=(), eq=False, repr=False)
    #: the resources it was translated from, as accepted (a reload keeps the last valid version
    #: of a resource whose edit is invalid)
    manifest_sources: tuple[Any, ...] = attrs.field(default=(), eq=False, repr=False)
    #: one line per resource left out (``--validate-only`` fails on them; the gateway logs them)
    rejected: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False)
    #: worker processes (``config.workers``): 1 = today's single process, 0 = auto (one per CPU)
    workers: int = 1
    #: the key store (``config.store``): an absolute SQLite path or a ``postgresql://`` URL; the
    #: compiler always sets it (default ``trioproxy.db`` beside the config file, or in the working
    #: directory when the config has no file); None only for a Config built without the compiler
    #: (a manifest). Opened only when something uses runtime keys.
    store: str | None = None
    keys: KeysSettings = KeysSettings()
    #: ``config.session.key``: signs MCP session ids (None: a key made at start, this process only)
    session_key: bytes | None = attrs.field(default=None, repr=False)
