"""Differential: the same random request heads, bodies and responses through both HTTP/1.1 parsers of
``frontend/http1.py``, llhttp's (``FastExchange``, upstream/wire.py) and h11's (``H11Exchange``, the
fallback and the reference), comparing what each accepts and what it read or wrote.

Where llhttp is stricter by design (upstream/wire.py's docstring: obs-fold, a bare LF or CR, control
characters in a value, Content-Length repeated, comma-joined or past 2^64, whitespace after a chunk
size) the test checks that it refuses (400) and lets h11 do as it did; everywhere else the two must
agree exactly: the decision, h11's status hint, method, target, version, headers, 100-continue,
keep-alive, every body byte and where the next request starts, and the response bytes.
"""

from __future__ import annotations

import re

import h11
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from trioproxy.frontend.http1 import HEAD_END, H11Exchange
from trioproxy.upstream.wire import END, NEED_DATA, FastExchange, LocalProtocolError, WireError

METHOD = st.sampled_from([b"GET", b"POST", b"PUT", b"HEAD", b"OPTIONS", b"PATCH", b"get", b"FOO", b"M-SEARCH",
                          b"G=T", b"", b"GET\x00"])
TARGET = st.sampled_from([b"/", b"/a?b=c", b"*", b"http://x/a", b"/a#f", b"/a b", b"/\x7f", b"/\xe9", b"", b"/%41"])
VERSION = st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1.2", b"HTTP/0.9", b"HTTP/1.1 x",
                           b"http/1.1", b"HTTP/11"])
NAME = st.sampled_from([b"Host", b"host", b"Content-Length", b"Transfer-Encoding", b"Connection", b"Expect",
                        b"X-A", b"x-b", b"Upgrade-Insecure", b"X A", b"", b"X:", b"\xe9"])
VALUE = st.one_of(
    st.sampled_from([b"", b"a", b"chunked", b"Chunked", b" chunked ", b"gzip, chunked", b"chunked, gzip", b"identity",
                     b"0", b"2", b"2, 2", b"1, 2", b"+2", b"-1", b"02", b"18446744073709551615",
                     b"18446744073709551616", b"99999999999999999999", b"close", b"keep-alive", b"Close, x",
                     b"100-continue", b"100-Continue, foo", b"a\tb", b"a  b ", b"\xe9", b"a\x01b", b"a\x7fb",
                     b"a\x00b"]),
    st.binary(max_size=6),
)
EOL = st.sampled_from([b"\r\n"] * 12 + [b"\n", b"\r"])
FOLD = st.sampled_from([b""] * 12 + [b" ", b"\t"])


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    head = draw(METHOD) + b" " + draw(TARGET) + b" " + draw(VERSION) + draw(EOL)
    for _ in range(draw(st.integers(0, 6))):
        head += draw(FOLD) + draw(NAME) + draw(st.sampled_from([b": ", b":", b" : ", b":\t"])) + draw(VALUE) + draw(EOL)
    return head + draw(st.sampled_from([b"\r\n"] * 8 + [b"\n"]))


def _parse(kind: type, data: bytes, end: int) -> object:
    try:
        return kind.parse(data, end)
    except WireError as error:
        return error


