"""Talking to one MCP server over Streamable HTTP (httpx, which runs under trio through anyio).

``post`` sends one JSON-RPC message and gives a ``TargetReply``: the server's session id, and the
messages of its answer (one JSON body, or the events of an SSE stream) read one by one, so a
routed call's progress notifications reach the client while the tool runs. Failures are
``TargetFailure`` with a short reason; the relay names the target in the client's error.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx

from ..asgi import Header

__all__ = ["HttpTargets", "TargetFailure", "TargetReply"]

#: how long connecting and a listing may take; a routed call's body is not time-limited here
#: (the route's ``timeout`` policy bounds the wait for its first byte)
CONNECT_TIMEOUT = 10.0


class TargetFailure(Exception):
    """A target that could not be reached or answered wrongly; ``reason`` is one line."""

    def __init__(self, reason: str, *, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class TargetReply:
    """A target's answer to one POST: its session id (``mcp-session-id``) and its messages."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.session_id = response.headers.get("mcp-session-id")
        self.streamed = response.headers.get("content-type", "").startswith("text/event-stream")

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        """The JSON-RPC messages of the answer, in order (none for 202 Accepted)."""
        response = self.response
        try:
            if response.status_code == 202:
                return
            if not self.streamed:
                body = await response.aread()
                if body.strip():
                    yield _json(body)
                return
            data: list[str] = []
            async for line in response.aiter_lines():
                if not line:
                    if data:
                        yield _json("\n".join(data).encode())
                        data = []
                elif line.startswith("data:"):
                    data.append(line[5:].removeprefix(" "))
            if data:
                yield _json("\n".join(data).encode())
        except httpx.HTTPError as exc:
            raise TargetFailure(_reason(exc)) from None

    async def aclose(self) -> None:
        await self.response.aclose()


def _json(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body)
    except ValueError:
        raise TargetFailure("answered with a body that is not JSON") from None
    if not isinstance(message, dict):
        raise TargetFailure("answered with JSON that is not a JSON-RPC message")
    return message


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if isinstance(exc, httpx.ConnectError):
        return f"unreachable ({text})"
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    return text


class HttpTargets:
    """One connection pool for the MCP targets of a gateway process."""

    def __init__(self) -> None:
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(CONNECT_TIMEOUT, read=None), follow_redirects=False)

    async def post(self, url: str, message: dict[str, Any], *, session_id: str | None, version: str | None,
                   headers: Sequence[Header] = ()) -> TargetReply:
        """Send ``message``; an HTTP error status is a ``TargetFailure`` (404: the session is gone)."""
        sent = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        for name, value in headers:
            sent[name.decode("latin-1")] = value.decode("latin-1")
        if session_id is not None:
            sent["mcp-session-id"] = session_id
        if version is not None:
            sent["mcp-protocol-version"] = version
        request = self.client.build_request("POST", url, content=json.dumps(message).encode(), headers=sent)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise TargetFailure(_reason(exc)) from None
        if response.status_code >= 400:
            body = (await response.aread())[:200].decode("utf-8", "replace")
            await response.aclose()
            reason = "its session expired (404)" if response.status_code == 404 and session_id else \
                f"answered HTTP {response.status_code}"
            detail = _error_text(body)
            raise TargetFailure(f"{reason}: {detail}" if detail else reason, status=response.status_code)
        return TargetReply(response)

    async def listen(self, url: str, *, session_id: str, version: str | None) -> TargetReply | None:
        """The target's standalone event stream (GET) for a session; None when it offers none (405)."""
        headers = {"accept": "text/event-stream", "mcp-session-id": session_id}
        if version is not None:
            headers["mcp-protocol-version"] = version
        try:
            response = await self.client.send(self.client.build_request("GET", url, headers=headers), stream=True)
        except httpx.HTTPError:
            return None
        if response.status_code != 200 or not response.headers.get("content-type", "").startswith(
                "text/event-stream"):
            await response.aclose()
            return None
        return TargetReply(response)

    async def delete(self, url: str, session_id: str, version: str | None) -> None:
        """End a target's session (best effort)."""
        headers = {"mcp-session-id": session_id}
        if version is not None:
            headers["mcp-protocol-version"] = version
        try:
            await self.client.delete(url, headers=headers)
        except httpx.HTTPError:
            pass

    async def aclose(self) -> None:
        await self.client.aclose()


def _error_text(body: str) -> str:
    """The JSON-RPC error message of an error body, else its first line."""
    try:
        message = json.loads(body)
        return str(message["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return body.strip().splitlines()[0] if body.strip() else ""
