"""The stages: each policy kind's thin async shell around its spec and pure decision, and the ONE
ordered table of them (``STAGE_ORDER``).

A kind's spec and decision live in its own module below (``policies/<kind>.py``), which imports
nothing from the exchange, the trace or routing, so the config model can hold the specs without
a cycle; what reads and changes the request (``Exchange``) is here, above them. How to add a
kind: docs/pipeline.md, "Adding a policy kind".
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import trio

from ..cel import compile_expression
from ..config.model import Policies
from ..errors import (
    ApiKeyAuthenticationFailed,
    AuthenticationFailed,
    AuthorizationDenied,
    BasicAuthenticationBusy,
    BasicAuthenticationFailed,
    CsrfValidationFailed,
    DirectResponse,
    KeyRefused,
    RateLimited,
    RateLimitFailed,
)
from ..policies import basic_auth
from ..policies.api_key import ApiKeySpec, key_digest
from ..policies.authorization import AuthorizationPolicy, decide
from ..policies.basic_auth import BCRYPT_PREFIXES, BasicAuthSpec, credentials_of, dummy_hash
from ..policies.cors import CorsPolicy
from ..policies.csrf import CsrfSpec, csrf_refusal
from ..policies.delay import DelaySpec, delay_seconds
from ..policies.headers import header_value
from ..policies.jwks import JwksRegistry
from ..policies.jwt import (
    JwtAuthSpec,
    JwtFailure,
    JwtVerifier,
    KeyHolder,
    ProviderSpec,
    UnknownKey,
    bearer_token,
    parse_jwks,
)
from ..policies.mirror import MirrorSpec
from ..policies.ratelimit_local import LocalRateLimiter, LocalRateLimitSpec
from ..policies.ratelimit_remote import RemoteRateLimitPolicy, RemoteRateLimitSpec
from ..policies.retry import RetrySpec
from ..policies.url_rewrite import RedirectSpec, UrlRewriteSpec, redirect_location, rewrite_authority, rewrite_prefix
from ..redaction import REDACTED
from ..rls.wire_client import RlsCallFailed, client_for
from ..telemetry.trace import activation
from .after_response import AFTER_RESPONSE, AfterResponse
from .header_stages import (
    BackendAuthStage,
    DirectResponseStage,
    RequestHeaderModifierStage,
    ResponseHeaderModifierStage,
)
from .mcp_stage import McpAuthenticationStage
from .ratelimit_client import ClientRateLimitStage
from .ratelimit_local_stage import local_rate_limit_stage
from .stage import Phase, SpecStage, Stage

if TYPE_CHECKING:
    from .exchange import Exchange


# --- authentication and authorization ---------------------------------------------------------

class CorsStage(Stage):
    """``cors``: answers preflights itself; adds CORS headers to allowed responses."""

    kind = "cors"

    def __init__(self, policy: CorsPolicy) -> None:
        self.policy = policy

    async def request(self, x: Exchange) -> None:
        decision = self.policy.decide(x.scope["method"], x.headers)
        if x.tracer and decision.result != "no origin":
            x.tracer.event("policy", severity="warn" if decision.result.startswith("disallowed") else "info",
                           kind="cors", result=decision.result,
                           origin=(header_value(x.headers, b"origin") or b"").decode("latin-1"))
        if decision.preflight:
            raise DirectResponse(200, "", headers=decision.headers)
        if decision.headers:
            x.extra_response_headers = x.extra_response_headers + list(decision.headers)


CHALLENGE = ((b"www-authenticate", b"Bearer"),)
#: the ``why`` of a strict jwtAuth without a token (read only)
NO_BEARER: dict[str, Any] = {"policy": "jwtAuth", "check": "missing", "detail": "no bearer token found"}


def _without_bearer(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [h for h in headers if not (h[0] == b"authorization" and h[1].lstrip()[:7].lower() == b"bearer ")]


class JwtAuthStage(Stage):
    """``jwtAuth``: sets ``x.jwt`` to the claims and removes the token before the request goes upstream.

    Trace ``policy`` events (kind ``jwt``) say what was decided and why; they carry the issuer
    and subject of an accepted token, never the token.
    """

    kind = "jwtAuth"

    def __init__(self, spec: JwtAuthSpec, verifier: JwtVerifier, remotes: Sequence[Any] = ()) -> None:
        self.spec = spec
        self.verifier = verifier
        self.remotes = tuple(remotes)  # RemoteJwks of the URL providers (refetched for an unknown kid)

    async def _refetch(self) -> bool:
        refreshed = False
        for remote in self.remotes:
            refreshed = await remote.refetch_for_unknown_kid() or refreshed
        return refreshed

    async def request(self, x: Exchange) -> None:
        tr = x.tracer
        mode = self.spec.mode
        token = bearer_token(x.headers)
        if token is None:
            if mode == "strict":
                if tr:
                    tr.event("policy", severity="warn", kind="jwt", result="rejected", reason="no bearer token found")
                raise AuthenticationFailed("no bearer token found", headers=CHALLENGE, why=NO_BEARER)
            if tr:
                tr.event("policy", kind="jwt", result="skipped", reason=f"no bearer token ({mode} mode)")
            return
        try:
            try:
                claims = self.verifier.verify(token, time.time())
            except UnknownKey:
                if not self.remotes or not await self._refetch():
                    raise
                claims = self.verifier.verify(token, time.time())
        except JwtFailure as failure:
            if mode == "permissive":
                if tr:
                    tr.event("policy", severity="warn", kind="jwt", result="skipped",
                             reason=f"{failure.reason} (permissive mode: passed without claims)")
                return
            if tr:
                tr.event("policy", severity="warn", kind="jwt", result="rejected", reason=failure.reason)
            raise AuthenticationFailed(failure.reason, headers=CHALLENGE, why=failure.why()) from None
        x.jwt = claims
        x.headers = _without_bearer(x.headers)
        if tr:
            tr.event("policy", severity="success", kind="jwt", result="authenticated",
                     issuer=claims.get("iss"), subject=claims.get("sub"))
            # the request as it now is: token gone, claims under ``jwt``
            tr.snapshot("jwtAuth", x)


class BasicAuthStage(Stage):
    """Sets ``x.basic_auth`` (CEL ``basicAuth``); after jwtAuth, before apiKey, as in agentgateway."""

    kind = "basicAuth"
    __slots__ = ("challenge", "checks", "dummy", "limiter", "spec", "users", "verified")

    def __init__(self, spec: BasicAuthSpec) -> None:
        self.spec = spec
        self.users = dict(spec.users)
        self.challenge = ((b"www-authenticate", f'Basic realm="{spec.realm}"'.encode("latin-1")),)
        self.verified: OrderedDict[bytes, float] = OrderedDict()  # digest of user:password -> until
        # the limits and verify_password are read through their module, where tests patch them
        self.limiter = trio.CapacityLimiter(basic_auth.BCRYPT_THREADS)
        self.checks = 0  # bcrypt checks running or waiting for a thread
        self.dummy = dummy_hash(spec.users)

    def _fail(self, x: Exchange, reason: str, check: str, detail: str | None = None,
              user: str | None = None) -> BasicAuthenticationFailed:
        x.tracer.event("policy", severity="warn", kind="basicAuth", result="rejected", reason=reason)
        why = {"policy": "basicAuth", "check": check, "detail": detail or reason}
        if user is not None:
            why["username"] = user
        return BasicAuthenticationFailed(reason, headers=self.challenge, why=why)

    async def request(self, x: Exchange) -> None:
        spec = self.spec
        encoded = spec.location.extract(x)
        if encoded is None:
            if spec.mode == "strict":
                raise self._fail(x, "no basic authentication credentials found", "missing")
            x.tracer.event("policy", kind="basicAuth", result="skipped", reason="no credentials (optional mode)")
            return
        credentials = credentials_of(encoded)
        if credentials is None:
            raise self._fail(x, "invalid credentials", "malformed", "the credentials are not base64 user:password")
        user, password = credentials
        hashed = self.users.get(user)
        if hashed is None:  # as slow as a wrong password, so the timing does not tell users apart
            await self._verify(user, password, self.dummy)
            raise self._fail(x, "invalid credentials", "user", f"unknown user {user!r}", user)
        if not await self._verify(user, password, hashed):
            raise self._fail(x, "invalid credentials", "password", f"wrong password for user {user!r}", user)
        spec.location.remove(x)
        x.basic_auth = {"username": user}
        if x.tracer:
            x.tracer.event("policy", severity="success", kind="basicAuth", result="authenticated", username=user)
            x.tracer.snapshot("basicAuth", x)

    async def _verify(self, user: str, password: bytes, hashed: str) -> bool:
        key = hashlib.sha256(user.encode() + b"\x00" + password + b"\x00" + hashed.encode()).digest()
        now = trio.current_time()
        until = self.verified.get(key)
        if until is not None and until > now:
            return True
        if hashed.startswith(BCRYPT_PREFIXES):
            if self.checks >= basic_auth.BCRYPT_THREADS + basic_auth.BCRYPT_QUEUE:
                raise BasicAuthenticationBusy(headers=((b"retry-after", b"1"),), why={
                    "policy": "basicAuth", "check": "busy", "username": user,
                    "detail": f"{self.checks} bcrypt password checks running or queued (at most "
                              f"{basic_auth.BCRYPT_THREADS + basic_auth.BCRYPT_QUEUE})"})
            self.checks += 1
            try:
                ok = await trio.to_thread.run_sync(basic_auth.verify_password, hashed, password, limiter=self.limiter)
            finally:
                self.checks -= 1
        else:
            ok = basic_auth.verify_password(hashed, password)
        if ok:
            self.verified[key] = now + basic_auth.CACHE_SECONDS
            self.verified.move_to_end(key)
            while len(self.verified) > basic_auth.CACHE_SIZE:
                self.verified.popitem(last=False)
        return ok


#: the ``why`` of an apiKey refusal without a key, and with a key nobody knows (read only)
NO_API_KEY: dict[str, Any] = {"policy": "apiKey", "check": "missing", "detail": "no API Key found"}
UNKNOWN_API_KEY: dict[str, Any] = {"policy": "apiKey", "check": "unknown", "detail": "no key of the policy matches"}
UNKNOWN_RUNTIME_KEY: dict[str, Any] = {"policy": "apiKey", "check": "unknown",
                                       "detail": "neither a key of the policy nor a runtime key matches"}


class ApiKeyStage(Stage):
    """Sets ``x.api_key`` (CEL ``apiKey``) for a known key; after jwtAuth, before authorization.

    With ``runtimeKeys``, a key not in the config is looked up among the runtime keys
    (docs/keys.md): a known one also sets ``x.principal`` and CEL ``key``/``team``; the budget is
    reserved later, once the body is known (keys_stage.py)."""

    kind = "apiKey"
    __slots__ = ("keys", "runtime_keys", "spec")

    def __init__(self, spec: ApiKeySpec, runtime_keys: Callable[[], Any] | None = None) -> None:
        self.spec = spec
        self.keys: Mapping[str, dict[str, str]] = {digest: dict(metadata) for digest, metadata in spec.keys}
        #: the runtime's KeyService, when the spec takes runtime keys
        self.runtime_keys = runtime_keys if spec.runtime_keys else None

    async def request(self, x: Exchange) -> None:
        spec = self.spec
        key = spec.location.extract(x)
        tr = x.tracer
        if key is None:
            if spec.mode == "strict":
                tr.event("policy", severity="warn", kind="apiKey", result="rejected", reason="no API Key found")
                raise ApiKeyAuthenticationFailed("no API Key found", why=NO_API_KEY)
            if tr:  # the reason is formatted only for a watcher
                tr.event("policy", kind="apiKey", result="skipped", reason=f"no API key ({spec.mode} mode)")
            return
        metadata = self.keys.get(key_digest(key))
        if metadata is None and self.runtime_keys is not None:
            metadata = await self._runtime_key(x, key)
        if metadata is None:
            if spec.mode == "permissive":
                tr.event("policy", severity="warn", kind="apiKey", result="skipped",
                         reason="invalid credentials (permissive mode: passed without apiKey)")
                return
            tr.event("policy", severity="warn", kind="apiKey", result="rejected", reason="invalid credentials")
            raise ApiKeyAuthenticationFailed(
                "invalid credentials", why=UNKNOWN_API_KEY if self.runtime_keys is None else UNKNOWN_RUNTIME_KEY)
        spec.location.remove(x)
        x.api_key = {**metadata, "key": REDACTED}
        if tr:
            tr.event("policy", severity="success", kind="apiKey", result="authenticated", metadata=metadata)
            tr.snapshot("apiKey", x)  # the request as it now is: the key gone

    async def _runtime_key(self, x: Exchange, secret: str) -> dict[str, str] | None:
        """The runtime key's metadata (None: not a runtime key); 401 for a revoked, expired or rotated
        one, whatever the mode (the key was meant, and is no longer good); 503 when the store is
        down and the key is not in the service's cache."""
        assert self.runtime_keys is not None
        service = self.runtime_keys()
        try:
            principal = await service.authenticate(secret)
        except KeyRefused as refused:
            if refused.reason == "invalid api key":
                return None
            x.tracer.event("policy", severity="warn", kind="apiKey", result="rejected", reason=refused.reason)
            raise ApiKeyAuthenticationFailed(refused.reason, why=refused.why) from None
        x.principal = principal
        if self.spec.log_payloads:
            x.payloads = {}  # the request log keeps the bodies (keys_stage.py)
        x.key = principal.key.cel()
        x.team = principal.team.cel() if principal.team is not None else None
        return {**principal.key.metadata, "name": principal.key.name, "id": principal.key.id}


