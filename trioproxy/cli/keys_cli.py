"""``trioproxy keys``: runtime API keys, teams, spend and the request log of a running gateway
(docs/keys-admin.md), through its admin API (``/api/keys``, ``/api/teams``, ``/api/spend``,
``/api/logs``).

The admin server is found as ``trioproxy trace`` and ``trioproxy requests`` find it: ``--local`` /
``--proxy-admin-port``, or ``--gateway gateway/NAME`` from the registry; ``ADMIN_TOKEN`` is sent as
the bearer token. Output is a table by default, ``-o json`` prints the API's JSON. Bad flags are one
``trioproxy: error:`` line naming the flag (exit 2); an admin server that refuses (400, 404, 503)
or cannot be reached is one line with its message (exit 1). Never a traceback.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx

from ..admin.client import auth_headers
from .trace_cli import DEFAULT_ADMIN_PORT, UsageError, exit_status, resolve_admin

DESCRIPTION = "Runtime API keys, teams, spend and the request log of a running gateway (its admin API)."
EPILOG = ("examples:\n"
          "  trioproxy keys create --name alice-laptop --model gpt-4o-mini --model 'openai/*' \\\n"
          "      --limit tokens/day=100000 --limit cost/month=50 --expires 30d --metadata owner=alice\n"
          "  trioproxy keys list\n"
          "  trioproxy keys rotate key_3f9a0c1b2d4e --grace 1h\n"
          "  trioproxy keys team create --name research --limit cost/month=500\n"
          "  trioproxy keys spend --group-by model --from 2026-11-01 --csv > spend.csv")

METRICS = ("requests", "tokens", "cost")
WINDOWS = ("minute", "hour", "day", "week", "month", "total")
GROUPS = ("key", "team", "model", "user", "day", "provider")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(s|m|h|d|w)")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class KeysError(Exception):
    """The admin server is unreachable or refused the call: one line, exit 1."""


# -- flag values ------------------------------------------------------------------------------------

def parse_duration(text: str, flag: str) -> float:
    """``90s``, ``30m``, ``1h``, ``30d``, ``2w`` (or a sum such as ``1h30m``) in seconds."""
    value = text.strip()
    pos, total = 0, 0.0
    while pos < len(value):
        match = _DURATION.match(value, pos)
        if match is None:
            raise UsageError(f"{flag}: expected a duration such as 30m, 1h, 30d, got {text!r}")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not value:
        raise UsageError(f"{flag}: expected a duration such as 30m, 1h, 30d, got an empty value")
    return total


def parse_time(text: str, flag: str, *, end_of_day: bool = False) -> str:
    """An instant as the API takes it: unix seconds or an ISO date/time (``Z`` assumed); a plain
    date with ``end_of_day`` means the end of that day (``--to 2026-11-30`` includes the 30th)."""
    value = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return value
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{flag}: expected an ISO date (2026-11-01), date-time or unix seconds, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    if end_of_day and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        moment = moment.replace(hour=23, minute=59, second=59)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_expires(text: str) -> str | None:
    """``--expires 30d`` (from now), an ISO date/time, or ``never``: the ``expiresAt`` to send."""
    value = text.strip()
    if value.lower() in ("never", "none"):
        return None
    if _DURATION.match(value) and not re.fullmatch(r"\d{4}-.*", value):
        seconds = parse_duration(value, "--expires")
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))
    return parse_time(value, "--expires")


def parse_limits(values: Sequence[str], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``--limit tokens/day=100000`` (repeatable) into the wire shape ``{"tokens": {"day": 100000}}``;
    ``=none`` removes that window from ``base`` (``keys update``)."""
    limits: dict[str, Any] = {metric: dict(windows) for metric, windows in (base or {}).items() if windows}
    for item in values:
        name, sep, amount = item.partition("=")
        metric, slash, window = name.strip().partition("/")
        if not sep or not slash:
            raise UsageError(f"--limit: expected METRIC/WINDOW=N such as tokens/day=100000, got {item!r}")
        if metric not in METRICS:
            raise UsageError(f"--limit {item}: unknown metric {metric!r} (expected {'|'.join(METRICS)})")
        if window not in WINDOWS:
            raise UsageError(f"--limit {item}: unknown window {window!r} (expected {'|'.join(WINDOWS)})")
        amount = amount.strip()
        if amount.lower() in ("none", "off", ""):
            limits.get(metric, {}).pop(window, None)
            continue
        try:
            number = float(amount)
        except ValueError:
            raise UsageError(f"--limit {item}: expected a number, got {amount!r}") from None
        if number < 0 or number != number or number == float("inf"):
            raise UsageError(f"--limit {item}: expected a number of 0 or more, got {amount!r}")
        if metric != "cost":
            if not number.is_integer():
                raise UsageError(f"--limit {item}: {metric} are counted whole, got {amount!r}")
            limits.setdefault(metric, {})[window] = int(number)
        else:
            limits.setdefault(metric, {})[window] = number
    return {metric: windows for metric, windows in limits.items() if windows}


