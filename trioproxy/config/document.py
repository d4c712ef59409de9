"""The standalone config document, described once: reading, errors and the JSON Schema come from here.

Every class is ``@described`` (attrs, frozen); every field is ``field(description, default=...)``
and its annotation is its type (kinds: see ``describe.py``; string syntaxes: ``scalars.py``).
The wire name is the attribute in camelCase unless ``name=`` says otherwise. Nothing here
decides what a value *means* at run time: ``compile.py`` turns a read ``Document`` into the
frozen ``model.Config``.

To add a policy kind: docs/pipeline.md, "Adding a policy kind".

To add a plain field anywhere: one ``field(...)`` line in the class, then a compile line in
``compile.py`` if the runtime model needs it, then ``python -m trioproxy schema >
trioproxy/config/schema.json``. A field agentgateway has and trioproxy does not
goes into ``agentgateway_fields.py`` instead.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from .describe import NOT_SUPPORTED, Integer, Items, Scalar, Text, described, field
from .model import Address
from .resilience_document import Eviction as Eviction
from .resilience_document import Health, LlmVirtualModel, LoadBalancer
from .scalars import (
    CEL,
    DURATION,
    HEADER_NAME,
    HEADER_VALUE,
    HOST_PORT_ADDRESS,
    HOSTNAME_NAME,
    METHOD,
    ORIGIN,
    PATH,
    RATIO,
    REGEX,
    SAMPLING,
    SERVER_ADDRESS,
    TOKEN_OR_STAR,
    WORKERS,
)

Port = Annotated[int, Integer(0, 65535)]
Duration = Annotated[float, DURATION]
Hostname = Annotated[str, HOSTNAME_NAME]
Regex = Annotated[str, REGEX]
PathText = Annotated[str, PATH]
HeaderName = Annotated[str, HEADER_NAME]
HeaderValue = Annotated[str, HEADER_VALUE]
#: A policy kind the contract names but this version does not build (any value is an error).
NotBuilt = Annotated[Any, NOT_SUPPORTED]


def not_built(description: str) -> Any:
    return field(f"{description} Not supported by this version of trioproxy.", default=None)


# --- policies ----------------------------------------------------------------------------------


@described
class HeaderPair:
    """One header: name and value."""

    name: HeaderName = field("Header name (case-insensitive).")
    value: HeaderValue = field("Header value.")


Headers = tuple[HeaderPair, ...] | dict[HeaderName, HeaderValue]


@described
class HeaderModifier:
    """Headers to add, set or remove (``[{name, value}]`` or ``{name: value}``)."""

    add: Headers = field("Headers appended (an existing header of the same name is kept).", default=())
    set: Headers = field("Headers set (replacing any of the same name).", default=())
    remove: tuple[HeaderName, ...] = field("Names of headers removed.", default=())


@described
class Timeout:
    """Time limits for a request."""

    request_timeout: Duration | None = field(
        "Limit for the whole request, from arrival to the end of the response (504 after it).", default=None)
    backend_request_timeout: Duration | None = field(
        "Limit for one call to the backend (504 after it).", default=None)


@described
class ConditionalDirectResponse:
    """One candidate answer: given when its condition is true (an entry without one is the fallback)."""

    condition: CelText | None = field(
        "CEL expression (such as `random() < 0.1`); absent: this entry is the fallback and must be last.",
        default=None)
    status: Annotated[int, Integer(200, 599)] = field("HTTP status of the answer.")
    body: Annotated[str, Text(min_length=0)] = field("Body of the answer (text/plain).", default="")


@described
class DirectResponse:
    """Answer without a backend: either status/body, or `conditional` entries (the first whose
    condition is true answers; when none is, the request goes on to the backend)."""

    status: Annotated[int, Integer(200, 599)] | None = field(
        "HTTP status of the answer (required unless conditional is given).", default=None)
    body: Annotated[str, Text(min_length=0)] = field("Body of the answer (text/plain).", default="")
    conditional: tuple[ConditionalDirectResponse, ...] = field(
        "Candidate answers tried in order (instead of status/body).", default=())


@described(one_of=("full", "prefix"))
class PathRewrite:
    """How the path is rewritten: exactly one of full, prefix."""

    full: Annotated[str, Text(min_length=0)] | None = field(
        "Replace the whole path (the query string is kept).", default=None)
    prefix: Annotated[str, Text(min_length=0)] | None = field(
        "Replace the part of the path that the route's pathPrefix matched (the rest and the query are kept).",
        default=None)


@described(one_of=("full", "host", "port"))
class AuthorityRewrite:
    """How the Host header sent upstream is rewritten: exactly one of full, host, port."""

    full: str | None = field("Replace the whole authority: host and optional port.", default=None)
    host: str | None = field("Replace the host and keep the request's port.", default=None)
    port: Annotated[int, Integer(1, 65535)] | None = field("Replace only the port.", default=None)


@described
class UrlRewrite:
    """Rewrite the request's path or authority (Host) before it goes upstream."""

    authority: AuthorityRewrite | Literal["auto", "none"] | None = field(
        "Host rewrite: {full}, {host} or {port}; auto and none keep the request's Host.", default=None)
    path: PathRewrite | None = field("Path rewrite: {full} or {prefix}.", default=None)


@described
class RequestRedirect:
    """Answer with a redirect (302 unless `status` says otherwise) to the request's URL with these parts
    changed; the backend is not called."""

    scheme: Literal["http", "https"] | None = field("Scheme of the new URL (default: the request's).", default=None)
    authority: AuthorityRewrite | Literal["auto", "none"] | None = field(
        "Host of the new URL: {full}, {host} or {port}; auto and none keep the request's Host.", default=None)
    path: PathRewrite | None = field(
        "Path of the new URL: {full} or {prefix} (the query is kept); absent: the request's path.", default=None)
    status: Annotated[int, Integer(300, 399)] | None = field("Redirect status (default 302).", default=None)


@described
class Delay:
    """Fault injection: latency added before the request goes upstream (counted in requestTimeout)."""

    duration: str = field(
        "A duration such as 2s, or a CEL expression returning a duration (`duration(\"500ms\")`) or a number of "
        "milliseconds (`random() < 0.1 ? 2000 : 0`); a non-positive result adds no delay.")


@described
class MirrorBackend:
    """Where mirrored copies go."""

    host: Annotated[Address, HOST_PORT_ADDRESS] = field("HOST:PORT of a plain HTTP backend.")


@described
class RequestMirror:
    """Send a copy of matching requests to another backend; its answer is ignored and it never delays or
    fails the original request."""

    backend: MirrorBackend = field("Backend receiving the copies.")
    percentage: Annotated[float, RATIO] = field("Share of requests mirrored, 0.0 to 1.0.")