class AuthorizationStage(Stage):
    """``authorization``: 403 ``authorization failed`` unless the rules allow the request."""

    kind = "authorization"

    def __init__(self, policy: AuthorizationPolicy) -> None:
        self.policy = policy

    async def request(self, x: Exchange) -> None:
        decision = decide(self.policy, activation(x))
        if x.tracer:
            x.tracer.event("policy", severity="info" if decision.allowed else "warn", kind="authorization",
                           result="allowed" if decision.allowed else "denied", reason=decision.reason,
                           rule=decision.rule)
        if not decision.allowed:
            raise AuthorizationDenied(why={"policy": "authorization", "rule": decision.rule,
                                           "detail": decision.reason})


# --- the rest of the request ----------------------------------------------------------------


class RetryStage(SpecStage[RetrySpec]):
    kind = "retry"
    __slots__ = ()

    async def request(self, x: Exchange) -> None:
        x.retry = self.spec


def descriptors_of(policy: RemoteRateLimitPolicy,
                   x: Exchange) -> tuple[list[tuple[int, list[tuple[str, str]]]], list[str]]:
    """``policy.descriptors`` for an exchange, without an activation when every entry is direct."""
    if policy.direct:
        return policy.choose(x, True)
    return policy.choose(activation(x), False)


class RemoteRateLimitStage(Stage):
    """The call: one per request (plus one after the response when tokens are counted)."""

    kind = "remoteRateLimit"

    def __init__(self, spec: RemoteRateLimitSpec, key: str, count: Callable[[str, str, str], None],
                 client: Any = None) -> None:
        self.spec = spec
        self.policy = RemoteRateLimitPolicy(spec)
        self.key = key
        self.count = count
        self.client = client if client is not None else client_for(spec.host)

    def _event(self, x: Exchange, severity: str, result: str, **fields: Any) -> None:
        if x.tracer.active:
            x.tracer.event("policy", severity=severity, scope=["rate_limit"], kind="remoteRateLimit",
                           result=result, **fields)

    async def request(self, x: Exchange) -> None:
        chosen, skipped = descriptors_of(self.policy, x)
        for reason in skipped:
            self._event(x, "warn", "skipped", reason=reason)
        if not chosen:
            return
        hits = self.policy.hits
        calls = [(entries, hits[i]) for i, entries in chosen]
        if self.policy.counts_tokens and any(hits[i] == 0 for i, _ in chosen):
            x.remote_charges.append((self, [entries for i, entries in chosen if hits[i] == 0]))
        try:
            response = await self.client.should_rate_limit(self.spec.domain, calls, self.spec.timeout)
        except RlsCallFailed as exc:
            self.count("remoteRateLimit", self.key, "failed")
            if self.spec.failure_mode == "failOpen":
                self._event(x, "warn", "failedOpen", reason=str(exc))
                return
            self._event(x, "error", "failed", reason=str(exc))
            raise RateLimitFailed(why={"policy": "remoteRateLimit", "check": "call", "detail": str(exc),
                                       "failureMode": "failClosed"}) from None
        decision = self.policy.decide(response, x.tracer.active)
        self.count("remoteRateLimit", self.key, "allowed" if decision.allowed else "rejected")
        if x.tracer.active:  # (the event's fields are built only for a watcher)
            self._event(x, "info" if decision.allowed else "warn", "allowed" if decision.allowed else "rejected",
                        descriptors=[dict(entries) for entries, _ in calls], limit=decision.limit,
                        remaining=decision.remaining)
        if not decision.allowed:
            raise RateLimited(decision.body, headers=decision.response_headers,
                              why=self.policy.refusal(response, [entries for entries, _ in calls]))
        if decision.request_headers:
            names = {k for k, _ in decision.request_headers}
            x.headers = [h for h in x.headers if h[0] not in names] + list(decision.request_headers)
        x.extra_response_headers.extend(decision.response_headers)


