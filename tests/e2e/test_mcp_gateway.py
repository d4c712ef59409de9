"""The ``mcp`` backend with the official MCP SDK on both sides: two MCPServer processes
(examples/mcp-auth/servers.py) behind one gateway route, the SDK's Streamable HTTP client in front."""

from __future__ import annotations

import httpx
import pytest
import trio
from mcp.shared.exceptions import MCPError

from tests.conftest import free_port, start_routes
from tests.mcp_helpers import mcp_client, mcp_servers, rpc
from tests.workers_helpers import start_workers

KEY = "5" * 64

ROUTE = """
- name: tools
  matches: [{{path: {{pathPrefix: /mcp}}}}]
  backends:
  - mcp:
      failureMode: {failure}
      targets:
      - {{name: math, mcp: {{host: "{math}"}}}}
      - {{name: text, mcp: {{host: "{text}"}}}}
"""

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "raw", "version": "1"}}}


async def gateway_for(nursery, math, text, failure="failClosed"):
    return await start_routes(nursery, ROUTE, port=free_port(), math=math.url, text=text.url, failure=failure)


async def test_two_servers_behind_one_endpoint_merged_prefixed_and_routed(nursery):
    async with mcp_servers("math", "text") as (math, text):
        gw = await gateway_for(nursery, math, text)
        async with mcp_client(gw.url + "/mcp") as session:
            tools = await session.list_tools()
            assert [t.name for t in tools.tools] == ["math_add", "math_slow_count", "text_echo", "text_shout"]
            assert (await session.call_tool("math_add", {"a": 2, "b": 3})).structured_content == {"result": 5}
            assert (await session.call_tool("text_shout", {"text": "hi"})).structured_content == {"result": "HI"}
            prompts = await session.list_prompts()
            assert [p.name for p in prompts.prompts] == ["math_review", "text_greet"]
            greeting = await session.get_prompt("text_greet", {"name": "Ada"})
            assert greeting.messages[0].content.text == "Hello, Ada!"
            resources = await session.list_resources()
            assert [str(r.uri) for r in resources.resources] == ["math+math://pi"]
            read = await session.read_resource("math+math://pi")
            assert (str(read.contents[0].uri), read.contents[0].text) == ("math+math://pi", "3.14159")
            # the target's progress notifications reach the client while the tool runs
            progress: list[float] = []

            async def on_progress(done: float, total: float | None, message: str | None) -> None:
                progress.append(done)

            result = await session.call_tool("math_slow_count", {"n": 3}, progress_callback=on_progress)
            assert result.structured_content == {"result": "counted to 3"}
            assert progress == [1, 2, 3]


async def test_bad_input_is_a_json_rpc_error_naming_it(nursery):
    async with mcp_servers("math", "text") as (math, text):
        gw = await gateway_for(nursery, math, text)
        url = gw.url + "/mcp"
        async with httpx.AsyncClient() as client:
            r = await client.post(url, content=b"{not json", headers={"content-type": "application/json"})
        assert (r.status_code, r.json()["error"]["code"]) == (400, -32700)
        r = await rpc(url, {"id": 1, "method": "tools/list"})
        assert (r.status_code, r.json()["error"]["code"]) == (400, -32600)
        r = await rpc(url, [INITIALIZE])
        assert (r.status_code, r.json()["error"]["code"]) == (400, -32600)
        r = await rpc(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session="forged.session")
        assert (r.status_code, r.json()["error"]["code"]) == (404, -32001)
        r = await rpc(url, {"jsonrpc": "2.0", "id": 3, "method": "server/discover"})  # a modern client's probe
        assert (r.status_code, r.json()["error"]["code"]) == (200, -32601)
        async with mcp_client(url) as session:
            with pytest.raises(MCPError) as raised:
                await session.call_tool("nope_add", {"a": 1, "b": 2})
            assert (raised.value.error.code, raised.value.error.message) == (-32602, "Unknown tool: nope_add")
            with pytest.raises(MCPError) as raised:
                await session.call_tool("add", {"a": 1, "b": 2})  # unprefixed: not a name of this endpoint
            assert raised.value.error.message == "Unknown tool: add"