@described
class Retry:
    """Retry failed backend calls: a response whose status is in `codes`, or a connection failure or
    backendRequestTimeout. Only requests whose body is empty or buffered (up to 64 KiB, or an LLM body) are
    retried, never once the response started; requestTimeout caps all attempts together."""

    attempts: Annotated[int, Integer(1, 255)] = field(
        "Retries after the first call (agentgateway's behaviour: attempts 2 = up to 3 calls).", default=1)
    backoff: Duration | None = field("Wait between attempts, such as 100ms.", default=None)
    codes: tuple[Annotated[int, Integer(100, 599)], ...] = field("Response statuses that are retried.")
    max_backoff: Duration | None = field(
        "With it, the waits grow: a random time up to backoff × 2^(n-1), at most this (full jitter; trioproxy).",
        default=None)
    budget_percent: Annotated[int, Integer(1, 100)] = field(
        "At most this share (percent) of the route's requests in flight may be retries (trioproxy).", default=20)
    min_retry_concurrency: Annotated[int, Integer(0, 1_000_000)] = field(
        "Retries allowed at once whatever budgetPercent says (trioproxy).", default=3)


@described
class BackendAuth:
    """Credentials the gateway sends to the backend."""

    key: str = field("API key sent as `Authorization: Bearer <key>` (use `$VAR` to read it from the environment).")


@described
class LocalRateLimit:
    """One token bucket; every bucket of a policy applies (a request must pass all)."""

    max_tokens: Annotated[int, Integer(1, 2**62)] = field("Bucket size: the most a burst may take.")
    tokens_per_fill: Annotated[int, Integer(1, 2**62)] = field("Tokens added at each fill.")
    fill_interval: Duration = field("Time between fills, such as 1s, 60s or 1h.")
    type: Literal["requests", "tokens"] = field(
        "What a token is: one request, or one LLM token (usage.total_tokens of each response).",
        default="requests")
    per_client_address: bool = field(
        "A bucket per client address (source.address), checked before authentication (jwtAuth, basicAuth, "
        "apiKey) so wrong credentials cannot buy unbounded password checks; requests only. trioproxy only.",
        default=False)


LOCAL_RATE_LIMIT = "Token buckets for requests or LLM tokens."

CelText = Annotated[str, CEL]


@described(one_of=("url", "file"))
class JwksRef:
    """Where a JSON Web Key Set is: exactly one of url, file (or write the JWKS JSON itself as a string)."""

    url: str | None = field(
        "HTTP(S) URL of the JWKS: fetched at start, refreshed every 5 minutes, refetched (rate-limited) "
        "when a token names an unknown key; the last good keys keep serving while it is unreachable.",
        default=None)
    file: str | None = field("Path of a JWKS file (relative to the working directory).", default=None)


Jwks = JwksRef | str


@described
class JwtProvider:
    """One trusted token issuer and its keys."""

    issuer: str = field("Expected `iss` claim, matched exactly.")
    audiences: tuple[str, ...] = field("Accepted audiences; a non-empty list requires a matching `aud`.", default=())
    jwks: Jwks = field("The issuer's public keys: {url}, {file} or the JWKS JSON inline.")


@described
class JwtAuth:
    """Validate `Authorization: Bearer` JWTs: either issuer/audiences/jwks, or providers (several issuers).

    The key is chosen by the token's `kid`; `exp` is required; `exp`/`nbf` get 60 s of leeway.
    A validated token is removed from the request; its claims are `jwt.<claim>` in CEL.
    """

    mode: Literal["strict", "optional", "permissive"] = field(
        "strict: a valid token is required. optional (default): requests without a token pass, invalid "
        "tokens are rejected. permissive: missing or invalid tokens pass without claims.", default="optional")
    issuer: str | None = field("Expected `iss` claim, matched exactly (single-issuer form).", default=None)
    audiences: tuple[str, ...] = field(
        "Accepted audiences; a non-empty list requires a matching `aud` (single-issuer form).", default=())
    jwks: Jwks | None = field("The issuer's public keys: {url}, {file} or the JWKS JSON inline.", default=None)
    providers: tuple[JwtProvider, ...] = field("Several trusted issuers (instead of issuer/audiences/jwks).",
                                               default=())


@described
class HeaderCredential:
    """A header holding the credential."""

    name: Annotated[str, Text()] = field("Header name.")
    prefix: Annotated[str, Text(min_length=0)] | None = field(
        "Prefix removed before the value is read, such as `Bearer ` (matched ignoring case; absent: the "
        "whole value).", default=None)


@described
class NamedCredential:
    """A query parameter or cookie holding the credential."""

    name: Annotated[str, Text()] = field("Its name.")


@described(one_of=("header", "queryParameter", "cookie"))
class CredentialLocation:
    """Where the API key is read from: exactly one of header, queryParameter, cookie."""

    header: HeaderCredential | None = field("A request header.", default=None)
    query_parameter: NamedCredential | None = field("A URL query parameter.", default=None)
    cookie: NamedCredential | None = field("A cookie.", default=None)


@described
class HtpasswdFile:
    """An htpasswd file."""

    file: Annotated[str, Text()] = field("Path of the file (relative to the working directory), read at load.")


@described
class BasicAuth:
    """Authenticate with HTTP Basic credentials checked against an htpasswd user list (bcrypt, $apr1$, {SHA})."""

    htpasswd: HtpasswdFile | Annotated[str, Text(expand=False)] = field(
        "The users: {file: path}, or the htpasswd lines themselves (taken as written: no $VAR expansion, "
        "hashes are full of $).")
    realm: str | None = field("Realm of the `WWW-Authenticate: Basic` challenge (default Restricted).",
                              default=None)
    mode: Literal["strict", "optional"] = field(
        "strict: valid credentials are required. optional (default): requests without credentials pass, wrong "
        "ones are rejected (401).", default="optional")
    authorization_location: CredentialLocation | None = field(
        "Where the credentials are read from (default: the authorization header, prefix `Basic `).", default=None)


@described(one_of=("key", "keyHash"))
class ApiKeyEntry:
    """One accepted key: exactly one of key, keyHash."""

    key: str | None = field("The key (use `$VAR` to read it from the environment).", default=None)
    key_hash: str | None = field(
        "The key's SHA-256 as `sha256:<64 hex digits>`, so the key itself is not in the config.", default=None)
    metadata: dict[str, str] = field(
        "Values for CEL `apiKey.<name>` (authorization rules, rate-limit descriptors, the access log) when this "
        "key authenticates a request.", default={})


@described
class ApiKeyAuth:
    """Authenticate requests with static API keys; the key is removed from the request once it matched."""

    keys: tuple[ApiKeyEntry, ...] = field(
        "The accepted static keys (required unless runtimeKeys is true).", default=())
    runtime_keys: bool = field(
        "Also accept the runtime keys of the key store (`config.store`; created with `trioproxy keys create` or "
        "the admin API's /api/keys), with their models, limits and budgets (docs/keys.md). trioproxy only.",
        default=False)
    log_payloads: bool = field(
        "With runtimeKeys and config.keys.requestLog enabled: the request log also keeps the request and "
        "response bodies of these requests (credential-named JSON members redacted, each cut at 16 KiB). "
        "trioproxy only.", default=False)
    mode: Literal["strict", "optional", "permissive"] = field(
        "strict: a valid key is required. optional (default): requests without a key pass, invalid keys are "
        "rejected (401). permissive: missing or invalid keys pass without apiKey.", default="optional")
    location: CredentialLocation | None = field(
        "Where the key is read from (default: the authorization header, prefix `Bearer `).", default=None)


