"""HTTP/1.1 server-side framing through llhttp (``httptools``), with h11's rules on top.

``http1.py`` serves each request through an *exchange*: the request's head parsed, its body read,
the response written. ``H11Exchange`` (in ``http1.py``) does it with h11, the pure-Python parser
this replaces; ``FastExchange`` here does the parsing in C and keeps every decision h11 made, so the
two are interchangeable (``tests/unit/frontend/test_wire_differential.py`` feeds both the same random
heads and compares what each accepts and what it parsed). What does what:

- **the request line**: h11's own grammar (``token SP 1*VCHAR SP HTTP/d.d``), one regex match.
  llhttp knows only its list of methods, and h11 (so the gateway) serves any token.
- **the header block**: llhttp in its strict mode, fed behind a fixed request line: it splits the
  fields and refuses what RFC 9112 lets a server refuse and h11 let through: obs-fold, a bare LF or
  CR, control characters in a value, ``Content-Length`` twice or comma-joined (even equal ones),
  one past 2^64-1. It is made lenient only where h11's own rules are checked here instead:
  ``Transfer-Encoding`` values (anything but exactly one ``chunked`` is 501, as h11 answers) and
  ``Content-Length`` beside ``Transfer-Encoding`` (chunked wins, and ``front_door.py`` answers 400,
  as it did behind h11). Then h11's checks: ``Host`` once (and present in HTTP/1.1), keep-alive
  (``HTTP/1.0`` closes, ``Connection: close`` closes), ``Expect: 100-continue`` (ignored for 1.0).
- **the body**: ``Content-Length`` counted here; chunked decoded by the same llhttp parser (strict:
  chunk-size overflow, whitespace or a bare LF after the size, a missing CRLF after the data all
  refuse). The parser is fed up to each ``CRLF CRLF`` at a time, and a chunked body always ends on
  one, so it stops exactly at the message's end: what follows (a pipelined request) is never parsed
  with it.
- **the response**: h11's framing rules, written directly: ``Content-Length`` kept and enforced,
  none on a 1.1 request's answer becomes chunked, on a 1.0 one the body runs to the close;
  ``Connection: close`` added when either side ends the connection; ``Host`` lines first, as h11
  writes them; names and values validated with h11's grammar (``LocalProtocolError`` as h11 raises).
"""

from __future__ import annotations

import inspect
import re
import weakref
from collections.abc import Callable
from typing import Any, Final

import h11
import httptools
from h11 import LocalProtocolError
from h11._headers import Headers as _Headers  # h11's header list, built here as h11's parser would

__all__ = ["END", "NEED_DATA", "FastExchange", "LocalProtocolError", "WireError"]

#: h11's grammar (h11/_abnf.py): the request line, field names and values
_TOKEN = rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+"
REQUEST_LINE: Final = re.compile(rb"(?P<method>" + _TOKEN + rb") (?P<target>[\x21-\x7e]+) HTTP/(?P<version>[0-9]\.[0-9])")
FIELD_NAME: Final = re.compile(_TOKEN)
REQUEST_TARGET: Final = re.compile(rb"[\x21-\x7e]+")
FIELD_VALUE: Final = re.compile(rb"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?")
CONTENT_LENGTH: Final = re.compile(rb"[0-9]+")
#: the (lower-case) names ``response_head`` has rules for
_SPECIAL: Final = frozenset((b"content-length", b"transfer-encoding", b"connection", b"host"))
#: names and values already matched by FIELD_NAME / FIELD_VALUE: most lines repeat request after
#: request, and a set lookup costs a tenth of a match. Only valid ones are kept (a refusal is rare
#: and raises); each set is emptied when it reaches KNOWN_MAX (values that do not repeat, such as
#: request ids, would otherwise grow it without end).
_GOOD_NAMES: Final[dict[bytes, bytes]] = {}  # a name and its lower case
_GOOD_VALUES: Final[set[bytes]] = set()
KNOWN_MAX: Final = 4096


