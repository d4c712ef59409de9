"""MCP test helpers: the example's two MCPServer processes (examples/mcp-auth/servers.py) on free
ports, and the official SDK's client pointed at a gateway."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio

ROOT = Path(__file__).resolve().parent.parent
SERVERS = ROOT / "examples" / "mcp-auth" / "servers.py"


class McpServer:
    """One example server in its own process (the SDK's servers are asyncio programs)."""

    def __init__(self, kind: str, port: int = 0) -> None:
        self.kind = kind
        kind, _, transport = kind.partition("/")  # "text/sse": the older HTTP+SSE transport
        self.process = subprocess.Popen([sys.executable, str(SERVERS), kind, "--port", str(port),
                                         *(["--sse"] if transport == "sse" else [])],
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline() if self.process.stdout else ""
        if not line.startswith("listening on "):
            self.process.kill()
            raise RuntimeError(f"the {kind} MCP server did not start: {line!r}")
        self.url = line.split()[-1]
        self.port = int(self.url.split(":")[2].split("/")[0])

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@asynccontextmanager
async def mcp_servers(*kinds: str) -> AsyncIterator[list[McpServer]]:
    servers = [await trio.to_thread.run_sync(McpServer, kind) for kind in kinds]
    try:
        yield servers
    finally:
        for server in servers:
            server.kill()


@asynccontextmanager
async def mcp_client(url: str, headers: dict[str, str] | None = None, **session_options: Any) -> AsyncIterator[Any]:
    """The SDK's ClientSession over Streamable HTTP, initialized (the legacy handshake the gateway speaks)."""
    import httpx2  # the SDK's own HTTP client package
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with httpx2.AsyncClient(headers=headers or {}, timeout=30) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write, **session_options) as session:
        await session.initialize()
        yield session


async def rpc(url: str, message: dict[str, Any], *, session: str | None = None,
              headers: dict[str, str] | None = None) -> httpx.Response:
    sent = {"accept": "application/json, text/event-stream", **(headers or {})}
    if session is not None:
        sent["mcp-session-id"] = session
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(url, json=message, headers=sent)
