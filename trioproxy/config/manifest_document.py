"""The Kubernetes-style resources ``--config`` accepts, described once (``describe.py`` mechanism).

``ProxyPolicySpec`` is trioproxy's own resource: its CRD (``trioproxy/crds/proxypolicy.yaml``)
is generated from it (``config/crd.py``), and a manifest is checked against that same schema
(``config/manifest_validate.py``), so the messages are the ones an API server with the CRD
would give. ``GatewaySpec`` and ``HTTPRouteSpec`` describe the subset of Gateway API v1 that
trioproxy reads (the upstream CRDs are not ours to ship); they are checked the same way. A spec
that passed is read into its class once (``read_spec``), and translated from there.

Extension points: ``Traffic.rate_limit.global_``, ``Traffic.jwt_authentication`` and
``Traffic.authorization`` are read as free-form objects; ``manifest_translate.TRAFFIC_TRANSLATORS`` says
which traffic fields this version applies (the others are reported in the status), and the JWT
and authorization translators (``policies/auth_manifest.py``) check their values themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import attrs

from . import describe
from .describe import Integer, Items, Kind, Text, described, field

__all__ = ["SPECS", "GatewaySpec", "HTTPRouteSpec", "ProxyPolicySpec", "read_spec"]

GATEWAY_GROUP = "gateway.networking.k8s.io"
Port = Annotated[int, Integer(1, 65535)]

# Gateway API v1's string types, with the patterns and lengths of its CRDs (config/crd/standard):
# the API server would refuse a value outside them, so trioproxy does too, with its message.
_DNS_LABELS = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
#: Hostname: a listener's or a route's, may start with ``*.``; lower case only.
Hostname = Annotated[str, Text(pattern=r"^(\*\.)?" + _DNS_LABELS, max_length=253)]
#: PreciseHostname: a redirect's or rewrite's, no wildcard.
PreciseHostname = Annotated[str, Text(pattern="^" + _DNS_LABELS, max_length=253)]
#: SectionName: a listener's name (a parentRef's sectionName), a rule's name.
SectionName = Annotated[str, Text(pattern="^" + _DNS_LABELS, max_length=253)]
#: HTTPHeaderName: a header (or query parameter) name, RFC 7230 token characters.
HTTPHeaderName = Annotated[str, Text(pattern=r"^[A-Za-z0-9!#$%&'*+\-.^_\x60|~]+$", max_length=256)]
#: ObjectName: a Kubernetes object's name.
ObjectName = Annotated[str, Text(max_length=253)]
#: Namespace: a DNS label.
Namespace = Annotated[str, Text(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
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

    name: SectionName = field("Listener name (a parentRef's sectionName).")
    port: Port = field("Port to listen on.")
    protocol: Literal["HTTP"] = field("Protocol (HTTP in this version).")
    hostname: Hostname | None = field("Host name (may start with *.) requests must have.", default=None)
    allowed_routes: AllowedRoutes | None = field("Routes that may attach.", default=None)


#: Gateway API's x-kubernetes-validations of Gateway ``spec.listeners`` that apply to protocol HTTP.
_LISTENER_RULES = (
    ("self.all(l1, self.exists_one(l2, l1.name == l2.name))", "Listener name must be unique within the Gateway"),
    ("self.all(l1, self.exists_one(l2, l1.port == l2.port && l1.protocol == l2.protocol && "
     "(has(l1.hostname) && has(l2.hostname) ? l1.hostname == l2.hostname : !has(l1.hostname) && !has(l2.hostname))))",
     "Combination of port, protocol and hostname must be unique for each listener"),
)


@described
class GatewaySpec:
    """A Gateway API v1 Gateway (the fields trioproxy reads)."""

    gateway_class_name: ObjectName = field("GatewayClass (any name is served).")
    listeners: Annotated[tuple[GatewayListener, ...], Items(min_items=1, rules=_LISTENER_RULES)] = field("Listeners.")


# --- HTTPRoute (the subset trioproxy reads) -----------------------------------------------------


@described
class ParentRef:
    """A Gateway (or one of its listeners) the route attaches to."""

    group: Literal["gateway.networking.k8s.io"] | None = field("API group.", default=None)
    kind: Literal["Gateway"] | None = field("Kind.", default=None)
    namespace: Namespace | None = field("Namespace of the Gateway (default: the route's).", default=None)
    name: ObjectName = field("Gateway name.")
    section_name: SectionName | None = field("Listener name.", default=None)
    port: Port | None = field("Listener port.", default=None)


_EXACT_OR_PREFIX = "(self.type in ['Exact','PathPrefix']) ? "
_WHEN = " when type one of ['Exact', 'PathPrefix']"


@described(rules=(  # Gateway API's HTTPPathMatch rules, its messages
    (_EXACT_OR_PREFIX + "self.value.startsWith('/') : true", "value must be an absolute path and start with '/'" + _WHEN),
    *((_EXACT_OR_PREFIX + f"!self.value.contains('{part}') : true", f"must not contain '{part}'" + _WHEN)
      for part in ("//", "/./", "/../", "%2f", "%2F", "#")),
    *((_EXACT_OR_PREFIX + f"!self.value.endsWith('{end}') : true", f"must not end with '{end}'" + _WHEN)
      for end in ("/..", "/.")),
    (_EXACT_OR_PREFIX + "self.value.matches(r\"\"\"^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$\"\"\") : true",
     "must only contain valid characters (matching ^(?:[-A-Za-z0-9/._~!$&'()*+,;=:@]|[%][0-9a-fA-F]{2})+$) "
     "for types ['Exact', 'PathPrefix']"),
))
class PathMatch:
    """A path condition."""

    type: Literal["Exact", "PathPrefix", "RegularExpression"] = field("How value is compared.",
                                                                        default="PathPrefix")
    value: Annotated[str, Text(max_length=1024)] = field("The path.", default="/")


@described
class ValueMatch:
    """A header or query parameter condition."""

    type: Literal["Exact", "RegularExpression"] = field("How value is compared.", default="Exact")
    name: HTTPHeaderName = field("Header or parameter name.")
    value: Annotated[str, Text(min_length=0, max_length=4096)] = field("Value.")


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

    name: HTTPHeaderName = field("Header name.")
    value: Annotated[str, Text(min_length=0, max_length=4096)] = field("Header value.")


@described
class HeaderFilter:
    """Headers to set, add and remove."""

    set: tuple[HeaderPair, ...] = field("Headers to set (replace).", default=())
    add: tuple[HeaderPair, ...] = field("Headers to add.", default=())
    remove: tuple[str, ...] = field("Header names to remove.", default=())


@described(rules=(
    ("self.type == 'ReplaceFullPath' ? has(self.replaceFullPath) : true",
     "replaceFullPath must be specified when type is set to 'ReplaceFullPath'"),
    ("has(self.replaceFullPath) ? self.type == 'ReplaceFullPath' : true",
     "type must be 'ReplaceFullPath' when replaceFullPath is set"),
    ("self.type == 'ReplacePrefixMatch' ? has(self.replacePrefixMatch) : true",
     "replacePrefixMatch must be specified when type is set to 'ReplacePrefixMatch'"),
    ("has(self.replacePrefixMatch) ? self.type == 'ReplacePrefixMatch' : true",
     "type must be 'ReplacePrefixMatch' when replacePrefixMatch is set"),
))
class PathModifier:
    """A new path: the whole path, or the part the rule's PathPrefix match matched."""

    type: Literal["ReplaceFullPath", "ReplacePrefixMatch"] = field("Which part is replaced.")
    replace_full_path: Annotated[str, Text(min_length=0)] | None = field(
        "The new path (the query is kept).", default=None)
    replace_prefix_match: Annotated[str, Text(min_length=0)] | None = field(
        "What replaces the matched prefix, element-wise (/api -> /v2: /api/x -> /v2/x).", default=None)


