"""``/api/requests``: the request history (docs/history.md), newest first, optionally CEL-filtered;
``?format=har`` answers the same entries as HAR 1.2 (docs/export.md).

Raw ASGI, like ``/debug/trace``: with ``?follow=true`` it is a server-sent-event stream of each
new matching summary (``data: {...}``, ``: keepalive`` every second while idle) that must notice
a reader that goes away. The CEL expression and the JSON are evaluated here, when read, never
when a request is recorded.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

import trio

from ..asgi import send_text
from ..cel import CelError, compile_expression
from ..telemetry.export import har_from_history
from ..telemetry.history import History, Summary

MAX_LIMIT = 1_000_000
KEEPALIVE = 1.0


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


async def serve_requests(scope: dict[str, Any], receive: Any, send: Any, history: History) -> None:
    if scope["method"] != "GET":
        await send_text(send, 405, "method not allowed: use GET")
        return
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    follow = {"": False, "false": False, "0": False, "true": True, "1": True}.get(
        query.get("follow", ["false"])[0].strip().lower())
    if follow is None:
        await send_text(send, 400, f"invalid follow {query['follow'][0]!r}: expected true or false")
        return
    fmt = query.get("format", ["json"])[0].strip().lower() or "json"
    if fmt not in ("json", "har") or (fmt == "har" and follow):
        await send_text(send, 400, f"invalid format {query['format'][0]!r}: expected json or har"
                        + (" (har is a list, not a follow stream)" if fmt == "har" else ""))
        return
    limit: int | None = None
    if "limit" in query:
        text = query["limit"][0].strip()
        if not text.isdigit() or not 1 <= int(text) <= MAX_LIMIT:
            await send_text(send, 400, f"invalid limit {query['limit'][0]!r}: expected a whole number from 1 to {MAX_LIMIT}")
            return
        limit = int(text)
    matches = None
    if query.get("expression", [""])[0].strip():
        try:
            expression = compile_expression(query["expression"][0])
        except CelError as error:
            await send_text(send, 400, f"invalid expression: {error}")
            return

        def matches(summary: Summary) -> bool:
            return expression.matches(summary.activation())

    if not follow:
        found = [s.as_dict() for s in history.newest(limit, matches)]
        await send_text(send, 200, _json(har_from_history(found) if fmt == "har" else found), b"application/json")
        return
    await _follow(receive, send, history, matches, limit)


async def _follow(receive: Any, send: Any, history: History, matches: Any, limit: int | None) -> None:
    """The last ``limit`` matching summaries (oldest first; none without a limit), then each new one."""
    seen = history.total
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]})
    await send({"type": "http.response.body", "body": b": ready\n\n", "more_body": True})
    backlog = list(reversed(history.newest(limit, matches))) if limit else []
    async with trio.open_nursery() as nursery:
        async def reader_gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            nursery.cancel_scope.cancel()

        nursery.start_soon(reader_gone)
        pending = backlog
        while True:
            if pending:
                body = b"".join(b"data: " + _json(s.as_dict()) + b"\n\n" for s in pending)
                await send({"type": "http.response.body", "body": body, "more_body": True})
            with trio.move_on_after(KEEPALIVE) as waited:
                await history.wait_new(seen)
            if waited.cancelled_caught:
                await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})
                pending = []
                continue
            pending = [s for s in history.since(seen) if matches is None or matches(s)]
            seen = history.total
