"""Client side of ``/debug/trace``: the SSE session, saved-trace files and request injection.

Runs on asyncio (httpx.AsyncClient) because the text UI is a prompt-toolkit (asyncio) program
and both share one loop; ``--raw`` uses the same code under ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from ..admin.client import auth_headers

Event = dict[str, Any]

TRACE_HEADER = "x-trioproxy-trace-id"


class TraceError(Exception):
    """A failure to show the user as one line (no traceback)."""


# -- events from text --------------------------------------------------------------------------
def parse_event(payload: str, where: str) -> Event:
    try:
        event = json.loads(payload)
    except ValueError as exc:
        raise TraceError(f"{where}: not a JSON event: {exc}") from None
    if not isinstance(event, dict):
        raise TraceError(f"{where}: not a JSON event object")
    return event


def events_from_lines(lines: Iterable[str], name: str) -> Iterator[Event]:
    """Events of a saved trace: JSON lines, or SSE (``data:`` lines; comments and blanks skipped)."""
    for lineno, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith(":") or line.startswith(("event:", "id:", "retry:")):
            continue
        if line.startswith("data:"):
            line = line[5:].strip()
        yield parse_event(line, f"{name}:{lineno}")


# -- request injection ---------------------------------------------------------------------------
@dataclass
class Injection:
    """The user's request (``URL [curl args]``) to send to 127.0.0.1:``port`` once tracing is on.

    ``trace_id`` goes out as the ``x-trioproxy-trace-id`` header and into the trace expression,
    so that exactly this request is traced even when other clients use the gateway.
    """

    port: int
    argv: Sequence[str]
    trace_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def expression(self) -> str:
        h = f'request.headers["{TRACE_HEADER}"]'
        return f'"{TRACE_HEADER}" in request.headers && {h} == "{self.trace_id}"'

    async def send(self) -> None:
        """Send the request; raises TraceError when it could not be sent at all."""
        if os.environ.get("TRIOPROXY_NO_CURL") != "1" and shutil.which("curl"):
            await self._send_curl()
        else:
            await send_builtin(parse_curl_args(self.argv), self.port, {TRACE_HEADER: self.trace_id})

    async def _send_curl(self) -> None:
        cmd = [
            "curl", "-sS", "-o", "/dev/null",
            "--connect-to", f"::127.0.0.1:{self.port}",  # any host:port -> our listener, no DNS
            "-H", f"{TRACE_HEADER}: {self.trace_id}",
            *self.argv,
        ]
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, err = await proc.communicate()
        except asyncio.CancelledError:  # trace over or UI closed: do not leave curl behind
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            raise
        if proc.returncode:
            msg = err.decode(errors="replace").strip().splitlines()
            raise TraceError(f"curl failed (exit {proc.returncode}): {msg[-1] if msg else ''}".rstrip())


@dataclass
class CurlRequest:
    url: str
    method: str | None = None
    headers: list[tuple[str, str]] = field(default_factory=list)
    data: bytes | None = None
    auth: tuple[str, str] | None = None


_FLAGS_IGNORED = {
    "-k", "--insecure", "-s", "--silent", "-S", "--show-error", "-v", "--verbose", "-i",
    "--include", "-L", "--location", "--compressed", "-f", "--fail", "-N", "--no-buffer",
}


def _read_data(value: str, *, at_file: bool, strip_newlines: bool) -> bytes:
    if at_file and value.startswith("@"):
        name = value[1:]
        try:
            raw = Path(name).read_bytes() if name != "-" else os.read(0, 1 << 30)
        except OSError as exc:
            raise TraceError(f"cannot read {name}: {exc.strerror}") from None
        return raw.replace(b"\r", b"").replace(b"\n", b"") if strip_newlines else raw
    return value.encode()


def parse_curl_args(argv: Sequence[str]) -> CurlRequest:
    """The subset of curl arguments the built-in sender understands (used when curl is absent)."""
    url: str | None = None
    req = CurlRequest(url="")
    data: list[bytes] = []
    json_mode = False
    args = list(argv)
    i = 0

    def value() -> str:
        nonlocal i
        i += 1
        if i >= len(args):
            raise TraceError(f"curl argument {args[i - 1]} needs a value")
        return args[i]

    while i < len(args):
        arg = args[i]
        if arg in ("-X", "--request"):
            req.method = value()
        elif arg in ("-H", "--header"):
            name, sep, val = value().partition(":")
            if not sep:
                raise TraceError(f"bad header {name!r}: expected 'Name: value'")
            req.headers.append((name.strip(), val.strip()))
        elif arg in ("-d", "--data", "--data-ascii"):
            data.append(_read_data(value(), at_file=True, strip_newlines=True))
        elif arg == "--data-binary":
            data.append(_read_data(value(), at_file=True, strip_newlines=False))
        elif arg == "--data-raw":
            data.append(_read_data(value(), at_file=False, strip_newlines=False))
        elif arg == "--json":
            json_mode = True
            data.append(_read_data(value(), at_file=True, strip_newlines=False))
        elif arg in ("-u", "--user"):
            user, _, password = value().partition(":")
            req.auth = (user, password)
        elif arg in ("-A", "--user-agent"):
            req.headers.append(("user-agent", value()))
        elif arg in _FLAGS_IGNORED:
            pass
        elif arg.startswith("-") and arg != "-":
            raise TraceError(f"curl argument {arg} is not supported without curl; install curl")
        elif url is None:
            url = arg
        else:
            raise TraceError(f"unexpected argument {arg!r} after the URL {url!r}")
        i += 1
    if url is None:
        raise TraceError("inject mode needs a URL after --")
    req.url = url
    names = {name.lower() for name, _ in req.headers}
    if data:
        req.data = b"".join(data) if json_mode else b"&".join(data)
        req.method = req.method or "POST"
        if json_mode:
            if "content-type" not in names:
                req.headers.append(("content-type", "application/json"))
            if "accept" not in names:
                req.headers.append(("accept", "application/json"))
        elif "content-type" not in names:
            req.headers.append(("content-type", "application/x-www-form-urlencoded"))
    req.method = req.method or "GET"
    return req


def request_target(url: str) -> tuple[str, str]:
    """(Host header, path?query) of a curl-style URL; the scheme defaults to http like curl."""
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if not parts.hostname:
        raise TraceError(f"URL {url!r} has no host")
    path = parts.path or "/"
    return parts.netloc.rpartition("@")[2], path + (f"?{parts.query}" if parts.query else "")


async def send_builtin(req: CurlRequest, port: int, extra_headers: dict[str, str]) -> None:
    """httpx equivalent of ``curl --connect-to ::127.0.0.1:PORT URL ...``: Host from the URL."""
    host, target = request_target(req.url)
    headers = [("host", host), *extra_headers.items(), *req.headers]
    if req.auth:
        token = base64.b64encode(f"{req.auth[0]}:{req.auth[1]}".encode()).decode()
        headers.append(("authorization", f"Basic {token}"))
    try:
        async with httpx.AsyncClient(timeout=httpx.Timeout(60, connect=5)) as client:
            resp = await client.request(
                req.method or "GET", f"http://127.0.0.1:{port}{target}", headers=headers, content=req.data
            )
            await resp.aread()
    except httpx.HTTPError as exc:
        raise TraceError(f"request to 127.0.0.1:{port} failed: {exc or type(exc).__name__}") from None


# -- the SSE session -----------------------------------------------------------------------------
def combine(*expressions: str | None) -> str | None:
    parts = [e for e in expressions if e]
    if len(parts) <= 1:
        return parts[0] if parts else None
    return " && ".join(f"({p})" for p in parts)


class TraceSession:
    """The ``/debug/trace`` stream of one request, or with ``follow`` of every request.

    ``follow`` asks the server for ``?follow=true``: one stream that never ends, so no request is
    missed between two streams. A gateway that predates it ends the stream after one request
    anyway; then a new stream is opened, as before.

    ``async with`` opens the first stream and waits for ``: ready`` — so an unreachable admin or
    a 400 is reported before any UI is drawn — then starts the injection, if any.
    """

    def __init__(
        self,
        admin: str,
        expression: str | None = None,
        *,
        injection: Injection | None = None,
        follow: bool = False,
    ) -> None:
        self.admin = admin
        self.expression = expression
        self.injection = injection
        self.follow = follow
        # An admin server off loopback wants its bearer token; the same variable the gateway reads.
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=5), headers=auth_headers())
        self._stream: contextlib.AsyncExitStack | None = None
        self._lines: AsyncIterator[str] | None = None
        self._inject_task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> TraceSession:
        try:
            # An injected request is traced on its own (one-shot) stream; following starts after it.
            await self._open(combine(self.expression, self.injection.expression if self.injection is not None else None),
                             follow=self.follow and self.injection is None)
            if self.injection is not None:  # only now: the watcher is registered
                self._inject_task = asyncio.create_task(self.injection.send())
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._inject_task is not None:
            self._inject_task.cancel()
            with contextlib.suppress(BaseException):
                await self._inject_task  # also retrieves an unreported error
        await self._close_stream()
        await self._client.aclose()

    async def _close_stream(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            with contextlib.suppress(Exception):
                await stream.aclose()

    async def _open(self, expression: str | None, *, follow: bool = False) -> None:
        await self._close_stream()
        url = f"http://{self.admin}/debug/trace"
        params = {"expression": expression} if expression else {}
        if follow:
            params["follow"] = "true"
        stack = contextlib.AsyncExitStack()
        self._stream = stack
        try:
            resp = await stack.enter_async_context(self._client.stream("POST", url, params=params))
        except httpx.HTTPError as exc:
            raise TraceError(f"cannot reach the admin server at {self.admin}: {exc or type(exc).__name__}") from None
        if resp.status_code != 200:
            body = (await resp.aread()).decode(errors="replace").strip()
            raise TraceError(f"admin server {self.admin} answered {resp.status_code}: {body or resp.reason_phrase}")
        self._lines = resp.aiter_lines()
        async for line in self._lines:
            if line.startswith(":") and line[1:].strip() == "ready":
                break
        else:
            raise TraceError(f"admin server {self.admin} closed the trace stream before it was ready")

    def _injection_error(self) -> BaseException | None:
        task = self._inject_task
        if task is None or not task.done() or task.cancelled():
            return None
        return task.exception()

    async def _next_line(self) -> str:
        """Next SSE line; a failure of the injected request ends the wait with its error."""
        assert self._lines is not None
        if (error := self._injection_error()) is not None:
            raise error
        reader = asyncio.ensure_future(anext(self._lines))
        task = self._inject_task
        if task is not None and not task.done():
            await asyncio.wait({reader, task}, return_when=asyncio.FIRST_COMPLETED)
            if not reader.done() and (error := self._injection_error()) is not None:
                reader.cancel()
                with contextlib.suppress(BaseException):
                    await reader
                raise error
        return await reader

    async def _events_of_stream(self) -> AsyncIterator[Event]:
        """Events of the current stream until ``requestFinished`` (with ``follow``, until it ends)."""
        data: list[str] = []
        between = False  # no request half-way: the stream may end here
        while True:
            try:
                line = await self._next_line()
            except StopAsyncIteration:
                if between:
                    return
                raise TraceError("the trace stream ended before the request finished") from None
            except httpx.HTTPError as exc:
                raise TraceError(f"trace stream from {self.admin} broke: {exc or type(exc).__name__}") from None
            if line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
            elif not line and data:
                event = parse_event("\n".join(data), f"event from {self.admin}")
                data = []
                yield event
                between = (event.get("message") or {}).get("type") == "requestFinished"
                if between and not self.follow:
                    return
            # comments (": keepalive") and other fields are ignored

    async def events(self) -> AsyncIterator[Event]:
        """All traced events; with ``follow``, of every request (a new stream if one ends)."""
        while True:
            async for event in self._events_of_stream():
                yield event
            if not self.follow:
                return
            await self._open(self.expression, follow=True)