@described
class RequestRedirectFilter:
    """Answer with a redirect to the request's URL with these parts replaced (the query is kept)."""

    scheme: Literal["http", "https"] | None = field(
        "Scheme of the new URL (default: the request's); it takes its well-known port unless port is set.",
        default=None)
    hostname: PreciseHostname | None = field("Host of the new URL (default: the request's).", default=None)
    path: PathModifier | None = field("Path of the new URL (default: the request's).", default=None)
    port: Port | None = field("Port of the new URL (the scheme's default port is left out).", default=None)
    status_code: Literal[301, 302, 303, 307, 308] | None = field("Redirect status (default 302).", default=None)


@described
class URLRewriteFilter:
    """Rewrite the Host and path the backend receives."""

    hostname: PreciseHostname | None = field("The Host header sent to the backend.", default=None)
    path: PathModifier | None = field("The path sent to the backend.", default=None)


@described
class Fraction:
    """numerator/denominator of requests."""

    numerator: Annotated[int, Integer(0, 2_147_483_647)] = field("Numerator.")
    denominator: Annotated[int, Integer(1, 2_147_483_647)] = field("Denominator (default 100).", default=100)


@described(rules=(
    ("!(has(self.percent) && has(self.fraction))", "Only one of percent or fraction may be specified in HTTPRequestMirrorFilter"),
))
class RequestMirrorFilter:
    """Send a copy of each request (or of a share of them) to another backend; its answer is ignored."""

    backend_ref: ServiceRef = field("Where the copies go.")
    percent: Annotated[int, Integer(0, 100)] | None = field("Share of requests mirrored, in percent (default 100).",
                                                            default=None)
    fraction: Fraction | None = field("Share of requests mirrored, as a fraction.", default=None)