@described
class Csrf:
    """Refuse state-changing requests (not GET, HEAD, OPTIONS) a browser sent from another site: by
    Sec-Fetch-Site, else by Origin against the request's own scheme://host."""

    additional_origins: tuple[str, ...] = field(
        "Origins also trusted, written as browsers send them: `https://app.example.com`.", default=())


@described(one_of=("allow", "deny", "require"))
class AuthorizationRule:
    """One rule: exactly one of allow, deny, require."""

    allow: CelText | None = field("Allow the request when this CEL expression is true.", default=None)
    deny: CelText | None = field(
        "Deny the request when this CEL expression is true (an expression that fails to evaluate does not deny).",
        default=None)
    require: CelText | None = field("Deny the request unless this CEL expression is true.", default=None)


@described
class Authorization:
    """CEL rules over the request (`request.*`, `source.address`, `jwt.<claim>`); a denial is 403.

    Any true deny rule denies; every require rule must be true; when allow rules exist one must be true.
    """

    rules: tuple[AuthorizationRule | CelText, ...] = field(
        "Rules: a plain CEL string is an allow rule; or {allow|deny|require: <CEL>}.")


@described
class Cors:
    """Cross-origin resource sharing; the gateway answers preflight requests itself."""

    allow_origins: tuple[Annotated[str, ORIGIN], ...] = field(
        "Origins allowed (* for any; a * in the host is a wildcard: https://*.example.com).", default=())
    allow_methods: tuple[Annotated[str, TOKEN_OR_STAR], ...] = field(
        "Access-Control-Allow-Methods of preflight answers (* echoes the requested method).", default=())
    allow_headers: tuple[Annotated[str, TOKEN_OR_STAR], ...] = field(
        "Access-Control-Allow-Headers of preflight answers (* echoes the requested headers).", default=())
    expose_headers: tuple[Annotated[str, TOKEN_OR_STAR], ...] = field(
        "Access-Control-Expose-Headers of allowed responses.", default=())
    allow_credentials: bool = field("Send Access-Control-Allow-Credentials: true.", default=False)
    max_age: Duration | None = field("Access-Control-Max-Age of preflight answers (whole seconds).", default=None)

JWT_AUTH = "Validate a JWT bearer token (strict, optional or permissive)."
BASIC_AUTH = "Authenticate with HTTP Basic credentials from an htpasswd list; CEL `basicAuth.username` is the user."
API_KEY = "Authenticate with static API keys (strict, optional or permissive); CEL `apiKey` holds the key's metadata."
AUTHORIZATION = "CEL rules that allow or deny a request."
CORS = "Cross-origin resource sharing."
REMOTE_RATE_LIMIT = ("Global rate limits through an Envoy rate limit service (such as `trioproxy ratelimit-server`): "
                     "one budget shared by every gateway replica.")


@described
class RemoteRateLimitEntry:
    """One descriptor entry: the key the service's config matches, and a CEL expression for its value."""

    key: str = field("Entry key, as in the rate limit service's descriptors.")
    value: str = field(
        "CEL expression for the value, over request.*, source.*, jwt.* and llm.* (e.g. `jwt.sub`, "
        "`request.headers[\"x-team\"]`); a fixed value is a string literal: `'\"users\"'`. When it does not "
        "evaluate for a request, its descriptor is skipped for that request.")


@described
class RemoteRateLimitDescriptor:
    """One descriptor sent to the service; every descriptor is checked (a request must pass all)."""

    entries: Annotated[tuple[RemoteRateLimitEntry, ...], Items(min_items=1)] = field("The entries, in order.")
    type: Literal["requests", "tokens"] = field(
        "requests: one hit per request; tokens: checked before the request (nothing added), then charged the "
        "response's usage.total_tokens after it completes.", default="requests")


@described
class RemoteRateLimit:
    """An Envoy RLS (gRPC ShouldRateLimit) service and the descriptors each request sends it."""

    host: str = field("host:port of the rate limit service (gRPC over plaintext HTTP/2).")
    domain: str = field("Domain of the service's config these limits belong to.")
    descriptors: Annotated[tuple[RemoteRateLimitDescriptor, ...], Items(min_items=1)] = field("Descriptors to send.")
    failure_mode: Literal["failClosed", "failOpen"] = field(
        "When the service is unreachable, too slow or fails: failClosed answers 500 `rate limit failed`, "
        "failOpen forwards the request.", default="failClosed")
    timeout: Duration | None = field("Time limit of one call to the service (default 1s). trioproxy only.",
                                     default=None)


@described
class BackendTLS:
    """TLS to the backend, verified against the system trust store unless root says otherwise (docs/backend-tls.md)."""

    root: str | None = field("CA bundle file (PEM) the backend's certificate must chain to, instead of the "
                             "system trust store.", default=None)
    hostname: str | None = field("Server name sent as SNI and verified in the certificate (default: the "
                                 "backend's host).", default=None)
    insecure: bool = field("Skip certificate verification entirely (a warning is logged at start).", default=False)
    insecure_host: bool = field("Verify the certificate chain but not the name in it.", default=False)
    cert: str | None = field("Client certificate file (PEM) presented to the backend (mTLS).", default=None)
    key: str | None = field("Private key file of the client certificate (default: in the cert file).",
                            default=None)
    alpn: tuple[str, ...] | None = field(
        "ALPN protocols offered (default [http/1.1]; trioproxy speaks HTTP/1.1 to backends).", default=None)
    subject_alt_names: tuple[str, ...] = field(
        "Names (DNS, URI or IP) of which the certificate must carry one, checked instead of the hostname.",
        default=())


BACKEND_TLS = "TLS to the backend (SNI, verification, client certificate)."
REQUEST_HEADERS = "Modify the request's headers before it goes upstream."
RESPONSE_HEADERS = "Modify the response's headers before they go to the client."
RETRY = "Retry failed backend calls."
MCP_AUTHORIZATION = ("CEL rules over MCP calls (`mcp.method`, `mcp.tool.name`, `mcp.tool.target`, "
                     "`mcp.prompt.name`, `mcp.resource.name`, `mcp.arguments`) and `jwt.*`: a call denied is "
                     "answered as an unknown tool; listings show only what is allowed.")


LocalRateLimits = Annotated[tuple[LocalRateLimit, ...], Items(min_items=1)]


@described
class GatewayPolicies:
    """Policies of a listener (gateway phase); a localRateLimit here is one budget shared by all its routes."""

    jwt_auth: JwtAuth | None = field(JWT_AUTH, default=None)
    basic_auth: BasicAuth | None = field(BASIC_AUTH, default=None)
    api_key: ApiKeyAuth | None = field(API_KEY, default=None)
    authorization: Authorization | None = field(AUTHORIZATION, default=None)
    cors: Cors | None = field(CORS, default=None)
    local_rate_limit: LocalRateLimits = field(LOCAL_RATE_LIMIT, default=())
    remote_rate_limit: RemoteRateLimit | None = field(REMOTE_RATE_LIMIT, default=None)


