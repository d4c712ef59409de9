"""``telemetry/export.py``: traces and history entries as HAR 1.2 and curl lines (pure functions;
the real curl binary and a real gateway: tests/e2e/test_export.py)."""

from __future__ import annotations

import base64
import json
import shlex
import shutil
import subprocess

import pytest

from tests.har_helpers import assert_har
from trioproxy.telemetry.export import Exchange, ExportError, curl, exchange_from_trace, har, har_from_history


def _snapshot(stage: str, at: int, request: dict, **extra) -> dict:
    return {"eventStart": None, "eventEnd": at, "severity": "info",
            "message": {"type": "requestSnapshot", "stage": stage,
                        "requestState": {"request": request, "env": {"listener": "default/default/bind/3000/listener0",
                                                                     "route": "r"}, **extra}}}


def _body(stage: str, at: int, body: bytes, truncated: bool = False) -> dict:
    message = {"type": "bodySnapshot", "stage": stage, "body": base64.b64encode(body).decode()}
    if truncated:
        message["truncated"] = True
    return {"eventStart": None, "eventEnd": at, "severity": "info", "message": message}


def trace(*, method="POST", uri="/v1/chat?q=1&access_token=<redacted>", headers=None, request_body=b'{"a": 1}',
          response_body=b'{"ok": true}', status=200, backend_call=True, truncated=False, extra=()) -> list[dict]:
    headers = headers if headers is not None else {
        "host": "api.example.com:3000", "content-type": "application/json", "authorization": "<redacted>",
        "x-tenant": "acme"}
    request = {"method": method, "path": uri.split("?")[0], "uri": uri, "host": "api.example.com", "scheme": "http",
               "version": "HTTP/1.1", "headers": headers}
    events = [{"eventStart": None, "eventEnd": 0, "severity": "info", "message": {"type": "requestStarted"}},
              _snapshot("initial request", 5, request)]
    events += list(extra)
    if backend_call:
        events += [{"eventStart": None, "eventEnd": 1000, "severity": "info", "message": {"type": "backendCallStart"}},
                   {"eventStart": 1000, "eventEnd": 4000, "severity": "info",
                    "message": {"type": "backendCallResult", "status": status, "error": None}}]
    if request_body is not None:
        events.append(_body("final request", 4100, request_body, truncated))
    events.append({"eventStart": None, "eventEnd": 4200, "severity": "info", "message": {
        "type": "responseSnapshot", "stage": "final response", "requestState": {
            "request": request, "response": {"code": status, "headers": {"content-type": "application/json",
                                                                        "set-cookie": "<redacted>"}},
            "backend": {"name": "b1", "type": "host", "protocol": "http"}}}})
    if response_body is not None:
        events.append(_body("response", 4500, response_body))
    events.append({"eventStart": None, "eventEnd": 5000, "severity": "success",
                   "message": {"type": "requestFinished", "status": status, "error": None}})
    return events


def test_exchange_reads_request_answer_timings_and_redactions():
    x = exchange_from_trace(trace(), started=1_700_000_000.25)
    assert (x.method, x.url, x.http_version, x.status) == (
        "POST", "http://api.example.com:3000/v1/chat?q=1&access_token=<redacted>", "HTTP/1.1", 200)
    assert x.request_body == b'{"a": 1}' and x.response_body == b'{"ok": true}'
    assert x.redacted == {"authorization"} and x.redacted_params == {"access_token"}
    assert x.timings == {"blocked": 1.0, "send": 0.0, "wait": 3.0, "receive": 1.0, "total": 5.0}
    assert (x.listener, x.route, x.backend, x.bind_port) == ("default/default/bind/3000/listener0", "r", "b1", 3000)
    assert x.target == "/v1/chat?q=1&access_token=<redacted>"


def test_client_request_body_is_preferred_to_the_translated_one():
    events = trace(extra=[_body("client request", 3, b"client form")])
    assert exchange_from_trace(events).request_body == b"client form"