class RemoteTokenRateLimitStage(RemoteRateLimitStage):
    """With ``tokens`` descriptors: the ``finish`` hook charges the response's tokens.

    The charge call runs after the response, outside the request (``after_response``): the
    client has its response, and a stalled service must not hold the connection's next
    keep-alive request either. The trace shows ``charging`` (the call was started); its outcome
    is counted in the metrics (``charged`` / ``chargeFailed``).
    """

    def __init__(self, spec: RemoteRateLimitSpec, key: str, count: Callable[[str, str, str], None],
                 client: Any = None, after_response: AfterResponse = AFTER_RESPONSE) -> None:
        super().__init__(spec, key, count, client)
        self.after_response = after_response

    def finish(self, x: Exchange) -> None:
        """Start the charge of ``usage.total_tokens`` to this stage's tokens descriptors; never waits."""
        usage = x.usage
        charges = [entries for stage, entries in x.remote_charges if stage is self]
        if usage is None or not charges or not usage.total_tokens:
            return
        tokens = usage.total_tokens
        calls = [(e, tokens) for e in charges[0]]
        if self.after_response.spawn(self._charge, calls, name=f"remoteRateLimit charge {self.key}"):
            self._event(x, "info", "charging", tokens=tokens)
        else:
            self.count("remoteRateLimit", self.key, "chargeFailed")
            self._event(x, "warn", "chargeFailed", tokens=tokens, reason="too many charges pending")

    async def _charge(self, calls: Sequence[tuple[list[tuple[str, str]], int | None]]) -> None:
        try:
            with trio.move_on_after(self.spec.timeout):
                await self.client.should_rate_limit(self.spec.domain, calls, self.spec.timeout)
                self.count("remoteRateLimit", self.key, "charged")
                return
            raise RlsCallFailed("timeout")
        except RlsCallFailed:
            self.count("remoteRateLimit", self.key, "chargeFailed")


