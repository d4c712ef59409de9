"""Per-tool budgets: the route's remoteRateLimit descriptors and authorization rules see CEL ``mcp``
(the JSON-RPC call is read before the route phase), against `trioproxy ratelimit-server`."""

from __future__ import annotations

from tests.conftest import free_port, start_routes
from tests.mcp_helpers import mcp_servers, rpc
from tests.rls_helpers import ratelimit_server

RLS = """
domain: mcp
descriptors:
  - key: tool
    value: add
    rate_limit: {unit: hour, requests_per_unit: 2}
"""

ROUTE = """
- name: tools
  matches: [{{path: {{pathPrefix: /mcp}}}}]
  policies:
    remoteRateLimit:
      host: "{rls}"
      domain: mcp
      descriptors:
      - entries: [{{key: tool, value: 'mcp.tool.name'}}]
    authorization:
      rules:
      - {{deny: 'has(mcp.tool) && mcp.tool.target == "text" && mcp.arguments.text == "stop"'}}
  backends:
  - mcp:
      targets:
      - {{name: math, mcp: {{host: "{math}"}}}}
      - {{name: text, mcp: {{host: "{text}"}}}}
"""

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "raw", "version": "1"}}}


def call(id: int, name: str, arguments: dict) -> dict:
    return {"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


async def test_a_budget_per_tool_and_a_rule_over_arguments_in_the_route_phase(nursery, tmp_path):
    config = tmp_path / "rls.yaml"
    config.write_text(RLS)
    with ratelimit_server(config, "--store", "memory") as server:
        async with mcp_servers("math", "text") as (math, text):
            gw = await start_routes(nursery, ROUTE, port=free_port(), rls=server.target, math=math.url,
                                    text=text.url)
            url = gw.url + "/mcp"
            r = await rpc(url, INITIALIZE)  # not a tool call: no descriptor, no budget spent
            session = r.headers["mcp-session-id"]
            answers = [await rpc(url, call(i, "math_add", {"a": i, "b": 1}), session=session) for i in range(3)]
            assert [a.status_code for a in answers] == [200, 200, 429]
            assert answers[2].text == "rate limit exceeded"
            # another tool has no budget of its own: unlimited
            for i in range(4):
                assert "HI" in (await rpc(url, call(10 + i, "text_shout", {"text": "hi"}), session=session)).text
            # the route's authorization reads the call's arguments
            r = await rpc(url, call(20, "text_echo", {"text": "stop"}), session=session)
            assert (r.status_code, r.text) == (403, "authorization failed")
            assert "go" in (await rpc(url, call(21, "text_echo", {"text": "go"}), session=session)).text
