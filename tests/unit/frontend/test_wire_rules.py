"""upstream/wire.py rule by rule: what the random differential tests (test_wire_differential.py) draw
rarely or do not compare: the exact wording of each refusal, a request's own ``Connection: close``
to the backend, duplicate ``Content-Length`` lines, chunked bodies split inside their last ``CRLF CRLF``,
``CONNECT`` answers, and ``_relay_class`` (built at import, where mutation testing never reaches,
so it is called again here)."""

from __future__ import annotations

import h11
import pytest

from trioproxy.upstream import wire
from trioproxy.upstream.wire import END, NEED_DATA, BadResponse, FastClient, FastExchange, LocalProtocolError, WireError

# --- _relay_class -----------------------------------------------------------------------------------


class _Owner:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []

    def on_header(self, name: bytes, value: bytes) -> str:
        self.calls.append(("on_header", (name, value)))
        return "header"

    def on_body(self, data: bytes) -> None:
        self.calls.append(("on_body", (data,)))


def test_a_relay_has_exactly_its_owners_callbacks_and_forwards_them():
    relay_class = wire._relay_class(_Owner)
    assert relay_class.__name__ == "_OwnerRelay"
    assert issubclass(relay_class, wire._Relay)
    assert relay_class.__slots__ == ()
    callbacks = {"on_message_begin", "on_url", "on_status", "on_header", "on_headers_complete", "on_body",
                 "on_message_complete", "on_chunk_header", "on_chunk_complete"}
    assert {name for name in callbacks if hasattr(relay_class, name)} == {"on_header", "on_body"}
    assert relay_class.on_header.__name__ == "on_header"
    owner = _Owner()
    relay = relay_class(owner)
    assert relay.on_header(b"A", b"b") == "header"
    relay.on_body(b"x")
    assert owner.calls == [("on_header", (b"A", b"b")), ("on_body", (b"x",))]


CALLBACKS = ("on_message_begin", "on_url", "on_status", "on_header", "on_headers_complete", "on_body",
             "on_message_complete", "on_chunk_header", "on_chunk_complete")


def test_a_relay_knows_every_llhttp_callback():
    owner = type("Full", (), {name: (lambda self, *args, _name=name: (_name, args)) for name in CALLBACKS})
    relay_class = wire._relay_class(owner)
    instance = owner()  # (the relay holds it weakly)
    relay = relay_class(instance)
    assert [getattr(relay, name)(b"x") for name in CALLBACKS] == [(name, (b"x",)) for name in CALLBACKS]


@pytest.mark.parametrize("owner", [FastExchange, FastClient])
def test_the_exchange_and_client_relays_carry_every_callback_they_define(owner):
    relay_class = wire._relay_class(owner)
    assert relay_class.__name__ == owner.__name__ + "Relay"
    names = [n for n in vars(owner) if n.startswith("on_")]
    assert names and all(callable(getattr(relay_class, n)) for n in names)
    assert not hasattr(relay_class, "on_url")


# --- FastExchange: the request ------------------------------------------------------------------------


def _refusal(head: bytes) -> WireError:
    with pytest.raises(WireError) as refused:
        FastExchange.parse(head, len(head))
    return refused.value