def remote_rate_limit_stage(spec: RemoteRateLimitSpec, key: str, count: Callable[[str, str, str], None],
                            client: Any = None) -> RemoteRateLimitStage:
    """The stage for ``spec``: with a ``finish`` hook only when some descriptor counts tokens."""
    tokens = any(d.kind == "tokens" for d in spec.descriptors)
    return (RemoteTokenRateLimitStage if tokens else RemoteRateLimitStage)(spec, key, count, client)


class CsrfStage(SpecStage[CsrfSpec]):
    """After the rate limits and before the header modifiers, as in agentgateway."""

    kind = "csrf"
    __slots__ = ()

    async def request(self, x: Exchange) -> None:
        scope = x.scope
        reason = csrf_refusal(self.spec, scope["method"], x.headers, scope.get("scheme", "http"),
                              x.authority() or x.host)
        if reason is not None:
            x.tracer.event("policy", severity="warn", kind="csrf", result="rejected", reason=reason)
            raise CsrfValidationFailed(why={"policy": "csrf", "detail": reason})
        x.tracer.event("policy", kind="csrf", result="allowed")


class UrlRewriteStage(SpecStage[UrlRewriteSpec]):
    kind = "urlRewrite"
    __slots__ = ()

    async def request(self, x: Exchange) -> None:
        spec = self.spec
        if spec.path_kind == "full":
            x.upstream_path = spec.path or "/"
        elif spec.path_kind == "prefix":
            matched = x.route_match.path.value if x.route_match is not None else "/"  # a pathPrefix (checked at load)
            raw = x.scope.get("raw_path")
            current = x.upstream_path or (raw.decode("latin-1") if raw else x.scope["path"])
            x.upstream_path = rewrite_prefix(current, matched, spec.path)
        if spec.authority_kind is not None:
            host = x.authority()
            x.headers = [h for h in x.headers if h[0] != b"host"] + [
                (b"host", rewrite_authority(spec, host).encode())]
        if x.tracer.active:
            x.tracer.event("policy", kind="urlRewrite", result="rewrote request URL", path=x.upstream_path)
            x.tracer.snapshot("urlRewrite", x)