def parse_metadata(values: Sequence[str], base: dict[str, Any] | None = None) -> dict[str, Any]:
    """``--metadata owner=alice`` (repeatable); ``owner=`` removes ``owner`` from ``base``."""
    metadata = dict(base or {})
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--metadata: expected KEY=VALUE such as owner=alice, got {item!r}")
        if value == "":
            metadata.pop(key.strip(), None)
        else:
            metadata[key.strip()] = value
    return metadata


# -- the admin API ---------------------------------------------------------------------------------

class Admin:
    """The admin API of one gateway, answers as JSON (or text for CSV), errors as ``KeysError``."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.client = httpx.Client(base_url=f"http://{address}", timeout=httpx.Timeout(30, connect=5),
                                   headers=auth_headers())

    def call(self, method: str, path: str, *, body: Any = None, params: dict[str, Any] | None = None,
             text: bool = False) -> Any:
        try:
            response = self.client.request(method, path, json=body, params=params)
        except httpx.HTTPError as exc:
            raise KeysError(f"cannot reach the admin server at {self.address}: {exc or type(exc).__name__}") from None
        if response.status_code >= 400:
            raise KeysError(f"{_message(response)} (admin server {self.address} answered {response.status_code})")
        if text:
            return response.text
        try:
            return response.json()
        except ValueError:
            raise KeysError(f"admin server {self.address} answered {path} with something that is not JSON"
                            " (an older trioproxy without runtime keys?)") from None

    def close(self) -> None:
        self.client.close()


def _message(response: httpx.Response) -> str:
    """The error's message: ``{"error": ...}`` from the keys API, else the text body."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return str(body["error"])
    if response.status_code == 404 and "<" in response.text:  # a gateway whose admin has no keys API
        return f"not found: {response.request.url.path}"
    return response.text.strip() or response.reason_phrase


def team_id(admin: Admin, value: str | None) -> str | None:
    """``--team``: a team id as is, a team name looked up (``""``/``none`` for no team)."""
    if value is None:
        return None
    if value.strip().lower() in ("", "none"):
        return ""
    if value.startswith("team_"):
        return value
    teams = admin.call("GET", "/api/teams")
    found = [t for t in teams.get("teams", teams) if t.get("name") == value]
    if not found:
        raise UsageError(f"--team: no team named {value!r} (trioproxy keys team list shows them)")
    if len(found) > 1:
        raise UsageError(f"--team: {len(found)} teams are named {value!r}; give the team's id")
    return str(found[0]["id"])


# -- output ----------------------------------------------------------------------------------------

def _print(text: str) -> None:
    sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
    sys.stdout.flush()


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _number(value: Any) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4f}".rstrip("0").rstrip(".")
    if isinstance(value, (int, float)):
        return f"{int(value)}"
    return str(value)