_FILTER_TYPES = (("RequestHeaderModifier", "requestHeaderModifier"),
                 ("ResponseHeaderModifier", "responseHeaderModifier"), ("RequestRedirect", "requestRedirect"),
                 ("URLRewrite", "urlRewrite"), ("RequestMirror", "requestMirror"))


@described(rules=tuple(
    rule for kind, name in _FILTER_TYPES for rule in (
        (f"!(has(self.{name}) && self.type != '{kind}')", f"filter.{name} must be nil if the filter.type is not {kind}"),
        (f"!(!has(self.{name}) && self.type == '{kind}')", f"filter.{name} must be specified for {kind} filter.type"),
    )))
class RouteFilter:
    """A filter of a rule: Gateway API's core and extended HTTPRoute filters (not ExtensionRef)."""

    type: Literal["RequestHeaderModifier", "ResponseHeaderModifier", "RequestRedirect", "URLRewrite",
                  "RequestMirror"] = field("Filter type.")
    request_header_modifier: HeaderFilter | None = field("For type RequestHeaderModifier.", default=None)
    response_header_modifier: HeaderFilter | None = field("For type ResponseHeaderModifier.", default=None)
    request_redirect: RequestRedirectFilter | None = field("For type RequestRedirect.", default=None)
    url_rewrite: URLRewriteFilter | None = field("For type URLRewrite.", name="urlRewrite", default=None)
    request_mirror: RequestMirrorFilter | None = field("For type RequestMirror.", default=None)


@described
class ServiceRef:
    """A host name:port (a Service in Kubernetes): where RequestMirror sends copies; BackendRef adds a weight."""

    group: Literal[""] | None = field("API group (core).", default=None)
    kind: Literal["Service"] | None = field("Kind (Service).", default=None)
    name: ObjectName = field("Host name (a Service name in Kubernetes).")
    namespace: Namespace | None = field("Namespace (the host is name.namespace when set).", default=None)
    port: Port = field("Port.")


@described
class BackendRef(ServiceRef):
    """A backend: the host name:port, with a weight."""

    weight: Weight = field("Share of requests.", default=1)


