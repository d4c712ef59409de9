"""Exchange's reading of the request head (trioproxy/proxy/exchange.py): the host it routes on and
whether the head declares a body, both taken in one pass over the headers."""

from __future__ import annotations

import pytest

from trioproxy.proxy.exchange import Exchange


def exchange(*headers: tuple[bytes, bytes]) -> Exchange:
    scope = {"type": "http", "method": "POST", "path": "/", "headers": list(headers)}
    return Exchange(scope, None, None, 0.0)  # type: ignore[arg-type]


def test_the_first_host_header_counts_without_its_port_and_lowercased() -> None:
    assert exchange((b"host", b"API.test:8443"), (b"host", b"other")).host == "api.test"
    assert exchange((b"host", b""), (b"host", b"other")).host == ""
    assert exchange((b"x-a", b"1")).host == ""


@pytest.mark.parametrize("headers, expected", [
    ([(b"content-length", b"0")], True),
    ([(b"host", b"a"), (b"transfer-encoding", b"chunked")], True),
    ([(b"host", b"a"), (b"x-content-length", b"5")], False),
    ([], False),
])
def test_a_body_is_declared_by_content_length_or_transfer_encoding(headers, expected) -> None:
    assert exchange(*headers).has_body() is expected
