"""Targets whose connection belongs to one client session: ``stdio`` (a child process speaking
JSON-RPC, one message per line, on its stdin and stdout) and ``sse`` (the older HTTP+SSE
transport: a GET event stream carries the server's messages, POSTs to the endpoint it names carry
the client's).

As in agentgateway, such a connection belongs to one client session: ``initialize`` opens one
(its handle goes into the session id in the target's place), later messages go to it, DELETE
ends it, and so does an idle hour or the gateway's shutdown (the connections live in the root
nursery: ``ConnectionPool.run``). A connection holds its session's state, so such a session continues
only on the gateway process that opened it; elsewhere its calls fail naming the target. A
connection that ends fails what is in flight and the session's later calls (``TargetFailure``);
the next ``initialize`` opens a new one.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urljoin

import httpx
import trio

from ..config.model import McpTarget
from .upstream import TargetFailure

__all__ = ["ConnectionPool", "StdioProcess", "ConnectionReply"]

#: an unused session's process is ended after this long
IDLE_TIMEOUT = 3600.0
#: longest line (one JSON-RPC message) read from a child
MAX_LINE = 16 * 1024 * 1024


class Connection:
    """One session's connection to a target and the requests in flight on it: a response goes to
    its request, anything else to every call in flight (a stdio or SSE server has no per-request
    channel for its notifications)."""

    def __init__(self, target: McpTarget) -> None:
        self.target = target
        self.pending: dict[Any, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.listeners: set[trio.MemorySendChannel[dict[str, Any]]] = set()
        self.exited: str | None = None
        self.used = trio.current_time()
        self.lock = trio.Lock()
        self.scope: trio.CancelScope | None = None  # the task reading it (SSE: cancelled to end it)

    def deliver(self, message: dict[str, Any]) -> None:
        if "method" not in message and message.get("id") in self.pending:
            try:
                self.pending.pop(message["id"]).send_nowait(message)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            return
        for listener in list(self.listeners):
            try:
                listener.send_nowait(message)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                pass

    def end(self, reason: str) -> None:
        self.exited = reason
        for channel in [*self.pending.values(), *self.listeners]:
            channel.close()

    async def send(self, message: dict[str, Any]) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class SseConnection(Connection):
    """The older HTTP+SSE transport: the event stream (``open``: up to its ``endpoint`` event, then
    ``read``) and the POSTs to that endpoint."""

    def __init__(self, target: McpTarget, client: httpx.AsyncClient) -> None:
        super().__init__(target)
        self.client = client
        self.endpoint = ""
        self.response: httpx.Response | None = None
        self.events: AsyncIterator[tuple[str, str]] | None = None

    async def _events(self, response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
        event, data = "message", list[str]()
        async for line in response.aiter_lines():
            if not line:
                if data:
                    yield event, "\n".join(data)
                event, data = "message", []
            elif line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))

    async def open(self) -> None:
        request = self.client.build_request("GET", self.target.url, headers={"accept": "text/event-stream"})
        try:
            self.response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise TargetFailure(f"unreachable ({exc or type(exc).__name__})") from None
        if self.response.status_code != 200:
            await self.response.aclose()
            raise TargetFailure(f"its event stream answered HTTP {self.response.status_code}")
        self.events = self._events(self.response)
        try:
            async for event, data in self.events:
                if event == "endpoint":
                    self.endpoint = urljoin(self.target.url, data.strip())
                    return
        except httpx.HTTPError as exc:
            raise TargetFailure(f"its event stream failed ({exc or type(exc).__name__})") from None
        raise TargetFailure("its event stream ended before naming its endpoint")

    async def read(self) -> None:
        assert self.events is not None and self.response is not None
        try:
            async for event, data in self.events:
                if event == "message":
                    try:
                        message = json.loads(data)
                    except ValueError:
                        continue
                    if isinstance(message, dict):
                        self.deliver(message)
            self.end("its event stream ended")
        except httpx.HTTPError as exc:
            self.end(f"its event stream failed ({exc or type(exc).__name__})")
        finally:
            if self.exited is None:
                self.end("its event stream was closed")
            with trio.CancelScope(shield=True):
                await self.response.aclose()

    async def send(self, message: dict[str, Any]) -> None:
        if self.exited is not None:
            raise TargetFailure(self.exited)
        self.used = trio.current_time()
        try:
            response = await self.client.post(self.endpoint, json=message)
        except httpx.HTTPError as exc:
            raise TargetFailure(f"unreachable ({exc or type(exc).__name__})") from None
        if response.status_code >= 400:
            raise TargetFailure(f"answered HTTP {response.status_code} to a message")

    def stop(self) -> None:
        if self.exited is None:
            self.end("its session ended")
        if self.scope is not None:
            self.scope.cancel()


class StdioProcess(Connection):
    """One child process."""

    def __init__(self, target: McpTarget, process: trio.Process) -> None:
        super().__init__(target)
        self.process = process

    def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()

    async def read(self) -> None:
        """Deliver each line the child writes: responses to their request, the rest to every call in flight."""
        stdout = self.process.stdout
        assert stdout is not None
        buffer = b""
        try:
            while True:
                chunk = await stdout.receive_some(65536)
                if not chunk:
                    break
                buffer += chunk
                if len(buffer) > MAX_LINE and b"\n" not in buffer:
                    break
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self._deliver(line)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            code = await self.process.wait()
            self.end(f"its process exited (code {code})")

    def _deliver(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return  # a server's stray output: not a message
        if isinstance(message, dict):
            self.deliver(message)

    async def send(self, message: dict[str, Any]) -> None:
        if self.exited is not None:
            raise TargetFailure(self.exited)
        stdin = self.process.stdin
        assert stdin is not None
        self.used = trio.current_time()
        async with self.lock:
            try:
                await stdin.send_all(json.dumps(message).encode() + b"\n")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                raise TargetFailure(self.exited or "its process does not read its input") from None


class ConnectionReply:
    """A stdio or SSE target's answer to one message, shaped as ``upstream.TargetReply``: what the
    server sends while the request is in flight (progress, logs, its own requests), then its answer."""

    streamed = True

    def __init__(self, process: Connection, handle: str, id: Any) -> None:
        self.process = process
        self.session_id: str | None = handle
        self.id = id
        self.inbox_send, self.inbox = trio.open_memory_channel[dict[str, Any]](256)
        if id is not None:
            process.pending[id] = self.inbox_send
            process.listeners.add(self.inbox_send)

    async def messages(self) -> AsyncIterator[dict[str, Any]]:
        if self.id is None:
            return
        async for message in self.inbox:
            yield message
            if "method" not in message and message.get("id") == self.id:
                return
        raise TargetFailure(self.process.exited or "its connection ended the call")

    async def aclose(self) -> None:
        self.process.pending.pop(self.id, None)
        self.process.listeners.discard(self.inbox_send)
        self.inbox_send.close()
        await trio.lowlevel.checkpoint()


class ConnectionPool:
    """The per-session connections (stdio processes, SSE streams) of one gateway process, by
    handle; ``run`` owns them."""

    def __init__(self) -> None:
        self.processes: dict[str, Connection] = {}
        self._nursery: trio.Nursery | None = None
        self._client: httpx.AsyncClient | None = None

    async def run(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                while True:
                    await trio.sleep(60)
                    now = trio.current_time()
                    for handle, process in list(self.processes.items()):
                        if process.exited is not None or now - process.used > IDLE_TIMEOUT:
                            self.stop(handle)
        finally:
            self._nursery = None
            self.processes.clear()
            if self._client is not None:
                with trio.CancelScope(shield=True):
                    await self._client.aclose()
                self._client = None

    async def start(self, target: McpTarget) -> str:
        """A new connection to ``target``; its handle."""
        nursery = self._nursery
        if nursery is None:
            raise TargetFailure(f"{target.transport} targets run only inside a gateway (no nursery)")
        handle = f"{target.transport}-{secrets.token_urlsafe(12)}"
        if target.transport == "sse":
            if self._client is None:
                self._client = httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=None))
            connection = SseConnection(target, self._client)
            await nursery.start(self._own_sse, handle, connection)
            return handle
        env = {**os.environ, **dict(target.env)}
        try:
            process = await trio.lowlevel.open_process([target.cmd, *target.args], stdin=subprocess.PIPE,
                                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        except OSError as exc:
            raise TargetFailure(f"cannot start {target.cmd!r}: {exc.strerror or exc}") from None
        child = StdioProcess(target, process)
        self.processes[handle] = child
        nursery.start_soon(self._own, handle, child)
        return handle

    async def _own_sse(self, handle: str, connection: SseConnection,
                       task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.CancelScope() as scope:
            connection.scope = scope
            await connection.open()  # a failure here is the caller's (nursery.start re-raises it)
            self.processes[handle] = connection
            task_status.started()
            try:
                await connection.read()
            finally:
                self.processes.pop(handle, None)

    async def _own(self, handle: str, child: StdioProcess) -> None:
        try:
            await child.read()
        finally:
            self.processes.pop(handle, None)
            if child.process.returncode is None:
                child.process.kill()
                with trio.CancelScope(shield=True):
                    await child.process.wait()

    def get(self, target: McpTarget, handle: str | None) -> Connection:
        child = self.processes.get(handle or "")
        if child is None or child.target.name != target.name:
            what = "stdio process" if target.transport == "stdio" else "event stream"
            raise TargetFailure(f"its {what} is not running on this gateway process (ended, or the "
                                "session began on another replica)")
        if child.exited is not None:
            raise TargetFailure(child.exited)
        return child

    def stop(self, handle: str) -> None:
        child = self.processes.pop(handle, None)
        if child is not None:
            child.stop()

    async def post(self, target: McpTarget, message: dict[str, Any], handle: str | None) -> ConnectionReply:
        """Send ``message`` on the session's connection (``initialize``: on a new one)."""
        if message.get("method") == "initialize" and handle is None:
            handle = await self.start(target)
        child = self.get(target, handle)
        assert handle is not None
        id = message.get("id") if "method" in message else None
        reply = ConnectionReply(child, handle, id)
        try:
            await child.send(message)
        except TargetFailure:
            await reply.aclose()
            raise
        return reply