async def test_a_target_killed_mid_session_fails_its_calls_and_the_other_keeps_serving(nursery):
    async with mcp_servers("math", "text") as (math, text):
        closed = await gateway_for(nursery, math, text)
        opened = await start_routes(nursery, ROUTE, port=free_port(), math=math.url, text=text.url,
                                    failure="failOpen")
        async with mcp_client(closed.url + "/mcp") as strict, mcp_client(opened.url + "/mcp") as lenient:
            assert len((await strict.list_tools()).tools) == 4
            assert len((await lenient.list_tools()).tools) == 4
            text.kill()
            for session in (strict, lenient):
                assert (await session.call_tool("math_add", {"a": 1, "b": 1})).structured_content == {"result": 2}
                with pytest.raises(MCPError) as raised:
                    await session.call_tool("text_echo", {"text": "x"})
                assert raised.value.error.message.startswith("MCP target 'text' failed: unreachable")
            # failOpen: the listing leaves the dead target out; failClosed: it fails, naming it
            assert [t.name for t in (await lenient.list_tools()).tools] == ["math_add", "math_slow_count"]
            with pytest.raises(MCPError) as raised:
                await strict.list_tools()
            assert raised.value.error.message.startswith("MCP target 'text' failed: unreachable")


async def test_a_session_continues_on_a_second_gateway_process_with_the_same_key(tmp_path):
    async with mcp_servers("math", "text") as (math, text):
        gateways = []
        for name, key in (("a", KEY), ("b", KEY), ("c", "6" * 64)):
            (tmp_path / name).mkdir()
            port = free_port()
            routes = "\n".join("      " + line for line in ROUTE.format(
                failure="failClosed", math=math.url, text=text.url).strip("\n").splitlines())
            config = f"config:\n  session: {{key: '{key}'}}\nbinds:\n- port: {port}\n  listeners:\n  - routes:\n{routes}\n"
            gateways.append(await start_workers(tmp_path / name, config, workers=1, bind_port=port))
        try:
            first, second, other = (gw.url + "/mcp" for gw in gateways)
            r = await rpc(first, INITIALIZE)
            assert r.status_code == 200, r.text
            session = r.headers["mcp-session-id"]
            assert r.json()["result"]["capabilities"]["tools"] is not None
            r = await rpc(first, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session=session)
            assert r.status_code == 202
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "text_shout", "arguments": {"text": "again"}}}
            r = await rpc(second, call, session=session, headers={"mcp-protocol-version": "2025-06-18"})
            assert r.status_code == 200, r.text
            assert "AGAIN" in r.text
            r = await rpc(second, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, session=session)
            assert len(r.json()["result"]["tools"]) == 4
            # a replica with another key does not take the session: 404, the client starts over
            r = await rpc(other, call, session=session)
            assert (r.status_code, r.json()["error"]["code"]) == (404, -32001)
        finally:
            for gw in gateways:
                gw.stop()


MODES = """
- name: tools
  matches: [{{path: {{pathPrefix: /mcp}}}}]
  backends:
  - mcp:
      statefulMode: {stateful}
      prefixMode: {prefix}
      failureMode: {failure}
      targets:
      - {{name: math, mcp: {{host: "{math}"}}}}
      - {{name: text, mcp: {{host: "{text}"}}}}
"""


async def test_stateless_mode_gives_no_session_and_prefix_never_finds_the_owner_by_listing(nursery):
    async with mcp_servers("math", "text") as (math, text):
        gw = await start_routes(nursery, MODES, port=free_port(), math=math.url, text=text.url, stateful="stateless",
                                prefix="never", failure="failClosed")
        url = gw.url + "/mcp"
        r = await rpc(url, INITIALIZE)
        assert r.status_code == 200 and "mcp-session-id" not in r.headers
        r = await rpc(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert [t["name"] for t in r.json()["result"]["tools"]] == ["add", "slow_count", "echo", "shout"]
        r = await rpc(url, {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                            "params": {"name": "shout", "arguments": {"text": "never"}}})
        assert "NEVER" in r.text
        r = await rpc(url, {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "nope"}})
        assert r.json()["error"] == {"code": -32602, "message": "Unknown tool: nope"}
        async with mcp_client(url) as session:  # the SDK is content without a session
            assert (await session.call_tool("add", {"a": 1, "b": 1})).structured_content == {"result": 2}


