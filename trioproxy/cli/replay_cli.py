"""``trioproxy replay FILE|-``: a trace saved by ``trioproxy trace --raw`` sent again through the
gateway (``POST /api/replay``, docs/export.md), ``-H 'name: value'`` supplying the credentials the
trace hid. The admin server is found as ``trioproxy trace`` finds it. Failures are one
``trioproxy: error:`` line naming the flag or file (``trace_cli.exit_status``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import httpx

from ..admin.client import AdminRefused, auth_headers, json_answer
from ..telemetry.export import ExportError, exchange_from_trace
from .export_files import ExportFailed
from .trace_cli import DEFAULT_ADMIN_PORT, UsageError, exit_status, parse_headers, resolve_admin
from .trace_client import Event, TraceError, events_from_lines

DESCRIPTION = "Send a traced request again through the gateway, with a fresh trace (docs/export.md)."
EPILOG = ("The trace is one request saved as JSON lines by `trioproxy trace --raw` (or the SSE stream).\n"
          "Credentials the trace hid (<redacted>) are not sent unless given with -H:\n"
          "  trioproxy trace --local --raw > req.jsonl\n"
          "  trioproxy replay req.jsonl --local -H 'authorization: Bearer ...'\n"
          "  trioproxy replay req.jsonl --local --raw > again.jsonl   # the fresh trace")


def configure_replay_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE|-", help="the saved trace (JSON lines or SSE; - for stdin)")
    parser.add_argument("target", nargs="?", metavar="gateway/NAME", help="the gateway to replay on (default: --local)")
    parser.add_argument("--local", action="store_true",
                        help="the gateway runs locally; its admin server is on localhost:--proxy-admin-port")
    parser.add_argument("--proxy-admin-port", type=int, default=DEFAULT_ADMIN_PORT, metavar="PORT",
                        help="admin port with --local (default %(default)s)")
    parser.add_argument("-H", "--header", action="append", default=[], metavar="'NAME: VALUE'",
                        help="a header to send (a credential the trace hid); repeatable")
    parser.add_argument("--raw", action="store_true",
                        help="print the fresh trace as JSON lines instead of the answer")
    parser.set_defaults(handler=run_replay)


def read_trace(name: str) -> list[Event]:
    """One traced request from ``name`` (``-``: stdin)."""
    try:
        if name == "-":
            events = list(events_from_lines(sys.stdin, "<stdin>"))
        else:
            with open(name, encoding="utf-8") as f:
                events = list(events_from_lines(f, name))
    except OSError as exc:
        raise ExportFailed(f"{name}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ExportFailed(f"{name}: not a text file of trace events") from None
    finished = sum(1 for e in events if isinstance(e.get("message"), dict)
                   and e["message"].get("type") == "requestFinished")
    if finished > 1:
        raise ExportFailed(f"{name}: holds {finished} traced requests; replay takes one (save it alone)")
    try:
        exchange_from_trace(events)
    except ExportError as error:
        raise ExportFailed(f"{name}: {error}") from None
    return events


def replay_on(admin: str, events: list[Event], headers: dict[str, str]) -> dict[str, Any]:
    try:
        with httpx.Client(timeout=httpx.Timeout(60, connect=5), headers=auth_headers()) as client:
            response = client.post(f"http://{admin}/api/replay", json={"trace": events, "headers": headers})
    except httpx.HTTPError as exc:
        raise ExportFailed(f"cannot reach the admin server at {admin}: {exc or type(exc).__name__}") from None
    try:
        return json_answer(response)
    except AdminRefused as refused:
        raise ExportFailed(f"admin server {admin} answered {refused.status}: {refused.detail}") from None


def run_replay(args: argparse.Namespace) -> int:
    """Run ``trioproxy replay``; returns the exit status, prints no traceback."""
    def command() -> int:
        if args.local and args.target is not None:
            raise UsageError(f"--local and {args.target} name two different gateways; give one of them")
        headers = parse_headers(args.header)
        admin = resolve_admin(args, args.target)
        events = read_trace(args.file)
        answer = replay_on(admin, events, headers)
        out = sys.stdout
        if args.raw:
            for event in answer.get("trace", []):
                out.write(json.dumps(event, separators=(",", ":"), ensure_ascii=False) + "\n")
        else:
            out.write(f"HTTP {answer['status']}\n")
            for name, value in answer.get("headers", []):
                out.write(f"{name}: {value}\n")
            out.write("\n" + answer.get("body", ""))
            if answer.get("body") and not answer["body"].endswith("\n"):
                out.write("\n")
        out.flush()
        return 0

    return exit_status(command, (ExportFailed, TraceError))