def _valid_name(name: bytes) -> bytes | None:
    """``name`` lower-cased if ``FIELD_NAME.fullmatch(name)``, remembered then; None if not."""
    if FIELD_NAME.fullmatch(name) is None:
        return None
    lower = bytes(name).lower()
    if type(name) is bytes:  # (not a bytearray: unhashable)
        if len(_GOOD_NAMES) >= KNOWN_MAX:
            _GOOD_NAMES.clear()
        _GOOD_NAMES[name] = lower
    return lower


def _valid_value(value: bytes) -> bool:
    """``FIELD_VALUE.fullmatch(value)``, remembered when it matches."""
    if FIELD_VALUE.fullmatch(value) is None:
        return False
    if type(value) is bytes:
        if len(_GOOD_VALUES) >= KNOWN_MAX:
            _GOOD_VALUES.clear()
        _GOOD_VALUES.add(value)
    return True
#: what llhttp parses the header block behind: any method would do but one with a body
_LINE: Final = b"PUT / HTTP/1.1\r\n"
_CRLF2: Final = b"\r\n\r\n"

END: Final = "end"  # the request body is complete
NEED_DATA: Final = "need-data"  # more bytes are needed


class _Relay:
    """llhttp's callbacks, forwarded to their owner through a weak reference.

    A parser holds the callbacks it was made with; callbacks bound to the owner (which holds the
    parser) would make one reference cycle per exchange, freed only by the cyclic collector, so a
    gateway run with the collector off would leak them (docs/reliability.md, "Pauses";
    tests/e2e/test_reliability_bench_smoke.py checks that a served load leaves no cycle)."""

    __slots__ = ("owner",)

    def __init__(self, owner: Any) -> None:
        self.owner = weakref.ref(owner)


def _relay_class(owner: type) -> type:
    """A ``_Relay`` with exactly the callbacks ``owner`` defines (llhttp looks each one up once)."""
    names = [n for n in ("on_message_begin", "on_url", "on_status", "on_header", "on_headers_complete", "on_body",
                         "on_message_complete", "on_chunk_header", "on_chunk_complete") if hasattr(owner, n)]

    def forward(name: str) -> Any:
        method = getattr(owner, name)
        code = getattr(method, "__code__", None)
        # the owner's function called with the arguments llhttp passes, no *args packing: half the
        # cost of a callback, which runs for each header line (2 arguments) and each body piece (1)
        arity = -1 if code is None or code.co_flags & inspect.CO_VARARGS else code.co_argcount - 1
        callback: Callable[..., Any]
        if arity == 0:
            def callback(self: _Relay) -> Any:
                return method(self.owner())
        elif arity == 1:
            def callback(self: _Relay, a: Any) -> Any:
                return method(self.owner(), a)
        elif arity == 2:
            def callback(self: _Relay, a: Any, b: Any) -> Any:
                return method(self.owner(), a, b)
        else:
            def callback(self: _Relay, *args: Any) -> Any:
                return getattr(self.owner(), name)(*args)
        callback.__name__ = name
        return callback

    return type(f"{owner.__name__}Relay", (_Relay,), {"__slots__": (), **{n: forward(n) for n in names}})


def _frame(writer: int | None, data: bytes) -> tuple[int | None, bytes]:
    """A body piece framed as h11 frames it, and what the body may still carry: ``writer`` is -1
    for chunked, the bytes a Content-Length leaves, or None for a body that ends at the close."""
    if writer == -1:  # (an empty chunk would be the last one: nothing is written)
        return writer, b"%x\r\n%s\r\n" % (len(data), data) if data else b""
    if writer is not None:
        if len(data) > writer:
            raise LocalProtocolError("Too much data for declared Content-Length")
        writer -= len(data)
    return writer, data


def _frame_end(writer: int | None) -> bytes:
    """The end of a body framed by ``_frame``: the last chunk, or nothing."""
    if writer is not None and writer > 0:
        raise LocalProtocolError("Too little data for declared Content-Length")
    return b"0\r\n\r\n" if writer == -1 else b""


class WireError(Exception):
    """The request is malformed; ``status`` is the answer h11 would hint (400, or 501 for a
    ``Transfer-Encoding`` other than ``chunked``)."""

    def __init__(self, status: int, what: str) -> None:
        super().__init__(what)
        self.status = status