@described
class RoutePolicies:
    """Policies of a route (route phase)."""

    jwt_auth: JwtAuth | None = field(JWT_AUTH, default=None)
    basic_auth: BasicAuth | None = field(BASIC_AUTH, default=None)
    api_key: ApiKeyAuth | None = field(API_KEY, default=None)
    authorization: Authorization | None = field(AUTHORIZATION, default=None)
    cors: Cors | None = field(CORS, default=None)
    local_rate_limit: LocalRateLimits = field(LOCAL_RATE_LIMIT, default=())
    remote_rate_limit: RemoteRateLimit | None = field(REMOTE_RATE_LIMIT, default=None)
    request_header_modifier: HeaderModifier | None = field(REQUEST_HEADERS, default=None)
    response_header_modifier: HeaderModifier | None = field(RESPONSE_HEADERS, default=None)
    timeout: Timeout | None = field("Request and backend time limits.", default=None)
    retry: Retry | None = field(RETRY, default=None)
    direct_response: DirectResponse | None = field("Answer without calling a backend.", default=None)
    backend_auth: BackendAuth | None = field(
        "Credentials sent to every backend of the route that has no backendAuth of its own (where "
        "agentgateway's examples put it).", default=None)
    backend_tls: BackendTLS | None = field(
        "TLS to every backend of the route that has no backendTLS of its own.", name="backendTLS", default=None)
    csrf: Csrf | None = field("Refuse cross-site state-changing requests (403 CSRF validation failed).",
                              default=None)
    url_rewrite: UrlRewrite | None = field("Rewrite the path or Host before forwarding.", default=None)
    request_redirect: RequestRedirect | None = field(
        "Answer with a redirect (Location: the request's URL with scheme, Host or path changed).", default=None)
    request_mirror: RequestMirror | None = field("Send a copy of requests to another backend.", default=None)
    delay: Delay | None = field("Inject latency before forwarding (fault injection).", default=None)
    ai: AiPolicy | None = field("LLM processing of the route's ai backends that have no ai policy of their own.",
                                default=None)
    health: Health | None = field("Outlier detection of every backend of the route without its own.", default=None)
    load_balancer: LoadBalancer | None = field("How a backend is picked among the healthy ones.", default=None)
    mcp_authentication: McpAuthentication | None = field(
        "MCP authorization: JWT validation with a 401 pointing at the resource metadata (docs/mcp.md).", default=None)
    mcp_authorization: Authorization | None = field(MCP_AUTHORIZATION, default=None)


#: agentgateway's route types (``ai.routes`` values); detect, realtime and rerank are refused when compiled
RouteKind = Literal["completions", "messages", "models", "passthrough", "responses", "embeddings",
                    "anthropicTokenCount", "generateContent", "geminiCountTokens", "detect", "realtime", "rerank"]


@described
class AiPolicy:
    """LLM processing of an ai backend's requests (agentgateway's ``ai`` policy; only ``routes`` here)."""

    routes: dict[str, RouteKind] = field(
        "Request path suffix → endpoint kind, replacing the built-in choice by path (docs/llm-providers.md, "
        "\"Endpoints\"): the longest suffix that ends the path wins, \"*\" matches any other path; a path "
        "matching none is completions.", default={})


@described
class BackendPolicies:
    """Policies of one backend (backend phase)."""

    backend_auth: BackendAuth | None = field("Credentials sent to this backend.", default=None)
    request_header_modifier: HeaderModifier | None = field(REQUEST_HEADERS, default=None)
    response_header_modifier: HeaderModifier | None = field(RESPONSE_HEADERS, default=None)
    backend_tls: BackendTLS | None = field(BACKEND_TLS, name="backendTLS", default=None)
    ai: AiPolicy | None = field("LLM processing of this ai backend's requests (its routes map).", default=None)
    health: Health | None = field("Outlier detection: eject this backend while it fails.", default=None)
    mcp_authorization: Authorization | None = field(MCP_AUTHORIZATION, default=None)


# --- MCP (docs/mcp.md) ---------------------------------------------------------------------------


@described
class McpHost:
    """Where a remote MCP server listens: a URL (`http://127.0.0.1:8001/mcp`), or host and port (with path)."""

    host: str = field("URL of the MCP endpoint (http:// or https://), or a host name with port and path.")
    port: Annotated[int, Integer(1, 65535)] | None = field("Port, when host is a host name.", default=None)
    path: PathText | None = field("Request path, when host is a host name (default /mcp; /sse for sse).",
                                  default=None)


@described
class McpStdio:
    """An MCP server the gateway starts as a child process, speaking JSON-RPC on its stdin and stdout."""

    cmd: str = field("Program to run (looked up on PATH).")
    args: tuple[str, ...] = field("Its arguments.", default=())
    env: dict[str, str] = field("Environment variables added to the gateway's.", default={})


@described(one_of=("mcp", "sse", "stdio"))
class McpTarget:
    """One MCP server behind the backend: exactly one of mcp (Streamable HTTP), sse (the older HTTP+SSE
    transport), stdio (a child process)."""

    name: str = field("Target name: the prefix of its tool and prompt names (`<name>_<tool>`) when there are "
                      "several targets, and `mcp.tool.target` in CEL.")
    mcp: McpHost | None = field("A server speaking MCP Streamable HTTP.", default=None)
    sse: McpHost | None = field("A server speaking the older HTTP+SSE transport.", default=None)
    stdio: McpStdio | None = field("A server started by the gateway as a child process.", default=None)


@described
class McpBackendSpec:
    """MCP servers behind one endpoint: listings merged, calls routed to the target by name prefix."""

    targets: Annotated[tuple[McpTarget, ...], Items(min_items=1)] = field("MCP servers to multiplex together.")
    stateful_mode: Literal["stateful", "stateless"] = field(
        "stateful (default): the client gets a session (it carries each target's session, signed); stateless: "
        "each request opens and closes its own target sessions.", default="stateful")
    prefix_mode: Literal["conditional", "always", "never"] = field(
        "Tool and prompt names prefixed with `<target>_`: conditional (default: only with several targets), "
        "always, or never (names must then be unique across targets; calls go to the target listing the name).",
        default="conditional")
    failure_mode: Literal["failClosed", "failOpen"] = field(
        "failClosed (default): a target failing initialize or a listing fails the whole request; failOpen: it "
        "is left out and the others serve (all failing is still an error). A call routed to a failed target "
        "is always an error naming it.", default="failClosed")


@described
class McpResourceMetadata:
    """The OAuth Protected Resource Metadata (RFC 9728) the gateway serves for the route."""

    resource: str | None = field(
        "The resource identifier, such as http://localhost:3000/mcp (default: the request's origin and path).",
        default=None)
    scopes_supported: tuple[str, ...] = field("Scopes a client may ask for.", default=())
    bearer_methods_supported: tuple[Literal["header", "body", "query"], ...] = field(
        "How the token may be sent (default [header]; only the header is read).", default=())
    resource_documentation: str | None = field("URL of human-readable documentation.", default=None)
    resource_policy_uri: str | None = field("URL of the resource's policy.", default=None)
    resource_name: str | None = field("Human-readable name of the resource.", default=None)