def _prefix_needs_one_pathprefix(name: str, kind: str) -> tuple[str, str]:
    """Gateway API's rule: a ReplacePrefixMatch needs exactly one PathPrefix match (absent matches,
    or an absent path or type, default to PathPrefix /)."""
    uses_prefix = (f"has(self.filters) && self.filters.exists_one(f, has(f.{name}) && has(f.{name}.path) && "
                   f"f.{name}.path.type == 'ReplacePrefixMatch')")
    one_prefix = ("!has(self.matches) || (size(self.matches) == 1 && (!has(self.matches[0].path) || "
                  "!has(self.matches[0].path.type) || self.matches[0].path.type == 'PathPrefix'))")
    return (f"({uses_prefix}) ? ({one_prefix}) : true",
            f"When using {kind} filter with path.replacePrefixMatch, exactly one PathPrefix match must be specified")


#: Gateway API's x-kubernetes-validations of HTTPRouteRule and its filters (their messages).
_RULE_RULES = (
    ("(has(self.backendRefs) && size(self.backendRefs) > 0) ? "
     "(!has(self.filters) || self.filters.all(f, !has(f.requestRedirect))) : true",
     "RequestRedirect filter must not be used together with backendRefs"),
    _prefix_needs_one_pathprefix("requestRedirect", "RequestRedirect"),
    _prefix_needs_one_pathprefix("urlRewrite", "URLRewrite"),
    ("!has(self.filters) || !(self.filters.exists(f, f.type == 'RequestRedirect') && "
     "self.filters.exists(f, f.type == 'URLRewrite'))",
     "May specify either httpRouteFilterRequestRedirect or httpRouteFilterRequestRewrite, but not both"),
    *((f"!has(self.filters) || size(self.filters.filter(f, f.type == '{kind}')) <= 1",
       f"{kind} filter cannot be repeated" + (" (trioproxy: one mirror per rule)" if kind == "RequestMirror" else ""))
      for kind, _ in _FILTER_TYPES),
)


@described(rules=_RULE_RULES)
class RouteRule:
    """Matches, filters and backends of one rule (with Gateway API's rules on how filters combine)."""

    name: SectionName | None = field("Rule name.", default=None)
    matches: tuple[RouteMatch, ...] = field("Conditions (any of them); absent = every path.", default=())
    filters: tuple[RouteFilter, ...] = field("Filters.", default=())
    backend_refs: tuple[BackendRef, ...] = field("Backends.", default=())


@described
class HTTPRouteSpec:
    """A Gateway API v1 HTTPRoute (the fields trioproxy reads)."""

    parent_refs: Annotated[tuple[ParentRef, ...], Items(min_items=1)] = field("Gateways to attach to.")
    hostnames: tuple[Hostname, ...] = field("Host names the route serves.", default=())
    rules: tuple[RouteRule, ...] = field("Rules.", default=())


#: (apiVersion, kind) -> spec description
SPECS: dict[tuple[str, str], type] = {
    (f"{GATEWAY_GROUP}/v1", "Gateway"): GatewaySpec,
    (f"{GATEWAY_GROUP}/v1", "HTTPRoute"): HTTPRouteSpec,
    ("trioproxy.dev/v1alpha1", "ProxyPolicy"): ProxyPolicySpec,
}


def read_spec(cls: type, data: Mapping[str, Any]) -> Any:
    """A spec that passed ``manifest_validate.validate_spec(cls, data)`` as an instance of ``cls``:
    wire names become attributes, absent fields take their defaults, free-form fields stay as
    written. Read once, so translation works on typed values rather than on dicts."""
    fields = describe.plan_of(cls).fields
    return cls(**{f.attribute: _value(f.kind, data[f.wire]) for f in fields if f.wire in data})


def _value(kind: Kind, value: Any) -> Any:
    if isinstance(kind, describe.Optional):
        return _value(kind.inner, value)
    if isinstance(kind, describe.Described):
        return read_spec(kind.cls, value)
    if isinstance(kind, describe.Items):
        assert kind.item is not None
        return tuple(_value(kind.item, item) for item in value)
    if isinstance(kind, (describe.Entries, describe.Either)):  # no manifest field has one: say so if one appears
        raise TypeError(f"read_spec: {type(kind).__name__} fields are not read from manifests")
    return value  # a scalar (checked by the schema), or a free-form mapping kept as written
