"""``llm/translate/sse.py`` in-process (issue 35): events split anywhere (inside a CRLF too), the
``data:`` space rule, ``event:`` names, lines of no use skipped, a last event without its blank line."""

from __future__ import annotations

import pytest

from trioproxy.llm.translate.sse import SseReader, sse

STREAM = (b": comment\r\nid: 1\r\nretry: 5\r\nevent: delta \r\ndata: {\"a\":1}\r\ndata:two\r\n\r\n"
          b"data:  spaced\n\nevent: ping\n\ndata: \xff\rdata: last\r\r\n")
EVENTS = [("delta", '{"a":1}\ntwo'), ("message", " spaced"), ("message", "\ufffd\nlast")]


@pytest.mark.parametrize("size", [1, 2, 3, 7, len(STREAM)])
def test_events_come_out_whole_however_the_bytes_are_split(size):
    reader = SseReader()
    events = []
    for at in range(0, len(STREAM), size):
        events += reader.feed(STREAM[at:at + size])
    assert events == EVENTS and reader.finish() == []


def test_a_cr_at_the_end_of_a_chunk_waits_for_its_lf():
    reader = SseReader()
    assert reader.feed(b"data: a\r\n\r") == []
    assert reader.feed(b"\ndata: b\n\n") == [("message", "a"), ("message", "b")]


def test_finish_gives_a_last_event_without_its_blank_line():
    reader = SseReader()
    assert reader.feed(b"event: end\r\ndata: x\r\n") == []
    assert reader.finish() == [("end", "x")]
    assert reader.finish() == []  # the rest was consumed
    reader.feed(b"event: only-a-name\n")
    assert reader.finish() == []  # no data: no event
    reader.feed(b"  \n")
    assert reader.finish() == []


def test_sse_frames_compact_json_named_or_not():
    assert sse({"a": [1, "é"]}) == 'data: {"a":[1,"é"]}\n\n'.encode()
    assert sse({"a": 1}, "delta") == b'event: delta\ndata: {"a":1}\n\n'


def test_an_event_name_without_a_space_and_reading_on_after_finish():
    reader = SseReader()
    assert reader.feed(b"event:end\ndata:x\n\n") == [("end", "x")]
    reader.feed(b"data: partial")
    assert reader.finish() == [("message", "partial")]
    assert reader.feed(b"data: y\n\n") == [("message", "y")]  # finish left nothing behind