@described(one_of=("auth0", "keycloak", "okta", "descope", "authentik", "entra"))
class McpIdp:
    """The identity provider's kind (agentgateway's provider; informational here)."""

    auth0: dict[str, str] | None = field("Auth0.", default=None)
    keycloak: dict[str, str] | None = field("Keycloak (what `trioproxy idp setup` prepares).", default=None)
    okta: dict[str, str] | None = field("Okta.", default=None)
    descope: dict[str, str] | None = field("Descope.", default=None)
    authentik: dict[str, str] | None = field("authentik.", default=None)
    entra: dict[str, str] | None = field("Microsoft Entra ID.", default=None)


@described
class McpAuthentication:
    """MCP authorization (the MCP spec): tokens validated like jwtAuth, and a 401 that tells the client where
    to get one (`WWW-Authenticate: Bearer resource_metadata=...`, RFC 9728)."""

    issuer: str = field("Expected `iss` claim; also the authorization server named in the resource metadata.")
    audiences: tuple[str, ...] = field(
        "Accepted audiences (default: the resource itself: the token must be bound to this resource).",
        default=())
    jwks: Jwks = field("The issuer's public keys: {url}, {file} or the JWKS JSON inline.")
    mode: Literal["strict", "optional", "permissive"] = field(
        "strict (default): a valid token is required (401 with the metadata link); optional: requests "
        "without a token pass; permissive: missing or invalid tokens pass without claims.", default="strict")
    resource_metadata: McpResourceMetadata | None = field(
        "The resource metadata served at /.well-known/oauth-protected-resource<route path>.", default=None)
    provider: McpIdp | None = field(
        "Identity provider kind ({keycloak: {}}...): accepted for agentgateway compatibility; the issuer's own "
        "discovery documents are used as they are.", default=None)



# --- routes and backends -------------------------------------------------------------------------


@described(one_of=("exact", "pathPrefix", "regex"))
class PathMatch:
    """How the request path must match: exactly one of exact, pathPrefix, regex."""

    exact: PathText | None = field("The path, exactly.", default=None)
    path_prefix: PathText | None = field(
        "A path prefix, element-wise: /v1 matches /v1 and /v1/x, not /v10.", default=None)
    regex: Regex | None = field("A regular expression the whole path must match.", default=None)


@described(one_of=("exact", "regex"))
class ValueCondition:
    """How a header or query value must match: exactly one of exact, regex."""

    exact: Annotated[str, Text(min_length=0)] | None = field("The value, exactly.", default=None)
    regex: Regex | None = field("A regular expression the whole value must match.", default=None)


@described
class ValueMatch:
    """A header or query parameter condition."""

    name: str = field("Header or query parameter name (header names are case-insensitive).")
    value: ValueCondition = field("The condition on its value.")


@described
class Match:
    """Conditions a request must all meet for the route to take it."""

    path: PathMatch | None = field("Path condition (absent: every path).", default=None)
    method: Annotated[str, METHOD] | None = field("HTTP method.", default=None)
    headers: tuple[ValueMatch, ...] = field("Header conditions.", default=())
    query: tuple[ValueMatch, ...] = field("Query parameter conditions.", default=())


@described
class OpenAIOptions:
    """Options of an OpenAI-compatible provider."""

    model: str | None = field("Model to use, overriding the one the client asks for.", default=None)


@described
class AnthropicOptions:
    """Options of Anthropic's Messages API (clients speak its format: trioproxy does not translate)."""

    model: str | None = field("Model to use, overriding the one the client asks for.", default=None)


@described
class GeminiOptions:
    """Options of Google Gemini through its OpenAI-compatible endpoint."""

    model: str | None = field("Model to use, overriding the one the client asks for.", default=None)


@described
class AzureOptions:
    """Options of Azure OpenAI (an OpenAI-compatible API on the resource's own host)."""

    model: str | None = field(
        "Model (deployment) to use, overriding the one the client asks for; with a dated apiVersion it "
        "names the deployment in the path.", default=None)
    resource_name: str = field("The Azure resource name: the host is <resourceName>.openai.azure.com "
                               "(foundry: <resourceName>.services.ai.azure.com).")
    resource_type: Literal["openAI", "foundry", "aiServices"] = field(
        "Endpoint type: openAI (Azure OpenAI Service) or foundry/aiServices (Azure AI Foundry project). "
        "trioproxy defaults to openAI; agentgateway requires it.", default="openAI")
    api_version: str | None = field(
        "api-version: v1 (default: /openai/v1/chat/completions), preview, or a dated version "
        "(/openai/deployments/<model>/chat/completions?api-version=<version>).", default=None)
    project_name: str | None = field("Foundry project name (default: resourceName).", default=None)


@described
class VertexOptions:
    """Options of Google Vertex AI through its OpenAI-compatible endpoint."""

    model: str | None = field("Model to use, overriding the one the client asks for.", default=None)
    project_id: str = field("Google Cloud project ID (in the path).")
    region: str | None = field("Region, e.g. us-central1 (default: global, at aiplatform.googleapis.com).",
                               default=None)


@described
class BedrockOptions:
    """Options of Amazon Bedrock's Converse API (OpenAI-format clients are translated to it)."""

    model: str | None = field("Model ID to use, overriding the one the client asks for.", default=None)
    region: str = field("AWS region: the host is bedrock-runtime.<region>.amazonaws.com, and the region "
                        "SigV4 signs for (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and "
                        "AWS_SESSION_TOKEN).")