class RequestRedirectStage(SpecStage[RedirectSpec]):
    """Answers with the redirect: after urlRewrite (whose path and Host it starts from), before
    delay and directResponse, as in agentgateway."""

    kind = "requestRedirect"
    __slots__ = ()

    async def request(self, x: Exchange) -> None:
        scope = x.scope
        raw = scope.get("raw_path")
        path = x.upstream_path or (raw.decode("latin-1") if raw else scope["path"])
        host = x.authority()
        if not host and scope.get("server"):
            host = "{}:{}".format(*scope["server"])
        matched = x.route_match.path.value if x.route_match is not None else "/"  # a pathPrefix for a prefix
        location = redirect_location(self.spec, scope.get("scheme", "http"), host, path,
                                     scope.get("query_string", b""), matched)
        if x.tracer.active:
            x.tracer.event("policy", kind="requestRedirect", result="redirected", status=self.spec.status,
                           location=location)
        raise DirectResponse(self.spec.status, "", headers=((b"location", location.encode("latin-1")),))


class DelayStage(Stage):
    kind = "delay"
    __slots__ = ("expression", "spec")

    def __init__(self, spec: DelaySpec) -> None:
        self.spec = spec
        self.expression = compile_expression(spec.source) if spec.seconds is None else None

    async def request(self, x: Exchange) -> None:
        if self.expression is None:
            assert self.spec.seconds is not None
            seconds = self.spec.seconds
        else:
            seconds = delay_seconds(self.expression.evaluate(activation(x)))
        if x.tracer.active:
            x.tracer.event("policy", kind="delay", result="delayed" if seconds else "no delay",
                           delay=f"{seconds * 1000:.0f}ms")
        if seconds:
            await trio.sleep(seconds)


