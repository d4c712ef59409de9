"""The Kubernetes-style resources ``--config`` accepts, described once (``describe.py`` mechanism).

``ProxyPolicySpec`` is trioproxy's own resource: its CRD (``trioproxy/crds/proxypolicy.yaml``)
is generated from it (``config/crd.py``), and a manifest is checked against that same schema
(``config/manifest_validate.py``), so the messages are the ones an API server with the CRD
would give. ``GatewaySpec`` and ``HTTPRouteSpec`` describe the subset of Gateway API v1 that
trioproxy reads (the upstream CRDs are not ours to ship); they are checked the same way.

Extension points: ``Traffic.rate_limit.global_``, ``Traffic.jwt_authentication`` and
``Traffic.authorization`` are read as free-form objects; ``manifest.TRAFFIC_TRANSLATORS`` says
which traffic fields this version applies (the others are reported in the status), and the JWT
and authorization translators (``policies/auth_manifest.py``) check their values themselves.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import attrs

from .describe import Integer, Items, Kind, Text, described, field

__all__ = ["SPECS", "GatewaySpec", "HTTPRouteSpec", "ProxyPolicySpec"]

GATEWAY_GROUP = "gateway.networking.k8s.io"
Port = Annotated[int, Integer(1, 65535)]
Weight = Annotated[int, Integer(0, 1_000_000)]
Count = Annotated[int, Integer(1, 4_294_967_295)]


@attrs.frozen(eq=False)
class FreeForm(Kind):
    """Any mapping, kept as written (``x-kubernetes-preserve-unknown-fields``): a field this
    version holds but does not yet apply (its translator reports it in the status)."""

    shape = "mapping"

    def read(self, r: Any, node: Any, path: str) -> Any:  # manifests are read as plain data
        raise NotImplementedError

    def schema(self, s: Any) -> dict[str, Any]:
        return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


Opaque = Annotated[Any, FreeForm()]


# --- ProxyPolicy -------------------------------------------------------------------------------


@described
class TargetRef:
    """A Gateway or HTTPRoute in the policy's namespace that the policy applies to."""

    group: Literal["gateway.networking.k8s.io"] = field("API group of the target.")
    kind: Literal["Gateway", "HTTPRoute"] = field("Kind of the target; a Gateway's routes share its limits.")
    name: Annotated[str, Text()] = field("Name of the target (same namespace as the policy).")
    section_name: str | None = field("A listener of a Gateway (its name); absent = every listener.",
                                     default=None)


@described(rules=(
    ("has(self.requests) != has(self.tokens)", "exactly one of requests or tokens must be set"),
    ("!has(self.burst) || has(self.requests)", "burst is allowed only with requests"),
))
class LocalLimit:
    """One token bucket: n requests or LLM tokens per unit (plus a request burst)."""

    requests: Count | None = field("Requests per unit (xor tokens).", default=None)
    tokens: Count | None = field("LLM tokens (usage.total_tokens) per unit (xor requests).", default=None)
    burst: Annotated[int, Integer(0, 4_294_967_295)] | None = field(
        "Extra requests a burst may take above the rate (bucket size = requests + burst).", default=None)
    unit: Literal["Seconds", "Minutes", "Hours"] = field("Length of one window (the fill interval).")


@described
class RateLimit:
    """Rate limits of the targets."""

    local: Annotated[tuple[LocalLimit, ...], Items(min_items=1)] | None = field(
        "In-process token buckets; every entry applies.", default=None)
    global_: Opaque | None = field(
        "A remote rate limit service (Envoy RLS protocol) shared by replicas: {host, domain, failureMode: "
        "FailClosed|FailOpen, timeout, descriptors: [{entries: [{name, expression: <CEL>}], unit: Requests|Tokens}]} "
        "(checked when translated; problems in the status).", default=None, name="global")


@described
class Traffic:
    """Traffic policies of the targets."""

    rate_limit: RateLimit | None = field("Local and global rate limits.", default=None)
    jwt_authentication: Opaque | None = field(
        "JWT authentication: {mode: Strict|Optional|Permissive, providers: [{issuer, audiences, "
        "jwks: {remote: {url}} | {inline: <JWKS JSON>}}]} (checked when translated; problems in the status).",
        default=None)
    authorization: Opaque | None = field(
        "CEL authorization rules: {rules: [<CEL> | {allow|deny|require: <CEL>}]} (checked when translated).",
        default=None)


@described
class ProxyPolicySpec:
    """trioproxy policies attached to Gateway API resources."""

    target_refs: Annotated[tuple[TargetRef, ...], Items(min_items=1)] = field("What the policy applies to.")
    traffic: Traffic | None = field("Traffic policies.", default=None)


# --- Gateway (the subset trioproxy reads) ---------------------------------------------------------


@described
class RouteNamespaces:
    """Which namespaces' routes may attach."""

    from_: Literal["Same", "All"] = field("Same: the Gateway's namespace; All: any.", default="Same",
                                          name="from")