@described(one_of=("openAI", "anthropic", "gemini", "vertex", "azure", "bedrock", "groq", "mistral", "deepseek", "openrouter", "together", "fireworks", "xai", "cerebras", "ollama", "vllm"))
class Provider:
    """Which LLM provider API the backend speaks: exactly one of openAI, anthropic, gemini, vertex, azure, bedrock,
    or an OpenAI-compatible preset (groq, mistral, deepseek, openrouter, together, fireworks, xai, cerebras, ollama,
    vllm)."""

    open_ai: OpenAIOptions | None = field(
        "OpenAI (api.openai.com:443): chat completions, Responses, embeddings, models; or any compatible API "
        "with hostOverride.", name="openAI", default=None)
    anthropic: AnthropicOptions | None = field(
        "Anthropic's Messages API (api.anthropic.com:443, /v1/messages, /v1/messages/count_tokens); the key goes "
        "in x-api-key, anthropic-version defaults to 2023-06-01.", default=None)
    gemini: GeminiOptions | None = field(
        "Google Gemini's OpenAI-compatible API (generativelanguage.googleapis.com:443, "
        "/v1beta/openai/...).", default=None)
    vertex: VertexOptions | None = field(
        "Google Vertex AI's OpenAI-compatible endpoint (<region>-aiplatform.googleapis.com:443, "
        "/v1/projects/<projectId>/locations/<region>/endpoints/openapi/...).", default=None)
    azure: AzureOptions | None = field(
        "Azure OpenAI (<resourceName>.openai.azure.com:443); the key goes in the api-key header.", default=None)
    bedrock: BedrockOptions | None = field(
        "Amazon Bedrock's Converse API (bedrock-runtime.<region>.amazonaws.com:443, /model/<model>/converse), "
        "requests translated from OpenAI's format and signed with SigV4.", default=None)
    groq: OpenAIOptions | None = field("Groq (api.groq.com:443, /openai/v1/...).", default=None)
    mistral: OpenAIOptions | None = field("Mistral (api.mistral.ai:443, /v1/...).", default=None)
    deepseek: OpenAIOptions | None = field("DeepSeek (api.deepseek.com:443, /v1/...).", default=None)
    openrouter: OpenAIOptions | None = field("OpenRouter (openrouter.ai:443, /api/v1/...).", default=None)
    together: OpenAIOptions | None = field("Together AI (api.together.xyz:443, /v1/...).", default=None)
    fireworks: OpenAIOptions | None = field("Fireworks AI (api.fireworks.ai:443, /inference/v1/...).", default=None)
    xai: OpenAIOptions | None = field("xAI (api.x.ai:443, /v1/...).", default=None)
    cerebras: OpenAIOptions | None = field("Cerebras (api.cerebras.ai:443, /v1/...).", default=None)
    ollama: OpenAIOptions | None = field("Ollama on this host (localhost:11434, plain HTTP, /v1/...).", default=None)
    vllm: OpenAIOptions | None = field("vLLM on this host (localhost:8000, plain HTTP, /v1/...).", default=None)


@described
class AIBackend:
    """An LLM provider: its default host, path and TLS, unless hostOverride/pathOverride say otherwise."""

    name: str = field("Backend name (traces, metrics).")
    provider: Provider = field("Provider API.")
    host_override: Annotated[Address, HOST_PORT_ADDRESS] | None = field(
        "HOST:PORT to use instead of the provider's host; reached over plain HTTP unless a backendTLS "
        "policy applies, and the client's path is kept (unless pathOverride).", default=None)
    path_override: PathText | None = field("Request path to use instead of the provider's (or the client's).",
                                           default=None)


@described(one_of=("host", "ai", "mcp"))
class Backend:
    """Where a route sends requests: exactly one of host, ai, mcp."""

    host: Annotated[Address, HOST_PORT_ADDRESS] | None = field("HOST:PORT of a plain HTTP backend.", default=None)
    ai: AIBackend | None = field("An LLM provider.", default=None)
    mcp: McpBackendSpec | None = field("MCP servers behind one endpoint (docs/mcp.md).", default=None)
    weight: Annotated[int, Integer(0, 1_000_000)] = field(
        "Share of the route's requests (0: none).", default=1)
    policies: BackendPolicies | None = field("Backend-phase policies.", default=None)


@described
class Route:
    """A set of conditions and the backends that serve requests meeting them."""

    name: str | None = field("Route name, unique in its listener (default route<index>).", default=None)
    namespace: str = field("Namespace in the route key.", default="default")
    hostnames: tuple[Hostname, ...] = field(
        "Host names the route takes (absent: any).", default=())
    matches: tuple[Match, ...] = field("Alternatives; a request meeting any one matches (absent: every request).",
                                       default=())
    policies: RoutePolicies | None = field("Route-phase policies.", default=None)
    backends: tuple[Backend, ...] = field("Backends, chosen by weight.", default=())


@described
class ListenerTls:
    """TLS for a listener (protocol HTTPS): serves HTTP/2 (ALPN h2) and HTTP/1.1 (docs/protocols.md)."""

    cert: str = field("Path of the PEM certificate chain (leaf first).")
    key: str = field("Path of the PEM private key of the certificate.")
    root: str | None = field(
        "Path of a PEM CA bundle: clients must present a certificate it verifies (mTLS).", default=None)


@described
class Listener:
    """A set of routes on one bind."""

    name: str | None = field("Listener name (default listener<index>).", default=None)
    protocol: Literal["HTTP", "HTTPS"] = field("Protocol: HTTP, or HTTPS (needs tls).", default="HTTP")
    hostname: Hostname | None = field("Host names this listener takes (absent: any).", default=None)
    policies: GatewayPolicies | None = field("Gateway-phase policies.", default=None)
    routes: tuple[Route, ...] = field("Routes, tried in order of specificity.", default=())
    tls: ListenerTls | None = field("TLS certificate and key (protocol HTTPS).", default=None)


@described
class Bind:
    """A port the gateway listens on."""

    port: Port = field("TCP port (0: any free port).")
    listeners: tuple[Listener, ...] = field("Listeners on this port.", default=())


ServerAddress = Annotated[Address | str, SERVER_ADDRESS]  # str: "off"


@described
class LogFields:
    """Fields added to (name → CEL expression) or removed from each access-log line or span."""

    add: dict[str, str] = field("Field name → CEL expression whose value is added.", default={})
    remove: tuple[str, ...] = field("Names of fields left out.", default=())


@described
class Logging:
    """The access log: one line per finished request (docs/observability.md)."""

    level: Literal["trace", "debug", "info", "warn", "error"] | None = field(
        "Log level (default info; --log-level and LOG_LEVEL override it).", default=None)
    format: Literal["text", "json"] | None = field(
        "text or json (default: text on a terminal, JSON lines otherwise; LOG_FORMAT overrides it).", default=None)
    filter: str | None = field("CEL expression: only requests for which it is true are logged.", default=None)
    fields: LogFields | None = field("Fields added to or removed from each line.", default=None)


Sampling = Annotated[float, SAMPLING]


def _random_sampling() -> Any:
    return field("Share of requests without a trace context that start a trace: true, false or 0.0-1.0 "
                 "(default false).", default=None)


def _client_sampling() -> Any:
    return field("Share of requests whose client sent a sampled traceparent that are traced: true, false or "
                 "0.0-1.0 (default true).", default=None)


@described
class Tracing:
    """OpenTelemetry spans exported over OTLP (a server span per request, a client span per backend call)."""

    otlp_endpoint: str = field("OTLP collector endpoint URL, e.g. http://localhost:4317 (grpc) or :4318 (http).")
    otlp_protocol: Literal["grpc", "http"] = field("OTLP transport: grpc or http (protobuf).", default="grpc")
    headers: dict[str, str] = field("Headers sent with each export (authentication).", default={})
    path: str | None = field("OTLP/HTTP path (default /v1/traces).", default=None)
    random_sampling: Sampling | None = _random_sampling()
    client_sampling: Sampling | None = _client_sampling()
    fields: LogFields | None = field("Span attributes added (CEL) or removed.", default=None)


