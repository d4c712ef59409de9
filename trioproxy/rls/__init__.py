"""Global rate limiting: Envoy's rate limit service (RLS) protocol.

- ``protos/``: our own wire-compatible declarations and the generated modules (``generate.sh``);
- ``limits``: envoyproxy/ratelimit's YAML, parsed once into a frozen tree, and the lookup of a descriptor;
- ``store``: the fixed-window counters (Redis, Redis Cluster or in-memory), one round trip per call;
- ``service``: ``ShouldRateLimit`` as a pure function of (config, counters, now);
- ``server``: the ``trioproxy ratelimit-server`` command (gRPC, health, metrics, reload);
- ``client``: the gateway's side (one reused channel per service, a per-call timeout).

See docs/ratelimit-server.md.
"""
