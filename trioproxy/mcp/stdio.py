"""MCP servers the gateway runs as child processes (``stdio`` targets): JSON-RPC, one message per
line, on the child's stdin and stdout.

As in agentgateway, a stdio process belongs to one client session: ``initialize`` starts one
(its handle goes into the session id in the target's place), later messages go to it, DELETE
ends it, and so does an idle hour or the gateway's shutdown (the processes live in the root
nursery: ``StdioPool.run``). A process holds its session's state, so such a session continues only
on the gateway process that started it; elsewhere its calls fail naming the target. A process
that exits fails what is in flight and the session's later calls (``TargetFailure``); the next
``initialize`` starts a new one.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import trio

from ..config.model import McpTarget
from .upstream import TargetFailure

__all__ = ["StdioPool", "StdioProcess", "StdioReply"]

#: an unused session's process is ended after this long
IDLE_TIMEOUT = 3600.0
#: longest line (one JSON-RPC message) read from a child
MAX_LINE = 16 * 1024 * 1024


class StdioProcess:
    """One child process and the requests in flight on it."""

    def __init__(self, target: McpTarget, process: trio.Process) -> None:
        self.target = target
        self.process = process
        self.pending: dict[Any, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.listeners: set[trio.MemorySendChannel[dict[str, Any]]] = set()
        self.exited: str | None = None
        self.used = trio.current_time()
        self.lock = trio.Lock()

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
            self.exited = f"its process exited (code {code})"
            for channel in [*self.pending.values(), *self.listeners]:
                channel.close()

    def _deliver(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            return  # a server's stray output: not a message
        if not isinstance(message, dict):
            return
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


class StdioReply:
    """A stdio target's answer to one message, shaped as ``upstream.TargetReply``: the messages the
    child writes while the request is in flight (progress, logs, its own requests), then its answer."""

    streamed = True

    def __init__(self, process: StdioProcess, handle: str, id: Any) -> None:
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
        raise TargetFailure(self.process.exited or "its process ended the call")

    async def aclose(self) -> None:
        self.process.pending.pop(self.id, None)
        self.process.listeners.discard(self.inbox_send)
        self.inbox_send.close()
        await trio.lowlevel.checkpoint()


class StdioPool:
    """The stdio processes of one gateway process, by handle; ``run`` owns them."""

    def __init__(self) -> None:
        self.processes: dict[str, StdioProcess] = {}
        self._nursery: trio.Nursery | None = None

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

    async def start(self, target: McpTarget) -> str:
        """A new process for ``target``; its handle."""
        nursery = self._nursery
        if nursery is None:
            raise TargetFailure("stdio targets run only inside a gateway (no process nursery)")
        env = {**os.environ, **dict(target.env)}
        try:
            process = await trio.lowlevel.open_process([target.cmd, *target.args], stdin=subprocess.PIPE,
                                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        except OSError as exc:
            raise TargetFailure(f"cannot start {target.cmd!r}: {exc.strerror or exc}") from None
        child = StdioProcess(target, process)
        handle = f"stdio-{secrets.token_urlsafe(12)}"
        self.processes[handle] = child
        nursery.start_soon(self._own, handle, child)
        return handle

    async def _own(self, handle: str, child: StdioProcess) -> None:
        try:
            await child.read()
        finally:
            self.processes.pop(handle, None)
            if child.process.returncode is None:
                child.process.kill()
                with trio.CancelScope(shield=True):
                    await child.process.wait()

    def get(self, target: McpTarget, handle: str | None) -> StdioProcess:
        child = self.processes.get(handle or "")
        if child is None or child.target.name != target.name:
            raise TargetFailure("its stdio process is not running on this gateway process (ended, or the "
                                "session began on another replica)")
        if child.exited is not None:
            raise TargetFailure(child.exited)
        return child

    def stop(self, handle: str) -> None:
        child = self.processes.pop(handle, None)
        if child is not None and child.process.returncode is None:
            child.process.terminate()

    async def post(self, target: McpTarget, message: dict[str, Any], handle: str | None) -> StdioReply:
        """Send ``message`` to the session's process (``initialize``: to a new one)."""
        if message.get("method") == "initialize" and handle is None:
            handle = await self.start(target)
        child = self.get(target, handle)
        assert handle is not None
        id = message.get("id") if "method" in message else None
        reply = StdioReply(child, handle, id)
        try:
            await child.send(message)
        except TargetFailure:
            await reply.aclose()
            raise
        return reply