def limits_text(limits: dict[str, Any] | None) -> str:
    """``tokens/day=100000 cost/month=50`` (``-`` without limits)."""
    parts = []
    for metric in METRICS:
        for window in WINDOWS:
            value = (limits or {}).get(metric, {}).get(window)
            if value is not None:
                parts.append(f"{metric}/{window}={'$' if metric == 'cost' else ''}{_number(value)}")
    return " ".join(parts) or "-"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_plain(c) for c in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def _plain(value: Any) -> str:
    """A cell on one line: control characters of user input (names, metadata) shown escaped."""
    text = "-" if value is None or value == "" else str(value)
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def key_rows(keys: Sequence[dict[str, Any]]) -> str:
    return table(("ID", "NAME", "PREFIX", "TEAM", "STATUS", "MODELS", "LIMITS", "EXPIRES"), [
        (k["id"], k.get("name"), k.get("prefix"), k.get("team"), k.get("status"),
         ",".join(k.get("models") or []) or "*", limits_text(k.get("limits")), k.get("expiresAt"))
        for k in keys])


def usage_lines(usage: dict[str, Any] | None) -> list[str]:
    lines = []
    for metric in METRICS:
        for window in WINDOWS:
            entry = (usage or {}).get(metric, {}).get(window)
            if not entry:
                continue
            limit = entry.get("limit")
            used = _number(entry.get("used", 0))
            reserved = entry.get("reserved") or 0
            line = f"  {metric}/{window}: {used}" + (f" of {_number(limit)}" if limit is not None else "")
            if reserved:
                line += f" (+{_number(reserved)} reserved)"
            if entry.get("resetsAt"):
                line += f", resets {entry['resetsAt']}"
            lines.append(line)
    return lines


def key_details(key: dict[str, Any]) -> str:
    fields = [("id", key.get("id")), ("name", key.get("name")), ("prefix", key.get("prefix")),
              ("status", key.get("status")), ("team", key.get("team")),
              ("models", ", ".join(key.get("models") or []) or "* (every model)"),
              ("limits", limits_text(key.get("limits"))),
              ("metadata", ", ".join(f"{k}={v}" for k, v in (key.get("metadata") or {}).items()) or "-"),
              ("expiresAt", key.get("expiresAt")), ("createdAt", key.get("createdAt")),
              ("rotatedAt", key.get("rotatedAt")), ("previousValidUntil", key.get("previousValidUntil")),
              ("revokedAt", key.get("revokedAt"))]
    lines = [f"{name + ':':<20}{_plain(value)}" for name, value in fields
             if value is not None or name in ("team", "expiresAt")]
    usage = usage_lines(key.get("usage"))
    if usage:
        lines += ["usage:", *usage]
    return "\n".join(lines)


def team_rows(teams: Sequence[dict[str, Any]]) -> str:
    return table(("ID", "NAME", "LIMITS", "METADATA", "CREATED"), [
        (t["id"], t.get("name"), limits_text(t.get("limits")),
         ",".join(f"{k}={v}" for k, v in (t.get("metadata") or {}).items()), t.get("createdAt")) for t in teams])


def team_details(team: dict[str, Any]) -> str:
    lines = [f"{'id:':<12}{_plain(team.get('id'))}", f"{'name:':<12}{_plain(team.get('name'))}",
             f"{'limits:':<12}{limits_text(team.get('limits'))}",
             f"{'metadata:':<12}{_plain(', '.join(f'{k}={v}' for k, v in (team.get('metadata') or {}).items()))}",
             f"{'createdAt:':<12}{_plain(team.get('createdAt'))}"]
    usage = usage_lines(team.get("usage"))
    if usage:
        lines += ["usage:", *usage]
    return "\n".join(lines)


def spend_rows(rows: Sequence[dict[str, Any]]) -> str:
    return table(("GROUP", "REQUESTS", "INPUT", "OUTPUT", "TOTAL", "COST"), [
        (r.get("group"), r.get("requests"), r.get("inputTokens"), r.get("outputTokens"), r.get("totalTokens"),
         f"${r.get('cost') or 0:.4f}") for r in rows])