@described
class BackendConnections:
    """How the gateway connects to backends (agentgateway's `config.backend`); defaults in docs/reliability.md."""

    connect_timeout: Duration | None = field(
        "Longest wait to establish a TCP connection to a backend (default 10s); past it 503 "
        "`upstream connect timeout`.", default=None)
    pool_idle_timeout: Duration | None = field(
        "How long an idle pooled backend connection is kept (default 1m30s).", default=None)
    pool_max_size: Annotated[int, Integer(0, 1_000_000)] | None = field(
        "Idle connections kept per backend (default 256); more may be open, they are closed when done.",
        default=None)
    response_header_timeout: Duration | None = field(
        "Longest wait from sending a request to a backend to its response headers, for routes whose "
        "`timeout` policy sets neither requestTimeout nor backendRequestTimeout (default 5m); past it "
        "504 `upstream call timeout`, so a backend that accepts and never answers cannot hold a client "
        "forever. trioproxy only.", default=None)


@described
class FrontendHttp:
    """Limits and timeouts for incoming HTTP requests (agentgateway's `frontendPolicies.http`)."""

    max_buffer_size: Annotated[int, Integer(1, 2**40)] | None = field(
        "Largest request body the gateway buffers, in bytes (an LLM request whose JSON it rewrites; "
        "default 2097152, 2 MiB, as agentgateway); larger → 413.", default=None)
    http1_max_headers: Annotated[int, Integer(1, 10_000)] | None = field(
        "Most headers an HTTP/1 request may have (default 100); more → 431.", default=None)
    http1_idle_timeout: Duration | None = field(
        "How long a client connection may stay idle between requests, the time to send a request head "
        "included (default 1m; agentgateway's is 10m). Read at start: a reload does not change it.",
        default=None)
    request_header_timeout: Duration | None = field(
        "Longest time from the first byte of a request head to its end (slowloris; default 10s); past it "
        "408 and the connection is closed. trioproxy only; read at start: a reload does not change it.",
        default=None)
    request_body_idle_timeout: Duration | None = field(
        "Longest gap between two pieces of a request body (default 1m); past it 408 (or the connection "
        "is cut when the response has started). trioproxy only.", default=None)
    max_connections: Annotated[int, Integer(1, 10_000_000)] | None = field(
        "Client connections per bind (default 10000, or fewer when the open-file limit needs it); past it "
        "a new connection gets 503 `overloaded` and is closed. trioproxy only; read at start.", default=None)
    max_connections_per_client: Annotated[int, Integer(1, 10_000_000)] | None = field(
        "Client connections per bind from one client IP address (default 1000, a tenth of the default "
        "maxConnections), so one client cannot hold every slot; past it a new connection from that address "
        "gets 503 `overloaded` and is closed. trioproxy only; read at start.", default=None)
    websocket_max_message_size: Annotated[int, Integer(1, 1 << 30)] | None = field(
        "Largest WebSocket message relayed either way, in bytes (characters of a text message; default "
        "1048576, as the `websockets` library): each message is buffered whole, so this bounds a "
        "session's memory; past it both sides are closed with 1009. trioproxy only; read at start.",
        default=None)
    max_requests_in_flight: Annotated[int, Integer(1, 10_000_000)] | None = field(
        "Requests handled at once per bind (default 10000); past it 503 `overloaded` at once, with "
        "`connection: close`. trioproxy only.", default=None)


@described
class AccessLogPolicy:
    """The access log's filter and fields for all requests (agentgateway's `frontendPolicies.accessLog`).
    Each one set replaces its `config.logging` counterpart; level and format stay in `config.logging`."""

    filter: str | None = field(
        "CEL expression: only requests for which it is true are logged (replaces config.logging.filter).",
        default=None)
    add: dict[str, str] = field(
        "Field name → CEL expression whose value is added to each line (replaces config.logging.fields.add).",
        default={})
    remove: tuple[str, ...] = field(
        "Names of fields left out of each line (replaces config.logging.fields.remove).", default=())


@described
class FrontendTracing:
    """OpenTelemetry spans over OTLP (agentgateway's `frontendPolicies.tracing`): the same export as
    `config.tracing`, written agentgateway's newer way; it replaces `config.tracing` when both are set."""

    host: str = field("The OTLP collector: HOST:PORT (plain HTTP), or an http:// or https:// URL.")
    protocol: Literal["grpc", "http"] = field("OTLP transport: grpc or http (protobuf).", default="grpc")
    path: str | None = field("OTLP/HTTP path (default /v1/traces).", default=None)
    random_sampling: Sampling | None = _random_sampling()
    client_sampling: Sampling | None = _client_sampling()
    attributes: dict[str, str] = field("Span attribute name → CEL expression whose value is added.", default={})
    remove: tuple[str, ...] = field("Span attributes left out.", default=())


@described
class FrontendPolicies:
    """Policies for all traffic the gateway receives (agentgateway's top-level `frontendPolicies`)."""

    http: FrontendHttp | None = field("Settings for handling incoming HTTP requests.", default=None)
    access_log: AccessLogPolicy | None = field(
        "Access-log filter and fields for every request; each one set replaces config.logging's.", default=None)
    logging: AccessLogPolicy | None = field("The same as accessLog (agentgateway's other name for it).",
                                            default=None)
    tracing: FrontendTracing | None = field(
        "OpenTelemetry span export (replaces config.tracing when both are set).", default=None)


@described
class History:
    """The request history: summaries of the last requests, kept in memory (docs/history.md)."""

    size: Annotated[int, Integer(0, 1_000_000)] | None = field(
        "How many finished requests are kept (default 1000; 0: no history).", default=None)