def _tokens(value: bytes) -> list[bytes]:
    """h11's ``get_comma_header`` for one line: its comma-separated values, stripped, lower-cased."""
    return [part for part in (piece.strip().lower() for piece in value.split(b",")) if part]


def _status(head: bytes) -> int:
    """The status of the answer to a head llhttp refused: h11's own hint where h11 refuses it too
    (501 for a Transfer-Encoding it cannot use, unless it met a malformed line first), else 400.
    Only refused heads come here, so h11's cost is not the served requests'."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(head)
    try:
        conn.next_event()
    except h11.RemoteProtocolError as error:
        return error.error_status_hint
    return 400


class FastExchange:
    """One request on a server connection: its head (parsed by ``parse``), its body, its response."""

    __slots__ = ("method", "target", "http_version", "headers", "expects_continue", "keep_alive",
                 "request_done", "response_done", "trailing", "__weakref__", "_parser", "_remaining", "_chunked", "_events",
                 "_headers_done", "_tail", "_writer", "_must_close", "_method_upper")

    method: bytes
    target: bytes
    http_version: bytes
    headers: list[tuple[bytes, bytes]]  # names lower-cased, values without surrounding whitespace
    expects_continue: bool
    keep_alive: bool  # neither the request nor (once written) the response closes the connection
    request_done: bool
    response_done: bool
    trailing: bytes  # received and not yet this request's: its body still to read, then the next request
    _parser: httptools.HttpRequestParser | None
    _remaining: int
    _chunked: bool
    _method_upper: bytes

    def __init__(self) -> None:
        self.headers = []
        self._events: list[bytes | WireError] = []
        self._headers_done = False
        self.request_done = False
        self.response_done = False
        self._tail = b""
        self._writer: int | None = None  # bytes the response body may still carry; None: chunked or to close
        self._must_close = False

    # --- llhttp's callbacks ------------------------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._headers_done:  # after the head: a chunked body's trailer fields, ignored as h11 did
            self.headers.append((name.lower(), value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        self._headers_done = True

    def on_body(self, data: bytes) -> None:
        self._events.append(data)

    def on_message_complete(self) -> None:
        self.request_done = True

    # --- the request ------------------------------------------------------------------------------

    @classmethod
    def parse(cls, data: bytes, head_end: int) -> FastExchange:
        """The request whose head is ``data[:head_end]`` (ending with the blank line); the bytes
        after it are the start of its body (and maybe more). Raises ``WireError``."""
        line_end = data.find(b"\r\n", 0, head_end)
        match = REQUEST_LINE.fullmatch(data, 0, line_end) if line_end >= 0 else None
        if match is None:
            raise WireError(400, "illegal request line")
        self = cls()
        parser = self._parser = httptools.HttpRequestParser(_EXCHANGE_RELAY(self))
        parser.set_dangerous_leniencies(lenient_transfer_encoding=True, lenient_chunked_length=True)
        try:
            parser.feed_data(_LINE + data[line_end + 2:head_end])
        except httptools.HttpParserUpgrade:  # pragma: no cover - http1.py hands upgrades over first
            raise WireError(400, "upgrade") from None
        except httptools.HttpParserError as error:
            raise WireError(_status(data[:head_end]), str(error)) from None
        if not self._headers_done:
            raise WireError(400, "incomplete head")
        self.method, self.target, version = match.group("method", "target", "version")
        self.http_version = version
        headers = self.headers
        hosts = length = encodings = 0
        chunked = False
        close = expects = False  # h11's get_comma_header: a ``close`` / ``100-continue`` token
        for i, (name, value) in enumerate(headers):
            if name == b"host":
                hosts += 1
            elif name == b"connection":
                close = close or b"close" in _tokens(value)
            elif name == b"expect":
                expects = expects or b"100-continue" in _tokens(value)
            elif name == b"transfer-encoding":
                encodings += 1
                if encodings > 1:
                    raise WireError(501, "multiple Transfer-Encoding headers")
                if value.lower() != b"chunked":
                    raise WireError(501, "Only Transfer-Encoding: chunked is supported")
                chunked = True
                headers[i] = (name, b"chunked")  # as h11 lists it
            elif name == b"content-length":
                try:
                    length = int(value)  # llhttp let through digits only, once, below 2^64
                except ValueError:
                    raise WireError(400, "bad Content-Length") from None
        if hosts > 1 or (hosts == 0 and version == b"1.1"):
            raise WireError(400, "Host header missing or repeated")
        self._chunked = chunked
        self._remaining = 0 if chunked else length
        if not chunked:
            # llhttp waits for the Content-Length body, which is counted here instead
            self._parser = None
            self.request_done = length == 0
        else:
            self.request_done = False
        self.keep_alive = version >= b"1.1" and not close
        self.expects_continue = version >= b"1.1" and expects
        self._method_upper = self.method.upper()
        self.trailing = data[head_end:]
        return self

    def receive_data(self, data: bytes) -> None:
        """Bytes from the client after the head: this request's body, then what follows it."""
        if data:
            self.trailing += data

    def next_body(self) -> bytes | str:
        """The next piece of the body, ``END`` once it is whole, or ``NEED_DATA``; raises ``WireError``."""
        if self._chunked:
            return self._next_chunked()
        remaining = self._remaining
        if not remaining:
            self.request_done = True
            return END
        pending = self.trailing
        if not pending:
            return NEED_DATA
        if len(pending) < remaining:
            self.trailing = b""
            self._remaining = remaining - len(pending)
            return pending
        self.trailing = pending[remaining:]
        self._remaining = 0
        self.request_done = True
        return pending[:remaining] if len(pending) > remaining else pending

    def _next_chunked(self) -> bytes | str:
        events = self._events
        if events:
            event = events.pop(0)
            if isinstance(event, WireError):
                events.append(event)  # for good: every later call raises it too
                raise event
            return event
        if self.request_done:
            return END
        pending = self.trailing
        parser = self._parser
        if not pending or parser is None:
            return NEED_DATA
        # Feed up to (and including) each CRLF CRLF in turn: the message ends on one, so the parser
        # stops where it ends and never reads into the next request.
        probe = self._tail + pending
        skip = len(self._tail)
        start = 0
        try:
            while start < len(pending) and not self.request_done:
                # the next CRLF CRLF that ends past what was fed (it may begin in the fed tail)
                found = probe.find(_CRLF2, max(0, start + skip - 3))
                stop = len(pending) if found < 0 else found + 4 - skip
                parser.feed_data(pending[start:stop])
                start = stop
        except httptools.HttpParserError as error:
            self._parser = None
            self.trailing = b""
            self._events.append(WireError(400, str(error)))  # after the data before it, as h11 reads
            return self._next_chunked()
        fed = pending[:start]
        self._tail = (self._tail + fed)[-3:]
        self.trailing = pending[start:]
        if self.request_done:
            self._parser = None
        if events:
            return self._next_chunked()
        return END if self.request_done else NEED_DATA

    # --- the response -----------------------------------------------------------------------------

    def informational(self, status: int, reason: bytes) -> bytes:
        return b"HTTP/1.1 %d %s\r\n\r\n" % (status, reason)

    def response_head(self, status: int, headers: list[tuple[bytes, bytes]], reason: bytes) -> bytes:
        """The status line and headers, framed by h11's rules; raises ``LocalProtocolError`` for a
        name or value h11 would refuse (``http1.py`` then strips surrounding whitespace and retries)."""
        lines: list[tuple[bytes, bytes, bytes]] = []  # raw name, lower name, value
        length: bytes | None = None
        encoding = False
        connection: list[bytes] = []
        host = False
        for raw, value in headers:
            raw, value = bytes(raw), bytes(value)
            name = _GOOD_NAMES.get(raw) or _valid_name(raw)
            if name is None:
                raise LocalProtocolError(f"Illegal header name {raw!r}")
            if value not in _GOOD_VALUES and not _valid_value(value):
                raise LocalProtocolError(f"Illegal header value {value!r}")
            if name not in _SPECIAL:
                lines.append((raw, name, value))
                continue
            if name == b"content-length":
                lengths = {part.strip() for part in value.split(b",")}
                if len(lengths) != 1:
                    raise LocalProtocolError("conflicting Content-Length headers")
                value = lengths.pop()
                if CONTENT_LENGTH.fullmatch(value) is None or len(value) > 20:
                    raise LocalProtocolError("bad Content-Length")
                if length is not None:
                    if length != value:
                        raise LocalProtocolError("conflicting Content-Length headers")
                    continue
                length = value
            elif name == b"transfer-encoding":
                if encoding:
                    raise LocalProtocolError("multiple Transfer-Encoding headers")
                value = value.lower()
                if value != b"chunked":
                    raise LocalProtocolError("Only Transfer-Encoding: chunked is supported")
                encoding = True
            elif name == b"connection":
                connection.extend(part.strip().lower() for part in value.split(b",") if part.strip())
            else:  # host: written first, as h11 does
                host = True
            lines.append((raw, name, value))
        method = self._method_upper
        # h11 frames a HEAD answer's headers as a GET's, and writes no body
        connect_ok = method == b"CONNECT" and 200 <= status < 300
        if status in (204, 304) or connect_ok:
            pass  # no body: the headers stay as they are
        elif encoding or length is None:  # a body of unknown length
            lines = [line for line in lines if line[1] != b"content-length"]
            lines = [line for line in lines if line[1] != b"transfer-encoding"]
            length = None
            if self.http_version < b"1.1":
                encoding = False
                if method != b"HEAD":
                    self._must_close = True  # the body ends with the connection
            else:
                lines.append((b"Transfer-Encoding", b"transfer-encoding", b"chunked"))
                encoding = True
        if status in (204, 304) or method == b"HEAD" or connect_ok:
            self._writer = 0
        elif encoding:
            self._writer = -1
        elif length is not None:
            self._writer = int(length)
        else:
            self._writer = None
        if not self.keep_alive or self._must_close:  # (a close the response names itself stays where it is)
            tokens = set(connection)
            tokens.discard(b"keep-alive")
            tokens.add(b"close")
            lines = [line for line in lines if line[1] != b"connection"]
            lines += [(b"Connection", b"connection", token) for token in sorted(tokens)]
            self.keep_alive = False
        elif b"close" in connection:
            self.keep_alive = False
        if host:
            lines = [line for line in lines if line[1] == b"host"] + [line for line in lines if line[1] != b"host"]
        parts = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
        for raw, _, value in lines:
            parts += (raw, b": ", value, b"\r\n")
        parts.append(b"\r\n")
        return b"".join(parts)

    def body(self, data: bytes) -> bytes:
        """A piece of the response body, framed."""
        self._writer, framed = _frame(self._writer, data)
        return framed

    def end(self) -> bytes:
        """The end of the response."""
        last = _frame_end(self._writer)
        self.response_done = True
        return last

    @property
    def reusable(self) -> bool:
        """Both messages complete and neither side ends the connection: the next request may follow."""
        return self.request_done and self.response_done and self.keep_alive and not self._must_close


