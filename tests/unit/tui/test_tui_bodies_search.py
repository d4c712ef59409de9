"""The body view (``b``) and search (``/``, ``n``, ``N``) as pure view state."""

from __future__ import annotations

import base64
import copy
import json

from tests.fake_trace_gateway import canned_events
from trioproxy.tui.state import ExportShown, TraceView

CHAT = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "say hi to Oslo"}]}


def chunk(**delta):
    return {"object": "chat.completion.chunk", "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}


STREAM = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in (
    chunk(role="assistant", content=""), chunk(content="Hello, "), chunk(content="Oslo!"),
    {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"object": "chat.completion.chunk", "choices": [],
     "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}})) + b"data: [DONE]\n\n"


def llm_events(response_body: bytes = STREAM, content_type: str = "text/event-stream") -> list[dict]:
    """A traced chat request: JSON request body, a streamed answer (with the snapshots' content types)."""
    events = copy.deepcopy(canned_events("POST", "/v1/chat/completions", body=json.dumps(CHAT).encode(),
                                         headers={"host": "api", "content-type": "application/json"}))
    for e in events:
        msg = e["message"]
        if msg["type"] == "responseSnapshot":
            msg["requestState"]["response"]["headers"] = {"content-type": content_type}
        if msg["type"] == "bodySnapshot" and msg["stage"] == "response":
            msg["body"] = base64.b64encode(response_body).decode()
    return events


def view_of(events, **kw) -> TraceView:
    view = TraceView(**kw)
    for e in events:
        view.add_event(e)
    return view


def texts(lines):
    return [text for _, text in lines]


def test_body_view_shows_request_json_and_the_reassembled_answer_side_by_side():
    view = view_of(llm_events())
    view.set_mode("bodies")
    assert view.details_title() == "Bodies" and view.focus == "details" and view.panes() == ("details",)
    left, right = view.body_columns()
    assert left[0] == ("body.head", "POST /v1/chat/completions")
    assert left[1] == ("body.caption", f"── final request · {len(json.dumps(CHAT))} bytes · application/json")
    assert texts(left[2:]) == json.dumps(CHAT, indent=2).splitlines()  # pretty-printed
    assert right[0] == ("body.head", "status 200")
    assert right[1][1].endswith("bytes · text/event-stream")
    assert right[2] == ("body.caption", "OpenAI chat stream reassembled from 5 events, model gpt-4o-mini")
    shown = texts(right)
    assert shown[3:5] == ["text:", "Hello, Oslo!"]
    assert "finish: stop" in shown and "tokens: input 7, output 3, total 10" in shown
    assert "6 events:" in shown  # then the events themselves, as they came
    # the combined lines (copy, scroll limit) hold both columns
    assert "Hello, Oslo!" in view.details_text() and '"model": "gpt-4o-mini",' in view.details_text()
    view.move(10**9)
    assert view.details_scroll == max(len(left), len(right)) - 1
    view.set_mode("event")  # back: the focus returns to the events, not to a pane no longer shown
    assert view.focus == "events" and view.details_scroll == 0


def test_body_view_of_a_request_without_bodies_and_one_still_running():
    events = canned_events("GET", "/x")
    view = view_of(events[:-2])  # no response body yet
    view.set_mode("bodies")
    left, right = view.body_columns()
    assert left[1:] == [("body.none", "no request body in the trace")]
    assert right == [("body.head", "status …"), ("body.none", "no response body yet")]
    view.add_event(events[-2])
    view.add_event(events[-1])
    assert view.body_columns()[1][-1] == ("", "hello from backend")  # the cache follows new events


def test_translated_answers_keep_both_forms_on_the_response_side():
    events = llm_events()
    at = next(i for i, e in enumerate(events) if e["message"].get("stage") == "response")
    provider = {**events[at], "message": {"type": "bodySnapshot", "stage": "provider response",
                                          "body": base64.b64encode(b'{"id": "x"}').decode()}}
    events.insert(at, provider)
    view = view_of(events)
    right = texts(view.body_columns()[1])
    assert any(t.startswith("── provider response · 11 bytes") for t in right)
    assert any(t.startswith("── response · ") for t in right)
    # and the snapshot view puts a provider response body on the response, not on the request
    snap = view.requests[0].snapshot_at(at)
    assert snap["response"]["body"] == '{"id": "x"}' and snap["request"]["body"] == json.dumps(CHAT)


def test_raw_event_of_a_body_snapshot_shows_the_body_decoded():
    view = view_of(llm_events())
    view.move(-1)  # the response body snapshot
    text = view.details_text()
    assert "type: bodySnapshot" in text and "# body, decoded (" in text and "Hello, Oslo!" in text


def test_search_finds_lines_in_events_and_bodies_and_cycles():
    view = view_of(llm_events())
    trace = view.trace
    view.set_mode("snapshot")
    view.search("oslo")
    matches = view.matches()
    # the request body (say hi to Oslo) and the response body (Hello, Oslo!): decoded, case-insensitive
    rows = sorted(view.matching_rows())
    body_rows = [i for i, e in enumerate(trace.events) if e["message"]["type"] == "bodySnapshot"]
    assert rows == body_rows
    first = view.current_match()
    assert first == matches[0] and view.mode == "event"  # a match is a line of the raw event
    assert view.selected_row == first.row and "oslo" in view.details_lines()[first.line][1].lower()
    assert view.details_scroll == first.line - 1
    assert view.search_status() == f"/oslo: 1/{len(matches)}"
    for i in range(1, len(matches)):
        view.search_next()
        assert view.current_match() == matches[i]
    view.search_next()
    assert view.current_match() == matches[0]  # wraps
    view.search_next(-1)
    assert view.current_match() == matches[-1] and view.selected_row == body_rows[-1]
    assert not view.follow_rows


def test_search_starts_at_the_selected_row_and_reports_no_match():
    view = view_of(llm_events())
    view.move(-10**9)
    view.move(2)
    view.search("requestFinished")
    assert view.selected_row == len(view.trace.events) - 1 and view.follow_rows
    view.search("no such text")
    assert view.matches() == [] and view.notice == "no match for 'no such text'"
    assert view.search_status() == "/no such text: no match"
    view.search("")
    assert view.search_term is None and view.search_status() == ""
    view.search_next()
    assert view.notice == "no search: press / and type a term"


def test_search_in_the_body_view_scrolls_both_columns_to_the_match():
    view = view_of(llm_events())
    view.set_mode("bodies")
    view.search("hello, oslo")
    left, right = view.body_columns()
    match = view.current_match()
    assert match.row == -1 and match.column == 1 and right[match.line][1] == "Hello, Oslo!"
    assert view.mode == "bodies" and view.details_scroll == match.line - 1
    assert len(view.matches()) == 1 + sum("Hello, Oslo!" in t for t in texts(right[match.line + 1:]))
    view.search("gpt-4o-mini")  # in both columns: ordered by line, then column
    order = [(m.line, m.column) for m in view.matches()]
    assert order == sorted(order) and {m.column for m in view.matches()} == {0, 1}


def test_search_prompt_typing():
    view = view_of(llm_events())
    view.prompt_open()
    assert view.prompt == ""
    view.prompt_type("Osl")
    view.prompt_type("x\x1b")  # control characters are not typed
    view.prompt_backspace()
    assert view.prompt == "Osl"
    view.prompt_accept()
    assert view.prompt is None and view.search_term == "Osl" and view.current_match() is not None
    view.prompt_open()
    view.prompt_type("zzz")
    view.prompt_cancel()
    assert view.prompt is None and view.search_term == "Osl"  # Esc keeps the search it interrupted


def test_a_replayed_trace_is_listed_and_selected_before_a_request_still_arriving():
    first, live = canned_events("GET", "/a"), canned_events("GET", "/live")
    view = view_of(first + live[:3])  # /live is still arriving
    view.show_export(ExportShown(1, "/tmp/a.har", "curl http://a"))
    replayed = canned_events("GET", "/a", status=201)
    at = view.add_trace(replayed, note="replay of 1")
    assert at == 1 and view.selected_request == 1 and view.show_requests and not view.follow_requests
    assert [(r.path, r.note, r.status) for r in view.requests] == [
        ("/a", "", "200"), ("/a", "replay of 1", "201"), ("/live", "", "…")]
    assert view.selected_row == len(replayed) - 1 and view.mode == "event"
    for e in live[3:]:  # the live request's events still go to the live request
        view.add_event(e)
    assert len(view.requests) == 3 and view.requests[2].finished and view.selected_request == 1
    assert view.add_trace(canned_events("GET", "/b")) == 3  # after finished requests: at the end


def test_export_view_shows_the_har_file_and_copies_the_curl_line():
    view = view_of(llm_events())
    assert view.details_title() == "Raw Event"
    view.show_export(ExportShown(1, "/tmp/x/trioproxy-request-1.har", "curl --globoff http://a/v1 -d hi"))
    assert view.details_title() == "Export"
    assert texts(view.details_lines()) == ["request 1 written as HAR 1.2 to /tmp/x/trioproxy-request-1.har", "",
                                           "curl (c copies it):", "curl --globoff http://a/v1 -d hi"]
    assert view.details_text() == "curl --globoff http://a/v1 -d hi"
    view.show_export(ExportShown(1, "/tmp/h.har", None, "the trace cut the request body"))
    assert view.details_lines()[-1] == ("body.warn", "no curl line: the trace cut the request body")
    assert view.details_text().startswith("request 1 written")


def test_matches_are_highlighted_the_current_one_apart_and_matching_rows_marked():
    from trioproxy.tui.layout import TraceLayout

    view = view_of(llm_events())
    layout = TraceLayout(view)
    view.search("oslo")
    fragments = layout._details()
    hits = [(style, text) for style, text in fragments if "search" in style]
    current = view.current_match()
    assert ("class:search.current", "Oslo") in hits  # the current match's line
    line_of = "".join(text for _, text in fragments).split("\n")
    assert "Oslo" in line_of[current.line - view.details_scroll]
    marks = [text for style, text in layout._event_lines() if style == "class:search.match"]
    assert marks == ["▶"] * len(view.matching_rows())
    view.set_mode("bodies")
    view.search("oslo")
    right = layout._column(1)
    assert [t for s, t in right if s == "class:search.current"] == ["Oslo"]
    assert all(t.lower() == "oslo" for s, t in right if s.startswith("class:search"))


def test_a_gzip_response_is_shown_and_searched_decoded():
    import gzip

    events = llm_events(gzip.compress(STREAM))
    for e in events:
        if e["message"]["type"] == "responseSnapshot":
            e["message"]["requestState"]["response"]["headers"]["content-encoding"] = "gzip"
    view = view_of(events)
    view.set_mode("bodies")
    right = texts(view.body_columns()[1])
    assert right[2].startswith("(gzip: ") and "Hello, Oslo!" in right
    view.set_mode("event")
    view.search("hello, oslo")
    assert view.matching_rows() == {len(events) - 2}  # the response body snapshot, decoded
