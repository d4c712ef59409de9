"""JSON-RPC 2.0 as MCP uses it: message kinds, error objects and the standard codes (pure)."""

from __future__ import annotations

import json
from typing import Any, Literal

__all__ = ["INTERNAL_ERROR", "INVALID_PARAMS", "INVALID_REQUEST", "METHOD_NOT_FOUND", "PARSE_ERROR",
           "SESSION_NOT_FOUND", "JsonRpcError", "error_message", "kind_of", "parse", "result_message"]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: the MCP SDKs' code for an unknown or expired session (answered with HTTP 404)
SESSION_NOT_FOUND = -32001

Kind = Literal["request", "notification", "response"]
Id = str | int | None


class JsonRpcError(Exception):
    """An error answered as a JSON-RPC error object (``id`` null when the request's is unknown)."""

    def __init__(self, code: int, message: str, id: Id = None, *, status: int = 200, denied: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.id = id
        self.status = status  # the HTTP status it is answered with
        self.denied = denied  # mcpAuthorization refused it (answered as unknown; counted as denied)

    def body(self) -> dict[str, Any]:
        return error_message(self.id, self.code, self.message)


def error_message(id: Id, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": id, "error": error}


def result_message(id: Id, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id, "result": result}


def parse(body: bytes) -> dict[str, Any]:
    """One JSON-RPC message from a POST body: -32700 for bad JSON, -32600 for anything that is not a
    single JSON-RPC 2.0 object (batches were removed from MCP in 2025-06-18), both with HTTP 400."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise JsonRpcError(PARSE_ERROR, f"Parse error: {exc}", status=400) from None
    if isinstance(message, list):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: batches are not supported", status=400)
    if not isinstance(message, dict):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: expected a JSON object", status=400)
    id = message.get("id")
    if message.get("jsonrpc") != "2.0":
        raise JsonRpcError(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', _id(id), status=400)
    if id is not None and (isinstance(id, bool) or not isinstance(id, (str, int))):
        raise JsonRpcError(INVALID_REQUEST, "Invalid Request: id must be a string or an integer", status=400)
    kind_of(message)  # raises for a message of no kind
    return message


def _id(value: Any) -> Id:
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def kind_of(message: dict[str, Any]) -> Kind:
    """request (method and id), notification (method, no id) or response (id, result or error)."""
    method = message.get("method")
    if method is not None:
        if not isinstance(method, str) or not method:
            raise JsonRpcError(INVALID_REQUEST, "Invalid Request: method must be a non-empty string",
                               _id(message.get("id")), status=400)
        params = message.get("params")
        if params is not None and not isinstance(params, dict):
            raise JsonRpcError(INVALID_REQUEST, "Invalid Request: params must be an object",
                               _id(message.get("id")), status=400)
        return "request" if "id" in message and message["id"] is not None else "notification"
    if "id" in message and ("result" in message or "error" in message):
        return "response"
    raise JsonRpcError(INVALID_REQUEST, "Invalid Request: neither a request, a notification nor a response",
                       _id(message.get("id")), status=400)
