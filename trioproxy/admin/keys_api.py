"""The admin API of runtime keys (docs/keys-admin.md): ``/api/keys``, ``/api/teams``, ``/api/spend``
and ``/api/logs``, over the runtime's ``KeyService`` (``runtime.keys``).

Like every admin endpoint they sit behind the admin token off loopback (``auth.py``), and the
admin app refuses cross-site writes (``host_check.refuse_cross_site_writes``), so a web page
cannot create or revoke keys from a browser on the admin's machine. Answers are JSON; errors are
``{"error": "<message>"}`` with 400 (the message names the field: ``limits.tokens.fortnight:
unknown window``), 404 (unknown id) or 503 (``key store unavailable``). A key's secret appears
only in the answers of create and rotate.
"""

from __future__ import annotations

import csv
import io
import math
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from quart import Quart, Response, request

from ..keys import KeyRecord, KeyService, Team
from ..proxy.runtime import Runtime
from . import keys_wire as wire

SPEND_GROUPS = ("key", "team", "model", "user", "day", "provider")
MAX_LOG_LIMIT = 10_000
#: cells a spreadsheet would read as a formula (OWASP "CSV injection"): prefixed with a quote
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_STATUS = re.compile(r"([1-5])(?:xx|XX)|([1-5]\d\d)")


class ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


Handler = Callable[..., Awaitable[Any]]


def _json(app: Quart, value: Any, status: int = 200) -> Response:
    response: Response = app.json.response(value)  # type: ignore[assignment]
    response.status_code = status
    response.headers["cache-control"] = "no-store"  # answers may hold a secret (create, rotate)
    return response


def _endpoint(app: Quart) -> Callable[[Handler], Handler]:
    def endpoint(handler: Handler) -> Handler:
        """Map the service's errors to answers, in one place."""
        async def guarded(**kwargs: Any) -> Response:
            try:
                result = await handler(**kwargs)
            except ApiError as error:
                return _json(app, {"error": error.message}, error.status)
            except Exception as error:  # the service's errors, mapped; anything else propagates
                mapped = wire.map_error(error)
                if mapped is None:
                    raise
                return _json(app, {"error": mapped[1]}, mapped[0])
            if isinstance(result, Response):
                return result
            status, value = result
            return _json(app, value, status)

        guarded.__name__ = handler.__name__
        return guarded

    return endpoint


def register_keys_api(app: Quart, runtime: Runtime) -> None:
    endpoint = _endpoint(app)

    def service() -> KeyService:
        return runtime.keys

    _key_routes(app, endpoint, service)
    _team_routes(app, endpoint, service)

    @app.get("/api/spend")
    @endpoint
    async def spend() -> tuple[int, Any] | Response:
        return await spend_answer(service())

    @app.get("/api/logs")
    @endpoint
    async def logs() -> tuple[int, Any]:
        return 200, {"entries": await log_answer(service())}


async def _body() -> Any:
    data = await request.get_json(force=True, silent=True)
    if not isinstance(data, dict):
        raise ApiError(400, "body: expected a JSON object")
    return data


def _key_routes(app: Quart, endpoint: Callable[[Handler], Handler], service: Callable[[], KeyService]) -> None:
    body = _body

    async def found_key(key_id: str) -> KeyRecord:
        record = await service().get_key(key_id)
        if record is None:
            raise wire.NotFound(f"unknown key {key_id}")
        return record

    @app.get("/api/keys")
    @endpoint
    async def list_keys() -> tuple[int, Any]:
        keys = await service().list_keys(team=request.args.get("team") or None)
        return 200, {"keys": await service().keys_json(keys)}

    @app.post("/api/keys")
    @endpoint
    async def create_key() -> tuple[int, Any]:
        fields = wire.key_fields(await body(), create=True)
        await check_team(fields)
        record, secret = await service().create_key(**fields)
        return 201, {**record.to_json(time.time()), "key": secret}

    async def check_team(fields: dict[str, Any]) -> None:
        if fields.get("team") is not None and await service().get_team(fields["team"]) is None:
            raise ApiError(400, f"team: unknown team {fields['team']}")

    @app.get("/api/keys/<key_id>")
    @endpoint
    async def get_key(key_id: str) -> tuple[int, Any]:
        return 200, (await service().keys_json([await found_key(key_id)]))[0]

    @app.patch("/api/keys/<key_id>")
    @endpoint
    async def update_key(key_id: str) -> tuple[int, Any]:
        changes = wire.key_fields(await body(), create=False)
        if not changes:
            raise ApiError(400, "body: nothing to change")
        await found_key(key_id)
        await check_team(changes)
        return 200, (await service().update_key(key_id, **changes)).to_json(time.time())

    @app.delete("/api/keys/<key_id>")
    @endpoint
    async def revoke_key(key_id: str) -> tuple[int, Any]:
        await found_key(key_id)
        return 200, (await service().revoke_key(key_id)).to_json(time.time())

    @app.post("/api/keys/<key_id>/rotate")
    @endpoint
    async def rotate_key(key_id: str) -> tuple[int, Any]:
        data = await request.get_json(force=True, silent=True)
        data = {} if data is None else data
        if not isinstance(data, dict):
            raise ApiError(400, "body: expected a JSON object")
        unknown = sorted(set(data) - {"gracePeriod"})
        if unknown:
            raise ApiError(400, f"{unknown[0]}: unknown field (expected gracePeriod)")
        grace = wire.duration(data.get("gracePeriod", 0), "gracePeriod")
        record = await found_key(key_id)
        if record.status(time.time()) != "active":
            raise ApiError(400, f"{key_id}: the key is {record.status(time.time())}; only an active key can be rotated")
        record, secret = await service().rotate_key(key_id, grace=grace)
        return 200, {**record.to_json(time.time()), "key": secret}


