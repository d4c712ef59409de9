"""MCP behind the gateway (docs/mcp.md): JSON-RPC over Streamable HTTP, several servers multiplexed
behind one endpoint, sessions carried in a signed session id, tool-level authorization.

A layer beside ``trioproxy.llm``: it imports config, policies, telemetry and the base modules, never
the proxy; ``proxy/mcp_stage.py`` adapts a request (``Exchange``) to ``relay.McpRelay``.
"""