def test_not_a_trace_is_an_export_error():
    with pytest.raises(ExportError, match="initial request"):
        exchange_from_trace([{"message": {"type": "requestFinished", "status": 200}}])
    with pytest.raises(ExportError, match="method"):
        exchange_from_trace([{"message": {"type": "requestSnapshot", "stage": "initial request",
                                          "requestState": {"request": {}}}}])
    bad = trace()
    bad[-2] = {**bad[-2], "message": {**bad[-2]["message"], "body": "!!"}}
    with pytest.raises(ExportError, match="base64"):
        exchange_from_trace(bad)


def test_har_validates_and_keeps_redactions_and_binary_bodies():
    gateway_answer = trace(status=429, backend_call=False, request_body=None, response_body=bytes([0xff, 0, 1]))
    document = har([exchange_from_trace(trace(), started=1_700_000_000.25), exchange_from_trace(gateway_answer)])
    assert_har(document)
    first, second = document["log"]["entries"]
    assert first["startedDateTime"] == "2023-11-14T22:13:20.250Z"
    assert first["time"] == 5.0 and first["timings"]["wait"] == 3.0 and first["timings"]["blocked"] == 1.0
    assert {"name": "authorization", "value": "<redacted>"} in first["request"]["headers"]
    assert {"name": "access_token", "value": "<redacted>"} in first["request"]["queryString"]
    assert first["request"]["postData"] == {"mimeType": "application/json", "text": '{"a": 1}'}
    assert first["response"]["content"]["text"] == '{"ok": true}' and "comment" in first
    assert second["timings"]["blocked"] == -1 and second["response"]["statusText"] == "Too Many Requests"
    assert "postData" not in second["request"]
    assert second["response"]["content"] == {"size": 3, "mimeType": "application/json",
                                             "text": base64.b64encode(bytes([0xff, 0, 1])).decode(),
                                             "encoding": "base64"}
    json.dumps(document)  # JSON as is


def test_har_from_history_validates_oldest_first():
    entries = [
        {"time": 1_700_000_002.0, "method": "GET", "path": "/b", "host": "h", "route": None, "backend": None,
         "status": 404, "durationMs": 0.5, "reason": "route not found", "errorKind": "RouteNotFound"},
        {"time": 1_700_000_001.0, "method": "POST", "path": "/a", "host": "h:3000", "route": "r", "backend": "b",
         "status": 200, "durationMs": 250.0, "inputTokens": 3, "outputTokens": 4, "cost": 0.01},
    ]
    document = har_from_history(entries)
    assert_har(document)
    first, second = document["log"]["entries"]
    assert (first["request"]["url"], first["startedDateTime"]) == ("http://h:3000/a", "2023-11-14T22:13:20.750Z")
    assert first["time"] == 250.0 and first["_trioproxy"]["inputTokens"] == 3
    assert second["response"]["status"] == 404 and second["_trioproxy"]["reason"] == "route not found"


def words(line: str) -> list[str]:
    return shlex.split(line)


def test_curl_drops_redactions_unless_supplied():
    x = exchange_from_trace(trace())
    line = words(curl(x))
    assert line[:3] == ["curl", "--globoff", "--path-as-is"]
    assert "http://api.example.com:3000/v1/chat?q=1" in line  # the redacted parameter is left out
    assert "authorization: <redacted>" not in line and not any("authorization" in w for w in line)
    assert ["-H", "x-tenant: acme"] == line[line.index("x-tenant: acme") - 1:line.index("x-tenant: acme") + 1]
    assert line[-2:] == ["--data-binary", '{"a": 1}'] and "-X" not in line  # POST is implied by the body
    assert "user-agent:" in line and "accept:" in line  # curl's own defaults removed: the trace had none
    given = words(curl(x, credentials={"Authorization": "Bearer s", "x-extra": "1"},
                       base_url="http://127.0.0.1:3000/"))
    assert "authorization: Bearer s" in given and "x-extra: 1" in given
    assert "http://127.0.0.1:3000/v1/chat?q=1" in given and "host: api.example.com:3000" in given