def _team_routes(app: Quart, endpoint: Callable[[Handler], Handler], service: Callable[[], KeyService]) -> None:
    body = _body

    async def found_team(team_id: str) -> Team:
        team = await service().get_team(team_id)
        if team is None:
            raise wire.NotFound(f"unknown team {team_id}")
        return team

    @app.get("/api/teams")
    @endpoint
    async def list_teams() -> tuple[int, Any]:
        return 200, {"teams": await service().teams_json(await service().list_teams())}

    @app.post("/api/teams")
    @endpoint
    async def create_team() -> tuple[int, Any]:
        team = await service().create_team(**wire.team_fields(await body(), create=True))
        return 201, team.to_json()

    @app.get("/api/teams/<team_id>")
    @endpoint
    async def get_team(team_id: str) -> tuple[int, Any]:
        return 200, (await service().teams_json([await found_team(team_id)]))[0]

    @app.patch("/api/teams/<team_id>")
    @endpoint
    async def update_team(team_id: str) -> tuple[int, Any]:
        changes = wire.team_fields(await body(), create=False)
        if not changes:
            raise ApiError(400, "body: nothing to change")
        await found_team(team_id)
        return 200, (await service().update_team(team_id, **changes)).to_json()

    @app.delete("/api/teams/<team_id>")
    @endpoint
    async def delete_team(team_id: str) -> tuple[int, Any]:
        if not await service().delete_team(team_id):
            raise wire.NotFound(f"unknown team {team_id}")
        return 200, {"deleted": team_id}


async def spend_answer(service: Any) -> tuple[int, Any] | Response:
    group_by = request.args.get("group_by", "key")
    groups = [g.strip() for g in group_by.split(",")]
    if not 1 <= len(groups) <= 2 or any(g not in SPEND_GROUPS for g in groups) or len(set(groups)) != len(groups):
        raise ApiError(400, f"group_by: expected one of {'|'.join(SPEND_GROUPS)} (or two, comma-separated),"
                            f" got {group_by!r}")
    start = instant(request.args.get("from"), "from")
    end = instant(request.args.get("to"), "to", end_of_day=True)
    if start is not None and end is not None and end < start:
        raise ApiError(400, "to: before from")
    fmt = request.args.get("format", "json")
    if fmt not in ("json", "csv"):
        raise ApiError(400, f"format: expected json or csv, got {fmt!r}")
    rows = await wire.spend_rows(service, groups, start, end)
    if groups in (["key"], ["team"]):  # names beside the ids (the CSV's and the page's)
        records = await (service.list_keys() if groups == ["key"] else service.list_teams())
        names = {r.id: r.name for r in records}
        rows = [{**row, "name": names.get(str(row.get("group")))} for row in rows]
    if fmt == "csv":
        response = Response(spend_csv(groups, rows), content_type="text/csv; charset=utf-8")
        response.headers["content-disposition"] = f'attachment; filename="spend-by-{"-".join(groups)}.csv"'
        response.headers["cache-control"] = "no-store"
        return response
    return 200, {"groupBy": ",".join(groups), "from": iso(start), "to": iso(end), "rows": rows}


async def log_answer(service: Any) -> list[dict[str, Any]]:
    limit_text = request.args.get("limit", "100").strip()
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= MAX_LOG_LIMIT:
        raise ApiError(400, f"limit: expected a whole number from 1 to {MAX_LOG_LIMIT}, got {limit_text!r}")
    status_text = (request.args.get("status") or "").strip()
    status: int | str | None = None
    if status_text:
        match = _STATUS.fullmatch(status_text)
        if match is None:
            raise ApiError(400, f"status: expected a status such as 429 or a class such as 5xx, got {status_text!r}")
        status = int(match.group(2)) if match.group(2) else f"{match.group(1)}xx"
    since = instant(request.args.get("since"), "since")
    entries: list[dict[str, Any]] = await wire.log_entries(
        service, key=request.args.get("key") or None, team=request.args.get("team") or None,
        model=request.args.get("model") or None, status=status, since=since, limit=int(limit_text))
    return entries


def instant(text: str | None, field: str, *, end_of_day: bool = False) -> float | None:
    """``from``/``to``/``since``: unix seconds, or an ISO date (``to``: the end of that day) or
    date-time (UTC unless it says otherwise)."""
    if text is None or not text.strip():
        return None
    value = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", value):
        return float(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ApiError(400, f"{field}: expected an ISO date (2026-11-01), date-time or unix seconds,"
                            f" got {value!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    seconds = moment.timestamp()
    if end_of_day and re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        seconds += 86400 - 1e-6
    return seconds


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(math.floor(seconds), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def safe_cell(value: Any) -> str:
    """A CSV cell a spreadsheet shows as text: ``=HYPERLINK(...)`` in a key's name is not run."""
    text = "" if value is None else (f"{value:.6f}".rstrip("0").rstrip(".") if isinstance(value, float) else str(value))
    return "'" + text if text.startswith(FORMULA_START) else text


def spend_csv(groups: list[str], rows: list[dict[str, Any]]) -> str:
    columns = [*groups, *(["name"] if groups[0] in ("key", "team") and len(groups) == 1 else []),
               "requests", "inputTokens", "outputTokens", "totalTokens", "cost"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([safe_cell(row.get(column)) for column in columns])
    return out.getvalue()