_CTL = re.compile(rb"[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _llhttp_stricter(head: bytes) -> bool:
    """A head h11 may read where llhttp refuses by design."""
    lines = head.split(b"\n")
    if b"\r" in head.replace(b"\r\n", b"") or any(not line.endswith(b"\r") for line in lines[:-1]):
        return True  # a bare CR or LF
    fields = [line.rstrip(b"\r") for line in lines[1:-1] if line not in (b"\r", b"")]
    if any(field[:1] in (b" ", b"\t") for field in fields):
        return True  # obs-fold
    lengths = [field for field in fields if field.lower().startswith(b"content-length:")]
    if len(lengths) > 1 or any(b"," in field or len(field.split(b":", 1)[1].strip()) > 19 for field in lengths):
        return True
    return any(_CTL.search(field.partition(b":")[2]) for field in fields)


def _fields(exchange: FastExchange | H11Exchange) -> tuple[object, ...]:
    return (exchange.method, exchange.target, exchange.http_version, list(exchange.headers), exchange.expects_continue)


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(head=heads())
def test_random_heads_get_the_same_decision_and_fields(head: bytes) -> None:
    match = HEAD_END.search(head)
    assume(match is not None)  # http1.py waits for more bytes
    assert match is not None
    fast, slow = _parse(FastExchange, head, match.end()), _parse(H11Exchange, head, match.end())
    if _llhttp_stricter(head):
        if isinstance(fast, WireError):
            assert fast.status in (400, 501)
            return
        # it may still be fine: what looked stricter was, say, a second line of a value llhttp also read
    if isinstance(slow, WireError) or isinstance(fast, WireError):
        assert isinstance(slow, WireError) and isinstance(fast, WireError), (head, fast, slow)
        assert fast.status == slow.status, (head, str(fast), str(slow))
        return
    assert isinstance(fast, FastExchange) and isinstance(slow, H11Exchange)
    assert _fields(fast) == _fields(slow), head


def _chunked(body: bytes, sizes: list[int], ext: bool, trailer: bool) -> bytes:
    out, rest = b"", body
    for size in sizes:
        piece, rest = rest[:size], rest[size:]
        if piece:
            out += b"%x%s\r\n%s\r\n" % (len(piece), b";x=y" if ext else b"", piece)
    if rest:
        out += b"%X\r\n%s\r\n" % (len(rest), rest)
    return out + b"0\r\n" + (b"X-T: 1\r\n" if trailer else b"") + b"\r\n"


def _drain(exchange: FastExchange | H11Exchange, pieces: list[bytes]) -> tuple[list[object], bytes]:
    """Feed the pieces one by one, reading what each gives; the body read, then what trails it."""
    out: list[object] = []
    pieces = [b"", *pieces]
    for i, piece in enumerate(pieces):
        if piece:  # (h11 takes no bytes for the EOF)
            exchange.receive_data(piece)
        while True:
            try:
                event = exchange.next_body()
            except WireError as error:
                out.append(("error", error.status))
                return out, b""
            if event is NEED_DATA:
                break
            out.append(event)
            if event is END:
                for later in pieces[i + 1:]:
                    if later:
                        exchange.receive_data(later)  # pipelined: kept for the next request
                return out, bytes(exchange.trailing)
    return out, b""


def _joined(events: list[object]) -> tuple[bytes, object]:
    return b"".join(e for e in events if isinstance(e, bytes)), events[-1] if events else None


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(body=st.binary(max_size=40).map(lambda b: b.replace(b"", b"") + b"\r\n\r\n" * (len(b) % 3 == 0)),
       chunked=st.booleans(), sizes=st.lists(st.integers(1, 9), max_size=5), ext=st.booleans(),
       trailer=st.booleans(), cuts=st.lists(st.integers(0, 80), max_size=4), damage=st.integers(-1, 60))
def test_random_bodies_are_read_alike_up_to_the_next_request(body, chunked, sizes, ext, trailer, cuts, damage):
    framing = b"Transfer-Encoding: chunked\r\n" if chunked else b"Content-Length: %d\r\n" % len(body)
    head = b"POST / HTTP/1.1\r\nHost: a\r\n" + framing + b"\r\n"
    payload = _chunked(body, sizes, ext, trailer) if chunked else body
    if chunked and 0 <= damage < len(payload):  # a byte of the framing or data replaced
        payload = payload[:damage] + b"Z" + payload[damage + 1:]
    wire = payload + b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n"
    points = sorted({c for c in cuts if c < len(wire)} | {0, len(wire)})
    pieces = [wire[a:b] for a, b in zip(points, points[1:], strict=False)]
    fast = FastExchange.parse(head, len(head))
    slow = H11Exchange.parse(head, len(head))
    (fast_events, fast_rest), (slow_events, slow_rest) = _drain(fast, pieces), _drain(slow, pieces)
    fast_body, fast_last = _joined(fast_events)
    slow_body, slow_last = _joined(slow_events)
    if fast_last == ("error", 400) and slow_last != ("error", 400):
        # llhttp's stricter chunk framing (whitespace after the size, a size past 2^64, or the
        # damage made one h11 still reads): h11 must not have read the next request as body
        assert b"GET /next" not in slow_body
        return
    if fast_last == slow_last == ("error", 400):
        # a malformed body ends the request with 400 (and the connection): the two may have handed
        # on different parts of what came before the fault, never what came after it
        assert fast_body.startswith(slow_body) or slow_body.startswith(fast_body), payload
        assert b"GET /next" not in fast_body + slow_body
        return
    assert (fast_body, fast_last, fast_rest) == (slow_body, slow_last, slow_rest), payload
    if fast_last is END:
        assert fast_rest.startswith(b"GET /next") and fast.request_done


RESPONSE_NAME = st.sampled_from([b"Content-Length", b"content-length", b"Transfer-Encoding", b"Connection", b"Host",
                                 b"X-A", b"Content-Type", b"Bad Name", b""])
RESPONSE_VALUE = st.sampled_from([b"0", b"3", b"3, 3", b"3, 4", b"x", b"chunked", b"gzip", b"close", b"keep-alive",
                                  b"upgrade, Close", b"text/plain", b" padded ", b"a\r\nb", b""])


# (no CONNECT: h11 switches protocols on its 2xx, which http1.py never serves)
@settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(method=st.sampled_from([b"GET", b"HEAD", b"POST", b"DELETE"]), version=st.sampled_from([b"1.1", b"1.0"]),
       close=st.booleans(), status=st.sampled_from([200, 201, 204, 304, 404, 500]),
       headers=st.lists(st.tuples(RESPONSE_NAME, RESPONSE_VALUE), max_size=5), body=st.binary(max_size=5),
       pieces=st.integers(0, 2))
def test_random_responses_are_written_alike(method, version, close, status, headers, body, pieces):
    head = b"%s / HTTP/%s\r\nHost: a\r\n%s\r\n" % (method, version, b"Connection: close\r\n" if close else b"")
    fast, slow = FastExchange.parse(head, len(head)), H11Exchange.parse(head, len(head))
    out = []
    for exchange in (fast, slow):
        written: list[object] = []
        try:
            written.append(exchange.response_head(status, headers, b"OK"))
            for _ in range(pieces):
                written.append(exchange.body(body))
            written.append(exchange.end())
        except (LocalProtocolError, h11.LocalProtocolError) as error:
            written.append(type(error).__name__)
        while exchange.next_body() not in (END, NEED_DATA):
            pass
        out.append((written, exchange.reusable if written[-1] != "LocalProtocolError" else None))
    assert out[0] == out[1]


@pytest.mark.parametrize("head", [
    b"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n c\r\n\r\n",  # obs-fold
    b"GET / HTTP/1.1\nHost: a\n\n",  # bare LF
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
    b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2, 2\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n",
])
def test_what_llhttp_refuses_and_h11_read(head):
    """The deliberate differences, each once: h11 read these, llhttp answers 400."""
    end = HEAD_END.search(head)
    assert end is not None
    assert isinstance(H11Exchange.parse(head, end.end()), H11Exchange)
    with pytest.raises(WireError) as refused:
        FastExchange.parse(head, end.end())
    assert refused.value.status == 400


# --- the client side: upstream/pool.py's responses ------------------------------------------------

STATUS_LINE = st.sampled_from([b"HTTP/1.1 200 OK", b"HTTP/1.1 200", b"HTTP/1.1 404 Not Found", b"HTTP/1.0 200 OK",
                               b"HTTP/1.1 204 No Content", b"HTTP/1.1 304 Not Modified", b"HTTP/1.1 2000 OK",
                               b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK", b"SSH-2.0-x",
                               b"HTTP/1.1 200 \xe9t\xe9"])
RESPONSE_FIELD = st.sampled_from([b"Content-Type: text/plain", b"Connection: close", b"Connection: keep-alive",
                                  b"X-A:  padded  ", b"Transfer-Encoding: gzip", b"Transfer-Encoding: chunked",
                                  b"Content-Length: 1, 2", b"Bad Name: x", b"X-Ctl: a\x01b",
                                  b"Transfer-Encoding: Chunked", b"Content-Length: " + b"0" * 20,
                                  b"Content-Length: " + b"0" * 21])  # h11's limit: 20 digits


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(status=STATUS_LINE, fields=st.lists(RESPONSE_FIELD, max_size=3), framing=st.sampled_from(["length", "chunked",
       "none"]), body=st.binary(max_size=12), cut=st.integers(0, 120), truncate=st.integers(-1, 60),
       extra=st.sampled_from([b"", b"HTTP/1.1 200 OK\r\n\r\n"]))
def test_random_responses_are_read_alike(status, fields, framing, body, cut, truncate, extra):
    from trioproxy.upstream.wire import BadResponse, FastClient

    head = [status, *fields]
    if framing == "length":
        head.append(b"Content-Length: %d" % len(body))
        payload = body
    elif framing == "chunked":
        head.append(b"Transfer-Encoding: chunked")
        payload = (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"
    else:
        payload = body
    wire = b"\r\n".join(head) + b"\r\n\r\n" + payload + extra
    if truncate >= 0:
        wire = wire[:truncate]
    pieces = [wire[:cut], wire[cut:]]

    def run_h11() -> tuple[list[object], bool]:
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 * 1024)
        conn.send(h11.Request(method=b"GET", target=b"/", headers=[(b"host", b"a")]))
        conn.send(h11.EndOfMessage())
        return _read(conn.receive_data, conn.next_event, h11.RemoteProtocolError,
                     lambda: conn.our_state is conn.their_state is h11.DONE and not conn.trailing_data[0])

    def run_fast() -> tuple[list[object], bool]:
        client = FastClient(64 * 1024)
        client.request(b"GET", b"/", [(b"host", b"a")])
        client.end()
        return _read(client.receive_data, client.next_event, BadResponse, lambda: client.reusable)

    def _read(feed, next_event, error_type, reusable) -> tuple[list[object], bool]:
        out: list[object] = []
        for piece in [*pieces, b""]:  # then the close
            if piece or not out or out[-1] != "end":
                feed(piece)
            while True:
                try:
                    event = next_event()
                except error_type:
                    out.append("error")
                    return out, False
                if event is h11.NEED_DATA:
                    break
                if type(event) is h11.ConnectionClosed:
                    out.append("closed")
                    return out, False
                if type(event) is h11.Data:
                    out.append(bytes(event.data))
                elif type(event) is h11.EndOfMessage:
                    out.append("end")
                    return out, reusable()
                else:
                    out.append((type(event).__name__, event.status_code, list(event.headers), bytes(event.reason)))
        return out, False

    fast, slow = run_fast(), run_h11()
    if framing == "none":  # read to the close: h11 calls that connection DONE too, pool.py never reuses it
        fast, slow = (fast[0], False), (slow[0], False)
    if fast != slow:
        # llhttp is stricter about a header value (a control character) and a repeated
        # Content-Length (h11 takes equal ones): it refuses the head (after an informational
        # response before it, which both read alike)
        stricter = b"\x01" in wire or wire.split(b"\r\n\r\n", 1)[0].count(b"Content-Length:") > 1
        assert stricter and fast[0][-1:] == ["error"] and fast[0][:-1] == slow[0][:len(fast[0]) - 1] \
            and all(event[0] == "InformationalResponse" for event in fast[0][:-1]), (wire, fast, slow)


def test_a_whole_response_llhttp_refuses_and_h11_reads_is_refused_with_llhttps_reason():
    """The error path asks h11 for its wording; h11 reads this one whole (then PAUSED, forever)."""
    from trioproxy.upstream.wire import BadResponse, FastClient

    client = FastClient(64 * 1024)
    client.request(b"GET", b"/", [(b"host", b"a")])
    client.end()
    client.receive_data(b"HTTP/1.1 200 OK\r\nX-Ctl: a\x01b\r\nContent-Length: 0\r\n\r\n")
    with pytest.raises(BadResponse, match="invalid upstream response: Invalid header value char"):
        client.next_event()


REQUEST_NAME = st.sampled_from([b"Content-Length", b"content-length", b"Transfer-Encoding", b"Connection", b"X-A",
                                b"X A"])
REQUEST_VALUE = st.one_of(st.sampled_from([b"0", b"2", b"02", b"2, 2", b"1, 2", b" 2", b"+2", b"18446744073709551615",
                                           b"999999999999999999999", b"chunked", b"Chunked", b"gzip", b"close"]), VALUE)


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(method=st.sampled_from([b"GET", b"POST", b"POST", b"G T"]), target=st.sampled_from([b"/", b"/a?b", b"/a b"]),
       headers=st.lists(st.tuples(REQUEST_NAME, REQUEST_VALUE), max_size=4),
       host=st.sampled_from([1, 1, 1, 0, 2]), body=st.binary(max_size=4), pieces=st.integers(0, 2))
def test_random_requests_are_written_alike(method, target, headers, host, body, pieces):
    """``FastClient.request`` (pool.py's request head, and its body framing) writes what h11 writes and refuses
    what h11 refuses: a plain Content-Length is decided without h11, anything else by h11 itself."""
    from trioproxy.upstream.wire import FastClient

    headers = [(b"Host", b"a")] * host + headers
    out = []
    for side in ("fast", "h11"):
        written: list[object] = []
        try:
            if side == "fast":
                client = FastClient(64 * 1024)
                written.append(client.request(method, target, list(headers)))
                written += [client.data(body) for _ in range(pieces)]
                written.append(client.end())
            else:
                conn = h11.Connection(h11.CLIENT)
                written.append(conn.send(h11.Request(method=method, target=target, headers=list(headers))))
                written += [conn.send(h11.Data(data=body)) for _ in range(pieces)]
                written.append(conn.send(h11.EndOfMessage()))
        except (LocalProtocolError, h11.LocalProtocolError) as error:
            written.append(("refused", str(error)))
        out.append(written)
    assert out[0] == out[1]


@pytest.mark.parametrize("version", [b"1.1", b"1.0"])
@pytest.mark.parametrize("request_close", [False, True])
@pytest.mark.parametrize("connection", [b"close", b"upgrade, Close", b"keep-alive", None])
def test_a_response_naming_its_connection_is_written_and_kept_alike(version, request_close, connection):
    """A close either side names ends the connection, as h11 decides (the random test above rarely
    draws a valid response naming ``Connection``)."""
    head = b"GET / HTTP/%s\r\nHost: a\r\n%s\r\n" % (version, b"Connection: close\r\n" if request_close else b"")
    headers = [(b"Content-Length", b"2")] + ([(b"Connection", connection)] if connection is not None else [])
    out = []
    for exchange in (FastExchange.parse(head, len(head)), H11Exchange.parse(head, len(head))):
        written = [exchange.response_head(200, headers, b"OK"), exchange.body(b"ab"), exchange.end()]
        while exchange.next_body() not in (END, NEED_DATA):
            pass
        out.append((written, exchange.reusable))
    assert out[0] == out[1]
    assert out[0][1] is (version == b"1.1" and not request_close and connection in (b"keep-alive", None))


@pytest.mark.parametrize("status", [b"204 No Content", b"304 Not Modified", b"200 OK"])
def test_a_bodiless_status_without_a_length_leaves_the_backend_connection_as_h11_does(status):
    """204 and 304 end with their head: the backend connection is reused; a 200 without a length runs to
    the close and is not."""
    from trioproxy.upstream.wire import FastClient

    wire = b"HTTP/1.1 " + status + b"\r\nX-A: b\r\n\r\n"
    client = FastClient(64 * 1024)
    client.request(b"GET", b"/", [(b"host", b"a")])
    client.end()
    client.receive_data(wire)
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method=b"GET", target=b"/", headers=[(b"host", b"a")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(wire)
    fast_events, slow_events = [], []
    for next_event, events in ((client.next_event, fast_events), (conn.next_event, slow_events)):
        while (event := next_event()) is not h11.NEED_DATA:
            events.append(type(event).__name__)
            if type(event) is h11.EndOfMessage:
                break
    assert fast_events == slow_events
    h11_reusable = conn.our_state is conn.their_state is h11.DONE
    assert client.reusable is h11_reusable is (status != b"200 OK")