def log_rows(entries: Sequence[dict[str, Any]]) -> str:
    def when(entry: dict[str, Any]) -> str:
        stamp = entry.get("timestamp", entry.get("time"))
        if isinstance(stamp, (int, float)):
            return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp))
        return str(stamp or "-")

    return table(("TIME", "KEY", "TEAM", "MODEL", "STATUS", "IN", "OUT", "COST", "LATENCY"), [
        (when(e), e.get("keyName") or e.get("key"), e.get("teamName") or e.get("team"), e.get("model"),
         e.get("status"), e.get("inputTokens"), e.get("outputTokens"),
         None if e.get("cost") is None else f"${e['cost']:.4f}",
         None if e.get("latencyMs") is None else f"{e['latencyMs']:.0f}ms") for e in entries])


# -- commands --------------------------------------------------------------------------------------

def _out(args: argparse.Namespace, value: Any, text: Callable[[], str]) -> None:
    _print(_json(value) if args.output == "json" else text())


def cmd_create(args: argparse.Namespace, admin: Admin) -> int:
    if not args.name or not args.name.strip():
        raise UsageError("--name: a key needs a name")
    body: dict[str, Any] = {"name": args.name, "models": list(args.model or []),
                            "limits": parse_limits(args.limit or []), "metadata": parse_metadata(args.metadata or [])}
    if args.expires is not None:
        body["expiresAt"] = parse_expires(args.expires)
    team = team_id(admin, args.team)
    if team:
        body["team"] = team
    created = admin.call("POST", "/api/keys", body=body)
    if args.output == "json":
        _print(_json(created))
    else:
        _print(key_details(created))
        _print(f"{'key:':<20}{created['key']}")
        print("trioproxy: store this key now: it is not shown again", file=sys.stderr)
    return 0


def cmd_list(args: argparse.Namespace, admin: Admin) -> int:
    params = {}
    team = team_id(admin, args.team)
    if team:
        params["team"] = team
    answer = admin.call("GET", "/api/keys", params=params)
    keys = answer.get("keys", [])
    _out(args, answer, lambda: key_rows(keys) if keys else "no keys")
    return 0


def cmd_show(args: argparse.Namespace, admin: Admin) -> int:
    key = admin.call("GET", f"/api/keys/{_id(args.id)}")
    _out(args, key, lambda: key_details(key))
    return 0


def cmd_update(args: argparse.Namespace, admin: Admin) -> int:
    changes: dict[str, Any] = {}
    current: dict[str, Any] | None = None
    if args.limit or args.metadata:
        current = admin.call("GET", f"/api/keys/{_id(args.id)}")
    if args.name is not None:
        if not args.name.strip():
            raise UsageError("--name: a key needs a name")
        changes["name"] = args.name
    if args.all_models and args.model:
        raise UsageError("--all-models and --model contradict each other; give one of them")
    if args.all_models:
        changes["models"] = []
    elif args.model:
        changes["models"] = list(args.model)
    if args.limit:
        changes["limits"] = parse_limits(args.limit, (current or {}).get("limits"))
    if args.metadata:
        changes["metadata"] = parse_metadata(args.metadata, (current or {}).get("metadata"))
    if args.expires is not None:
        changes["expiresAt"] = parse_expires(args.expires)
    if args.team is not None:
        changes["team"] = team_id(admin, args.team) or None
    if not changes:
        raise UsageError("keys update: nothing to change (give --name, --team, --model, --limit, --metadata or --expires)")
    key = admin.call("PATCH", f"/api/keys/{_id(args.id)}", body=changes)
    _out(args, key, lambda: key_details(key))
    return 0


def cmd_rotate(args: argparse.Namespace, admin: Admin) -> int:
    grace = args.grace.strip() if args.grace else "0s"
    parse_duration(grace, "--grace")  # the flag is named here, not in the server's message
    rotated = admin.call("POST", f"/api/keys/{_id(args.id)}/rotate", body={"gracePeriod": grace})
    if args.output == "json":
        _print(_json(rotated))
    else:
        _print(key_details(rotated))
        _print(f"{'key:':<20}{rotated['key']}")
        print("trioproxy: store this key now: it is not shown again", file=sys.stderr)
    return 0


