"""``stdio`` targets: MCP servers the gateway starts as child processes, one per client session,
in its root nursery; ended with the session, started again by the next one."""

from __future__ import annotations

import sys

import pytest
import trio
from mcp.shared.exceptions import MCPError

from tests.conftest import free_port, start_gateway, start_routes
from tests.mcp_helpers import SERVERS, mcp_client, mcp_servers, rpc

ROUTE = """
- name: tools
  matches: [{{path: {{pathPrefix: /mcp}}}}]
  backends:
  - mcp:
      targets:
      - name: math
        stdio: {{cmd: "{python}", args: ["{servers}", math, --stdio]}}
      - {{name: text, mcp: {{host: "{text}"}}}}
"""

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "raw", "version": "1"}}}


async def until(condition) -> None:
    with trio.fail_after(15):
        while not condition():
            await trio.sleep(0.02)


async def test_a_stdio_target_beside_an_http_one_started_and_ended_with_the_session(nursery):
    async with mcp_servers("text") as (text,):
        gw = await start_routes(nursery, ROUTE, port=free_port(), python=sys.executable, servers=SERVERS,
                                text=text.url)
        pool = gw.info.runtime.mcp.connections
        async with mcp_client(gw.url + "/mcp") as session:
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["math_add", "math_slow_count", "text_echo", "text_shout"]
            assert (await session.call_tool("math_add", {"a": 4, "b": 5})).structured_content == {"result": 9}
            progress: list[float] = []

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append(done)

            result = await session.call_tool("math_slow_count", {"n": 2}, progress_callback=on_progress)
            assert result.structured_content == {"result": "counted to 2"} and progress == [1, 2]
            [first] = pool.processes.values()
            # the process dies: its calls fail naming the target, the http target keeps serving
            first.process.kill()
            await until(lambda: first.exited is not None)
            with pytest.raises(MCPError) as raised:
                await session.call_tool("math_add", {"a": 1, "b": 1})
            assert raised.value.error.message.startswith("MCP target 'math' failed:")
            assert (await session.call_tool("text_echo", {"text": "ok"})).structured_content == {"result": "ok"}
        # a new session starts a new process; ending the session (the SDK sends DELETE) ends it
        async with mcp_client(gw.url + "/mcp") as session:
            assert (await session.call_tool("math_add", {"a": 1, "b": 2})).structured_content == {"result": 3}
            [second] = pool.processes.values()
            assert second is not first
        await until(lambda: second.process.returncode is not None)
        assert not pool.processes


async def test_a_stdio_session_elsewhere_fails_naming_the_target_and_shutdown_ends_the_processes(nursery):
    key = "7" * 64
    async with mcp_servers("text") as (text,):
        gateways = []
        for _ in range(2):
            routes = ROUTE.format(python=sys.executable, servers=SERVERS, text=text.url)
            body = "\n".join("    " + line for line in routes.strip("\n").splitlines())
            config = (f"config:\n  session: {{key: '{key}'}}\nbinds:\n- port: {free_port()}\n  listeners:\n"
                      f"  - routes:\n{body}\n")
            gateways.append(await start_gateway(nursery, config.replace("{", "{{").replace("}", "}}")))
        first, second = gateways
        r = await rpc(first.url + "/mcp", INITIALIZE)
        session = r.headers["mcp-session-id"]
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "math_add",
                                                                             "arguments": {"a": 1, "b": 1}}}
        assert "result" in (await rpc(first.url + "/mcp", call, session=session)).text
        # the http target's session moves; the stdio process does not
        r = await rpc(second.url + "/mcp", call, session=session)
        assert "its stdio process is not running on this gateway process" in r.json()["error"]["message"]
        assert "MCP target 'math' failed" in r.json()["error"]["message"]
        echo = {**call, "params": {"name": "text_echo", "arguments": {"text": "moved"}}}
        assert "moved" in (await rpc(second.url + "/mcp", echo, session=session)).text
        [process] = first.info.runtime.mcp.connections.processes.values()
        first.info.shutdown.set()
        await until(lambda: process.process.returncode is not None)


SSE_ROUTE = """
- name: tools
  matches: [{{path: {{pathPrefix: /mcp}}}}]
  backends:
  - mcp:
      targets:
      - {{name: math, mcp: {{host: "{math}"}}}}
      - {{name: text, sse: {{host: "{text}"}}}}
"""


async def test_an_sse_target_speaks_the_older_transport_behind_the_same_endpoint(nursery):
    async with mcp_servers("math", "text/sse") as (math, text):
        assert text.url.endswith("/sse")
        gw = await start_routes(nursery, SSE_ROUTE, port=free_port(), math=math.url, text=text.url)
        pool = gw.info.runtime.mcp.connections
        async with mcp_client(gw.url + "/mcp") as session:
            names = [t.name for t in (await session.list_tools()).tools]
            assert names == ["math_add", "math_slow_count", "text_echo", "text_shout"]
            assert (await session.call_tool("text_shout", {"text": "sse"})).structured_content == {"result": "SSE"}
            greeting = await session.get_prompt("text_greet", {"name": "Ada"})
            assert greeting.messages[0].content.text == "Hello, Ada!"
            [stream] = pool.processes.values()
            assert stream.endpoint.startswith(text.url.removesuffix("/sse") + "/messages/")
            text.kill()  # the server goes: its calls fail naming it, the other target serves
            await until(lambda: stream.exited is not None)
            with pytest.raises(MCPError) as raised:
                await session.call_tool("text_echo", {"text": "x"})
            assert raised.value.error.message.startswith("MCP target 'text' failed: its event stream")
            assert (await session.call_tool("math_add", {"a": 1, "b": 1})).structured_content == {"result": 2}
        await until(lambda: not pool.processes)
