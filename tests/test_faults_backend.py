"""Fault suite, backend rows (docs/reliability.md rows 4 and 9): backends that hang, answer garbage,
and clients whose request body stops arriving."""

from __future__ import annotations

from trioproxy.errors import BadUpstreamResponse, plain_text

# Row 9: error bodies are plain text ---------------------------------------------------------------


async def test_row9_a_502_body_holds_no_python_repr(gateway):
    async with gateway.client() as client:
        response = await client.get("/garbage")  # the echo backend answers "this is not http"
    assert response.status_code == 502
    assert response.text == "invalid upstream response: illegal status line: 'this is not http'"


def test_row9_plain_text_unquotes_byte_reprs():
    assert plain_text("bad: bytearray(b'a b') and b\"c\"") == "bad: 'a b' and 'c'"
    assert BadUpstreamResponse("x: bytearray(b'\\x00')").message == "x: '\\x00'"
    assert plain_text("no bytes here, it's fine") == "no bytes here, it's fine"