@described
class AllowedRoutes:
    """Routes that may attach to a listener."""

    namespaces: RouteNamespaces | None = field("Namespaces routes may come from.", default=None)


@described
class GatewayListener:
    """One listener: a port, a protocol and an optional hostname."""

    name: Annotated[str, Text()] = field("Listener name (a parentRef's sectionName).")
    port: Port = field("Port to listen on.")
    protocol: Literal["HTTP"] = field("Protocol (HTTP in this version).")
    hostname: str | None = field("Host name (may start with *.) requests must have.", default=None)
    allowed_routes: AllowedRoutes | None = field("Routes that may attach.", default=None)


@described
class GatewaySpec:
    """A Gateway API v1 Gateway (the fields trioproxy reads)."""

    gateway_class_name: Annotated[str, Text()] = field("GatewayClass (any name is served).")
    listeners: Annotated[tuple[GatewayListener, ...], Items(min_items=1)] = field("Listeners.")


# --- HTTPRoute (the subset trioproxy reads) -----------------------------------------------------


@described
class ParentRef:
    """A Gateway (or one of its listeners) the route attaches to."""

    group: Literal["gateway.networking.k8s.io"] | None = field("API group.", default=None)
    kind: Literal["Gateway"] | None = field("Kind.", default=None)
    namespace: str | None = field("Namespace of the Gateway (default: the route's).", default=None)
    name: Annotated[str, Text()] = field("Gateway name.")
    section_name: str | None = field("Listener name.", default=None)
    port: Port | None = field("Listener port.", default=None)


@described
class PathMatch:
    """A path condition."""

    type: Literal["Exact", "PathPrefix", "RegularExpression"] = field("How value is compared.",
                                                                        default="PathPrefix")
    value: Annotated[str, Text()] = field("The path.", default="/")


@described
class ValueMatch:
    """A header or query parameter condition."""

    type: Literal["Exact", "RegularExpression"] = field("How value is compared.", default="Exact")
    name: Annotated[str, Text()] = field("Header or parameter name.")
    value: Annotated[str, Text(min_length=0)] = field("Value.")


@described
class RouteMatch:
    """Conditions a request must meet (all of them)."""

    path: PathMatch | None = field("Path condition.", default=None)
    headers: tuple[ValueMatch, ...] = field("Header conditions.", default=())
    query_params: tuple[ValueMatch, ...] = field("Query parameter conditions.", default=())
    method: Literal["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"] | None = field(
        "HTTP method.", default=None)


@described
class HeaderPair:
    """A header name and value."""

    name: Annotated[str, Text()] = field("Header name.")
    value: Annotated[str, Text(min_length=0)] = field("Header value.")


@described
class HeaderFilter:
    """Headers to set, add and remove."""

    set: tuple[HeaderPair, ...] = field("Headers to set (replace).", default=())
    add: tuple[HeaderPair, ...] = field("Headers to add.", default=())
    remove: tuple[str, ...] = field("Header names to remove.", default=())


@described
class RouteFilter:
    """A filter of a rule (RequestHeaderModifier and ResponseHeaderModifier in this version)."""

    type: Literal["RequestHeaderModifier", "ResponseHeaderModifier"] = field("Filter type.")
    request_header_modifier: HeaderFilter | None = field("For type RequestHeaderModifier.", default=None)
    response_header_modifier: HeaderFilter | None = field("For type ResponseHeaderModifier.", default=None)


@described
class BackendRef:
    """A backend: the host name:port, with a weight."""

    group: Literal[""] | None = field("API group (core).", default=None)
    kind: Literal["Service"] | None = field("Kind (Service).", default=None)
    name: Annotated[str, Text()] = field("Host name (a Service name in Kubernetes).")
    namespace: str | None = field("Namespace (the host is name.namespace when set).", default=None)
    port: Port = field("Port.")
    weight: Weight = field("Share of requests.", default=1)


@described
class RouteRule:
    """Matches, filters and backends of one rule."""

    name: str | None = field("Rule name.", default=None)
    matches: tuple[RouteMatch, ...] = field("Conditions (any of them); absent = every path.", default=())
    filters: tuple[RouteFilter, ...] = field("Filters.", default=())
    backend_refs: tuple[BackendRef, ...] = field("Backends.", default=())


@described
class HTTPRouteSpec:
    """A Gateway API v1 HTTPRoute (the fields trioproxy reads)."""

    parent_refs: Annotated[tuple[ParentRef, ...], Items(min_items=1)] = field("Gateways to attach to.")
    hostnames: tuple[str, ...] = field("Host names the route serves.", default=())
    rules: tuple[RouteRule, ...] = field("Rules.", default=())


#: (apiVersion, kind) -> spec description
SPECS: dict[tuple[str, str], type] = {
    (f"{GATEWAY_GROUP}/v1", "Gateway"): GatewaySpec,
    (f"{GATEWAY_GROUP}/v1", "HTTPRoute"): HTTPRouteSpec,
    ("trioproxy.dev/v1alpha1", "ProxyPolicy"): ProxyPolicySpec,
}