class MirrorStage(SpecStage[MirrorSpec]):
    kind = "requestMirror"
    __slots__ = ()

    async def request(self, x: Exchange) -> None:
        if self.spec.percentage >= 1.0 or random.random() < self.spec.percentage:
            x.mirrors = (*x.mirrors, self.spec.target)


# --- the one ordered table ----------------------------------------------------------------------

#: builds a new limiter: ``(specs, key, now)``; worker processes pass one that keeps buckets in shared memory
LimiterFactory = Callable[[tuple[LocalRateLimitSpec, ...], str, float], LocalRateLimiter]


def local_limiter(specs: tuple[LocalRateLimitSpec, ...], key: str, now: float) -> LocalRateLimiter:
    """The default ``LimiterFactory``: buckets in this process."""
    return LocalRateLimiter(specs, now)


class StageCompiler:
    """What compiling one config's stages needs: the remote JWKS registry, the previous config's
    limiters (one whose entries did not change is kept, so a reload keeps budgets) and the metrics
    a stage reports to."""

    def __init__(self, jwks: JwksRegistry,
                 previous_limiters: Mapping[str, tuple[tuple[LocalRateLimitSpec, ...], LocalRateLimiter]],
                 count_decision: Callable[[str, str, str], None],
                 limiter_factory: LimiterFactory = local_limiter,
                 runtime_keys: Callable[[], Any] | None = None) -> None:
        self.jwks = jwks
        #: the runtime's KeyService, made when first asked for (apiKey ``runtimeKeys``)
        self.runtime_keys = runtime_keys
        self.limiter_factory = limiter_factory
        self.previous_limiters = previous_limiters
        self.count_decision = count_decision
        # listener or route key -> (specs, limiter); a listener's is shared by all its routes.
        self.limiters: dict[str, tuple[tuple[LocalRateLimitSpec, ...], LocalRateLimiter]] = {}

    def limiter(self, specs: tuple[LocalRateLimitSpec, ...], key: str) -> LocalRateLimiter | None:
        """A limiter for ``specs``; the previous config's one when unchanged."""
        if not specs:
            return None
        old = self.previous_limiters.get(key)
        limiter = old[1] if old is not None and old[0] == specs else self.limiter_factory(specs, key, trio.current_time())
        self.limiters[key] = (specs, limiter)
        return limiter


