"""What the trace viewer's ``x`` and ``r`` keys do outside the screen: write a HAR file, replay a request.

Both build on ``telemetry.export`` (docs/export.md), the one exporter of the admin API and the
commands: ``x`` writes the selected request as HAR 1.2 into the current directory and gives its curl
line; ``r`` posts the request's events to the admin server's ``POST /api/replay``, which sends it again
through the gateway's own listener and answers with the fresh trace. Credentials the trace hid
(``<redacted>``) are not replayed: ``trioproxy replay FILE -H ...`` supplies them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from ..admin.client import AdminRefused, auth_headers, json_answer
from ..telemetry.export import ExportError, curl, exchange_from_trace, har
from .state import Event

REPLAY_TIMEOUT = 60.0


class ActionError(Exception):
    """Why ``x`` or ``r`` could not be done: shown in the status line."""


@dataclass(frozen=True)
class Exported:
    path: Path
    curl: str | None  # None when no curl line can repeat the request (``curl_error`` says why)
    curl_error: str | None = None


def _free_name(directory: Path, stem: str) -> Path:
    path = directory / f"{stem}.har"
    n = 2
    while path.exists():
        path = directory / f"{stem}-{n}.har"
        n += 1
    return path


def export_request(events: list[Event], number: int, *, directory: Path | None = None,
                   base_url: str | None = None, credentials: dict[str, str] | None = None) -> Exported:
    """Write ``events`` (one traced request) as ``trioproxy-request-<number>.har`` (``-2``... when taken)
    in ``directory`` (default: the current one); its curl line is aimed at ``base_url`` when given."""
    try:
        exchange = exchange_from_trace(events)
    except ExportError as error:
        raise ActionError(f"cannot export: {error}") from None
    directory = directory or Path.cwd()
    path = _free_name(directory, f"trioproxy-request-{number}")
    text = json.dumps(har([exchange]), indent=2, ensure_ascii=False) + "\n"
    try:
        with open(path, "x", encoding="utf-8") as f:
            f.write(text)
    except OSError as exc:
        raise ActionError(f"cannot write {path}: {exc.strerror}") from None
    try:
        return Exported(path, curl(exchange, base_url=base_url, credentials=credentials or {}))
    except ExportError as error:
        return Exported(path, None, str(error))


async def replay_request(admin: str, events: list[Event], headers: dict[str, str] | None = None) -> dict[str, Any]:
    """``POST /api/replay`` on ``admin`` (``host:port``): the answer (``status``, ``headers``, ``body``, ``trace``)."""
    try:
        exchange_from_trace(events)
    except ExportError as error:
        raise ActionError(f"cannot replay: {error}") from None
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(REPLAY_TIMEOUT, connect=5), headers=auth_headers()) as client:
            response = await client.post(f"http://{admin}/api/replay",
                                         json={"trace": events, "headers": headers or {}})
    except httpx.HTTPError as exc:
        raise ActionError(f"cannot reach the admin server at {admin}: {exc or type(exc).__name__}") from None
    try:
        return json_answer(response)
    except AdminRefused as refused:
        raise ActionError(f"replay refused: {refused}") from None
