"""``trioproxy ratelimit-server``'s command line, apart from the server: every ``trioproxy`` command
builds the whole parser, and the server's imports (protobuf messages, the gRPC framing) have no
place in a gateway process.
"""

from __future__ import annotations

import argparse


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True,
                        help="envoyproxy/ratelimit YAML (domain, descriptors), or a directory of such files "
                             "(*.yaml, *.yml; one domain each)")
    parser.add_argument("--addr", default="127.0.0.1:8081", help="gRPC listen address HOST:PORT (port 0: any)")
    store = parser.add_mutually_exclusive_group()
    store.add_argument("--redis", metavar="URL", help="redis:// or rediss:// URL of the counter store")
    store.add_argument("--redis-cluster", metavar="URL", help="URL of any node of a Redis Cluster")
    store.add_argument("--store", choices=["memory"], help="in-process counters (one server only; the default)")
    parser.add_argument("--response-headers", action="store_true",
                        help="add x-ratelimit-limit/-remaining/-reset to responses (also: "
                             "LIMIT_RESPONSE_HEADERS_ENABLED=true, as envoyproxy/ratelimit); off by default, since "
                             "Envoy's enable_x_ratelimit_headers and the gateway derive them from the statuses")
    parser.add_argument("--stats-addr", metavar="HOST:PORT", help="serve Prometheus /metrics here")
    parser.add_argument("--threads", type=int, default=16,
                        help="accepted for compatibility, no effect: the server is one Trio thread, and store "
                             "round trips go one batch at a time to a worker thread")
    parser.add_argument("--health-watchers", type=int, default=8, metavar="N",
                        help="grpc.health.v1 Watch streams served at once (default 8)")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from .server import run

    return run(args)
