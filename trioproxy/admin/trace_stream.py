"""``/debug/trace``: server-sent events of the next request that matches (docs/trace-events.md).

Raw ASGI rather than a Quart view: the stream must notice a reader that goes away (to stop
offering it requests) and must never hold a request up, so it owns its ``receive`` and its
timing. Off loopback the admin token is scrubbed from every event (headers, URLs, bodies), so a
traced request that carries it never shows it. Framing: ``: ready``, then ``data: <event>`` each followed by a blank line, ``: keepalive``
every second (``TraceHub.keepalive``) while waiting; the response ends after ``requestFinished``.
With ``?follow=true`` it never ends on its own: every matching request follows, whole, in the order
they arrived (``trace.Follower``), each ``requestFinished`` followed by ``: dropped N events`` if any were.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs

import trio

from ..asgi import send_text
from ..cel import CelError, compile_expression
from ..telemetry.metrics import Metrics
from ..telemetry.trace import REDACTED, TooManyWatchers, TraceHub, Watcher

T = TypeVar("T")


def scrub_body(event: dict[str, Any], secrets: tuple[str, ...]) -> dict[str, Any]:
    """A body snapshot with each secret replaced inside the (base64) body, where ``scrub`` cannot see."""
    message = event.get("message")
    if not isinstance(message, dict) or message.get("type") != "bodySnapshot" or not isinstance(message.get("body"), str):
        return event
    try:
        raw = base64.b64decode(message["body"])
    except ValueError:
        return event
    cleaned = raw
    for secret in secrets:
        cleaned = cleaned.replace(secret.encode(), REDACTED.encode())
    if cleaned == raw:
        return event
    return {**event, "message": {**message, "body": base64.b64encode(cleaned).decode()}}


def scrub(data: bytes, secrets: tuple[str, ...]) -> bytes:
    """Hide each secret (the admin token) wherever it appears in an event, header redaction aside."""
    for secret in secrets:
        for form in (secret.encode(), json.dumps(secret, ensure_ascii=False)[1:-1].encode()):
            if form and form in data:
                data = data.replace(form, REDACTED.encode())
    return data


def _follow_flag(query: dict[str, list[str]]) -> bool | None:
    """``follow``: absent/false/0 → one request, true/1 → every request; None when it is neither."""
    value = query.get("follow", ["false"])[0].strip().lower()
    return {"": False, "false": False, "0": False, "true": True, "1": True}.get(value)


async def serve_trace(scope: dict[str, Any], receive: Any, send: Any, hub: TraceHub, metrics: Metrics,
                      *, secrets: tuple[str, ...] = ()) -> None:
    if scope["method"] not in ("GET", "POST"):
        await send_text(send, 405, "method not allowed: use POST or GET")
        return
    # A POST body is not used; read it so the request is complete.
    message = await receive()
    while message["type"] == "http.request" and message.get("more_body"):
        message = await receive()
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    follow = _follow_flag(query)
    if follow is None:
        await send_text(send, 400, f"invalid follow {query['follow'][0]!r}: expected true or false")
        return
    matches = None
    if query.get("expression", [""])[0].strip():
        try:
            matches = compile_expression(query["expression"][0]).matches
        except CelError as error:
            await send_text(send, 400, f"invalid expression: {error}")
            return
    try:
        follower = hub.follow(matches) if follow else None
        watcher = hub.watch(matches) if follower is None else None
    except TooManyWatchers as error:
        await send_text(send, 429, str(error))
        return
    try:
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]})
        await send({"type": "http.response.body", "body": b": ready\n\n", "more_body": True})
        async with trio.open_nursery() as nursery:
            async def reader_gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(reader_gone)
            if watcher is not None:
                await _write_request(send, hub, watcher, secrets)
                await send({"type": "http.response.body", "body": _dropped(watcher), "more_body": False})
            else:
                assert follower is not None
                while True:  # until the reader leaves
                    claimed = await _keepalive_until(send, hub, follower.next_request)
                    try:
                        await _write_request(send, hub, claimed, secrets)
                        if claimed.dropped:
                            await send({"type": "http.response.body", "body": _dropped(claimed), "more_body": True})
                    finally:
                        follower.done(claimed)
            nursery.cancel_scope.cancel()
    finally:
        if follower is not None:
            follower.close()
        if watcher is not None:
            hub.forget(watcher)


def _dropped(watcher: Watcher) -> bytes:
    """The comment after a request whose reader lost events (counted in trioproxy_trace_events_dropped)."""
    return f": dropped {watcher.dropped} events (reader too slow)\n\n".encode() if watcher.dropped else b""


async def _keepalive_until(send: Any, hub: TraceHub, get: Callable[[], Awaitable[T]]) -> T:
    """``await get()``, writing ``: keepalive`` every ``hub.keepalive`` seconds meanwhile."""
    while True:
        with trio.move_on_after(hub.keepalive):
            return await get()
        await send({"type": "http.response.body", "body": b": keepalive\n\n", "more_body": True})


async def _write_request(send: Any, hub: TraceHub, watcher: Watcher, secrets: tuple[str, ...]) -> None:
    """The events of ``watcher``'s request until its ``requestFinished``."""
    while True:
        try:
            event = await _keepalive_until(send, hub, watcher.next_event)
        except trio.EndOfChannel:
            return
        if secrets:
            event = scrub_body(event, secrets)
        # default=str: an odd value in an event is shown as text, never ends the stream
        data = json.dumps(event, separators=(",", ":"), ensure_ascii=False, default=str).encode()
        if secrets:
            data = scrub(data, secrets)
        await send({"type": "http.response.body", "body": b"data: " + data + b"\n\n", "more_body": True})
