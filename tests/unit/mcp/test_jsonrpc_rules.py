"""The rules of ``mcp/jsonrpc.py`` one by one (issue 35): the standard codes, the error and result
objects a client reads, and for each refused message the exact message, code, HTTP status and the id
the client can match the error to."""

from __future__ import annotations

import pytest

from trioproxy.mcp import jsonrpc as rpc


def test_the_codes_are_json_rpcs_and_the_mcp_sdks():
    assert (rpc.PARSE_ERROR, rpc.INVALID_REQUEST, rpc.METHOD_NOT_FOUND, rpc.INVALID_PARAMS, rpc.INTERNAL_ERROR,
            rpc.SESSION_NOT_FOUND) == (-32700, -32600, -32601, -32602, -32603, -32001)


def test_an_error_keeps_its_fields_and_defaults_to_http_200_not_denied():
    error = rpc.JsonRpcError(rpc.METHOD_NOT_FOUND, "Method not found: x", 7)
    assert (error.code, error.message, error.id, error.status, error.denied) == (-32601, "Method not found: x", 7, 200, False)
    assert str(error) == "Method not found: x"
    assert error.body() == {"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "Method not found: x"}}
    denied = rpc.JsonRpcError(rpc.INVALID_PARAMS, "Unknown tool", "a", status=403, denied=True)
    assert (denied.status, denied.denied) == (403, True)


def test_error_and_result_messages():
    assert rpc.error_message(None, -32603, "boom") == {"jsonrpc": "2.0", "id": None,
                                                       "error": {"code": -32603, "message": "boom"}}
    assert rpc.error_message("x", 1, "m", {"why": 1}) == {"jsonrpc": "2.0", "id": "x",
                                                          "error": {"code": 1, "message": "m", "data": {"why": 1}}}
    assert rpc.error_message(1, 1, "m", 0)["error"]["data"] == 0  # falsy data is still data
    assert rpc.result_message(3, {"tools": []}) == {"jsonrpc": "2.0", "id": 3, "result": {"tools": []}}
    assert rpc.result_message("a", None) == {"jsonrpc": "2.0", "id": "a", "result": None}


@pytest.mark.parametrize("body, message, id", [
    (b"[]", "Invalid Request: batches are not supported", None),
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "x"}]', "Invalid Request: batches are not supported", None),
    (b"3", "Invalid Request: expected a JSON object", None),
    (b'{"jsonrpc": "1.0", "id": "r", "method": "x"}', 'Invalid Request: "jsonrpc" must be "2.0"', "r"),
    (b'{"jsonrpc": "1.0", "id": true, "method": "x"}', 'Invalid Request: "jsonrpc" must be "2.0"', None),
    (b'{"jsonrpc": "1.0", "id": [1], "method": "x"}', 'Invalid Request: "jsonrpc" must be "2.0"', None),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "x"}', "Invalid Request: id must be a string or an integer", None),
    (b'{"jsonrpc": "2.0", "id": 4, "method": 5}', "Invalid Request: method must be a non-empty string", 4),
    (b'{"jsonrpc": "2.0", "id": "m", "method": ""}', "Invalid Request: method must be a non-empty string", "m"),
    (b'{"jsonrpc": "2.0", "id": 5, "method": "x", "params": "p"}', "Invalid Request: params must be an object", 5),
    (b'{"jsonrpc": "2.0", "method": "x", "params": [1]}', "Invalid Request: params must be an object", None),
    (b'{"jsonrpc": "2.0", "id": 6}', "Invalid Request: neither a request, a notification nor a response", 6),
    (b'{"jsonrpc": "2.0", "result": {}}', "Invalid Request: neither a request, a notification nor a response", None),
])
def test_each_refusal_says_why_with_the_requests_id_when_it_has_a_usable_one(body, message, id):
    with pytest.raises(rpc.JsonRpcError) as raised:
        rpc.parse(body)
    error = raised.value
    assert (error.code, error.message, error.id, error.status) == (rpc.INVALID_REQUEST, message, id, 400)
    assert error.body() == {"jsonrpc": "2.0", "id": id, "error": {"code": -32600, "message": message}}


def test_a_parse_error_names_the_decoders_complaint():
    with pytest.raises(rpc.JsonRpcError) as raised:
        rpc.parse(b'{"a": }')
    assert raised.value.message.startswith("Parse error: Expecting value: line 1 column 7")
    assert (raised.value.code, raised.value.id, raised.value.status) == (-32700, None, 400)


def test_kinds_at_their_edges():
    assert rpc.kind_of({"jsonrpc": "2.0", "method": "x", "id": None}) == "notification"  # a null id is no id
    assert rpc.kind_of({"jsonrpc": "2.0", "method": "x", "id": 0}) == "request"
    assert rpc.kind_of({"jsonrpc": "2.0", "method": "x", "id": "", "params": {}}) == "request"
    assert rpc.kind_of({"jsonrpc": "2.0", "id": None, "error": {"code": 1}}) == "response"
    assert rpc.parse(b'{"jsonrpc": "2.0", "id": 0, "method": "x", "params": null}')["id"] == 0
