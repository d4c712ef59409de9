"""Two tiny MCP servers (the official SDK's MCPServer, formerly FastMCP) over Streamable HTTP.

    python servers.py math [--port 8001]    # tools add, slow_count; prompt review; resource math://pi
    python servers.py text [--port 8002]    # tools echo, shout; prompt greet
    python servers.py math --stdio          # the same over stdin/stdout (a gateway `stdio` target)
    python servers.py text --sse            # the older HTTP+SSE transport at /sse (an `sse` target)
    python servers.py ask                   # tool greet_me, which asks the client for a name (elicitation)

Each prints ``listening on http://127.0.0.1:<port>/mcp`` once it accepts connections (``--port 0``
picks a free port: the tests run them so). The gateway in config.yaml puts both behind one endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel


def math_server() -> MCPServer:
    server = MCPServer("math")

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    async def slow_count(n: int, ctx: Context) -> str:
        """Count to n, reporting progress on the way."""
        for i in range(n):
            await ctx.report_progress(i + 1, n)
        return f"counted to {n}"

    @server.prompt()
    def review(code: str) -> str:
        """Ask for a review of some code."""
        return f"Please review this code:\n{code}"

    @server.resource("math://pi")
    def pi() -> str:
        """The first digits of pi."""
        return "3.14159"

    return server


def text_server() -> MCPServer:
    server = MCPServer("text")

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def shout(text: str) -> str:
        """Return the text in capitals."""
        return text.upper()

    @server.prompt()
    def greet(name: str) -> str:
        """A greeting."""
        return f"Hello, {name}!"

    return server


def ask_server() -> MCPServer:
    server = MCPServer("ask")

    class Name(BaseModel):
        name: str

    @server.tool()
    async def announce(ctx: Context) -> str:
        """Tell every listener the tool list changed (a notification outside any call's stream)."""
        await ctx.session.send_tool_list_changed()
        return "announced"

    @server.tool()
    async def greet_me(ctx: Context) -> str:
        """Ask the user for a name (an elicitation: the server's own request to the client)."""
        answer = await ctx.elicit("What is your name?", Name)
        return f"Hello, {answer.data.name}!" if answer.action == "accept" else "no name given"

    return server


async def serve(server: MCPServer, port: int, sse: bool = False) -> None:
    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    sock.set_inheritable(True)
    config = Config()
    config.bind = [f"fd://{sock.fileno()}"]
    config.accesslog = None
    config.errorlog = None
    app = server.sse_app() if sse else server.streamable_http_app()

    async def announce() -> None:
        await asyncio.sleep(0)
        print(f"listening on http://127.0.0.1:{sock.getsockname()[1]}/{'sse' if sse else 'mcp'}", flush=True)

    asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(announce()))
    await hypercorn_serve(app, config)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("server", choices=["math", "text", "ask"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stdio", action="store_true", help="speak MCP on stdin/stdout instead of HTTP")
    parser.add_argument("--sse", action="store_true", help="speak the older HTTP+SSE transport (/sse)")
    args = parser.parse_args(argv)
    server = {"math": math_server, "text": text_server, "ask": ask_server}[args.server]()
    if args.stdio:
        server.run("stdio")
        return
    try:
        asyncio.run(serve(server, args.port, args.sse))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