#: a row's builder: ``(policies, listener/route/backend key, compiler)`` -> its stage, or None when
#: the kind is not configured there
StageFactory = Callable[[Policies, str, StageCompiler], Stage | None]


def of_spec(attribute: str, build: Callable[[Any], Stage]) -> StageFactory:
    """The usual row: ``build(spec)`` when ``policies.<attribute>`` is set."""

    def factory(policies: Policies, key: str, compiler: StageCompiler) -> Stage | None:
        spec = getattr(policies, attribute)
        return build(spec) if spec is not None else None

    factory.__qualname__ = f"of_spec({attribute!r})"
    return factory


def api_key_stage(policies: Policies, key: str, c: StageCompiler) -> Stage | None:
    spec: ApiKeySpec | None = policies.api_key
    return ApiKeyStage(spec, c.runtime_keys) if spec is not None else None


def jwt_auth_stage(policies: Policies, key: str, c: StageCompiler) -> Stage | None:
    spec: JwtAuthSpec | None = policies.jwt_auth
    if spec is None:
        return None
    providers, remotes = [], []
    for provider in spec.providers:
        if provider.jwks.url is not None:
            remote = c.jwks.get(provider.jwks.url)
            remotes.append(remote)
            providers.append((provider, remote.holder))
        else:
            assert provider.jwks.inline is not None  # file and inline JWKS were read and checked at load
            providers.append((provider, KeyHolder(parse_jwks(provider.jwks.inline))))
    return JwtAuthStage(spec, JwtVerifier(providers), remotes)


def mcp_authentication_stage(policies: Policies, key: str, c: StageCompiler) -> Stage | None:
    """``mcpAuthentication``: jwtAuth's verifier for its one issuer (proxy/mcp_stage.py)."""
    spec = policies.mcp_authentication
    if spec is None:
        return None
    provider = ProviderSpec(spec.issuer, spec.jwks, spec.audiences)
    if spec.jwks.url is not None:
        remote = c.jwks.get(spec.jwks.url)
        return McpAuthenticationStage(spec, JwtVerifier([(provider, remote.holder)]), [remote])
    assert spec.jwks.inline is not None  # file and inline JWKS were read and checked at load
    return McpAuthenticationStage(spec, JwtVerifier([(provider, KeyHolder(parse_jwks(spec.jwks.inline)))]))