def cmd_revoke(args: argparse.Namespace, admin: Admin) -> int:
    key = admin.call("DELETE", f"/api/keys/{_id(args.id)}")
    _out(args, key, lambda: key_details(key))
    return 0


def cmd_team_create(args: argparse.Namespace, admin: Admin) -> int:
    if not args.name or not args.name.strip():
        raise UsageError("--name: a team needs a name")
    team = admin.call("POST", "/api/teams", body={"name": args.name, "limits": parse_limits(args.limit or []),
                                                  "metadata": parse_metadata(args.metadata or [])})
    _out(args, team, lambda: team_details(team))
    return 0


def cmd_team_list(args: argparse.Namespace, admin: Admin) -> int:
    answer = admin.call("GET", "/api/teams")
    teams = answer.get("teams", [])
    _out(args, answer, lambda: team_rows(teams) if teams else "no teams")
    return 0


def cmd_team_show(args: argparse.Namespace, admin: Admin) -> int:
    team = admin.call("GET", f"/api/teams/{_team_path(admin, args.id)}")
    _out(args, team, lambda: team_details(team))
    return 0


def cmd_team_update(args: argparse.Namespace, admin: Admin) -> int:
    ident = _team_path(admin, args.id)
    changes: dict[str, Any] = {}
    current = admin.call("GET", f"/api/teams/{ident}") if (args.limit or args.metadata) else {}
    if args.name is not None:
        if not args.name.strip():
            raise UsageError("--name: a team needs a name")
        changes["name"] = args.name
    if args.limit:
        changes["limits"] = parse_limits(args.limit, current.get("limits"))
    if args.metadata:
        changes["metadata"] = parse_metadata(args.metadata, current.get("metadata"))
    if not changes:
        raise UsageError("keys team update: nothing to change (give --name, --limit or --metadata)")
    team = admin.call("PATCH", f"/api/teams/{ident}", body=changes)
    _out(args, team, lambda: team_details(team))
    return 0


def cmd_team_delete(args: argparse.Namespace, admin: Admin) -> int:
    ident = _team_path(admin, args.id)
    answer = admin.call("DELETE", f"/api/teams/{ident}")
    _out(args, answer, lambda: f"team {ident} deleted")
    return 0


def cmd_spend(args: argparse.Namespace, admin: Admin) -> int:
    params: dict[str, Any] = {"group_by": args.group_by}
    if args.from_ is not None:
        params["from"] = parse_time(args.from_, "--from")
    if args.to is not None:
        params["to"] = parse_time(args.to, "--to", end_of_day=True)
    if args.csv:
        if args.output == "json":
            raise UsageError("--csv and -o json contradict each other; give one of them")
        _print(admin.call("GET", "/api/spend", params={**params, "format": "csv"}, text=True))
        return 0
    answer = admin.call("GET", "/api/spend", params=params)
    rows = answer.get("rows", [])
    _out(args, answer, lambda: spend_rows(rows) if rows else "no spend in this period")
    return 0


def cmd_logs(args: argparse.Namespace, admin: Admin) -> int:
    if not 1 <= args.limit <= 10_000:
        raise UsageError(f"--limit: expected a whole number from 1 to 10000, got {args.limit}")
    params: dict[str, Any] = {"limit": args.limit}
    for name in ("key", "model", "status"):
        if getattr(args, name) is not None:
            params[name] = getattr(args, name)
    team = team_id(admin, args.team)
    if team:
        params["team"] = team
    if args.since is not None:
        value = args.since.strip()
        params["since"] = (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - parse_duration(value, "--since")))
                           if _DURATION.fullmatch(value) or re.fullmatch(r"(\d+[smhdw])+", value)
                           else parse_time(value, "--since"))
    answer = admin.call("GET", "/api/logs", params=params)
    entries = answer.get("entries", [])
    _out(args, answer, lambda: log_rows(entries) if entries else "no requests logged (config.keys.requestLog.enabled?)")
    return 0


