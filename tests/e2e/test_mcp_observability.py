"""Each JSON-RPC call through an ``mcp`` backend in the trace (event ``mcp``), the access log
(``mcp.*`` fields) and the metrics (``trioproxy_mcp_calls_total``)."""

from __future__ import annotations

import httpx
import pytest
import trio
from mcp.shared.exceptions import MCPError
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port, start_routes
from tests.e2e.test_trace import watch
from tests.mcp_helpers import mcp_client, mcp_servers

ROUTE = """
- name: tools
  matches: [{{path: {{pathPrefix: /mcp}}}}]
  policies:
    mcpAuthorization:
      rules: ['!has(mcp.tool) || mcp.tool.name != "shout"']
  backends:
  - mcp:
      targets:
      - {{name: math, mcp: {{host: "{math}"}}}}
      - {{name: text, mcp: {{host: "{text}"}}}}
"""


def requests_of(lines: list[dict]) -> list[dict]:
    return [line for line in lines if line["message"] == "request"]


async def test_a_tool_call_in_the_trace_the_access_log_and_the_metrics(nursery, log_lines):
    async with mcp_servers("math", "text") as (math, text):
        gw = await start_routes(nursery, ROUTE, port=free_port(), math=math.url, text=text.url)
        async with mcp_client(gw.url + "/mcp") as session:
            reader = await watch(nursery, gw, 'request.method == "POST" && "mcp-session-id" in request.headers')
            assert (await session.call_tool("math_add", {"a": 1, "b": 2})).structured_content == {"result": 3}
            events = await reader.events()
            [event] = [e for e in events if e["message"]["type"] == "mcp"]
            assert {k: v for k, v in event["message"].items() if k != "duration"} == {
                "type": "mcp", "method": "tools/call", "tool": "add", "target": "math", "result": "ok",
                "error": None}
            assert event["message"]["duration"].endswith(("us", "ms", "s"))
            assert event["severity"] == "success" and 0 <= event["eventStart"] <= event["eventEnd"]
            types = [e["message"]["type"] for e in events]
            assert types.index("backendCallStart") < types.index("mcp") < types.index("requestFinished")
            with pytest.raises(MCPError):
                await session.call_tool("text_shout", {"text": "no"})
        with trio.fail_after(10):  # each line is written once its request ended
            while not any(line.get("mcp.result") == "denied" for line in requests_of(await log_lines())):
                await trio.sleep(0.05)
        lines = requests_of(await log_lines())
        call = next(line for line in lines if line.get("mcp.method") == "tools/call" and line["mcp.name"] == "add")
        assert (call["mcp.target"], call["mcp.result"], call["http.status"]) == ("math", "ok", 200)
        denied = next(line for line in lines if line.get("mcp.result") == "denied")
        assert (denied["mcp.name"], denied["mcp.target"]) == ("shout", "text")
        assert any(line.get("mcp.method") == "initialize" for line in lines)
        async with httpx.AsyncClient() as client:
            text_metrics = (await client.get(f"http://{gw.info.stats}/metrics")).text
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(text_metrics) for s in family.samples}
        route = f"default/default/bind/{gw.port}/listener0/default/tools"
        labels = lambda method, target, name, result: tuple(sorted(  # noqa: E731
            {"route": route, "method": method, "target": target, "name": name, "result": result}.items()))
        assert samples[("trioproxy_mcp_calls_total", labels("tools/call", "math", "add", "ok"))] == 1
        assert samples[("trioproxy_mcp_calls_total", labels("tools/call", "text", "shout", "denied"))] == 1
        assert samples[("trioproxy_mcp_calls_total", labels("initialize", "", "", "ok"))] == 1