def _usd(text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise ValueError() from None
    if not 0 <= value < float("inf"):
        raise ValueError(f"expected a number of USD from 0, got {text!r}")
    return value


Usd = Annotated[float, Scalar("USD", _usd, {"type": "number", "minimum": 0}, "a number of USD from 0")]


@described
class ModelPrice:
    """A model's price in USD per million tokens (docs/pricing.md); each field set replaces the bundled
    catalog's, a model the catalog lacks needs input and output. trioproxy only."""

    input: Usd | None = field("Input (prompt) tokens not read from a cache.", default=None)
    output: Usd | None = field("Output (completion) tokens.", default=None)
    cached_input: Usd | None = field("Input tokens read from the provider's cache (default: input).", default=None)
    reasoning: Usd | None = field("Output tokens spent reasoning (default: output).", default=None)
    cache_write: Usd | None = field("Input tokens written to the provider's cache (default: input).", default=None)


@described
class RequestLog:
    """The optional record of each LLM request with a runtime key, kept in the key store (docs/keys.md)."""

    enabled: bool = field("Record each LLM request (key, team, model, tokens, cost, status, latency).",
                          default=False)
    retention: Duration | None = field("How long records are kept (default 7d).", default=None)


@described
class Keys:
    """Runtime API keys, budgets and spend (docs/keys.md). trioproxy only."""

    refresh_interval: Duration | None = field(
        "How often the key cache is refreshed from the store: replicas see new, changed and revoked keys "
        "within it (default 500ms).", default=None)
    flush_interval: Duration | None = field(
        "How often settled usage is written to the store in one batch; a crash loses at most this much "
        "spend (default 200ms).", default=None)
    reservation_ttl: Duration | None = field(
        "How long a reservation of a request's estimate lives when its process never settles it (a crash; "
        "default 5m).", default=None)
    failure_mode: Literal["closed", "open"] | None = field(
        "When the store cannot be reached: closed (default) answers 503 `key store unavailable`; open lets "
        "requests with a cached key pass without budgets.", default=None)
    default_max_tokens: Annotated[int, Integer(1, 10_000_000)] | None = field(
        "The completion part of a request's token estimate when it sets no max_tokens (default 1024).",
        default=None)
    request_log: RequestLog | None = field("The optional request log and its retention.", default=None)


@described
class SessionKey:
    """The key MCP session ids are signed with (HMAC-SHA256): replicas sharing it continue each other's
    sessions. Without it each process makes its own at start."""

    key: str = field("64 hex digits (`openssl rand -hex 32`); `$VAR` reads it from the environment.")


@described
class Servers:
    """The gateway's own servers; env ADMIN_ADDR, STATS_ADDR, READINESS_ADDR, ADMIN_TOKEN override them."""

    admin_addr: ServerAddress | None = field(
        "Admin server (/ui, /debug/trace, /config_dump); loopback by default; off: not started.", default=None)
    stats_addr: ServerAddress | None = field("Metrics server (/metrics); default localhost:15020 (set 0.0.0.0:15020 for off-host scrapes); off: not started.", default=None)
    readiness_addr: ServerAddress | None = field(
        "Readiness server (/healthz/ready); default localhost:15021 (set 0.0.0.0:15021 for a kubelet probe); off: not started.", default=None)
    logging: Logging | None = field("Access log level, format and filter.", default=None)
    tracing: Tracing | None = field("OpenTelemetry trace export.", default=None)
    history: History | None = field(
        "The request history the admin API (/api/requests) and `trioproxy requests` show.", default=None)
    admin_token: str | None = field(
        "Bearer token every admin endpoint requires when adminAddr is not loopback (required then);"
        " env ADMIN_TOKEN overrides it. Use `$VAR` to read it from the environment.", default=None)
    backend: BackendConnections | None = field(
        "Connections to backends: connect timeout, pooling, the default response-header timeout.", default=None)
    workers: Annotated[int, WORKERS] | None = field(
        "Worker processes serving the binds: a number, or auto for one per CPU (default 1: one process);"
        " --workers overrides it. Admin, stats and readiness stay in the supervisor (docs/workers.md).",
        default=None)
    prices: dict[str, ModelPrice] = field(
        "Model prices over the bundled catalog, USD per million tokens: model name (`gpt-4o`, or with a "
        "provider: `bedrock/amazon.nova-pro-v1:0`) -> fields (docs/pricing.md). trioproxy only.", default={})
    store: str | None = field(
        "The key store: a SQLite file path (relative to the config file's directory) or a "
        "`postgresql://user@host:port/db` URL (default trioproxy.db beside the config file; opened only "
        "when runtime keys are used). trioproxy only.", default=None)
    keys: Keys | None = field("Runtime API keys, budgets and spend (docs/keys.md).", default=None)
    session: SessionKey | None = field("How MCP session ids are signed (docs/mcp.md).", default=None)


@described
class LlmParams:
    """What the gateway sends the provider for one model."""

    model: str | None = field("Model sent to the provider (absent: the client's model).", default=None)
    api_key: str | None = field(
        "API key sent as `Authorization: Bearer <key>` (use `$VAR` to read it from the environment).", default=None)
    host_override: Annotated[Address, HOST_PORT_ADDRESS] | None = field(
        "HOST:PORT of the provider, reached over plain HTTP unless backendTLS applies (absent: the provider's own"
        " host over TLS).", default=None)
    path_override: PathText | None = field("Request path to use instead of the client's.", default=None)
    vertex_project: str | None = field("Google Cloud project ID (provider vertex).", default=None)
    vertex_region: str | None = field("Vertex AI region (provider vertex; default global).", default=None)


@described
class LlmTransformation:
    """Request fields computed by CEL over `llmRequest` (the client's JSON body)."""

    model: CelText | None = field(
        "The model sent upstream, e.g. `llmRequest.model.stripPrefix(\"anthropic/\")`.", default=None)


@described
class LlmModel:
    """One model the gateway serves, matched against the `model` of the client's request body."""

    name: str = field("Model name the client asks for: exact, or a wildcard at one end (`anthropic/*`, `*`).")
    provider: str = field("Provider API of the model (such as openAI).")
    params: LlmParams | None = field("Model, API key and address sent to the provider.", default=None)
    transformation: LlmTransformation | None = field("Request fields computed by CEL.", default=None)
    health: Health | None = field("Outlier detection of this model's provider (default: eviction's defaults).",
                                  default=None)
    local_rate_limit: LocalRateLimits = field(
        "This target's own quota (trioproxy): when a bucket is empty, a virtual model fails over to its next"
        " target and a direct request is 429 (docs/resilience.md, \"Per-target limits\"); requests or tokens"
        " buckets, without perClientAddress.", default=())


@described
class LlmPolicies:
    """Policies of the llm: format's requests, applied before a model is chosen (agentgateway's
    LocalLLMPolicy: authentication, authorization, CORS and limits; `apiKey.runtimeKeys` takes the
    runtime keys of docs/keys.md)."""

    jwt_auth: JwtAuth | None = field(JWT_AUTH, default=None)
    basic_auth: BasicAuth | None = field(BASIC_AUTH, default=None)
    api_key: ApiKeyAuth | None = field(API_KEY, default=None)
    authorization: Authorization | None = field(AUTHORIZATION, default=None)
    cors: Cors | None = field(CORS, default=None)
    local_rate_limit: LocalRateLimits = field(LOCAL_RATE_LIMIT, default=())
    remote_rate_limit: RemoteRateLimit | None = field(REMOTE_RATE_LIMIT, default=None)


@described
class Llm:
    """The short LLM format: models served on one port, chosen by the request body's `model`; an unknown
    model is 404 `model_not_found` (JSON, as agentgateway). Compiles to a bind with one route of `ai`
    backends."""

    port: Port | None = field("Port of the LLM API (default 4000).", default=None)
    models: tuple[LlmModel, ...] = field("The models, most specific name first when several match.")
    virtual_models: tuple[LlmVirtualModel, ...] = field(
        "Names standing for several models, with failover, weights or conditions (docs/resilience.md).", default=())
    policies: LlmPolicies | None = field(
        "Policies of every request, before a model is chosen (authentication, authorization, limits).", default=None)


@described
class Document:
    """trioproxy standalone configuration (a subset of agentgateway's)."""

    config: Servers | None = field("The gateway's own servers.", default=None)
    binds: tuple[Bind, ...] = field("Ports the gateway listens on.", default=())
    frontend_policies: FrontendPolicies | None = field(
        "Policies for all traffic the gateway receives: limits and timeouts of client connections.", default=None)
    llm: Llm | None = field("LLM models served on their own port (the short format).", default=None)