# --- the client side (upstream/pool.py) ----------------------------------------------------------


def _request_error(method: bytes, path: bytes, headers: list[tuple[bytes, bytes]]) -> LocalProtocolError | None:
    """h11's refusal of a request it could not frame (``h11.Request``'s checks), if any."""
    try:
        h11.Request(method=method, target=path, headers=headers)
    except LocalProtocolError as error:
        return error
    return None


class FastClient:
    """One exchange of an upstream connection: the request written by h11's rules, the response
    parsed by llhttp with h11's checks on top; events are h11's (``Response``, ``Data``, ...), so
    ``pool.py`` reads them as before. HEAD and CONNECT exchanges stay with h11 (llhttp cannot be
    told a response has no body because of the request's method)."""

    __slots__ = ("__weakref__", "_events", "_parser", "_headers", "_reason", "_head_bytes", "_raw", "_writer", "_limit",
                 "_informational", "_until_close", "_complete", "_error", "_close", "_length", "_received",
                 "our_done", "their_done",
                 "trailing")

    def __init__(self, limit: int) -> None:
        self._events: list[Any] = []
        self._parser = httptools.HttpResponseParser(_CLIENT_RELAY(self))
        self._parser.set_dangerous_leniencies(lenient_transfer_encoding=True, lenient_chunked_length=True)
        self._headers: list[tuple[bytes, bytes]] = []
        self._reason = b""
        self._head_bytes = 0  # bytes fed while no final response head was complete
        self._raw = bytearray()  # the same bytes, for h11's wording of an error
        self._limit = limit
        self._writer: int | None = 0  # -1 chunked, else bytes the request body may still carry
        self._informational = False
        self._until_close = False
        self._complete = False
        self._error: Exception | None = None
        self._close = False  # either side said ``Connection: close`` (or the backend is HTTP/1.0)
        self._length = -1  # the response's Content-Length (-1: none)
        self._received = 0  # body bytes so far
        self.our_done = False
        self.their_done = False
        self.trailing = b""

    # --- the request ----------------------------------------------------------------------------

    def request(self, method: bytes, path: bytes, headers: list[tuple[bytes, bytes]]) -> bytes:
        """The request head, h11's way (``Host`` first); raises ``LocalProtocolError`` as h11 does."""
        parts = [b"", b"", b": ", b"", b"\r\n"]  # the request line and the Host line: set below
        hosts = 0
        chunked = False
        length = None
        for raw, value in headers:
            try:
                name = _GOOD_NAMES.get(raw) if value in _GOOD_VALUES else None
            except TypeError:  # a bytearray (unhashable): matched below
                name = None
            if name is None and ((name := _valid_name(raw)) is None or not _valid_value(value)):
                raise _request_error(method, path, headers) or LocalProtocolError("illegal header")
            if name == b"host":
                hosts += 1
                parts[1], parts[3] = raw, value
                continue
            if name == b"content-length" and length is None and not chunked and len(value) <= 20 \
                    and CONTENT_LENGTH.fullmatch(value) is not None:
                length = int(value)  # one plain Content-Length, as every request with a body has: h11 would take it
            elif name == b"content-length" or name == b"transfer-encoding":
                error = _request_error(method, path, headers)  # anything else is rare: h11 decides
                if error is not None:
                    raise error
                if name == b"transfer-encoding":
                    chunked = True
                    value = value.lower()
                else:  # equal values (h11 refused others): one line with one value, as h11 writes it
                    value = value.split(b",")[0].strip()
                    if length is not None:
                        continue
                    length = int(value)
            elif name == b"connection" and b"close" in value.lower():
                self._close = self._close or b"close" in [t.strip() for t in value.lower().split(b",")]
            parts += (raw, b": ", value, b"\r\n")
        if hosts != 1 or not ((type(method) is bytes and method in _GOOD_NAMES) or _valid_name(method)) \
                or REQUEST_TARGET.fullmatch(path) is None:
            raise _request_error(method, path, headers) or LocalProtocolError("illegal request")
        self._writer = -1 if chunked else (length or 0)
        parts[0] = b"%s %s HTTP/1.1\r\n" % (method, path)
        parts.append(b"\r\n")
        return b"".join(parts)

    def data(self, data: bytes) -> bytes:
        self._writer, framed = _frame(self._writer, data)
        return framed

    def end(self) -> bytes:
        last = _frame_end(self._writer)
        self.our_done = True
        return last

    # --- llhttp's callbacks -------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.their_done:  # a second response in the same bytes: it answers no request
            self.trailing = b"(more)"

    def on_status(self, reason: bytes) -> None:
        self._reason += reason  # in pieces when it arrives in pieces

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._complete:
            self._headers.append((name.lower(), value.rstrip(b" \t")))

    def on_headers_complete(self) -> None:
        if self.their_done:
            return
        status = self._parser.get_status_code()
        headers, self._headers = self._headers, []
        reason, self._reason = self._reason, b""
        if status < 200:
            self._informational = True  # its end is not the response's
            self._events.append(h11.InformationalResponse(status_code=status, headers=headers, reason=reason,
                                                          _parsed=True))
            return
        self._complete = True
        encodings = 0
        framed = status in (204, 304)
        # h11's normalize_and_validate(_parsed=True), which h11.Response would run over every line,
        # done in this one pass: llhttp checked names and values and we lower-cased the names, so
        # each line is (name, name, value) but for h11's own rules on the two framing headers.
        lines = []
        for name, value in headers:
            if name == b"transfer-encoding":
                encodings += 1
                value = value.lower()
                if encodings > 1 or value != b"chunked":
                    raise LocalProtocolError("Only Transfer-Encoding: chunked is supported")
                framed = True
            elif name == b"content-length":
                # llhttp let through digits only, once (a second line, a comma, a sign are
                # refused), but leading zeros past h11's 20 digits
                if len(value) > 20:
                    raise LocalProtocolError("bad Content-Length")
                framed = True
                self._length = int(value)
            elif name == b"connection" and b"close" in value.lower():
                self._close = self._close or b"close" in [t.strip() for t in value.lower().split(b",")]
            lines.append((name, name, value))
        if self._parser.get_http_version() < "1.1":
            self._close = True
        self._until_close = not framed
        self._events.append(h11.Response(status_code=status, headers=_Headers(lines), reason=reason, _parsed=True))

    def on_body(self, data: bytes) -> None:
        if not self.their_done:
            self._received += len(data)
            self._events.append(h11.Data(data=data))

    def on_message_complete(self) -> None:
        if self.their_done:
            return
        if self._informational:
            self._informational = False
            return
        self.their_done = True
        self._events.append(h11.EndOfMessage())

    # --- reading ------------------------------------------------------------------------------------

    @property
    def awaiting_head(self) -> bool:
        return not self._complete

    def receive_data(self, data: bytes) -> None:
        """Bytes from the backend (``b""``: it closed)."""
        if self._error is not None:
            return
        if self.their_done:
            self.trailing += data
            return
        if not data:
            if self._until_close and self._complete and not self._events_pending_end():
                self.their_done = True
                self._events.append(h11.EndOfMessage())
            elif not self._complete:
                self._error = _closed()
            else:  # h11's wording
                self._error = BadResponse(
                    "invalid upstream response: peer closed connection without sending complete message body "
                    + (f"(received {self._received} bytes, expected {self._length})" if self._length >= 0
                       else "(incomplete chunked read)"))
            return
        if not self._complete:
            self._head_bytes += len(data)
            self._raw += data
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as error:
            if self.their_done:
                self.trailing = b"(more)"
            else:
                self._error = self._bad(error)
            return
        except LocalProtocolError as error:  # our check of the head, from a callback
            self._error = BadResponse(f"invalid upstream response: {error}")
            return
        if self._complete:
            self._raw = bytearray()
        elif self._head_bytes > self._limit:
            self._error = BadResponse("invalid upstream response: Receive buffer too long")
        if self.their_done:
            pass  # bytes after the response stay unparsed: the connection is not reused (pool.py)

    def _events_pending_end(self) -> bool:
        return any(type(event) is h11.EndOfMessage for event in self._events)

    def _bad(self, error: Exception) -> BadResponse:
        cause = error.__context__
        if isinstance(cause, LocalProtocolError):
            return BadResponse(f"invalid upstream response: {cause}")
        if not self._complete:  # h11's wording, from h11 itself (only a refused head comes here)
            conn = h11.Connection(h11.CLIENT)
            conn.send(h11.Request(method=b"GET", target=b"/", headers=[(b"host", b"x")]))
            conn.receive_data(bytes(self._raw))
            try:
                for _ in range(3):  # a head, a body, its end (h11 read what llhttp refused): then PAUSED
                    if conn.next_event() in (h11.NEED_DATA, h11.PAUSED):
                        break
            except h11.RemoteProtocolError as h11_error:
                return BadResponse(f"invalid upstream response: {h11_error}")
        return BadResponse(f"invalid upstream response: {error}")

    def next_event(self) -> Any:
        """The next h11 event, or ``h11.NEED_DATA``; raises ``BadResponse``."""
        events = self._events
        if events:
            return events.pop(0)
        if self._error is not None:
            raise self._error
        return h11.NEED_DATA

    @property
    def reusable(self) -> bool:
        return self.our_done and self.their_done and not (self._until_close or self._close or self.trailing)


_EXCHANGE_RELAY = _relay_class(FastExchange)
_CLIENT_RELAY = _relay_class(FastClient)


class BadResponse(Exception):
    """The backend's answer is not HTTP/1.1 (``pool.py`` raises it as ``BadUpstreamResponse``)."""


def _closed() -> BadResponse:
    return BadResponse("upstream closed the connection before the response completed")
