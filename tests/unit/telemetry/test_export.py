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
from trioproxy.telemetry.export import ExportError, curl, exchange_from_trace, har, har_from_history


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
