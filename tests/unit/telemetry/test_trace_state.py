"""The pure parts of trioproxy/telemetry/trace.py, exactly: a snapshot's ``requestState``, the CEL
activation, header redaction, body capture, duration text and the body-limit setting.

The end-to-end trace tests (tests/e2e/test_trace.py) check event order and a few fields; a
mutation run showed every other field of these payloads could change unnoticed.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from trioproxy.proxy.exchange import Exchange
from trioproxy.telemetry.trace import (
    DEFAULT_BODY_LIMIT,
    BodyCapture,
    activation,
    body_limit_from_env,
    duration_string,
    headers_map,
    request_state,
)

FULL_SCOPE: dict[str, Any] = {
    "type": "http", "method": "POST", "path": "/v1/x", "query_string": b"a=1", "scheme": "https",
    "http_version": "1.0", "client": ("10.0.0.7", 5151),
    "headers": [(b"host", b"api.test:8443"), (b"x-a", b"1"), (b"x-a", b"2"), (b"authorization", b"Bearer s")],
}


def exchange(**scope: Any) -> Exchange:
    return Exchange({**FULL_SCOPE, **scope}, None, None, 0.0)  # type: ignore[arg-type]


def test_request_state_is_the_request_as_the_stages_shaped_it():
    assert request_state(exchange()) == {
        "request": {"method": "POST", "path": "/v1/x", "uri": "/v1/x?a=1", "host": "api.test", "scheme": "https",
                    "version": "HTTP/1.0",
                    "headers": {"host": "api.test:8443", "x-a": "1, 2", "authorization": "<redacted>"}},
        "source": {"address": "10.0.0.7", "port": 5151},
        "env": {"gateway": "default/default", "listener": None, "route": None},
    }


def test_request_state_defaults_and_what_later_stages_add():
    scope = {k: v for k, v in FULL_SCOPE.items() if k not in ("client", "scheme", "http_version", "query_string")}
    x = Exchange(scope, None, None, 0.0)  # type: ignore[arg-type]
    x.upstream_path = "/rewritten"
    x.listener = SimpleNamespace(key="gw/bind/main")  # type: ignore[assignment]
    x.route = SimpleNamespace(key="gw/route/r")  # type: ignore[assignment]
    x.backend = SimpleNamespace(name="b", kind="host")  # type: ignore[assignment]
    x.llm = {"provider": "openai"}
    x.jwt = {"sub": "me"}
    state = request_state(x, headers=[(b"x-b", b"3")], response={"code": 200}, proxy={"upstreamDuration": "1ms"})
    assert state == {
        "request": {"method": "POST", "path": "/rewritten", "uri": "/rewritten", "host": "api.test", "scheme": "http",
                    "version": "HTTP/1.1", "headers": {"x-b": "3"}},
        "source": {"address": "", "port": 0},
        "env": {"gateway": "default/default", "listener": "gw/bind/main", "route": "gw/route/r"},
        "backend": {"name": "b", "type": "host", "protocol": "http"},
        "llm": {"provider": "openai"},
        "jwt": {"sub": "me"},
        "response": {"code": 200},
        "proxy": {"upstreamDuration": "1ms"},
    }


def test_the_activation_sees_the_same_request():
    act = activation(exchange())
    assert act["request"] == {
        "method": "POST", "path": "/v1/x", "pathAndQuery": "/v1/x?a=1", "host": "api.test", "scheme": "https",
        "uri": "https://api.test/v1/x?a=1", "version": "HTTP/1.0",
        "headers": {"host": "api.test:8443", "x-a": "1,2", "authorization": "Bearer s"},
    }
    assert act["source"] == {"address": "10.0.0.7", "port": 5151}
    assert (act["jwt"], act["llm"]) == ({}, {})
    x = exchange(client=None, scheme="http", http_version="1.1")
    x.jwt, x.llm = {"sub": "me"}, {"model": "m"}
    act = activation(x)
    assert act["source"] == {"address": "", "port": 0}
    assert (act["request"]["scheme"], act["request"]["version"]) == ("http", "HTTP/1.1")
    assert (act["jwt"], act["llm"]) == ({"sub": "me"}, {"model": "m"})


def test_headers_map_joins_repeats_and_redacts_credentials():
    headers = [(b"cookie", b"a=1"), (b"set-cookie", b"b=2"), (b"proxy-authorization", b"Basic x"),
               (b"x-api-key", b"k"), (b"authorization", b"t"), (b"accept", b"a"), (b"accept", b"b")]
    assert headers_map(headers) == {"cookie": "<redacted>", "set-cookie": "<redacted>",
                                    "proxy-authorization": "<redacted>", "x-api-key": "<redacted>",
                                    "authorization": "<redacted>", "accept": "a, b"}


def test_body_capture_keeps_the_first_limit_bytes():
    capture = BodyCapture(5)
    capture.feed(b"abc")
    assert (capture.size, capture.truncated) == (3, False)
    capture.feed(b"de")
    assert (capture.size, capture.truncated, capture.encoded()) == (5, False, "YWJjZGU=")
    capture.feed(b"")
    assert capture.truncated is False
    capture.feed(b"f")
    assert (capture.size, capture.truncated, capture.parts) == (5, True, [b"abc", b"de"])
    cut = BodyCapture(2)
    cut.feed(b"xyz")
    assert (cut.parts, cut.truncated, cut.encoded()) == ([b"xy"], True, "eHk=")


@pytest.mark.parametrize(("seconds", "text"), [
    (2.5, "2.500s"), (1.0, "1.000s"), (0.9995, "999.500ms"), (0.001, "1.000ms"), (0.0025, "2.500ms"),
    (0.000087, "87µs"), (0.0, "0µs"),
])
def test_durations_read_as_agentgateway_prints_them(seconds, text):
    assert duration_string(seconds) == text


@pytest.mark.parametrize(("raw", "limit"), [
    (None, DEFAULT_BODY_LIMIT), ("", DEFAULT_BODY_LIMIT), ("abc", DEFAULT_BODY_LIMIT), ("-1", DEFAULT_BODY_LIMIT),
    ("123", 123), ("0", 0),
])
def test_the_trace_body_limit_comes_from_the_environment(monkeypatch, raw, limit):
    if raw is None:
        monkeypatch.delenv("TRIOPROXY_TRACE_BODY_LIMIT", raising=False)
    else:
        monkeypatch.setenv("TRIOPROXY_TRACE_BODY_LIMIT", raw)
    assert body_limit_from_env() == limit
    assert DEFAULT_BODY_LIMIT == 2 * 1024 * 1024
