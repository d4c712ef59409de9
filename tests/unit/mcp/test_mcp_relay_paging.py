"""Listings across targets page by page: the gateway's cursor holds each target's own, and the next
page asks only the targets that had more (the relay driven against in-memory targets)."""

from __future__ import annotations

import json
from typing import Any

from trioproxy.config.model import McpBackend, McpTarget
from trioproxy.mcp.relay import McpRelay, McpRequest
from trioproxy.mcp.session import SessionCodec

PAGES = {"http://math/mcp": [["add", "sub"], ["mul"]], "http://text/mcp": [["echo"]]}


class Reply:
    streamed = False

    def __init__(self, message: dict[str, Any]) -> None:
        self.message = message
        self.session_id = None

    async def messages(self):
        yield self.message

    async def aclose(self) -> None:
        pass


class Targets:
    """Streamable HTTP targets in memory: each answers tools/list from its pages."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Any]] = []

    async def post(self, url, message, *, session_id, version, headers=()):
        cursor = (message.get("params") or {}).get("cursor")
        self.asked.append((url, cursor))
        index = int(cursor or 0)
        result: dict[str, Any] = {"tools": [{"name": n, "inputSchema": {}} for n in PAGES[url][index]]}
        if index + 1 < len(PAGES[url]):
            result["nextCursor"] = str(index + 1)
        return Reply({"jsonrpc": "2.0", "id": message["id"], "result": result})


async def test_a_listing_pages_through_every_target_and_asks_only_those_with_more():
    codec = SessionCodec(b"k" * 32)
    targets = Targets()
    spec = McpBackend((McpTarget("math", "mcp", url="http://math/mcp"), McpTarget("text", "mcp", url="http://text/mcp")))
    relay = McpRelay(spec, codec, targets)  # type: ignore[arg-type]
    session = codec.encode({"math": ("m", "2025-06-18"), "text": ("t", "2025-06-18")}).encode()
    calls = []

    async def listing(cursor: str | None) -> dict[str, Any]:
        params = {"cursor": cursor} if cursor is not None else {}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params}).encode()
        answer = await relay.handle(McpRequest("POST", [(b"mcp-session-id", session)], body, {}), calls.append)
        return json.loads(answer.body)

    first = (await listing(None))["result"]
    assert [t["name"] for t in first["tools"]] == ["math_add", "math_sub", "text_echo"]
    assert sorted(targets.asked) == [("http://math/mcp", None), ("http://text/mcp", None)]
    targets.asked.clear()
    second = (await listing(first["nextCursor"]))["result"]
    assert [t["name"] for t in second["tools"]] == ["math_mul"] and "nextCursor" not in second
    assert targets.asked == [("http://math/mcp", "1")]  # text had no more: not asked again
    bad = await listing("not-a-cursor")
    assert bad["error"]["code"] == -32602 and "unknown cursor" in bad["error"]["message"]
    assert [c.result for c in calls] == ["ok", "ok", "error"]