def test_request_refusals_carry_their_status_and_reason():
    assert (_refusal(b"GET / HTTP/1.1 x\r\nHost: a\r\n\r\n").status, str(_refusal(b"GET  / HTTP/1.1\r\n\r\n"))) \
        == (400, "illegal request line")
    refused = _refusal(b"GET / HTTP/1.1\r\n\r\n")
    assert (refused.status, str(refused)) == (400, "Host header missing or repeated")
    refused = _refusal(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\n")
    assert (refused.status, str(refused)) == (501, "Only Transfer-Encoding: chunked is supported")


BASE = b"POST / HTTP/1.1\r\nHost: a\r\n"


@pytest.mark.parametrize(("fields", "status", "reason"), [
    (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 501, "multiple Transfer-Encoding headers"),
    (b"Transfer-Encoding: chunked, gzip\r\n", 501, "Only Transfer-Encoding: chunked is supported"),  # not llhttp's
    (b"Connection: Upgrade\r\nUpgrade: websocket\r\n", 400, "upgrade"),
    (b"Content-Length: 2\r\nContent-Length: 2\r\n", 400, "Duplicate Content-Length"),  # llhttp's words
    (b"X: a\r\n b\r\n", 400, "Unexpected whitespace after header value"),
])
def test_request_heads_refused_by_rule(fields, status, reason):
    refused = _refusal(BASE + fields + b"\r\n")
    assert (refused.status, str(refused)) == (status, reason)


def test_a_head_without_its_blank_line_is_incomplete():
    refused = _refusal(BASE)
    assert (refused.status, str(refused)) == (400, "incomplete head")


@pytest.mark.parametrize(("value", "keep_alive"), [(b"close,keep-alive", False), (b"keep-alive, Close", False),
                                                   (b"keep-alive", True), (b"closed", True)])
def test_a_request_closes_by_its_connection_tokens(value, keep_alive):
    head = BASE + b"Connection: " + value + b"\r\nX-A: BOX \r\nExpect: 100-continue,foo\r\n\r\n"
    exchange = FastExchange.parse(head, len(head))
    assert exchange.keep_alive is keep_alive and exchange.expects_continue
    assert (b"x-a", b"BOX") in exchange.headers


@pytest.mark.parametrize(("lines", "keep_alive", "expects"), [
    (b"Connection: close\r\nConnection: keep-alive\r\nExpect: 100-continue\r\nExpect: foo\r\n", False, True),
    (b"Connection: keep-alive\r\nConnection: x, CLOSE\r\nExpect: foo\r\nExpect: x,100-CONTINUE\r\n", False, True),
    (b"Connection: keep-alive\r\nConnection: upgrade\r\nExpect: 100-continuex\r\n", True, False),
])
def test_the_connection_and_expect_tokens_of_every_line_count(lines, keep_alive, expects):
    head = BASE + lines + b"\r\n"
    exchange = FastExchange.parse(head, len(head))
    assert (exchange.keep_alive, exchange.expects_continue) == (keep_alive, expects)


def test_a_head_llhttp_refuses_gets_h11s_status_hint():
    # llhttp refuses the duplicate length; h11 reads it (equal values) and then refuses the coding: 501
    head = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2, 2\r\nTransfer-Encoding: gzip\r\n\r\n"
    assert _refusal(head).status == 501
    assert wire._status(head) == 501
    assert wire._status(b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n") == 400


def test_a_length_body_is_done_with_its_last_piece():
    head = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\n"
    exchange = FastExchange.parse(head + b"ab", len(head))
    assert (exchange.next_body(), exchange.request_done) == (b"ab", False)
    assert exchange.next_body() == NEED_DATA
    exchange.receive_data(b"cdGET")
    assert (exchange.next_body(), exchange.request_done, exchange.trailing) == (b"cd", True, b"GET")
    assert exchange.next_body() == END
    exchange = FastExchange.parse(head + b"abcd", len(head))
    assert (exchange.next_body(), exchange.request_done, exchange.trailing) == (b"abcd", True, b"")


CHUNKED = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
NEXT = b"GET /next HTTP/1.1\r\nHost: a\r\n\r\n"


def _body(exchange: FastExchange) -> list[bytes | str]:
    out: list[bytes | str] = []
    while True:
        piece = exchange.next_body()
        out.append(piece)
        if piece in (END, NEED_DATA):
            return out


@pytest.mark.parametrize("size", [1, 2, 3, 5, 100])
def test_a_chunked_body_fed_in_pieces_stops_at_its_end(size):
    body = b"3\r\nabc\r\n1;x=y\r\nd\r\n0\r\nT: v\r\n\r\n"
    exchange = FastExchange.parse(CHUNKED, len(CHUNKED))
    data = body + NEXT
    got = b""
    for i in range(0, len(data), size):
        exchange.receive_data(data[i:i + size])
        got += b"".join(p for p in _body(exchange) if isinstance(p, bytes))
        if exchange.request_done:
            exchange.receive_data(data[i + size:])
            break
    assert got == b"abcd"
    assert exchange.request_done and exchange.next_body() == END
    assert exchange.trailing == NEXT
    assert exchange.headers[-1] == (b"transfer-encoding", b"chunked")  # the trailer field is not a header


def test_a_chunked_body_ending_byte_by_byte_leaves_the_next_request_whole():
    exchange = FastExchange.parse(CHUNKED, len(CHUNKED))
    body = b"1\r\na\r\n0\r\n\r\n"
    for byte in body[:-1]:
        exchange.receive_data(bytes([byte]))
        _body(exchange)
    assert not exchange.request_done
    exchange.receive_data(body[-1:] + NEXT)
    assert _body(exchange) == [END]
    assert exchange.trailing == NEXT


def test_a_bad_chunk_is_refused_for_good_after_the_data_before_it():
    exchange = FastExchange.parse(CHUNKED + b"1\r\na\r\nzz\r\n", len(CHUNKED))
    assert exchange.next_body() == b"a"
    with pytest.raises(WireError) as refused:
        exchange.next_body()
    assert refused.value.status == 400 and str(refused.value) == "Invalid character in chunk size"
    assert exchange.trailing == b""
    with pytest.raises(WireError) as again:
        exchange.next_body()
    assert again.value is refused.value


# --- FastExchange: the response -----------------------------------------------------------------------


def _exchange(method: bytes = b"GET", version: bytes = b"1.1", extra: bytes = b"") -> FastExchange:
    head = method + b" / HTTP/" + version + b"\r\nHost: a\r\n" + extra + b"\r\n"
    return FastExchange.parse(head, len(head))


@pytest.mark.parametrize(("headers", "message"), [
    ([(b"Bad Name", b"x")], "Illegal header name b'Bad Name'"),
    ([(b"X", b"a\x00b")], "Illegal header value b'a\\x00b'"),
    ([(b"Content-Length", b"1, 2")], "conflicting Content-Length headers"),
    ([(b"Content-Length", b"1"), (b"Content-Length", b"2")], "conflicting Content-Length headers"),
    ([(b"Content-Length", b"x")], "bad Content-Length"),
    ([(b"Content-Length", b"1" * 21)], "bad Content-Length"),
    ([(b"Transfer-Encoding", b"chunked"), (b"Transfer-Encoding", b"chunked")], "multiple Transfer-Encoding headers"),
    ([(b"Transfer-Encoding", b"gzip")], "Only Transfer-Encoding: chunked is supported"),
])
def test_response_heads_h11_would_refuse_are_refused_in_its_words(headers, message):
    with pytest.raises(LocalProtocolError) as refused:
        _exchange().response_head(200, headers, b"OK")
    assert str(refused.value) == message


def test_valid_names_and_values_are_remembered_within_a_bound_and_refusals_never():
    """The match each line needs is done once per distinct name and value (wire._GOOD_NAMES/_VALUES):
    a refused one is refused every time, and a set that fills is emptied, not grown."""
    wire._GOOD_NAMES.clear()
    wire._GOOD_VALUES.clear()
    for _ in range(2):
        _exchange().response_head(200, [(b"X-Seen", b"v 1")], b"OK")
        FastClient(100).request(b"GET", b"/", [(b"Host", b"a"), (b"X-Req", b"w")])
        for name, value in [(b"Bad Name", b"x"), (b"X", b"a\x00b"), (b"X", b" lead")]:
            with pytest.raises(LocalProtocolError):
                _exchange().response_head(200, [(name, value)], b"OK")
            with pytest.raises(LocalProtocolError):
                FastClient(100).request(b"GET", b"/", [(b"Host", b"a"), (name, value)])
    assert {b"X-Seen", b"X-Req", b"Host"} <= wire._GOOD_NAMES.keys() and {b"v 1", b"w", b"a"} <= wire._GOOD_VALUES
    assert not {b"Bad Name"} & wire._GOOD_NAMES.keys() and not {b"a\x00b", b" lead"} & wire._GOOD_VALUES
    for i in range(wire.KNOWN_MAX + 10):
        _exchange().response_head(200, [(b"X-Id", b"%d" % i)], b"OK")
    assert len(wire._GOOD_VALUES) <= wire.KNOWN_MAX
    assert FastClient(100).request(bytearray(b"GET"), bytearray(b"/"), [(bytearray(b"Host"), bytearray(b"a")),
                                                                        (b"X", bytearray(b"b"))]) \
        == b"GET / HTTP/1.1\r\nHost: a\r\nX: b\r\n\r\n"  # bytearrays (unhashable): matched, not remembered


def test_a_twenty_digit_length_is_kept():
    exchange = _exchange()
    assert b"Content-Length: 10000000000000000000\r\n" in exchange.response_head(200, [(b"Content-Length", b"1" + b"0" * 19)], b"OK")


def test_an_exchange_is_reusable_once_both_messages_are_whole():
    exchange = _exchange()
    exchange.response_head(200, [(b"Content-Length", b"0")], b"OK")
    assert exchange.request_done and not exchange.response_done and not exchange.reusable
    exchange.end()
    assert exchange.response_done and exchange.reusable


def test_chunked_wins_over_a_length_in_a_response():
    exchange = _exchange()
    head = exchange.response_head(200, [(b"Content-Length", b"3"), (b"Transfer-Encoding", b"Chunked")], b"OK")
    assert head == b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert exchange.body(b"abcd") == b"4\r\nabcd\r\n"
    assert exchange.end() == b"0\r\n\r\n"


@pytest.mark.parametrize(("method", "status", "bodiless"), [
    (b"CONNECT", 200, True), (b"connect", 201, True), (b"CONNECT", 299, True), (b"CONNECT", 300, False),
    (b"CONNECT", 199 + 1, True), (b"GET", 200, False),
])
def test_a_connect_answered_2xx_has_no_body(method, status, bodiless):
    exchange = _exchange(method)
    head = exchange.response_head(status, [], b"X")
    assert (b"Transfer-Encoding" not in head) == bodiless
    if bodiless:
        assert exchange.body(b"") == b"" and exchange.end() == b""
    else:
        assert exchange.body(b"ab") == b"2\r\nab\r\n"


def test_a_response_naming_close_ends_a_kept_alive_connection():
    exchange = _exchange()
    head = exchange.response_head(200, [(b"Content-Length", b"0"), (b"Connection", b"Close")], b"OK")
    assert head.endswith(b"Connection: Close\r\n\r\n")
    assert exchange.keep_alive is False
    exchange.end()
    assert not exchange.reusable
    exchange = _exchange()
    exchange.response_head(200, [(b"Content-Length", b"0"), (b"Connection", b"keep-alive")], b"OK")
    exchange.end()
    assert exchange.keep_alive is True and exchange.reusable


def test_a_closing_request_gets_connection_close_with_the_responses_other_tokens():
    exchange = _exchange(extra=b"Connection: close\r\n")
    head = exchange.response_head(200, [(b"Connection", b"keep-alive, Upgrade"), (b"Content-Length", b"0")], b"OK")
    assert head == b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\nConnection: upgrade\r\n\r\n"


def test_an_http10_answer_without_length_runs_to_the_close():
    exchange = _exchange(version=b"1.0")
    head = exchange.response_head(200, [(b"Content-Length", b"5"), (b"Transfer-Encoding", b"chunked")], b"OK")
    assert head == b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"
    assert exchange.body(b"abcdefg") == b"abcdefg"


# --- FastClient: the request --------------------------------------------------------------------------


def _client(headers: list[tuple[bytes, bytes]] | None = None, limit: int = 65536) -> tuple[FastClient, bytes]:
    client = FastClient(limit)
    head = client.request(b"GET", b"/", [(b"Host", b"a"), *(headers or [])])
    return client, head


def _read(client: FastClient, *pieces: bytes) -> list[object]:
    out: list[object] = []
    for piece in pieces:
        client.receive_data(piece)
        while True:
            try:
                event = client.next_event()
            except BadResponse as error:
                out.append(str(error))
                return out
            if event is h11.NEED_DATA:
                break
            out.append(event)
    return out


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


@pytest.mark.parametrize(("value", "closes"), [
    (b"close", True), (b"Close", True), (b"keep-alive, close", True), (b"close,keep-alive", True),
    (b"keep-alive", False), (b"closed", False),
])
def test_a_requests_own_connection_close_ends_the_backend_connection(value, closes):
    client, _ = _client([(b"Connection", value)])
    client.end()
    _read(client, OK)
    assert client.their_done and client.reusable is not closes


def test_close_in_another_header_keeps_the_connection():
    client, _ = _client([(b"X-Note", b"close")])
    client.end()
    _read(client, b"HTTP/1.1 200 OK\r\nX-Note: close\r\nContent-Length: 0\r\n\r\n")
    assert client.reusable


def test_a_connection_is_reusable_only_once_the_request_is_sent_too():
    client, _ = _client()
    _read(client, OK)
    assert client.their_done and not client.our_done and not client.reusable
    client.end()
    assert client.reusable


def test_equal_content_lengths_are_written_once_and_later_headers_kept():
    client, head = _client([(b"Content-Length", b"2"), (b"Content-Length", b"2"), (b"X-After", b"y")])
    assert head == b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nX-After: y\r\n\r\n"
    client, head = _client([(b"Content-Length", b"2, 2"), (b"X-After", b"y")])
    assert head == b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nX-After: y\r\n\r\n"
    assert client.data(b"ab") == b"ab"
    with pytest.raises(LocalProtocolError):
        client.data(b"c")


def test_a_request_h11_refuses_is_refused_in_its_words():
    with pytest.raises(LocalProtocolError) as refused:
        FastClient(100).request(b"GET", b"/", [(b"Host", b"a"), (b"Bad Name", b"x")])
    assert str(refused.value) == "Illegal header name b'Bad Name'"
    with pytest.raises(LocalProtocolError) as refused:
        FastClient(100).request(b"GET", b"/", [(b"Content-Length", b"1")])
    assert str(refused.value) == "Missing mandatory Host: header"


# --- FastClient: the response -------------------------------------------------------------------------


def test_a_response_with_chunked_and_a_length_is_read_chunked():
    client, _ = _client()
    client.end()
    events = _read(client, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n1\r\na\r\n0\r\n\r\n")
    assert [type(e) for e in events] == [h11.Response, h11.Data, h11.EndOfMessage]
    assert client.reusable


@pytest.mark.parametrize("fields", [b"Transfer-Encoding: gzip\r\n", b"Transfer-Encoding: chunked, gzip\r\n",
                                    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"])
def test_a_response_coding_other_than_one_chunked_is_refused_in_h11s_words(fields):
    client, _ = _client()
    assert _read(client, b"HTTP/1.1 200 OK\r\n" + fields + b"\r\n0\r\n\r\n") \
        == ["invalid upstream response: Only Transfer-Encoding: chunked is supported"]


@pytest.mark.parametrize(("fields", "refusal"), [
    (b"Content-Length: " + b"0" * 21 + b"\r\n", "bad Content-Length"),  # digits llhttp reads, past h11's 20
    (b"Content-Length: 2\r\nContent-Length: 2\r\n", "Duplicate Content-Length"),  # llhttp's words: h11 took it
    (b"Content-Length: 2, 2\r\n", "Invalid character in Content-Length"),  # likewise
])
def test_a_response_length_h11_or_llhttp_refuses_is_refused(fields, refusal):
    client, _ = _client()
    assert _read(client, b"HTTP/1.1 200 OK\r\n" + fields + b"\r\nab") == [f"invalid upstream response: {refusal}"]


def test_the_response_head_is_h11s_header_list_with_its_framing_values_normalized():
    client, _ = _client()
    events = _read(client, b"HTTP/1.1 200 OK\r\nX-A: 1\r\nTransfer-Encoding: Chunked\r\nSet-Cookie: a\r\n"
                           b"set-cookie: b\r\n\r\n0\r\n\r\n")
    headers = events[0].headers
    assert list(headers) == [(b"x-a", b"1"), (b"transfer-encoding", b"chunked"), (b"set-cookie", b"a"),
                             (b"set-cookie", b"b")]
    assert headers.raw_items() == list(headers)  # names come lower-cased from the parser, as pool.py reads them
    client, _ = _client()
    events = _read(client, b"HTTP/1.1 200 OK\r\nContent-Length: " + b"0" * 19 + b"2\r\n\r\nab")
    assert list(events[0].headers) == [(b"content-length", b"0" * 19 + b"2")] and events[1].data == b"ab"


def test_a_truncated_body_is_reported_as_h11_words_it():
    client, _ = _client()
    events = _read(client, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nab", b"c", b"")
    assert events[-1] == ("invalid upstream response: peer closed connection without sending complete message "
                          "body (received 3 bytes, expected 10)")
    client, _ = _client()
    events = _read(client, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n", b"")
    assert events[-1] == ("invalid upstream response: peer closed connection without sending complete message "
                          "body (incomplete chunked read)")
    client, _ = _client()
    assert _read(client, b"HTTP/1.1 200 OK\r\n", b"") == ["upstream closed the connection before the response completed"]


def test_a_head_refused_across_pieces_is_worded_by_h11_from_all_of_it():
    client, _ = _client()
    assert _read(client, b"HTTP/1.1 200 OK\r\n", b"Bad Name: x\r\n\r\n") \
        == ["invalid upstream response: illegal header line: bytearray(b'Bad Name: x')"]
    client, _ = _client()
    assert _read(client, b"SSH-2.0-x\r\n\r\n") == ["invalid upstream response: illegal status line: bytearray(b'SSH-2.0-x')"]


def test_a_head_h11_reads_is_worded_by_h11_at_the_body_it_refuses():
    # llhttp refuses the control character in the head; h11 reads the head and refuses the chunk after it
    client, _ = _client()
    assert _read(client, b"HTTP/1.1 200 OK\r\nX: a\x01b\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n") \
        == ["invalid upstream response: illegal chunk header: bytearray(b'zz\\r\\n')"]


def test_h11_is_asked_for_at_most_three_events_for_its_wording():
    # (a bound: h11 may read a refused response whole, then PAUSED forever) two chunks and the bad
    # one are past it, so the words are llhttp's own
    client, _ = _client()
    assert _read(client, b"HTTP/1.1 200 OK\r\nX: a\x01b\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n1\r\nb\r\nzz\r\n") \
        == ["invalid upstream response: Invalid header value char"]


def test_a_head_longer_than_the_limit_is_refused():
    partial = b"HTTP/1.1 200 OK\r\nX: " + b"a" * 20
    client, _ = _client(limit=len(partial))
    assert _read(client, partial) == []
    assert _read(client, b"a") == ["invalid upstream response: Receive buffer too long"]


def test_the_final_reason_and_values_are_the_backends():
    client, _ = _client()
    events = _read(client, b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nX-A: BOX  \r\n"
                           b"Content-Length: 0\r\n\r\n")
    assert [(type(e), e.reason) for e in events[:2]] == [(h11.InformationalResponse, b"Early Hints"), (h11.Response, b"OK")]
    assert list(events[1].headers)[0] == (b"x-a", b"BOX")


@pytest.mark.parametrize(("value", "reusable"), [(b"close, keep-alive", False), (b"keep-alive", True)])
def test_a_response_naming_close_ends_the_backend_connection(value, reusable):
    client, _ = _client()
    client.end()
    _read(client, b"HTTP/1.1 200 OK\r\nConnection: " + value + b"\r\nContent-Length: 0\r\n\r\n")
    assert client.their_done and client.reusable is reusable


@pytest.mark.parametrize("status", [204, 304])
def test_a_bodiless_status_ends_at_its_head(status):
    client, _ = _client()
    client.end()
    events = _read(client, b"HTTP/1.1 %d X\r\n\r\n" % status)
    assert [type(e) for e in events] == [h11.Response, h11.EndOfMessage]
    assert client.reusable


def test_a_body_to_the_close_ends_at_the_close_even_unread():
    client, _ = _client()
    client.end()
    client.receive_data(b"HTTP/1.1 200 OK\r\n\r\nabc")
    client.receive_data(b"")
    assert client.their_done
    events = _read(client, b"")
    assert [type(e) for e in events] == [h11.Response, h11.Data, h11.EndOfMessage]
    assert not client.reusable


def test_bytes_after_the_response_are_kept_and_end_reuse():
    client, _ = _client()
    client.end()
    _read(client, OK)
    assert client.reusable
    client.receive_data(b"a")
    client.receive_data(b"b")
    assert client.trailing == b"ab" and not client.reusable
