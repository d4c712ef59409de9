"""``trioproxy [proxy] trace``: trace one request (or, with ``--follow``, each request) of a gateway.

Usage::

    trace [gateway/NAME] [--local] [--proxy-admin-port 15000] [--raw] [--expression CEL]
          [--file F|-] [--follow] [--har FILE|-] [--curl] [--port N -- URL [curl args...]]

``--har`` / ``--curl`` export each traced request (``export_files.py``) instead of showing it.

Argument parsing. ``configure_parser`` declares the options plus one ``argparse.REMAINDER``
positional, ``rest``. argparse fills it from the first positional word on, including options that
follow it and the ``--`` separator, which is what lets ``trace gateway/x --port 3000 -- URL -X
POST`` work without argparse mistaking the URL for the gateway or ``-X`` for its own option.
``run`` then splits ``rest`` at the first ``--`` itself: the words before are re-parsed as options
(into the same namespace, so options on either side of ``gateway/NAME`` count) plus at most one
``gateway/NAME``; the words after are the URL and curl arguments, passed on untouched.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from ..frontend import registry
from ..telemetry.export import ExportError
from .export_files import ExportFailed, export_stream
from .trace_client import Event, Injection, TraceError, TraceSession, events_from_lines

DEFAULT_ADMIN_PORT = 15000


class UsageError(Exception):
    """Bad flags: reported in one line with exit status 2."""


class _Parser(argparse.ArgumentParser):
    """Raises instead of exiting, so ``run`` owns the exit code and the message format."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--local", action="store_true",
                        help="the gateway runs locally; its admin server is on localhost:--proxy-admin-port")
    parser.add_argument("--proxy-admin-port", type=int, default=DEFAULT_ADMIN_PORT, metavar="PORT",
                        help="admin port with --local (default %(default)s)")
    parser.add_argument("--raw", action="store_true",
                        help="print one JSON event per line instead of the text UI "
                             "(the default when stdin or stdout is not a terminal)")
    parser.add_argument("--expression", metavar="CEL", help="trace only requests matching this CEL expression")
    parser.add_argument("-f", "--file", metavar="F", help="show a saved trace (JSON lines or SSE; - for stdin)")
    parser.add_argument("--follow", action="store_true", help="keep tracing request after request")
    parser.add_argument("--port", type=int, metavar="N",
                        help="inject mode: send the request given after -- to 127.0.0.1:N")
    parser.add_argument("--har", metavar="FILE",
                        help="write the traced requests as HAR 1.2 to FILE (- for stdout)")
    parser.add_argument("--curl", action="store_true", help="print each traced request as a curl command line")
    parser.add_argument("--credential", action="append", default=[], metavar="'NAME: VALUE'",
                        help="a header the trace hides (<redacted>) to send with the text UI's replay (r) and"
                             " to write into its export's curl line (x); repeatable")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add the trace options and arguments to ``parser`` (a subcommand parser of the main CLI)."""
    _add_options(parser)
    parser.add_argument("rest", nargs=argparse.REMAINDER, metavar="[gateway/NAME] [-- URL [curl args...]]",
                        help="gateway to trace; with --port, the request to send after --")


@dataclass
class Options:
    target: str | None
    request: list[str]


def _split_rest(args: argparse.Namespace) -> Options:
    rest = list(getattr(args, "rest", None) or [])
    before, after = rest, []
    if "--" in rest:
        at = rest.index("--")
        before, after = rest[:at], rest[at + 1 :]
    inner = _Parser(prog="trace", add_help=False)
    _add_options(inner)
    inner.add_argument("words", nargs="*")
    # parse into the same namespace: argparse leaves attributes already set alone unless given
    ns = inner.parse_intermixed_args(before, namespace=args)
    words: list[str] = list(ns.words)
    del ns.words
    target = words.pop(0) if words else None
    if words:
        raise UsageError(f"unexpected arguments: {' '.join(words)}")
    return Options(target, after)


def check_conflicts(args: argparse.Namespace, opts: Options) -> None:
    """Flags that contradict each other are usage errors, never a silent choice of one."""
    if args.port is not None and not opts.request:
        raise UsageError("--port needs the request to send: --port N -- URL [curl args...]")
    if opts.request and args.port is None:
        raise UsageError("a URL after -- needs --port N (the gateway listener to send it to)")
    if args.file is not None:
        for flag, given in (("--port", args.port is not None), ("--expression", args.expression is not None),
                            ("--follow", args.follow), ("--local", args.local),
                            ("gateway/NAME", opts.target is not None)):
            if given:
                raise UsageError(f"--file shows a saved trace; it cannot be combined with {flag}")
    if args.local and opts.target is not None:
        raise UsageError(f"--local and {opts.target} name two different gateways; give one of them")
    if args.har == "":
        raise UsageError("--har: expected a file name (or - for stdout)")
    if args.har == "-" and (args.curl or args.raw):
        raise UsageError("--har - writes HAR to stdout; it cannot be combined with --curl or --raw")


def wants_raw(args: argparse.Namespace) -> bool:
    """The text UI needs a terminal on both ends; piped or scripted use gets JSON lines."""
    return bool(args.raw) or not (_isatty(sys.stdin) and _isatty(sys.stdout))


def _isatty(stream: object) -> bool:
    try:
        return bool(stream is not None and stream.isatty())  # type: ignore[attr-defined]
    except (ValueError, OSError):  # closed stream
        return False


def resolve_admin(args: argparse.Namespace, target: str | None) -> str:
    """Admin ``host:port``: ``--local`` (or no gateway named) is localhost, else the registry."""
    if args.local or target is None:
        return f"localhost:{args.proxy_admin_port}"
    kind, sep, name = target.partition("/")
    if not sep or kind not in ("gateway", "gateways") or not name:
        raise UsageError(f"expected gateway/NAME, got {target!r}")
    return registry.lookup(name)


def _print_raw(event: Event) -> None:
    sys.stdout.write(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n")
    sys.stdout.flush()


async def _aiter(events: Iterable[Event]) -> AsyncIterator[Event]:
    for event in events:
        yield event


def _read_file(name: str) -> list[Event]:
    if name == "-":
        return list(events_from_lines(sys.stdin, "<stdin>"))
    try:
        with open(name, encoding="utf-8") as f:
            return list(events_from_lines(f, name))
    except OSError as exc:
        raise TraceError(f"cannot read {name}: {exc.strerror}") from None


async def _run_async(args: argparse.Namespace, opts: Options) -> int:
    exporting = args.har is not None or args.curl
    credentials = parse_headers(args.credential, "--credential")  # refused before anything is read
    if args.file is not None:
        events = _read_file(args.file)
        if exporting:  # --raw with an export would print the file back: only the export
            return await export_stream(events, args, live=False)
        if wants_raw(args):
            for event in events:
                _print_raw(event)
            return 0
        from ..tui.app import run_tui

        return await run_tui(_aiter(events), follow=False, credentials=credentials)

    admin = resolve_admin(args, opts.target)
    injection = Injection(args.port, opts.request) if args.port is not None else None
    async with TraceSession(admin, args.expression, injection=injection, follow=args.follow) as session:
        if exporting:  # the export instead of the text UI; --raw prints the events too
            return await export_stream(session.events(), args, live=True, raw=_print_raw if args.raw else None)
        if wants_raw(args):
            async for event in session.events():
                _print_raw(event)
            return 0
        from ..tui.app import run_tui

        # the curl line of x goes to the listener the request was injected into, when we know it
        base_url = f"http://127.0.0.1:{args.port}" if args.port is not None else None
        return await run_tui(session.events(), follow=args.follow, admin=admin, base_url=base_url,
                             credentials=credentials)


def parse_headers(values: Iterable[str], flag: str = "-H") -> dict[str, str]:
    """``name: value`` headers given on the command line (``flag`` names the option in the error)."""
    headers: dict[str, str] = {}
    for value in values:
        name, sep, text = value.partition(":")
        if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
            raise UsageError(f"{flag} {value!r}: expected 'name: value'")
        headers[name.strip()] = text.strip()
    return headers


def exit_status(command: Callable[[], int], failures: tuple[type[Exception], ...]) -> int:
    """Run an admin-client command (``trace``, ``requests``): its exit status, and for each way it
    can fail one ``trioproxy: error:`` line and the status (2 usage, 1 ``failures``, 130 Ctrl-C),
    never a traceback."""
    failing: tuple[type[Exception], ...] = (*failures, LookupError)
    try:
        return command()
    except UsageError as exc:
        print(f"trioproxy: error: {exc}", file=sys.stderr)
        return 2
    except failing as exc:
        print(f"trioproxy: error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `trace --raw | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def run(args: argparse.Namespace) -> int:
    """Run the trace command for parsed ``args``; returns the exit status, prints no traceback."""
    def command() -> int:
        opts = _split_rest(args)
        check_conflicts(args, opts)
        return asyncio.run(_run_async(args, opts))

    return exit_status(command, (TraceError, ExportFailed, ExportError))


DESCRIPTION = "Trace the next request of a gateway (with --follow, each request)."
EPILOG = ("examples:\n  trioproxy trace --local\n"
          "  trioproxy trace gateway/default --port 3000 -- http://api.example.com/v1 -H 'x-a: b' -d hi")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="trioproxy trace", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure_parser(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed usage and its one-line error
        return int(exc.code or 0)
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
