"""The static config of the real Envoy the project runs: one HTTP/1.1 listener routing everything to one
backend, optionally through Envoy's global ``ratelimit`` filter. One builder for the interop test
(tests/compat/test_ratelimit_envoy.py) and the peer of bench/proxy_compare.py, so both run the same Envoy.

The config is JSON text: Envoy reads ``-c file.yaml`` as YAML, of which JSON is a subset."""

from __future__ import annotations

import json
from typing import Any

import attrs


@attrs.frozen
class EnvoyRateLimit:
    """Envoy's ratelimit filter: ask the rate-limit server on ``rls_port`` (gRPC over HTTP/2) about
    ``domain``, with one descriptor entry ``descriptor_key`` = the value of request header ``header``;
    deny when the server cannot be asked. ``x_ratelimit_headers``: Envoy adds ``x-ratelimit-*`` itself
    from the statuses (``enable_x_ratelimit_headers: DRAFT_VERSION_03``)."""

    domain: str
    rls_port: int
    header: str
    descriptor_key: str
    x_ratelimit_headers: bool = False


def _cluster(name: str, port: int, **extra: Any) -> dict[str, Any]:
    endpoint = {"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}
    return {"name": name, "type": "STATIC", "connect_timeout": "1s", **extra,
            "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [endpoint]}]}}


def _typed(kind: str, **fields: Any) -> dict[str, Any]:
    return {"@type": f"type.googleapis.com/envoy.extensions.{kind}", **fields}


def envoy_config(port: int, backend_port: int, rate_limit: EnvoyRateLimit | None = None) -> str:
    """Envoy listening on 127.0.0.1:``port``, proxying every path to 127.0.0.1:``backend_port``."""
    host: dict[str, Any] = {"name": "all", "domains": ["*"],
                            "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "backend"}}]}
    filters: list[dict[str, Any]] = []
    clusters = [_cluster("backend", backend_port)]
    if rate_limit is not None:
        host["rate_limits"] = [{"actions": [{"request_headers": {"header_name": rate_limit.header,
                                                                 "descriptor_key": rate_limit.descriptor_key}}]}]
        extra = {"enable_x_ratelimit_headers": "DRAFT_VERSION_03"} if rate_limit.x_ratelimit_headers else {}
        filters.append({"name": "envoy.filters.http.ratelimit", "typed_config": _typed(
            "filters.http.ratelimit.v3.RateLimit", domain=rate_limit.domain, failure_mode_deny=True, timeout="2s",
            rate_limit_service={"transport_api_version": "V3",
                                "grpc_service": {"envoy_grpc": {"cluster_name": "rls"}}}, **extra)})
        http2 = _typed("upstreams.http.v3.HttpProtocolOptions",
                       explicit_http_config={"http2_protocol_options": {}})
        clusters.append(_cluster("rls", rate_limit.rls_port, typed_extension_protocol_options={
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": http2}))
    filters.append({"name": "envoy.filters.http.router", "typed_config": _typed("filters.http.router.v3.Router")})
    manager = _typed("filters.network.http_connection_manager.v3.HttpConnectionManager", stat_prefix="ingress",
                     codec_type="HTTP1", route_config={"virtual_hosts": [host]}, http_filters=filters)
    listener = {"name": "main", "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
                "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                                "typed_config": manager}]}]}
    return json.dumps({"static_resources": {"listeners": [listener], "clusters": clusters}}, indent=1)
