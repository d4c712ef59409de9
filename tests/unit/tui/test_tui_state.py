import base64

from tests.fake_trace_gateway import canned_events
from trioproxy.tui.state import KIND_BY_TYPE, RequestTrace, TraceView, render, summarize


def trace_of(events):
    t = RequestTrace()
    for e in events:
        t.add(e)
    return t


def ev(msg, severity="info"):
    return {"eventStart": None, "eventEnd": 1, "severity": severity, "message": msg}


def test_rows_kinds_and_agctl_summaries():
    t = trace_of(canned_events("POST", "/v1/x", body=b'{"a": 1}'))
    kinds = [r.kind for r in t.rows]
    assert kinds[0] == "Request Start" and kinds[-1] == "Request Done"
    # a plain request has no MCP call, and no LLM usage
    assert set(kinds) == set(KIND_BY_TYPE.values()) - {"MCP Call", "LLM Usage"}
    by_kind = {r.kind: r.summary for r in t.rows}
    assert by_kind["Route"] == 'selected "default/default/bind/3000/listener0/default/api" (2 evaluated)'
    assert by_kind["Backend Start"] == "target=127.0.0.1:8080"
    assert by_kind["Backend Result"] == "status=200"
    assert by_kind["Request Done"] == "request finished status=200"
    assert by_kind["Policy"] == "localRateLimit: allowed"
    assert [r.number for r in t.rows] == list(range(1, len(t.rows) + 1))
    assert t.rows[1].summary == "initial request"
    policies = [r.summary for r in t.rows if r.kind == "Policies"]
    assert policies == ["gateway", "route (localRateLimit)", "backend"]
    assert t.finished and t.method == "POST" and t.path == "/v1/x" and t.status == "200"
    assert t.duration.endswith("ms")


def test_mcp_call_rows():
    call = {"type": "mcp", "method": "tools/call", "tool": "add", "target": "math", "result": "ok", "error": None,
            "duration": "1.2ms"}
    assert summarize(ev(call)) == ("MCP Call", "tools/call add@math: ok")
    denied = {**call, "tool": "shout", "target": "text", "result": "denied", "error": "Unknown tool: text_shout"}
    assert summarize(ev(denied))[1] == "tools/call shout@text: denied error=Unknown tool: text_shout"
    assert summarize(ev({"type": "mcp", "method": "initialize", "result": "ok"}))[1] == "initialize: ok"


def test_llm_usage_summary():
    usage = {"type": "llmUsage", "provider": "openai", "model": "gpt-4o-mini", "cost": 0.00012,
             "inputTokens": 9, "outputTokens": 4, "totalTokens": 13}
    assert summarize(ev(usage)) == ("LLM Usage", "model=gpt-4o-mini in=9 out=4 cost=0.00012")
    assert summarize(ev({**usage, "cost": None}))[1] == "model=gpt-4o-mini in=9 out=4"


def test_error_summaries():
    assert summarize(ev({"type": "routeSelection", "selectedRoute": None, "evaluatedRoutes": []})) == (
        "Route", "no route matched (0 evaluated)")
    assert summarize(ev({"type": "backendCallResult", "status": None, "error": "connection refused"}))[1] == (
        "error=connection refused")
    assert summarize(ev({"type": "requestFinished", "status": 503, "error": "connection refused"}))[1] == (
        "request finished status=503 error=connection refused")
    assert summarize(ev({"type": "somethingNew"})) == ("somethingNew", "")
    assert summarize(ev({"type": "policySelection", "effectivePolicy": {}})) == ("Policies", "effective policy")


def test_snapshot_decodes_bodies_up_to_the_selected_row():
    events = canned_events("POST", "/v1/x", body=b'{"a": 1}\n')
    t = trace_of(events)
    types = [e["message"]["type"] for e in events]
    body_req = types.index("bodySnapshot")
    assert t.snapshot_at(0) is None
    before = t.snapshot_at(body_req - 1)
    assert before["stage"] == "final request" and "body" not in before["request"]
    at = t.snapshot_at(body_req)
    assert at["request"]["body"] == '{"a": 1}\n'
    last = t.snapshot_at(len(events) - 1)
    assert last["stage"] == "final response"
    assert last["response"] == {"code": 200, "headers": {"content-type": "text/plain"},
                                "body": "hello from backend\n"}
    assert last["request"]["body"] == '{"a": 1}\n'
    # YAML shows multi-line bodies as block scalars, readable
    assert "body: |" in "\n".join(render(last, "yaml"))
    # the event itself is not changed by decoding
    assert events[-2]["message"]["body"] == base64.b64encode(b"hello from backend\n").decode()


