"""A traced request as HAR 1.2 and as a ``curl`` command line; history summaries as HAR (docs/export.md).

Pure functions over the JSON a reader already holds: the events of one ``/debug/trace`` request
(docs/trace-events.md) or the summaries of ``/api/requests`` (docs/history.md). No I/O, so the
admin API, the commands, the TUI and the web UI's server side all export the same way.

What is taken from a trace:

- the request as the client sent it: ``requestSnapshot`` ``initial request`` (method, scheme,
  host, the target with its query, HTTP version, headers);
- its body: ``bodySnapshot`` ``client request`` (a translated LLM request's body as the client
  wrote it) or else ``final request``;
- the answer the client got: ``responseSnapshot`` ``final response`` (headers), the status of
  ``requestFinished`` and ``bodySnapshot`` ``response``;
- timings from the events' ``eventEnd`` (µs since arrival): before the backend call, the call, the
  rest.

Traces never hold credentials: a header or query parameter whose value is ``<redacted>`` stays
``<redacted>`` in HAR (``Exchange.redacted`` and ``redacted_params`` name them) and is left out of a
curl line unless the caller supplies the value (``credentials``). A body a trace cut at its
limit (``truncated``) is marked (``Exchange.request_truncated``); ``curl`` refuses it, since the
line would send another request.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import http
import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, unquote_plus

from attrs import field, frozen

from ..redaction import REDACTED
from ..version import __version__

__all__ = ["Exchange", "ExportError", "curl", "exchange_from_trace", "har", "har_from_history"]

HAR_VERSION = "1.2"
#: headers curl writes itself from what it sends (or that describe one connection only)
_CURL_SKIPS = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive", "te", "upgrade",
                         "proxy-connection", "expect", "trailer"})
#: headers curl adds on its own; removed (``-H 'name:'``) when the traced request had none
_CURL_DEFAULTS = ("user-agent", "accept")


class ExportError(ValueError):
    """Events that are not one traced request, or a request a curl line cannot reproduce: the
    message is shown as is (the admin API's 400, a command's one error line)."""


@frozen
class Exchange:
    """One request and its answer, as a trace recorded them."""

    method: str
    url: str  # scheme://host/target?query, the client's target (credential parameters ``<redacted>``)
    http_version: str  # "HTTP/1.1"
    request_headers: tuple[tuple[str, str], ...]
    request_body: bytes | None
    status: int  # 0 when the request ended without an answer
    response_headers: tuple[tuple[str, str], ...] = ()
    response_body: bytes | None = None
    #: milliseconds: ``blocked`` (arrival to the backend call; -1 without one), ``wait`` (the call),
    #: ``receive`` (the rest), ``total``
    timings: Mapping[str, float] = field(factory=dict)
    redacted: frozenset[str] = frozenset()  # header names (lower case) whose value the trace hid
    redacted_params: frozenset[str] = frozenset()  # query parameter names the trace hid
    request_truncated: bool = False
    response_truncated: bool = False
    started: float | None = None  # unix seconds; None: unknown (HAR then says "now")
    error: str | None = None
    listener: str | None = None  # the listener's key (``default/default/bind/3000/listener0``)
    route: str | None = None
    backend: str | None = None

    @property
    def scheme(self) -> str:
        return self.url.partition("://")[0] or "http"

    @property
    def target(self) -> str:
        """``/path?query`` of ``url``."""
        rest = self.url.partition("://")[2]
        slash = rest.find("/")
        return rest[slash:] if slash >= 0 else "/"

    @property
    def host(self) -> str:
        rest = self.url.partition("://")[2]
        return rest.split("/", 1)[0]

    @property
    def bind_port(self) -> int | None:
        """The bind's port, from the listener's key (``.../bind/3000/listener0``)."""
        parts = (self.listener or "").split("/")
        for i, part in enumerate(parts[:-1]):
            if part == "bind" and parts[i + 1].isdigit():
                return int(parts[i + 1])
        return None


def _message(event: Any) -> dict[str, Any]:
    message = event.get("message") if isinstance(event, dict) else None
    return message if isinstance(message, dict) else {}


def _stage(event: Any) -> str | None:
    stage = _message(event).get("stage")
    return stage if isinstance(stage, str) else None


def _kind(event: Any) -> str | None:
    kind = _message(event).get("type")
    return kind if isinstance(kind, str) else None


def _headers(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise ExportError(f"{where}: headers: expected an object")
    return tuple((str(name), str(text)) for name, text in value.items())


def _body(events: Sequence[Any], *stages: str) -> tuple[bytes | None, bool]:
    """The body of the first of ``stages`` present (in that order of preference), and whether the
    trace cut it."""
    for stage in stages:
        for event in events:
            if _kind(event) == "bodySnapshot" and _stage(event) == stage:
                message = _message(event)
                try:
                    body = base64.b64decode(str(message.get("body", "")), validate=True)
                except (binascii.Error, ValueError):
                    raise ExportError(f"bodySnapshot {stage!r}: body is not base64") from None
                return body, bool(message.get("truncated"))
    return None, False


def _micros(event: Any) -> float | None:
    value = event.get("eventEnd") if isinstance(event, dict) else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _timings(events: Sequence[Any]) -> dict[str, float]:
    def at(kind: str, last: bool = False) -> float | None:
        found = [_micros(e) for e in events if _kind(e) == kind and _micros(e) is not None]
        return (found[-1] if last else found[0]) if found else None

    end = at("requestFinished") or max((m for m in map(_micros, events) if m is not None), default=0.0)
    call_start, call_end = at("backendCallStart"), at("backendCallResult", last=True)
    ms = 1000.0
    if call_start is not None and call_end is not None:
        blocked, wait, receive = call_start / ms, (call_end - call_start) / ms, max(0.0, end - call_end) / ms
    else:
        answered = next((_micros(e) for e in events if _kind(e) == "responseSnapshot"
                         and _stage(e) == "final response"), None) or end
        blocked, wait, receive = -1.0, answered / ms, max(0.0, end - answered) / ms
    return {"blocked": blocked, "send": 0.0, "wait": wait, "receive": receive, "total": end / ms}


def _redacted_params(target: str) -> frozenset[str]:
    query = target.partition("?")[2]
    return frozenset(unquote_plus(part.partition("=")[0]).lower() for part in query.split("&")
                     if part.partition("=")[2] == REDACTED)


def exchange_from_trace(events: Iterable[Any], *, started: float | None = None) -> Exchange:
    """The exchange a trace's events describe (``ExportError`` when they hold no ``initial request``).
    ``started``: unix seconds of the arrival, when the caller knows it (a trace does not say)."""
    events = list(events)
    initial = next((e for e in events if _kind(e) == "requestSnapshot" and _stage(e) == "initial request"), None)
    if initial is None:
        raise ExportError("not a traced request: no requestSnapshot 'initial request' among the events")
    state = _message(initial).get("requestState")
    request = state.get("request") if isinstance(state, dict) else None
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        raise ExportError("requestSnapshot 'initial request': no requestState.request.method")
    target = str(request.get("uri") or request.get("path") or "/")
    headers = _headers(request.get("headers"), "requestSnapshot 'initial request'")
    # the Host header as sent (with its port); requestState.request.host is the name alone
    host = next((v for k, v in headers if k.lower() == "host"), None) or str(request.get("host") or "")
    env = state.get("env") if isinstance(state, dict) else None
    env = env if isinstance(env, dict) else {}

    final = next((e for e in reversed(events) if _kind(e) == "responseSnapshot" and _stage(e) == "final response"),
                 None)
    final_state = _message(final).get("requestState") if final is not None else None
    response = final_state.get("response") if isinstance(final_state, dict) else None
    response = response if isinstance(response, dict) else {}
    finished = next((_message(e) for e in reversed(events) if _kind(e) == "requestFinished"), {})
    status = finished.get("status", response.get("code", 0))
    backend = final_state.get("backend") if isinstance(final_state, dict) else None

    request_body, request_cut = _body(events, "client request", "final request")
    response_body, response_cut = _body(events, "response")
    return Exchange(
        method=request["method"], url=f"{request.get('scheme') or 'http'}://{host}{target}",
        http_version=str(request.get("version") or "HTTP/1.1"), request_headers=headers,
        request_body=request_body, status=status if isinstance(status, int) else 0,
        response_headers=_headers(response.get("headers"), "responseSnapshot 'final response'"),
        response_body=response_body, timings=_timings(events),
        redacted=frozenset(k.lower() for k, v in headers if v == REDACTED), redacted_params=_redacted_params(target),
        request_truncated=request_cut, response_truncated=response_cut, started=started,
        error=finished.get("error") if isinstance(finished.get("error"), str) else None,
        listener=env.get("listener") if isinstance(env.get("listener"), str) else None,
        route=env.get("route") if isinstance(env.get("route"), str) else None,
        backend=backend.get("name") if isinstance(backend, dict) and isinstance(backend.get("name"), str) else None,
    )


# -- HAR 1.2 -----------------------------------------------------------------------------------------

def _iso(seconds: float) -> str:
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def _pairs(pairs: Iterable[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in pairs]


def _header(headers: Iterable[tuple[str, str]], name: str) -> str | None:
    return next((value for key, value in headers if key.lower() == name), None)


def _query(url: str) -> list[dict[str, str]]:
    query = url.partition("?")[2]
    return _pairs(parse_qsl(query, keep_blank_values=True)) if query else []


def _status_text(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _content(body: bytes | None, mime: str, truncated: bool) -> dict[str, Any]:
    content: dict[str, Any] = {"size": len(body or b""), "mimeType": mime}
    if body:
        try:
            content["text"] = body.decode("utf-8")
        except UnicodeDecodeError:
            content["text"] = base64.b64encode(body).decode("ascii")
            content["encoding"] = "base64"
    if truncated:
        content["comment"] = "truncated by the trace's body limit (TRIOPROXY_TRACE_BODY_LIMIT)"
    return content


def _har_entry(x: Exchange, now: float) -> dict[str, Any]:
    timings = dict(x.timings)
    total = float(timings.get("total", 0.0))
    har_timings = {"blocked": timings.get("blocked", -1.0), "dns": -1, "connect": -1, "ssl": -1,
                   "send": timings.get("send", 0.0), "wait": timings.get("wait", total),
                   "receive": timings.get("receive", 0.0)}
    request: dict[str, Any] = {
        "method": x.method, "url": x.url, "httpVersion": x.http_version, "cookies": [],
        "headers": _pairs(x.request_headers), "queryString": _query(x.url), "headersSize": -1,
        "bodySize": len(x.request_body) if x.request_body is not None else 0,
    }
    if x.request_body:
        request["postData"] = {"mimeType": _header(x.request_headers, "content-type") or "",
                               "text": x.request_body.decode("utf-8", errors="replace")}
        if x.request_truncated:
            request["postData"]["comment"] = "truncated by the trace's body limit (TRIOPROXY_TRACE_BODY_LIMIT)"
    response = {
        "status": x.status, "statusText": _status_text(x.status), "httpVersion": x.http_version, "cookies": [],
        "headers": _pairs(x.response_headers),
        "content": _content(x.response_body, _header(x.response_headers, "content-type") or "",
                            x.response_truncated),
        "redirectURL": _header(x.response_headers, "location") or "", "headersSize": -1,
        "bodySize": len(x.response_body) if x.response_body is not None else 0,
    }
    entry: dict[str, Any] = {
        "startedDateTime": _iso(x.started if x.started is not None else now), "time": total,
        "request": request, "response": response, "cache": {}, "timings": har_timings,
        "_trioproxy": {"listener": x.listener, "route": x.route, "backend": x.backend, "error": x.error,
                       "redactedHeaders": sorted(x.redacted), "redactedParams": sorted(x.redacted_params)},
    }
    if x.redacted or x.redacted_params:
        entry["comment"] = "credentials are shown as <redacted>: traces never hold them"
    return entry


def _log(entries: list[dict[str, Any]], creator: str) -> dict[str, Any]:
    return {"log": {"version": HAR_VERSION, "creator": {"name": creator, "version": __version__},
                    "entries": entries}}


def har(exchanges: Iterable[Exchange], *, creator: str = "trioproxy") -> dict[str, Any]:
    """A HAR 1.2 document (``{"log": ...}``) of ``exchanges``, in their order. Bodies that are not
    UTF-8 go in as base64 (``content.encoding``); trioproxy's own facts (listener, route, backend,
    the redacted names) are under ``_trioproxy`` (HAR's custom-field prefix)."""
    now = time.time()
    return _log([_har_entry(x, now) for x in exchanges], creator)


def har_from_history(entries: Iterable[Mapping[str, Any]], *, creator: str = "trioproxy") -> dict[str, Any]:
    """HAR 1.2 of ``/api/requests`` summaries (docs/history.md): method, URL, status and duration;
    a summary holds no headers or bodies, so those are empty. Oldest first, as HAR readers expect."""
    out = []
    for summary in sorted(entries, key=lambda s: float(s.get("time") or 0.0)):
        duration = float(summary.get("durationMs") or 0.0)
        status = int(summary.get("status") or 0)
        url = f"http://{summary.get('host') or 'localhost'}{summary.get('path') or '/'}"
        out.append({
            "startedDateTime": _iso(float(summary.get("time") or 0.0) - duration / 1000), "time": duration,
            "request": {"method": str(summary.get("method") or "GET"), "url": url, "httpVersion": "HTTP/1.1",
                        "cookies": [], "headers": [], "queryString": _query(url), "headersSize": -1, "bodySize": -1},
            "response": {"status": status, "statusText": _status_text(status), "httpVersion": "HTTP/1.1",
                         "cookies": [], "headers": [], "content": {"size": -1, "mimeType": ""}, "redirectURL": "",
                         "headersSize": -1, "bodySize": -1},
            "cache": {}, "timings": {"send": 0, "wait": duration, "receive": 0},
            "comment": "from the request history: a summary, without headers or bodies",
            "_trioproxy": {k: summary.get(k) for k in ("route", "backend", "reason", "errorKind", "subject", "model",
                                                      "inputTokens", "outputTokens", "cost") if k in summary},
        })
    return _log(out, creator)


# -- curl --------------------------------------------------------------------------------------------

def _without_params(target: str, names: frozenset[str]) -> str:
    path, sep, query = target.partition("?")
    if not sep or not names:
        return target
    kept = [part for part in query.split("&")
            if not (part.partition("=")[2] == REDACTED and unquote_plus(part.partition("=")[0]).lower() in names)]
    return f"{path}?{'&'.join(kept)}" if kept else path


def request_headers(x: Exchange, credentials: Mapping[str, str] = {}) -> list[tuple[str, str]]:
    """The headers to send again: the traced ones, each ``<redacted>`` one replaced by the
    credential of that name or else left out, plus the credentials the trace did not have."""
    given = {name.lower(): value for name, value in credentials.items()}
    out: list[tuple[str, str]] = []
    for name, value in x.request_headers:
        key = name.lower()
        if key in given:
            out.append((name, given.pop(key)))
        elif value != REDACTED:
            out.append((name, value))
    out.extend(given.items())
    return out


def replay_target(x: Exchange) -> str:
    """``x.target`` without the query parameters the trace redacted (their values are gone)."""
    return _without_params(x.target, x.redacted_params)


def _plain_text(body: bytes) -> str | None:
    """``body`` as text when it is UTF-8 without NUL (a shell word cannot hold NUL)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\0" in text else text


def curl(exchange: Exchange, *, base_url: str | None = None, credentials: Mapping[str, str] = {}) -> str:
    """One shell-quoted ``curl`` command line that sends ``exchange``'s request again: to its own
    URL, or to ``base_url`` (``http://127.0.0.1:3000``, with the traced ``Host`` header kept so the
    gateway routes it the same). Redacted headers and query parameters are left out unless
    ``credentials`` (header name → value) supplies them; a body goes as ``--data-binary`` (a
    binary one through ``base64 -d`` on stdin). ``ExportError`` for a body the trace truncated."""
    x = exchange
    if x.request_truncated:
        raise ExportError("the trace cut the request body at its limit (TRIOPROXY_TRACE_BODY_LIMIT):"
                          " a curl line would send another request")
    target = replay_target(x)
    url = f"{base_url.rstrip('/')}{target}" if base_url else f"{x.scheme}://{x.host}{target}"
    words = ["curl", "--globoff", "--path-as-is"]
    if x.method == "HEAD":
        words.append("--head")
    elif x.method != ("POST" if x.request_body else "GET"):
        words += ["-X", x.method]
    words.append(url)
    sent = set()
    for name, value in request_headers(x, credentials):
        key = name.lower()
        if key in _CURL_SKIPS or (key == "host" and not base_url):
            continue
        sent.add(key)
        words += ["-H", f"{name}: {value}" if value else f"{name};"]
    for name in _CURL_DEFAULTS:
        if name not in sent:
            words += ["-H", f"{name}:"]
    prefix = ""
    if x.request_body:
        if "content-type" not in sent:
            words += ["-H", "content-type:"]
        text = _plain_text(x.request_body)
        if text is not None and not text.startswith("@"):
            words += ["--data-binary", text]
        else:  # binary, or text curl would take for a file name (@name): on stdin
            words += ["--data-binary", "@-"]
            prefix = (f"printf %s {shlex.quote(text)} | " if text is not None else
                      f"printf %s {shlex.quote(base64.b64encode(x.request_body).decode('ascii'))} | base64 -d | ")
    return prefix + " ".join(shlex.quote(word) for word in words)