async def test_a_target_down_at_initialize_fails_closed_naming_it_or_is_left_out_failing_open(nursery):
    async with mcp_servers("math", "text") as (math, text):
        text.kill()
        closed = await start_routes(nursery, MODES, port=free_port(), math=math.url, text=text.url,
                                    stateful="stateful", prefix="conditional", failure="failClosed")
        r = await rpc(closed.url + "/mcp", INITIALIZE)
        assert r.json()["error"]["code"] == -32603
        assert r.json()["error"]["message"].startswith("MCP target 'text' failed: unreachable")
        opened = await start_routes(nursery, MODES, port=free_port(), math=math.url, text=text.url,
                                    stateful="stateful", prefix="conditional", failure="failOpen")
        async with mcp_client(opened.url + "/mcp") as session:
            assert [t.name for t in (await session.list_tools()).tools] == ["math_add", "math_slow_count"]
            with pytest.raises(MCPError) as raised:
                await session.call_tool("text_echo", {"text": "x"})
            assert raised.value.error.message.startswith("MCP target 'text' is unavailable")


async def test_a_servers_own_request_reaches_the_client_and_its_answer_the_server(nursery):
    from mcp.types import ElicitResult

    async with mcp_servers("math", "ask") as (math, ask):
        gw = await start_routes(nursery, ROUTE.replace("name: text", "name: ask"), port=free_port(), math=math.url,
                                text=ask.url, failure="failClosed")
        asked: list[str] = []

        async def answer(context, params) -> ElicitResult:
            asked.append(params.message)
            return ElicitResult(action="accept", content={"name": "Ada"})

        async with mcp_client(gw.url + "/mcp", elicitation_callback=answer) as session:
            result = await session.call_tool("ask_greet_me", {})
            assert result.structured_content == {"result": "Hello, Ada!"}
            assert asked == ["What is your name?"]


async def test_workers_share_one_session_key_when_the_config_names_none(tmp_path):
    async with mcp_servers("math", "text") as (math, text):
        port = free_port()
        routes = "\n".join("      " + line for line in ROUTE.format(
            failure="failClosed", math=math.url, text=text.url).strip("\n").splitlines())
        config = f"binds:\n- port: {port}\n  listeners:\n  - routes:\n{routes}\n"
        gw = await start_workers(tmp_path, config, workers=2, bind_port=port)
        try:
            url = gw.url + "/mcp"
            session = (await rpc(url, INITIALIZE)).headers["mcp-session-id"]
            async def call(i: int) -> None:
                r = await rpc(url, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                    "params": {"name": "math_add", "arguments": {"a": i, "b": 0}}}, session=session)
                assert r.status_code == 200 and f'"text":"{i}"' in r.text.replace(" ", ""), r.text

            # a new connection each, several at once: the workers accept from one queue, and one idle
            # worker can win every sequential accept, so batches go at once until both served some
            for batch in range(10):
                async with trio.open_nursery() as calls:
                    for i in range(batch * 12, batch * 12 + 12):
                        calls.start_soon(call, i)
                served = await gw.per_worker()
                if all(n > 0 for n in served.values()) and len(served) == 2:
                    break
            assert len([n for n in served.values() if n > 0]) == 2, served
        finally:
            gw.stop()


async def test_what_a_server_says_outside_any_call_reaches_the_client_on_its_get_stream(nursery):
    async with mcp_servers("math", "ask") as (math, ask):
        gw = await start_routes(nursery, ROUTE.replace("name: text", "name: ask"), port=free_port(), math=math.url,
                                text=ask.url, failure="failClosed")
        heard: list[str] = []
        changed = trio.Event()

        async def on_message(message) -> None:
            method = getattr(getattr(message, "root", message), "method", None) or getattr(message, "method", None)
            heard.append(str(method))
            if method == "notifications/tools/list_changed":
                changed.set()

        async with mcp_client(gw.url + "/mcp", message_handler=on_message) as session:
            assert (await session.call_tool("ask_announce", {})).structured_content == {"result": "announced"}
            with trio.fail_after(10):
                await changed.wait()
