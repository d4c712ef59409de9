"""The policy kinds: the one table every list of them derives from.

One row per kind a config can set, in the order traces and ``/config_dump`` list them: its wire
name, the attribute it has on ``document.*Policies`` and ``model.Policies``, and the phases it is
accepted in. From it: ``model.TRACE_KINDS``, the ``agentgateway_fields`` entries for the phases
trioproxy leaves out, and the checks (tests/unit/policies/test_policy_kinds.py) that the typed phase classes,
``compile.POLICY_COMPILERS`` and ``stages.STAGE_ORDER`` cover exactly these kinds. How to add
one: docs/pipeline.md, "Adding a policy kind".
"""

from __future__ import annotations

from attrs import frozen

__all__ = ["PHASES", "POLICY_KINDS", "PolicyKind", "kinds_of", "runtime_kinds_of"]

#: listener (``gateway``), route and backend, in the order a request meets them
PHASES: tuple[str, ...] = ("gateway", "route", "backend")


@frozen
class PolicyKind:
    name: str                      # as written in the config (camelCase)
    attribute: str                 # on document.*Policies and model.Policies
    phases: frozenset[str]         # where trioproxy takes it
    #: phases where agentgateway has it and trioproxy does not (an error says so, not "did you mean")
    agentgateway_only: frozenset[str] = frozenset()
    #: read into the backend when the config is compiled (the ``ai`` policy's routes map): no field
    #: on ``model.Policies``, no stage, not listed in traces
    backend_setting: bool = False


def _kind(name: str, attribute: str, phases: str, agentgateway_only: str = "", *,
          backend_setting: bool = False) -> PolicyKind:
    return PolicyKind(name, attribute, frozenset(phases.split()), frozenset(agentgateway_only.split()),
                      backend_setting)


POLICY_KINDS: tuple[PolicyKind, ...] = (
    _kind("jwtAuth", "jwt_auth", "gateway route"),
    _kind("basicAuth", "basic_auth", "gateway route"),
    _kind("apiKey", "api_key", "gateway route"),
    _kind("authorization", "authorization", "gateway route", agentgateway_only="backend"),
    _kind("cors", "cors", "gateway route"),
    _kind("localRateLimit", "local_rate_limit", "gateway route"),
    _kind("remoteRateLimit", "remote_rate_limit", "gateway route"),
    _kind("requestHeaderModifier", "request_header_modifier", "route backend"),
    _kind("responseHeaderModifier", "response_header_modifier", "route backend"),
    _kind("timeout", "timeout", "route"),
    _kind("retry", "retry", "route"),
    _kind("directResponse", "direct_response", "route"),
    _kind("backendAuth", "backend_auth", "route backend"),
    _kind("backendTLS", "backend_tls", "route backend"),
    _kind("csrf", "csrf", "route"),
    _kind("urlRewrite", "url_rewrite", "route"),
    _kind("requestRedirect", "request_redirect", "route", agentgateway_only="backend"),
    _kind("requestMirror", "request_mirror", "route"),
    _kind("delay", "delay", "route"),
    _kind("ai", "ai", "route backend", backend_setting=True),
    _kind("health", "health", "route backend", backend_setting=True),
    _kind("loadBalancer", "load_balancer", "route", backend_setting=True),
    _kind("mcpAuthentication", "mcp_authentication", "route"),
    _kind("mcpAuthorization", "mcp_authorization", "route backend", backend_setting=True),  # into mcp backends
)


def kinds_of(phase: str) -> tuple[PolicyKind, ...]:
    """The kinds ``phase`` takes, in table order."""
    return tuple(kind for kind in POLICY_KINDS if phase in kind.phases)


def runtime_kinds_of(phase: str) -> tuple[PolicyKind, ...]:
    """The kinds of ``phase`` a compiled ``model.Policies`` holds (not the backend settings)."""
    return tuple(kind for kind in kinds_of(phase) if not kind.backend_setting)
