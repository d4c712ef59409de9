"""``trioproxy``: run the gateway, or one of its tools (docs/cli.md).

Every user-facing failure ends as one line on stderr naming its place and a non-zero exit;
``main`` is the only place that turns exceptions into exit codes.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator, Sequence

import trio

from ..config import ConfigError, load_config
from ..frontend.server import StartupError, log_rejected, run_until_signalled
from ..idp import cli as idp_cli
from ..proxy.keys_host import STORE_ENV
from ..rls import cli as rls_cli
from ..telemetry.access_log import configure_logging
from ..usage import PREFIX, OneLineParser
from ..version import __version__
from . import demo, keys_cli, replay_cli, requests_cli, schema_cli, status_cli, trace_cli


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="trioproxy",
        description="A gateway proxy on Trio: routes, policies, LLM token limits and tracing.",
    )
    parser.add_argument("-f", "--config", metavar="FILE", help="gateway config (standalone YAML, or a Gateway/HTTPRoute/ProxyPolicy manifest)")
    parser.add_argument("--validate-only", action="store_true", help="load and validate the config, then exit")
    parser.add_argument("--drain-timeout", type=float, default=10.0, metavar="SECONDS",
                        help="on SIGINT/SIGTERM, how long requests in flight may take to finish (default 10)")
    parser.add_argument("--workers", metavar="N|auto",
                        help="worker processes serving the binds (default: config.workers, else 1); docs/workers.md")
    parser.add_argument("--store", metavar="PATH|URL",
                        help="the key store: a SQLite file or postgresql://... (overrides config.store); docs/keys.md")
    parser.add_argument("--log-level", metavar="LEVEL",
                        help="trace|debug|info|warn|error (default info, or LOG_LEVEL); LOG_FORMAT=text|json")
    parser.add_argument("--version", action="version", version=f"trioproxy {__version__}")
    parser.set_defaults(handler=None)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    proxy = commands.add_parser("proxy", help="commands about a running gateway (proxy trace)")
    proxy_commands = proxy.add_subparsers(dest="proxy_command", metavar="COMMAND", required=True)
    for trace in (
        proxy_commands.add_parser("trace", help="trace the next request a gateway handles",
                                  description=trace_cli.DESCRIPTION, epilog=trace_cli.EPILOG,
                                  formatter_class=argparse.RawDescriptionHelpFormatter),
        commands.add_parser("trace", help="same as 'proxy trace'", description=trace_cli.DESCRIPTION,
                            epilog=trace_cli.EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter),
    ):
        trace_cli.configure_parser(trace)
        trace.set_defaults(handler=trace_cli.run)
    requests_cli.configure_parser(commands.add_parser(
        "requests", help="show the last requests a gateway handled (its history)",
        description=requests_cli.DESCRIPTION, epilog=requests_cli.EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter))
    replay_cli.configure_replay_parser(commands.add_parser(
        "replay", help="send a traced request again through the gateway, with a fresh trace",
        description=replay_cli.DESCRIPTION, epilog=replay_cli.EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter))
    keys_cli.configure_parser(commands.add_parser(
        "keys", help="runtime API keys, teams, spend and the request log (keys create|list|...)",
        description=keys_cli.DESCRIPTION, epilog=keys_cli.EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter))
    demo_parser = commands.add_parser("demo", help="run the gateway with a bundled demo backend (Ctrl-C stops both)",
                                      description=demo.__doc__.splitlines()[0] if demo.__doc__ else None)
    demo.configure_parser(demo_parser)
    demo_parser.set_defaults(handler=demo.run)
    schema_cli.configure_parser(commands.add_parser("schema", help="print the config's JSON Schema",
                                                    description=schema_cli.DESCRIPTION))
    status_cli.configure_parser(commands.add_parser("status", help="print the status of a manifest's resources",
                                                    description=status_cli.DESCRIPTION))
    idp_cli.configure_parser(commands.add_parser("idp", help="identity provider set-up (idp setup)"))
    rls_cli.configure_parser(commands.add_parser(
        "ratelimit-server", help="the global rate-limit service (Envoy RLS protocol, counters in Redis)"))
    return parser


@contextlib.contextmanager
def _config_warnings_as_lines() -> Iterator[None]:
    """The first load's warnings (logging is set up only after it) as ``trioproxy: warning:`` lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("trioproxy: warning: %(message)s"))
    logger = logging.getLogger("trioproxy.config")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def _run_gateway(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if not args.config:
        parser.error("--config FILE is required")
    if args.store is not None:
        if not args.store.strip():
            parser.error("--store: expected a SQLite file or a postgresql:// URL")
        # An environment variable, so worker processes and every reload of the config see it too
        # (proxy/keys_host.py); a file is taken relative to where the command runs.
        store = args.store.strip()
        os.environ[STORE_ENV] = store if "://" in store else os.path.abspath(store)
    try:
        with _config_warnings_as_lines():
            config = load_config(args.config)
    except ConfigError as error:
        for problem in error.problems:
            print(f"trioproxy: error: {problem}", file=sys.stderr)
        return 1
    if args.validate_only and config.rejected:  # a manifest's resources the gateway would leave out
        for line in config.rejected:
            print(f"{PREFIX}{line}", file=sys.stderr)
        return 1
    if args.validate_only:
        from ..frontend.server import check_binds_can_listen

        if problems := check_binds_can_listen(config):
            for problem in problems:
                print(f"{PREFIX}{args.config}: {problem}", file=sys.stderr)
            return 1
        print(f"{args.config}: valid ({len(config.binds)} binds, "
              f"{sum(len(l.routes) for b in config.binds for l in b.listeners)} routes)")
        return 0
    try:
        configure_logging(args.log_level, config_level=config.logging.level if config.logging else None,
                          config_format=config.logging.format if config.logging else None)
    except ValueError as error:
        print(f"trioproxy: error: {error}", file=sys.stderr)
        return 2
    log_rejected(config)
    failures: list[StartupError] = []
    from ..workers.supervisor import resolve_workers, run_supervisor

    try:
        workers = resolve_workers(args.workers, config)
    except ValueError as error:
        print(f"trioproxy: error: --workers: {error}", file=sys.stderr)
        return 2
    try:
        if workers > 1:
            trio.run(lambda: run_supervisor(config, workers=workers, config_path=args.config,
                                            drain_timeout=args.drain_timeout, log_level=args.log_level))
        else:
            trio.run(lambda: run_until_signalled(config, config_path=args.config, drain_timeout=args.drain_timeout))
    except* StartupError as group:
        failures.extend(group.exceptions)  # type: ignore[arg-type]
    for failure in failures:
        print(f"trioproxy: error: {failure}", file=sys.stderr)
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.handler is not None:
        code: int = args.handler(args)
        return code
    return _run_gateway(parser, args)


if __name__ == "__main__":
    raise SystemExit(main())
