"""Global rate limiting: Envoy's rate limit service (RLS) protocol.

- ``protos/``: our own wire-compatible declarations and the generated modules (``generate.sh``);
- ``limits``: envoyproxy/ratelimit's YAML, parsed once into a frozen tree, and the lookup of a descriptor;
- ``store``: the fixed-window counters (Redis, Redis Cluster or in-memory), one pipelined round trip
  per ``incr``;
- ``service``: ``ShouldRateLimit`` as a pure function of (config, counters, now), split around the
  store round trip (``Plan``) so a server can batch many requests into one;
- ``server``: the ``trioproxy ratelimit-server`` command (batches, metrics, reload) on
  ``wire_server`` (gRPC framed by hand on HTTP/2 over Trio); ``health``: its ``grpc.health.v1``
  Check and Watch;
- ``client``: ``client_for``, the gateway's one client per service; ``wire_client``: the one in use
  (gRPC framed by hand on HTTP/2 over Trio); bench/rls_h2_client.py and bench/rls_grpcio_client.py: the measured
  alternatives (the ``h2`` library; grpcio bridged into Trio).

See docs/ratelimit-server.md.
"""