def local_rate_limit_stage_of(policies: Policies, key: str, c: StageCompiler) -> Stage | None:
    specs = tuple(spec for spec in policies.local_rate_limit if not spec.per_client_address)
    limiter = c.limiter(specs, key)
    return local_rate_limit_stage(limiter, key, c.count_decision) if limiter is not None else None


def client_rate_limit_stage(policies: Policies, key: str, c: StageCompiler) -> Stage | None:
    specs = tuple(spec for spec in policies.local_rate_limit if spec.per_client_address)
    return ClientRateLimitStage(specs, key, c.count_decision) if specs else None


def remote_rate_limit_stage_of(policies: Policies, key: str, c: StageCompiler) -> Stage | None:
    spec = policies.remote_rate_limit
    return remote_rate_limit_stage(spec, key, c.count_decision) if spec is not None else None


#: The one order every phase runs its stages in (agentgateway's). A phase holds only the kinds
#: configured on it. Each row: (stage kind, its factory); the kinds' names, attributes and phases
#: are ``kinds.POLICY_KINDS``. Adding a kind: docs/pipeline.md, "Adding a policy kind".
STAGE_ORDER: list[tuple[str, StageFactory]] = [
    ("cors", of_spec("cors", lambda spec: CorsStage(CorsPolicy(spec)))),  # a preflight never needs a token
    ("clientRateLimit", client_rate_limit_stage),          # localRateLimit perClientAddress: before any password check
    ("jwtAuth", jwt_auth_stage),                           # sets x.jwt, removes the token
    ("mcpAuthentication", mcp_authentication_stage),       # jwtAuth for MCP: 401 names the resource metadata
    ("basicAuth", of_spec("basic_auth", BasicAuthStage)),  # sets x.basic_auth, removes the credentials
    ("apiKey", api_key_stage),                             # sets x.api_key (and a runtime key), removes the key
    ("authorization", of_spec("authorization", lambda spec: AuthorizationStage(AuthorizationPolicy(spec)))),
    ("retry", of_spec("retry", RetryStage)),               # marks the request retryable (the gateway retries)
    ("localRateLimit", local_rate_limit_stage_of),         # only authenticated requests spend budget
    ("remoteRateLimit", remote_rate_limit_stage_of),       # global budgets: after the local, cheaper check
    ("csrf", of_spec("csrf", CsrfStage)),                  # cross-site writes refused before any rewriting
    ("requestHeaderModifier", of_spec("request_header_modifier", RequestHeaderModifierStage)),
    ("responseHeaderModifier", of_spec("response_header_modifier", ResponseHeaderModifierStage)),  # response hook only
    ("backendAuth", of_spec("backend_auth", lambda auth: BackendAuthStage(auth.key))),  # last word on auth
    ("urlRewrite", of_spec("url_rewrite", UrlRewriteStage)),  # path and Host as the backend will see them
    ("requestRedirect", of_spec("request_redirect", RequestRedirectStage)),  # the URL as urlRewrite left it
    ("delay", of_spec("delay", DelayStage)),               # fault injection: after auth, before answering
    ("directResponse", of_spec("direct_response", DirectResponseStage)),  # once every check has passed
    ("requestMirror", of_spec("request_mirror", MirrorStage)),  # copies only of requests that go upstream
]


def compile_phase(name: str, policies: Policies, key: str, compiler: StageCompiler) -> Phase:
    """The stages of one listener (``gateway``), route or backend, in ``STAGE_ORDER``."""
    stages = []
    for _kind, build in STAGE_ORDER:
        stage = build(policies, key, compiler)
        if stage is not None:
            stages.append(stage)
    return Phase(name, policies, tuple(stages))
