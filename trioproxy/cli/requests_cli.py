"""``trioproxy requests``: the gateway's request history (``/api/requests``, docs/history.md).

The admin server is found as ``trioproxy trace`` finds it: ``--local`` / ``--proxy-admin-port``,
or ``gateway/NAME`` from the registry. Rows are printed oldest first, so ``--follow`` simply
keeps appending below them; ``--raw`` prints the same entries as one JSON object per line;
``--har FILE`` writes them as HAR 1.2 (docs/export.md).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx

from ..admin.client import auth_headers
from .export_files import ExportFailed, write_history_har
from .trace_cli import DEFAULT_ADMIN_PORT, UsageError, exit_status, resolve_admin

DESCRIPTION = "Show the last requests a gateway handled; with --follow, each new one too."
EPILOG = ("EXPR is a CEL expression over each request (docs/history.md), e.g.\n"
          "  trioproxy requests 'response.code >= 400'\n"
          "  trioproxy requests --follow --raw 'request.path.startsWith(\"/v1\")'")

_GATEWAY = re.compile(r"gateways?/[A-Za-z0-9][A-Za-z0-9_.-]*")


class RequestsError(Exception):
    """The admin server is unreachable or refused the query: one line, exit 1."""


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--local", action="store_true",
                        help="the gateway runs locally; its admin server is on localhost:--proxy-admin-port")
    parser.add_argument("--proxy-admin-port", type=int, default=DEFAULT_ADMIN_PORT, metavar="PORT",
                        help="admin port with --local (default %(default)s)")
    parser.add_argument("--raw", action="store_true", help="print one JSON object per request instead of a table")
    parser.add_argument("--follow", action="store_true", help="keep printing requests as they finish")
    parser.add_argument("--har", metavar="FILE", help="write the requests shown as HAR 1.2 to FILE (- for stdout)")
    parser.add_argument("-n", "--limit", type=int, default=20, metavar="N",
                        help="how many of the last requests to show first (default %(default)s)")
    parser.add_argument("target", nargs="?", metavar="gateway/NAME",
                        help="the gateway to ask (default: --local)")
    parser.add_argument("expression", nargs="?", metavar="EXPR", help="CEL expression the requests must match")
    parser.set_defaults(handler=run)


def _split_words(target: str | None, expression: str | None) -> tuple[str | None, str | None]:
    """argparse fills ``gateway/NAME`` first: a lone word that names no gateway is the expression."""
    if target is not None and not _GATEWAY.fullmatch(target):
        if expression is not None:
            raise UsageError(f"expected gateway/NAME before the expression, got {target!r}")
        return None, target
    return target, expression


COLUMNS = (("TIME", 12), ("METHOD", 7), ("STATUS", 6), ("DURATION", 10), ("PATH", 28), ("ROUTE", 20),
           ("BACKEND", 22), ("SUBJECT", 12), ("TOKENS", 9))


def _cell(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def header() -> str:
    return " ".join(name.ljust(width) for name, width in COLUMNS) + " REASON"


def row(entry: dict[str, Any]) -> str:
    stamp = time.gmtime(entry["time"])
    millis = int((entry["time"] % 1) * 1000)
    tokens = ""
    if entry.get("inputTokens") is not None or entry.get("outputTokens") is not None:
        tokens = f"{entry.get('inputTokens') or 0}/{entry.get('outputTokens') or 0}"
    route = entry.get("route") or "-"
    values = (f"{time.strftime('%H:%M:%S', stamp)}.{millis:03d}", entry["method"], str(entry["status"]),
              f"{entry['durationMs']:.1f}ms", entry["path"], route.rsplit("/", 1)[-1] if "/" in route else route,
              entry.get("backend") or "-", entry.get("subject") or "-", tokens or "-")
    cells = " ".join(_cell(v, w).ljust(w) for v, (_, w) in zip(values, COLUMNS))
    return f"{cells} {entry.get('reason') or ''}".rstrip()


def _client() -> httpx.Client:
    return httpx.Client(timeout=httpx.Timeout(None, connect=5), headers=auth_headers())


def _check(response: httpx.Response, admin: str) -> None:
    if response.status_code != 200:
        body = response.read().decode(errors="replace").strip()
        raise RequestsError(f"admin server {admin} answered {response.status_code}: {body or response.reason_phrase}")


def fetch(admin: str, expression: str | None, limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` matching entries, oldest first."""
    params: dict[str, str | int] = {"limit": limit}
    if expression:
        params["expression"] = expression
    try:
        with _client() as client:
            response = client.get(f"http://{admin}/api/requests", params=params)
            _check(response, admin)
            entries = response.json()
    except httpx.HTTPError as exc:
        raise RequestsError(f"cannot reach the admin server at {admin}: {exc or type(exc).__name__}") from None
    except ValueError:
        raise RequestsError(f"admin server {admin} answered something that is not a request list") from None
    return list(reversed(entries))


def follow(admin: str, expression: str | None, limit: int) -> Iterator[dict[str, Any]]:
    """The last ``limit`` matching entries, then each new one, from the ``?follow=true`` stream."""
    params: dict[str, str | int] = {"follow": "true", "limit": limit}
    if expression:
        params["expression"] = expression
    try:
        with _client() as client, client.stream("GET", f"http://{admin}/api/requests", params=params) as response:
            _check(response, admin)
            for line in response.iter_lines():
                if line.startswith("data:"):
                    yield json.loads(line[5:])
    except httpx.HTTPError as exc:
        raise RequestsError(f"request stream from {admin}: {exc or type(exc).__name__}") from None


def _print(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def run(args: argparse.Namespace) -> int:
    """Run ``trioproxy requests``; returns the exit status, prints no traceback."""
    def command() -> int:
        target, expression = _split_words(args.target, args.expression)
        if args.local and target is not None:
            raise UsageError(f"--local and {target} name two different gateways; give one of them")
        if not 1 <= args.limit <= 1_000_000:
            raise UsageError(f"--limit: expected a whole number from 1 to 1000000, got {args.limit}")
        if args.har is not None and (args.follow or args.har == ""):
            raise UsageError("--har: expected a file name (or - for stdout)" if args.har == "" else
                             "--har writes the requests shown once; it cannot be combined with --follow")
        admin = resolve_admin(args, target)
        if args.har is not None:
            write_history_har(fetch(admin, expression, args.limit), args.har)
            return 0
        entries = follow(admin, expression, args.limit) if args.follow else iter(fetch(admin, expression, args.limit))
        if not args.raw:
            _print(header())
        for entry in entries:
            _print(json.dumps(entry, separators=(",", ":"), ensure_ascii=False) if args.raw else row(entry))
        return 0

    return exit_status(command, (RequestsError, ExportFailed))
