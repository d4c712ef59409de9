"""Request smuggling through a real bind, with both HTTP/1.1 parsers of ``frontend/http1.py``: llhttp
(``upstream/wire.py``, the default) and h11 (the fallback, ``TRIOPROXY_HTTP1_PARSER=h11``).

Each case is a request whose framing two HTTP implementations could read differently (RFC 9112
§6.3, §11.2). What must hold for both parsers: the answer is one of the expected refusals, or
(h11's leniencies) the backend got exactly one request whose body is the one reading of it; never
a second request smuggled in the body. With llhttp every case below is refused and nothing reaches
the backend.
"""

from __future__ import annotations

import pytest
import trio

from tests.conftest import free_port, start_routes
from tests.fault_helpers import RecordingBackend, raw_exchange, status_line
from trioproxy.frontend import http1

SMUGGLED = b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"

#: name -> (head lines after the request line and Host, body bytes, llhttp's answer, h11's answer:
#: a status, "forward" when h11 reads it one consistent way and forwards it, or "hang" when it
#: waits for the body a huge length announced)
CASES = {
    "CL.TE": (b"Content-Length: 6\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n" + SMUGGLED, 400, 400),
    "TE.CL": (b"Transfer-Encoding: chunked\r\nContent-Length: 3\r\n", b"8\r\n" + SMUGGLED[:8] + b"\r\n0\r\n\r\n", 400, 400),
    "two different Content-Length": (b"Content-Length: 0\r\nContent-Length: 37\r\n", SMUGGLED, 400, 400),
    "two equal Content-Length": (b"Content-Length: 2\r\nContent-Length: 2\r\n", b"ab", 400, "forward"),
    "comma-joined Content-Length": (b"Content-Length: 0, 37\r\n", SMUGGLED, 400, 400),
    "comma-joined equal Content-Length": (b"Content-Length: 2, 2\r\n", b"ab", 400, "forward"),
    "signed Content-Length": (b"Content-Length: +2\r\n", b"ab", 400, 400),
    "Content-Length past 2^64": (b"Content-Length: 18446744073709551617\r\n", b"ab", 400, "hang"),
    "obs-fold": (b"X-Folded: a\r\n b\r\nContent-Length: 2\r\n", b"ab", 400, "forward"),
    "obs-fold into Transfer-Encoding": (b"Transfer-Encoding:\r\n chunked\r\nContent-Length: 2\r\n", b"ab", 400, 400),
    "bare LF ends a header": (b"X-A: 1\nContent-Length: 2\r\n", b"ab", 400, "forward"),
    "bare CR in a header": (b"X-A: 1\rContent-Length: 37\r\nContent-Length: 2\r\n", b"ab", 400, 400),
    "space before the colon": (b"Transfer-Encoding : chunked\r\nContent-Length: 2\r\n", b"ab", 400, 400),
    "NUL in a value": (b"X-A: a\x00b\r\nContent-Length: 2\r\n", b"ab", 400, 400),
    "Transfer-Encoding: chunked, gzip": (b"Transfer-Encoding: chunked, gzip\r\n", b"0\r\n\r\n", 501, 501),
    "Transfer-Encoding: gzip, chunked": (b"Transfer-Encoding: gzip, chunked\r\n", b"0\r\n\r\n", 501, 501),
    "Transfer-Encoding: xchunked": (b"Transfer-Encoding: xchunked\r\n", b"0\r\n\r\n", 501, 501),
    "Transfer-Encoding: identity": (b"Transfer-Encoding: identity\r\nContent-Length: 2\r\n", b"ab", 501, 501),
    "Transfer-Encoding twice": (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n", 501, 501),
}

#: chunked bodies: the head is fine, the body is not (llhttp's answer, h11's: a status, or "hang"
#: when h11 waits for the bytes a huge chunk size announced)
BODIES = {
    "chunk size past 2^64": (b"10000000000000001\r\nx\r\n0\r\n\r\n", 400, "hang"),
    "chunk size of 17 hex digits": (b"fffffffffffffffff\r\nx\r\n0\r\n\r\n", 400, "hang"),
    "bare LF after the chunk size": (b"1\nx\r\n0\r\n\r\n", 400, 400),
    "space after the chunk size": (b"1 \r\nx\r\n0\r\n\r\n", 400, "forward"),
    "no CRLF after the chunk data": (b"1\r\nxYZ0\r\n\r\n", 400, 400),
    "non-hex chunk size": (b"zz\r\nx\r\n0\r\n\r\n", 400, 400),
}


@pytest.fixture(params=["llhttp", "h11"])
def parser(request, monkeypatch) -> str:
    monkeypatch.setattr(http1, "PARSER", request.param)
    return str(request.param)


async def _gateway(nursery) -> tuple[int, RecordingBackend]:
    recorder = await nursery.start(RecordingBackend().serve)
    gw = await start_routes(nursery, """
            - backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=recorder.port)
    return gw.info.ports[gw.port], recorder


async def _expect_no_answer(port: int, request: bytes) -> None:
    """h11 waits for 2^64 bytes: nothing is answered while they come (and nothing smuggled)."""
    with trio.move_on_after(0.5):
        await raw_exchange(port, request)
        raise AssertionError("h11 answered a body it should still be reading")


def _assert_read_one_way(recorder: RecordingBackend, body: bytes) -> None:
    """h11 read the request one consistent way: the backend got it with exactly ``body``; the bytes
    after that body are the next request on the connection (pipelined), served on its own or not at
    all (the client closes once it has its answer, so whether it is depends on the scheduling), and
    never part of the first request."""
    requests = [(method, target, got) for method, target, _, got in recorder.requests]
    assert requests[0] == (b"POST", b"/first", body)
    assert requests[1:] in ([], [(b"GET", b"/smuggled", b"")]), requests


@pytest.mark.parametrize("case", list(CASES))
async def test_ambiguous_framing_is_refused_or_read_one_way(nursery, parser, case):
    port, recorder = await _gateway(nursery)
    head, body, strict, lenient = CASES[case]
    expected = strict if parser == "llhttp" else lenient
    request = b"POST /first HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n" + body + SMUGGLED
    if expected == "hang":
        await _expect_no_answer(port, request)
        return
    response = await raw_exchange(port, request)
    if expected == "forward":
        assert status_line(response) == b"HTTP/1.1 200 OK", response[:200]
        _assert_read_one_way(recorder, b"ab")
        return
    assert b"/smuggled" not in b"".join(recorder.targets)
    assert int(response[9:12]) == expected, response[:300]
    assert b"connection: close" in response.lower()
    assert recorder.requests == []
    assert b"Traceback" not in response


@pytest.mark.parametrize("case", list(BODIES))
async def test_malformed_chunked_bodies_are_refused(nursery, parser, case):
    port, recorder = await _gateway(nursery)
    body, strict, lenient = BODIES[case]
    expected = strict if parser == "llhttp" else lenient
    request = b"POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body + SMUGGLED
    if expected == "hang":
        await _expect_no_answer(port, request)
        return
    response = await raw_exchange(port, request)
    if expected == "forward":
        assert status_line(response) == b"HTTP/1.1 200 OK", response[:200]
        _assert_read_one_way(recorder, b"x")
        return
    assert b"/smuggled" not in b"".join(recorder.targets)
    assert int(response[9:12]) == expected, response[:300]
    assert response.endswith(b"bad request: malformed request body\n"), response[-200:]
    assert [got for _, _, _, got in recorder.requests if got] == []  # no body the backend could take for whole


async def test_a_pipelined_request_after_a_chunked_body_is_served_on_its_own(nursery, parser):
    """The chunked body ends on a CRLF CRLF; what follows it in the same write is the next request,
    parsed only once its turn comes (upstream/wire.py feeds llhttp up to each CRLF CRLF)."""
    port, recorder = await _gateway(nursery)
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(b"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                              b"4\r\n\r\n\r\n\r\n3;ext=1\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n"
                              b"POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
        answers = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                answers += chunk
    assert answers.count(b"HTTP/1.1 200 OK\r\n") == 2
    assert [(target, body) for _, target, _, body in recorder.requests] == [(b"/a", b"\r\n\r\nabc"), (b"/b", b"hi")]