def test_curl_methods_and_bodies():
    assert words(curl(exchange_from_trace(trace(method="GET", request_body=None))))[3:5] != ["-X", "GET"]
    assert "--head" in words(curl(exchange_from_trace(trace(method="HEAD", request_body=None))))
    assert words(curl(exchange_from_trace(trace(method="PUT"))))[3:5] == ["-X", "PUT"]
    no_type = curl(exchange_from_trace(trace(headers={"host": "h"}, request_body=b"x=1")))
    assert "content-type:" in words(no_type)  # curl would add its form type otherwise
    at = curl(exchange_from_trace(trace(request_body=b"@/etc/passwd")))
    assert at.startswith("printf %s @/etc/passwd | curl ") and words(at.split(" | ")[1])[-1] == "@-"
    binary = curl(exchange_from_trace(trace(request_body=b"\x00\xff")))
    encoded = base64.b64encode(b"\x00\xff").decode()
    assert binary.startswith(f"printf %s {encoded} | base64 -d | curl ")
    with pytest.raises(ExportError, match="TRIOPROXY_TRACE_BODY_LIMIT"):
        curl(exchange_from_trace(trace(truncated=True)))


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_curl_line_is_one_shell_command_whose_words_survive_quoting(tmp_path):
    """The line as bash parses it: every word as built (quotes, $, backticks, newlines inside)."""
    fake = tmp_path / "curl"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done; cat\n')
    fake.chmod(0o755)
    body = b"it's \"$(rm -rf /)\" `x` \n next"
    line = curl(exchange_from_trace(trace(headers={"host": "h", "x-q": "a'b\"c $HOME"}, request_body=body)))
    done = subprocess.run(["bash", "-c", line], capture_output=True, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    args = done.stdout.split(b"\0")
    assert b"x-q: a'b\"c $HOME" in args and body in args


# -- every field, exactly


def test_exchange_is_exactly_what_the_trace_says():
    assert exchange_from_trace(trace(), started=5.0) == Exchange(
        method="POST", url="http://api.example.com:3000/v1/chat?q=1&access_token=<redacted>", http_version="HTTP/1.1",
        request_headers=(("host", "api.example.com:3000"), ("content-type", "application/json"),
                         ("authorization", "<redacted>"), ("x-tenant", "acme")),
        request_body=b'{"a": 1}', status=200,
        response_headers=(("content-type", "application/json"), ("set-cookie", "<redacted>")),
        response_body=b'{"ok": true}',
        timings={"blocked": 1.0, "send": 0.0, "wait": 3.0, "receive": 1.0, "total": 5.0},
        redacted=frozenset({"authorization"}), redacted_params=frozenset({"access_token"}),
        request_truncated=False, response_truncated=False, started=5.0, error=None,
        listener="default/default/bind/3000/listener0", route="r", backend="b1")


def test_a_minimal_trace_falls_back_field_by_field():
    """Only the initial snapshot, with what a gateway's own early answer may lack."""
    events = [{"eventEnd": 7, "message": {"type": "requestSnapshot", "stage": "initial request", "requestState": {
        "request": {"method": "GET", "path": "/p", "host": "only-name", "scheme": "https"}}}}]
    x = exchange_from_trace(events)
    assert x == Exchange(method="GET", url="https://only-name/p", http_version="HTTP/1.1", request_headers=(),
                         request_body=None, status=0, timings={"blocked": -1.0, "send": 0.0, "wait": 0.007,
                                                              "receive": 0.0, "total": 0.007})
    assert (x.scheme, x.host, x.target, x.bind_port) == ("https", "only-name", "/p", None)
    bare = [{"message": {"type": "requestSnapshot", "stage": "initial request", "requestState": {
        "request": {"method": "GET"}}}}]
    assert exchange_from_trace(bare).url == "http:///"


def test_status_and_error_come_from_request_finished_else_the_final_response():
    events = trace(status=503)
    events[-1]["message"].update(status=0, error="upstream connect error")
    x = exchange_from_trace(events)
    assert (x.status, x.error) == (0, "upstream connect error")
    without_finish = trace(status=503)[:-1]
    assert exchange_from_trace(without_finish).status == 503
    assert exchange_from_trace(without_finish).timings["total"] == 4.5  # the last event's time
    odd = trace()
    odd[-1]["message"].update(status="200", error=5)
    assert (exchange_from_trace(odd).status, exchange_from_trace(odd).error) == (0, None)


def test_truncated_response_and_the_last_final_response_count():
    events = trace()
    events[-2]["message"]["truncated"] = True
    events.insert(-2, {"eventEnd": 4300, "message": {"type": "responseSnapshot", "stage": "final response",
                                                     "requestState": {"response": {"code": 200, "headers": {"x": "y"}}}}})
    x = exchange_from_trace(events)
    assert x.response_truncated and x.response_headers == (("x", "y"),) and x.backend is None
    entry = har([x])["log"]["entries"][0]
    assert entry["response"]["content"]["comment"].startswith("truncated by the trace's body limit")


def test_shapes_that_are_not_a_trace():
    base = trace()
    for bad_state, match in ((["x"], "method"), ({"request": {"method": "GET", "headers": ["x"]}}, "headers")):
        events = [dict(e) for e in base]
        events[1] = {"message": {"type": "requestSnapshot", "stage": "initial request", "requestState": bad_state}}
        with pytest.raises(ExportError, match=match):
            exchange_from_trace(events)
    with pytest.raises(ExportError, match="initial request"):
        exchange_from_trace([{"message": {"type": "responseSnapshot", "stage": "initial request"}},
                             {"message": {"type": "requestSnapshot", "stage": "final request"}}, "not an event"])


def test_har_entry_exactly():
    x = exchange_from_trace(trace(), started=0.5)
    assert har([x], creator="tester")["log"] | {"entries": None} == {
        "version": "1.2", "creator": {"name": "tester", "version": har([])["log"]["creator"]["version"]},
        "entries": None}
    entry = har([x])["log"]["entries"][0]
    assert entry == {
        "startedDateTime": "1970-01-01T00:00:00.500Z", "time": 5.0,
        "request": {"method": "POST", "url": "http://api.example.com:3000/v1/chat?q=1&access_token=<redacted>",
                    "httpVersion": "HTTP/1.1", "cookies": [],
                    "headers": [{"name": "host", "value": "api.example.com:3000"},
                                {"name": "content-type", "value": "application/json"},
                                {"name": "authorization", "value": "<redacted>"},
                                {"name": "x-tenant", "value": "acme"}],
                    "queryString": [{"name": "q", "value": "1"}, {"name": "access_token", "value": "<redacted>"}],
                    "headersSize": -1, "bodySize": 8,
                    "postData": {"mimeType": "application/json", "text": '{"a": 1}'}},
        "response": {"status": 200, "statusText": "OK", "httpVersion": "HTTP/1.1", "cookies": [],
                     "headers": [{"name": "content-type", "value": "application/json"},
                                 {"name": "set-cookie", "value": "<redacted>"}],
                     "content": {"size": 12, "mimeType": "application/json", "text": '{"ok": true}'},
                     "redirectURL": "", "headersSize": -1, "bodySize": 12},
        "cache": {},
        "timings": {"blocked": 1.0, "dns": -1, "connect": -1, "ssl": -1, "send": 0.0, "wait": 3.0, "receive": 1.0},
        "_trioproxy": {"listener": "default/default/bind/3000/listener0", "route": "r", "backend": "b1",
                       "error": None, "redactedHeaders": ["authorization"], "redactedParams": ["access_token"]},
        "comment": "credentials are shown as <redacted>: traces never hold them",
    }


def test_har_entry_of_a_redirect_a_cut_request_and_no_redactions():
    events = trace(headers={"host": "h", "content-type": "text/plain"}, uri="/r", status=302, truncated=True,
                   request_body="é".encode() + b"\xff", response_body=b"")
    events[-3]["message"]["requestState"]["response"]["headers"] = {"location": "/next"}
    entry = har([exchange_from_trace(events)])["log"]["entries"][0]
    assert entry["request"]["postData"] == {"mimeType": "text/plain", "text": "é\ufffd",
                                            "comment": "truncated by the trace's body limit (TRIOPROXY_TRACE_BODY_LIMIT)"}
    assert entry["request"]["bodySize"] == 3 and entry["request"]["queryString"] == []
    assert entry["response"]["redirectURL"] == "/next" and entry["response"]["statusText"] == "Found"
    assert entry["response"]["content"] == {"size": 0, "mimeType": ""} and entry["response"]["bodySize"] == 0
    assert "comment" not in entry
    odd = exchange_from_trace(trace(status=299, response_body=None, request_body=None))
    entry = har([odd])["log"]["entries"][0]
    assert entry["response"]["statusText"] == "" and entry["response"]["bodySize"] == 0
    assert entry["request"]["bodySize"] == 0


def test_har_without_a_start_time_says_now(monkeypatch):
    monkeypatch.setattr("trioproxy.telemetry.export.time.time", lambda: 86400.0)
    assert har([exchange_from_trace(trace())])["log"]["entries"][0]["startedDateTime"] == "1970-01-02T00:00:00.000Z"


def test_har_from_history_entry_exactly():
    summary = {"time": 10.0, "method": "POST", "path": "/a?x=1", "host": "h:3000", "route": "r", "backend": "b",
               "status": 201, "durationMs": 250.0, "inputTokens": 3, "outputTokens": 4, "model": "m", "cost": 0.5,
               "subject": "alice", "reason": None, "errorKind": None, "extra": "not copied"}
    document = har_from_history([summary], creator="tester")
    assert document["log"]["creator"]["name"] == "tester"
    assert document["log"]["entries"] == [{
        "startedDateTime": "1970-01-01T00:00:09.750Z", "time": 250.0,
        "request": {"method": "POST", "url": "http://h:3000/a?x=1", "httpVersion": "HTTP/1.1", "cookies": [],
                    "headers": [], "queryString": [{"name": "x", "value": "1"}], "headersSize": -1, "bodySize": -1},
        "response": {"status": 201, "statusText": "Created", "httpVersion": "HTTP/1.1", "cookies": [], "headers": [],
                     "content": {"size": -1, "mimeType": ""}, "redirectURL": "", "headersSize": -1, "bodySize": -1},
        "cache": {}, "timings": {"send": 0, "wait": 250.0, "receive": 0},
        "comment": "from the request history: a summary, without headers or bodies",
        "_trioproxy": {"route": "r", "backend": "b", "reason": None, "errorKind": None, "subject": "alice",
                       "model": "m", "inputTokens": 3, "outputTokens": 4, "cost": 0.5},
    }]
    (empty,) = har_from_history([{}])["log"]["entries"]
    assert (empty["startedDateTime"], empty["time"], empty["request"]["method"], empty["request"]["url"],
            empty["response"]["status"], empty["_trioproxy"]) == (
        "1970-01-01T00:00:00.000Z", 0.0, "GET", "http://localhost/", 0, {})


def test_curl_lines_exactly():
    assert curl(exchange_from_trace(trace())) == (
        "curl --globoff --path-as-is 'http://api.example.com:3000/v1/chat?q=1' -H 'content-type: application/json'"
        " -H 'x-tenant: acme' -H user-agent: -H accept: --data-binary '{\"a\": 1}'")
    headers = {"host": "h", "user-agent": "ua", "accept": "*/*", "content-length": "0", "transfer-encoding": "x",
               "connection": "close", "x-e": "", "x-r": "<redacted>"}
    line = curl(exchange_from_trace(trace(method="DELETE", request_body=None, headers=headers,
                                          uri="/d?key=<redacted>&k2=v&token=<redacted>")), base_url="http://g:1/")
    assert line == ("curl --globoff --path-as-is -X DELETE 'http://g:1/d?k2=v' -H 'host: h' -H 'user-agent: ua'"
                    " -H 'accept: */*' -H 'x-e;'")
    only_redacted = curl(exchange_from_trace(trace(method="GET", request_body=None, headers={"host": "h"},
                                                   uri="/d?token=<redacted>")))
    assert only_redacted == "curl --globoff --path-as-is http://h/d -H user-agent: -H accept:"
    post_without_body = curl(exchange_from_trace(trace(request_body=None, headers={"host": "h"}, uri="/p")))
    assert post_without_body == "curl --globoff --path-as-is -X POST http://h/p -H user-agent: -H accept:"


def test_timings_span_every_attempt_and_read_the_final_response():
    retried = trace(extra=[
        {"eventEnd": 500, "message": {"type": "backendCallStart"}},
        {"eventEnd": 700, "message": {"type": "backendCallResult", "status": 503}}])
    assert exchange_from_trace(retried).timings == {"blocked": 0.5, "send": 0.0, "wait": 3.5, "receive": 1.0,
                                                    "total": 5.0}
    refused = trace(backend_call=False, request_body=None, response_body=None, extra=[
        {"eventEnd": 100, "message": {"type": "responseSnapshot", "stage": "raw response"}},
        {"eventEnd": 200, "message": {"type": "requestSnapshot", "stage": "final response"}}])
    assert exchange_from_trace(refused).timings == {"blocked": -1.0, "send": 0.0, "wait": 4.2, "receive": 0.8,
                                                    "total": 5.0}
    only_start = trace(backend_call=False, extra=[{"eventEnd": 600, "message": {"type": "backendCallStart"}}])
    assert exchange_from_trace(only_start).timings["blocked"] == -1.0


def test_har_of_an_exchange_built_by_hand_has_default_timings():
    x = Exchange(method="GET", url="http://h/", http_version="HTTP/1.1", request_headers=(), request_body=None,
                 status=204, started=0.0)
    entry = har([x])["log"]["entries"][0]
    assert entry["timings"] == {"blocked": -1.0, "dns": -1, "connect": -1, "ssl": -1, "send": 0.0, "wait": 0.0,
                                "receive": 0.0}
    assert entry["time"] == 0.0
    timed = Exchange(method="GET", url="http://h/", http_version="HTTP/1.1", request_headers=(), request_body=None,
                     status=204, started=0.0, timings={"total": 2.5})
    assert har([timed])["log"]["entries"][0]["timings"]["wait"] == 2.5


def test_redaction_comment_for_headers_or_parameters_alone():
    header_only = har([exchange_from_trace(trace(uri="/p"))])["log"]["entries"][0]
    assert "comment" in header_only
    param_only = har([exchange_from_trace(trace(headers={"host": "h"}))])["log"]["entries"][0]
    assert "comment" in param_only


def test_credentials_match_header_names_in_any_case_and_only_redacted_params_go():
    x = exchange_from_trace(trace(headers={"Host": "h", "X-Key": "<redacted>", "X-Other": "v"},
                                  uri="/p?key=<redacted>&b=&key=shown&c=1"))
    line = words(curl(x, credentials={"x-key": "k1"}))
    assert "X-Key: k1" in line and "X-Other: v" in line and sum(w.lower().startswith("x-key") for w in line) == 1
    assert "http://h/p?b=&key=shown&c=1" in line  # only the hidden value goes
    assert har([x])["log"]["entries"][0]["request"]["queryString"] == [
        {"name": "key", "value": "<redacted>"}, {"name": "b", "value": ""}, {"name": "key", "value": "shown"},
        {"name": "c", "value": "1"}]


def test_text_with_nul_goes_as_binary():
    line = curl(exchange_from_trace(trace(request_body=b"a\x00b")))
    assert line.startswith(f"printf %s {base64.b64encode(b'a' + bytes(1) + b'b').decode()} | base64 -d | curl ")


def test_history_start_is_end_minus_duration():
    (entry,) = har_from_history([{"time": 100.0, "durationMs": 5000.0}])["log"]["entries"]
    assert entry["startedDateTime"] == "1970-01-01T00:01:35.000Z"
    untimed = har_from_history([{"time": 2.0, "path": "/second"}, {"path": "/first"}])["log"]["entries"]
    assert [e["request"]["url"] for e in untimed] == ["http://localhost/first", "http://localhost/second"]
