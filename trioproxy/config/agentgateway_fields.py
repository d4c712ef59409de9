"""Fields agentgateway's standalone config has and trioproxy does not implement.

A key listed here for a described class gets ``<path>: '<field>' is an agentgateway feature that
trioproxy does not implement`` instead of "unknown field; did you mean ...": a user bringing an
agentgateway config learns the feature is missing, not that they made a typo. Keys are the
``document.py`` class names; values are wire names (agentgateway's, from its schema/config.json).
When trioproxy builds one of these, move it from here to a ``field(...)`` in ``document.py`` (a
test fails while a name is in both). A policy kind trioproxy has, but not in a phase where
agentgateway has it, is the kind's ``agentgateway_only`` in ``policies/kinds.py``, not a name here.
"""

from __future__ import annotations

from ..policies.kinds import POLICY_KINDS


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


def _kinds_only_in_agentgateway(phase: str) -> frozenset[str]:
    """Policy kinds trioproxy has, but not in ``phase`` where agentgateway has them (policies/kinds.py)."""
    return frozenset(kind.name for kind in POLICY_KINDS if phase in kind.agentgateway_only)


UNIMPLEMENTED: dict[str, frozenset[str]] = {
    "Document": _names(
        "backends gateways mcp policies routeGroups routes services tcpRoutes ui "
        "workloads"
    ),
    "Servers": _names(
        "additionalTrustDomains caAddress caAuthToken clusterId connectionMinTerminationDeadline "
        "connectionTerminationDeadline customFunctions database dns enableIpv6 gateway hbone histograms "
        "localXdsPath mcp metrics modelCatalog namespace network sensitiveHeaders serviceAccount "
        "skipValidateTrustDomain spiffe standardAttributes storage trustDomain "
        "workerThreads xdsAddress xdsAuthToken"
    ),
    "Bind": _names("mode tunnelProtocol"),
    "Listener": _names("namespace tcpRoutes"),
    "Route": _names("ruleName"),
    "Backend": _names("aws backend dynamic internal invalid routeGroup service"),
    "GatewayPolicies": _names("extAuthz extProc oidc transformations") | _kinds_only_in_agentgateway("gateway"),
    "RoutePolicies": _names(
        "a2a backendTunnel buffer extAuthz extProc "
        "mcpGuardrails oidc transformations"
    ) | _kinds_only_in_agentgateway("route"),
    "BackendPolicies": _names(
        "a2a backendTunnel extAuthz http inferenceRouting "
        "mcpGuardrails sessionAffinity tcp transformations"
    ) | _kinds_only_in_agentgateway("backend"),
    "AIBackend": _names("pathPrefix policies tokenize"),
    "AiPolicy": _names(
        "promptGuard defaults overrides transformations finalTransformations prompts modelAliases promptCaching"),
    "Provider": _names("copilot custom"),
    "BackendTLS": _names("keyExchangeGroups spiffe"),
    "OpenAIOptions": _names("moderation"),
    "DirectResponse": _names("bodyExpression headers"),
    "ConditionalDirectResponse": _names("bodyExpression headers"),
    "Retry": _names("precondition condition"),
    "Health": _names("unhealthyExpression"),
    "Eviction": _names("restoreHealth healthThreshold"),
    "MirrorBackend": _names("service backend"),
    "BackendAuth": _names("aws azure crossAppAccess gcp jwtSign oauthTokenExchange passthrough"),
    "ApiKeyEntry": _names("allowedModels"),
    "CredentialLocation": _names("expression"),
    # only the Authorization: Bearer header is read; exp is always required
    "JwtAuth": _names("location jwtValidationOptions"),
    "JwtProvider": _names("jwtValidationOptions"),
    "McpAuthentication": _names("authorizationLocation clientId clientSecret jwtValidationOptions"),
    "McpBackendSpec": _names("dnsRebindingProtection"),
    "McpTarget": _names("openapi policies"),
    "FrontendPolicies": _names(
        "connect networkAuthorization networkExtAuthz proxy proxyProtocol tcp tls"),
    "AccessLogPolicy": _names("database otlp"),
    # only a collector given by host; every exported span (no filter); no resource attributes
    "FrontendTracing": _names("backend filter policies resources service"),
    "FrontendHttp": _names(
        "http1HeaderCase http2ConnectionWindowSize http2FrameSize http2KeepaliveInterval http2KeepaliveTimeout "
        "http2MaxHeaderSize http2WindowSize maxConnectionDuration"),
    "BackendConnections": _names("keepalives"),
    "Llm": _names("gateways tls providers"),
    "LlmPolicies": _names("extAuthz extProc guardrails oidc transformations"),
    "LlmModel": _names(
        "id visibility passthrough authorization defaults overrides finalTransformation requestHeaders "
        "responseHeaders backendTLS tls auth backendTunnel guardrails promptCaching matches"
    ),
    "LlmParams": _names(
        "awsRegion azureResourceName azureResourceType azureApiVersion "
        "azureProjectName baseUrl pathPrefix tokenize"
    ),
}
