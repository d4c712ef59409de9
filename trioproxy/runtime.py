"""What a config compiles into, and the state shared by every bind of one gateway process."""

from __future__ import annotations

import bisect
import random
from itertools import accumulate

import trio

from .config.model import Backend, Config, Listener, Route
from .config.model import Policies
from .metrics import Metrics
from .policies.authorization import AuthorizationPolicy, AuthorizationStage
from .policies.cors import CorsPolicy, CorsStage
from .policies.jwks import JwksRegistry
from .policies.jwt import JwtAuthStage, JwtVerifier, KeyHolder, parse_jwks
from .policies.ratelimit_local import LocalRateLimiter, LocalRateLimitSpec
from .routing import BindTable
from .trace import TraceHub
from .upstream import UpstreamPool


def _limiter(specs: tuple[LocalRateLimitSpec, ...], key: str, previous: "GatewayState | None") -> LocalRateLimiter | None:
    """A limiter for ``specs``; the previous config's one when unchanged, so a reload keeps budgets."""
    if not specs:
        return None
    if previous is not None:
        old = previous.limiters.get(key)
        if old is not None and old[0] == specs:
            return old[1]
    return LocalRateLimiter(specs, trio.current_time())


def compile_stages(policies: Policies, jwks: JwksRegistry) -> tuple:
    """The request stages of one listener or route, in agentgateway's fixed order:
    cors (a preflight never needs a token) → jwtAuth → authorization (sees the claims)."""
    stages: list = []
    if policies.cors is not None:
        stages.append(CorsStage(CorsPolicy(policies.cors)))
    if policies.jwt_auth is not None:
        spec = policies.jwt_auth
        providers, remotes = [], []
        for provider in spec.providers:
            if provider.jwks.url is not None:
                remote = jwks.get(provider.jwks.url)
                remotes.append(remote)
                providers.append((provider, remote.holder))
            else:
                assert provider.jwks.inline is not None  # file and inline JWKS were read and checked at load
                providers.append((provider, KeyHolder(parse_jwks(provider.jwks.inline))))
        stages.append(JwtAuthStage(spec, JwtVerifier(providers), remotes))
    if policies.authorization is not None:
        stages.append(AuthorizationStage(AuthorizationPolicy(policies.authorization)))
    return tuple(stages)


class CompiledRoute:
    """A route plus what choosing among its backends and limiting it need, computed once."""

    __slots__ = ("route", "backends", "cumulative", "limiter", "stages")

    def __init__(self, route: Route, limiter: LocalRateLimiter | None, stages: tuple = ()) -> None:
        self.route = route
        self.stages = stages
        self.backends = tuple(b for b in route.backends if b.weight > 0)
        self.cumulative = list(accumulate(b.weight for b in self.backends))
        self.limiter = limiter

    def choose_backend(self) -> Backend | None:
        if not self.backends:
            return None
        if len(self.backends) == 1:
            return self.backends[0]
        return self.backends[bisect.bisect_right(self.cumulative, random.randrange(self.cumulative[-1]))]


class GatewayState:
    """Everything compiled from one ``Config``; replaced whole on reload."""

    def __init__(self, config: Config, previous: "GatewayState | None" = None,
                 jwks: JwksRegistry | None = None) -> None:
        self.config = config
        jwks = jwks if jwks is not None else JwksRegistry()
        self.listener_stages: dict[str, tuple] = {}
        self.binds = {bind.port: BindTable(bind) for bind in config.binds}
        # listener or route key -> (specs, limiter); a listener's is shared by all its routes.
        self.limiters: dict[str, tuple[tuple[LocalRateLimitSpec, ...], LocalRateLimiter]] = {}
        self.routes: dict[str, CompiledRoute] = {}
        for bind in config.binds:
            for listener in bind.listeners:
                self._limit(listener.key, listener.policies.local_rate_limit, previous)
                self.listener_stages[listener.key] = compile_stages(listener.policies, jwks)
                for route in listener.routes:
                    self.routes[route.key] = CompiledRoute(
                        route, self._limit(route.key, route.policies.local_rate_limit, previous),
                        compile_stages(route.policies, jwks))

    def _limit(self, key: str, specs: tuple[LocalRateLimitSpec, ...], previous: "GatewayState | None") -> LocalRateLimiter | None:
        limiter = _limiter(specs, key, previous)
        if limiter is not None:
            self.limiters[key] = (specs, limiter)
        return limiter

    def listener_limiter(self, listener: Listener) -> LocalRateLimiter | None:
        entry = self.limiters.get(listener.key)
        return entry[1] if entry is not None else None


class Runtime:
    """Shared by every bind of one gateway process: current state, upstream pool, metrics, tracing."""

    def __init__(self, config: Config, *, pool: UpstreamPool | None = None, metrics: Metrics | None = None,
                 trace: TraceHub | None = None) -> None:
        self.pool = pool or UpstreamPool()
        self.metrics = metrics or Metrics(open_upstream_connections=lambda: self.pool.open_connections)
        #: remote JWKS by URL, kept across reloads; its ``run`` task lives in the root nursery
        self.jwks = JwksRegistry(self.metrics.registry)
        self.state = GatewayState(config, jwks=self.jwks)
        self.trace = trace or TraceHub()
        self.reload_errors: list[str] = []  # problems of the last rejected reload, [] after a good one

    def apply(self, config: Config) -> None:
        """Swap in a new config; requests in flight finish on the state they started with."""
        self.state = GatewayState(config, self.state, self.jwks)
        self.reload_errors = []