def test_binary_body_is_previewed():
    t = trace_of([ev({"type": "requestSnapshot", "stage": "final request", "requestState": {"request": {}}}),
                  ev({"type": "bodySnapshot", "stage": "final request",
                      "body": base64.b64encode(b"\xff\x00\x01").decode()})])
    assert t.snapshot_at(1)["request"]["body"].startswith("<3 bytes binary> ff0001")


def test_diff_against_previous_snapshot():
    events = canned_events()
    t = trace_of(events)
    types = [e["message"]["type"] for e in events]
    final_req = types.index("backendCallStart") - 1
    caption, diff = t.diff_at(final_req, "yaml")
    assert caption == "route policies → final request"
    added = [line for tag, line in diff if tag == "+"]
    assert any("backend:" in line for line in added)
    assert all(tag in "+-@ " for tag, _ in diff)
    assert t.diff_at(0, "yaml") == ("no snapshot yet", [])
    caption, diff = t.diff_at(1, "yaml")
    assert caption == "(nothing) → initial request" and all(tag in "+@" for tag, _ in diff)


def test_view_follows_newest_row_until_user_moves():
    view = TraceView()
    assert view.status_line() == "waiting for trace data"
    events = canned_events()
    for e in events[:5]:
        view.add_event(e)
    assert view.selected_row == 4 and view.status_line() == "5 events"
    view.move(-2)
    assert view.selected_row == 2 and not view.follow_rows
    view.add_event(events[5])
    assert view.selected_row == 2
    view.move(10**9)
    assert view.selected_row == 5 and view.follow_rows
    for e in events[6:]:
        view.add_event(e)
    assert view.selected_row == len(events) - 1
    view.complete = True
    assert view.status_line() == "stream complete, press q to exit"
    view.error = "boom"
    assert view.status_line() == "boom"


def test_view_modes_titles_focus_and_scroll():
    view = TraceView()
    for e in canned_events():
        view.add_event(e)
    assert view.details_title() == "Raw Event"
    assert view.details_lines()[0][1].startswith("eventStart:")
    view.toggle_format()
    assert view.details_title() == "Raw Event (json)" and view.details_text().startswith("{")
    view.toggle_format()
    view.set_mode("snapshot")
    assert view.details_title() == "Snapshot" and "stage: final response" in view.details_text()
    view.set_mode("diff")
    assert view.details_title() == "Snapshot Diff"
    # last row: the response body snapshot, diffed against the final response snapshot
    lines = view.details_lines()
    assert lines[0] == ("diff.caption", "final response → response body")
    assert ("diff.add", "+  body: |") in lines
    assert view.panes() == ("events", "details")
    view.focus_next()
    assert view.focus == "details"
    view.move(3)
    assert view.details_scroll == 3
    view.move(-10)
    assert view.details_scroll == 0
    view.focus_next()
    assert view.focus == "events"
    view.focus_next(-1)
    assert view.focus == "details"


def test_follow_mode_splits_requests():
    view = TraceView(show_requests=True)
    first = canned_events("GET", "/a")
    second = canned_events("POST", "/b", status=404)
    for e in first + second:
        view.add_event(e)
    assert len(view.requests) == 2 and view.selected_request == 1
    assert [(r.method, r.path, r.status) for r in view.requests] == [("GET", "/a", "200"), ("POST", "/b", "404")]
    assert view.panes() == ("requests", "events", "details")
    view.focus = "requests"
    view.move(-1)
    assert view.selected_request == 0 and view.trace is view.requests[0]
    assert view.selected_row == len(first) - 1
    view.add_event(first[0])  # a third request starts; the user's choice stays
    assert view.selected_request == 0
    assert view.status_line() == f"{2 * len(first) + 1} events in 3 requests"