def _id(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
        raise UsageError(f"expected a key id such as key_3f9a0c1b2d4e, got {value!r}")
    return value


def _team_path(admin: Admin, value: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", value) or not value.startswith("team_"):
        found = team_id(admin, value)
        if not found:
            raise UsageError(f"expected a team id or name, got {value!r}")
        return found
    return value


# -- parser ----------------------------------------------------------------------------------------

def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_argument_group("gateway")
    where.add_argument("--local", action="store_true",
                       help="the gateway runs locally; its admin server is on localhost:--proxy-admin-port (default)")
    where.add_argument("--proxy-admin-port", type=int, default=DEFAULT_ADMIN_PORT, metavar="PORT",
                       help="admin port with --local (default %(default)s)")
    where.add_argument("--gateway", metavar="gateway/NAME", help="the gateway to ask, from the registry")
    common.add_argument("-o", "--output", choices=("table", "json"), default="table",
                        help="a readable table (default) or the API's JSON")
    return common


def _key_fields(parser: argparse.ArgumentParser, *, update: bool) -> None:
    parser.add_argument("--name", required=not update, help="the key's name (user-facing label)")
    parser.add_argument("--team", metavar="TEAM", help="team id or name" + (" ('none': no team)" if update else ""))
    parser.add_argument("--model", action="append", metavar="MODEL",
                        help="allowed model, repeatable; 'prefix/*' allows a provider's models (default: every model)")
    parser.add_argument("--limit", action="append", metavar="METRIC/WINDOW=N",
                        help="repeatable: requests|tokens|cost per minute|hour|day|week|month|total, e.g. "
                             "tokens/day=100000, cost/month=50 (USD)" + ("; =none removes one" if update else ""))
    parser.add_argument("--expires", metavar="30d|ISO" + ("|never" if update else ""),
                        help="when the key stops working: a duration from now or an ISO date/time")
    parser.add_argument("--metadata", action="append", metavar="KEY=VALUE",
                        help="owner metadata, repeatable (owner=alice, user=alice@example.com)"
                             + ("; KEY= removes one" if update else ""))


def configure_parser(parser: argparse.ArgumentParser) -> None:
    common = _common()
    commands = parser.add_subparsers(dest="keys_command", metavar="COMMAND", required=True)
    create = commands.add_parser("create", parents=[common], help="create a key (its secret is shown once)",
                                 description="Create a runtime API key; its secret is printed once.")
    _key_fields(create, update=False)
    create.set_defaults(keys_handler=cmd_create)
    listing = commands.add_parser("list", parents=[common], help="list keys", description="List runtime API keys.")
    listing.add_argument("--team", metavar="TEAM", help="only this team's keys (id or name)")
    listing.set_defaults(keys_handler=cmd_list)
    show = commands.add_parser("show", parents=[common], help="show a key and its usage",
                               description="Show a key, its limits and their usage.")
    show.add_argument("id", metavar="ID")
    show.set_defaults(keys_handler=cmd_show)
    update = commands.add_parser("update", parents=[common], help="change a key",
                                 description="Change a key; limits and metadata given are merged into the key's.")
    update.add_argument("id", metavar="ID")
    _key_fields(update, update=True)
    update.add_argument("--all-models", action="store_true", help="allow every model again")
    update.set_defaults(keys_handler=cmd_update)
    rotate = commands.add_parser("rotate", parents=[common], help="new secret; the old one works for --grace",
                                 description="Give a key a new secret; the old one keeps working for --grace.")
    rotate.add_argument("id", metavar="ID")
    rotate.add_argument("--grace", metavar="DURATION", default="0s",
                        help="how long the old secret stays valid, e.g. 1h (default 0s: at once)")
    rotate.set_defaults(keys_handler=cmd_rotate)
    revoke = commands.add_parser("revoke", parents=[common], help="revoke a key (at once, for good)",
                                 description="Revoke a key: every gateway on the store refuses it from now on.")
    revoke.add_argument("id", metavar="ID")
    revoke.set_defaults(keys_handler=cmd_revoke)

    team = commands.add_parser("team", help="teams: limits and budgets shared by their keys",
                               description="Teams: limits and budgets shared by all their keys.")
    teams = team.add_subparsers(dest="team_command", metavar="COMMAND", required=True)
    t_create = teams.add_parser("create", parents=[common], help="create a team", description="Create a team.")
    t_create.add_argument("--name", required=True, help="the team's name")
    t_create.add_argument("--limit", action="append", metavar="METRIC/WINDOW=N",
                          help="repeatable, as for keys: shared by every key of the team")
    t_create.add_argument("--metadata", action="append", metavar="KEY=VALUE", help="repeatable")
    t_create.set_defaults(keys_handler=cmd_team_create)
    t_list = teams.add_parser("list", parents=[common], help="list teams", description="List teams.")
    t_list.set_defaults(keys_handler=cmd_team_list)
    t_show = teams.add_parser("show", parents=[common], help="show a team", description="Show a team and its usage.")
    t_show.add_argument("id", metavar="ID|NAME")
    t_show.set_defaults(keys_handler=cmd_team_show)
    t_update = teams.add_parser("update", parents=[common], help="change a team",
                                description="Change a team; limits and metadata given are merged.")
    t_update.add_argument("id", metavar="ID|NAME")
    t_update.add_argument("--name", help="the team's new name")
    t_update.add_argument("--limit", action="append", metavar="METRIC/WINDOW=N", help="repeatable; =none removes one")
    t_update.add_argument("--metadata", action="append", metavar="KEY=VALUE", help="repeatable; KEY= removes one")
    t_update.set_defaults(keys_handler=cmd_team_update)
    t_delete = teams.add_parser("delete", parents=[common], help="delete a team that has no active keys left",
                                description="Delete a team; move (update --team) or revoke its keys first.")
    t_delete.add_argument("id", metavar="ID|NAME")
    t_delete.set_defaults(keys_handler=cmd_team_delete)

    spend = commands.add_parser("spend", parents=[common], help="spend per key, team, model, user, day or provider",
                                description="Spend (requests, tokens, cost in USD) grouped one way, over a period.")
    spend.add_argument("--group-by", choices=GROUPS, default="key", help="default %(default)s")
    spend.add_argument("--from", dest="from_", metavar="DATE", help="start: ISO date/time or unix seconds")
    spend.add_argument("--to", metavar="DATE", help="end: ISO date/time or unix seconds (a date includes that day)")
    spend.add_argument("--csv", action="store_true", help="print CSV (safe to open in a spreadsheet)")
    spend.set_defaults(keys_handler=cmd_spend)

    logs = commands.add_parser("logs", parents=[common], help="the request log (config.keys.requestLog)",
                               description="The request log: key, team, model, tokens, cost, status, latency.")
    logs.add_argument("--key", metavar="ID", help="only this key's requests")
    logs.add_argument("--team", metavar="TEAM", help="only this team's requests (id or name)")
    logs.add_argument("--model", metavar="MODEL", help="only this model's requests")
    logs.add_argument("--status", metavar="CODE", help="only this status (200, 429, or 4xx/5xx)")
    logs.add_argument("--since", metavar="WHEN", help="only since: a duration back (1h) or an ISO date/time")
    logs.add_argument("-n", "--limit", type=int, default=50, metavar="N", help="at most N entries (default %(default)s)")
    logs.set_defaults(keys_handler=cmd_logs)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run ``trioproxy keys ...``; returns the exit status, prints no traceback."""
    def command() -> int:
        if args.local and args.gateway is not None:
            raise UsageError(f"--local and --gateway {args.gateway} name two different gateways; give one of them")
        admin = Admin(resolve_admin(args, args.gateway))
        try:
            code: int = args.keys_handler(args, admin)
            return code
        finally:
            admin.close()

    return exit_status(command, (KeysError,))
