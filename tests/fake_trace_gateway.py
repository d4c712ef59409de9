"""A stand-in for the gateway in trace tests: an admin server speaking the /debug/trace SSE contract
and a listener whose requests are traced to the first waiting watcher whose expression matches.

Threaded, on real sockets bound to port 0; synchronisation is by events, never sleeps.
"""

from __future__ import annotations

import base64
import json
import queue
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_HEADER_EQ = re.compile(r'request\.headers\["([^"]+)"\] == "([^"]*)"')


def canned_events(method: str = "GET", path: str = "/", host: str = "example.com",
                  body: bytes = b"", status: int = 200, headers: dict | None = None) -> list[dict]:
    """A newer-build event sequence for one request, shaped like issue 3 specifies."""
    req = {"method": method, "path": path, "uri": f"http://{host}{path}", "host": host,
           "scheme": "http", "version": "HTTP/1.1", "headers": headers or {"host": host}}
    src = {"address": "127.0.0.1", "port": 40000}
    backend = {"name": "127.0.0.1:8080", "type": "service", "protocol": "http"}
    route = "default/default/bind/3000/listener0/default/api"

    def state(**extra):
        return {"request": req, "source": src, "env": {}, **extra}

    resp = {"code": status, "headers": {"content-type": "text/plain"}}
    events = [
        ("info", None, {"type": "requestStarted"}),
        ("info", None, {"type": "requestSnapshot", "stage": "initial request", "requestState": state()}),
        ("info", None, {"type": "policySelection", "phase": "gateway", "effectivePolicy": {"cors": None}}),
        ("info", None, {"type": "requestSnapshot", "stage": "gateway policies", "requestState": state()}),
        ("info", None, {"type": "routeSelection", "selectedRoute": route, "evaluatedRoutes": [route, "x"]}),
        ("info", None, {"type": "policySelection", "phase": "route",
                        "effectivePolicy": {"localRateLimit": [{"maxTokens": 5}], "jwtAuth": None}}),
        ("success", None, {"type": "policy", "kind": "localRateLimit", "result": "allowed"}),
        ("info", None, {"type": "requestSnapshot", "stage": "route policies", "requestState": state()}),
        ("info", None, {"type": "policySelection", "phase": "backend", "effectivePolicy": {}}),
        ("info", None, {"type": "requestSnapshot", "stage": "final request",
                        "requestState": state(backend=backend)}),
        ("info", None, {"type": "backendCallStart", "target": "127.0.0.1:8080"}),
    ]
    if body:
        events.append(("info", None, {"type": "bodySnapshot", "stage": "final request",
                                      "body": base64.b64encode(body).decode()}))
    events += [
        ("success", 40, {"type": "backendCallResult", "status": status, "error": None}),
        ("info", None, {"type": "responseSnapshot", "stage": "raw response", "requestState": state(
            backend=backend, response=resp,
            proxy={"requestProcessingDuration": "0.200ms", "upstreamDuration": "1.000ms"})}),
        ("info", None, {"type": "responseSnapshot", "stage": "backend response ready",
                        "requestState": state(backend=backend, response=resp)}),
        ("info", None, {"type": "responseSnapshot", "stage": "final response",
                        "requestState": state(backend=backend, response=resp)}),
        ("info", None, {"type": "bodySnapshot", "stage": "response",
                        "body": base64.b64encode(b"hello from backend\n").decode()}),
        ("success", None, {"type": "requestFinished", "status": status, "error": None}),
    ]
    return [{"eventStart": start, "eventEnd": 10 * (i + 1) + (start or 0), "severity": sev, "message": msg}
            for i, (sev, start, msg) in enumerate(events)]


def expression_matches(expression: str | None, headers: dict[str, str]) -> bool:
    """Just enough CEL for the CLI's own expressions: header equality conjuncts."""
    if not expression:
        return True
    return all(headers.get(name.lower()) == value for name, value in _HEADER_EQ.findall(expression))


class _Watcher:
    def __init__(self, expression: str | None) -> None:
        self.expression = expression
        self.events: queue.Queue[list[dict] | None] = queue.Queue()


class FakeGateway:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.watchers: list[_Watcher] = []
        self.received: list[dict] = []  # requests the listener got
        self.traced: list[dict] = []  # of those, the ones handed to a watcher
        self.expressions: list[str | None] = []
        self.watcher_ready = threading.Semaphore(0)  # released once per watcher after ": ready"
        self.request_done = threading.Semaphore(0)
        self.stopping = threading.Event()
        self.admin = ThreadingHTTPServer(("127.0.0.1", 0), self._admin_handler())
        self.listener = ThreadingHTTPServer(("127.0.0.1", 0), self._listener_handler())
        self.admin.daemon_threads = self.listener.daemon_threads = True
        self._threads = [threading.Thread(target=s.serve_forever, args=(0.05,), daemon=True)
                         for s in (self.admin, self.listener)]

    @property
    def admin_port(self) -> int:
        return self.admin.server_address[1]

    @property
    def listener_port(self) -> int:
        return self.listener.server_address[1]

    def __enter__(self) -> FakeGateway:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        with self.lock:
            for w in self.watchers:
                w.events.put(None)
        for s in (self.admin, self.listener):
            s.shutdown()
            s.server_close()

    def _dispatch(self, record: dict) -> None:
        with self.lock:
            self.received.append(record)
            for w in self.watchers:
                if expression_matches(w.expression, record["headers"]):
                    self.watchers.remove(w)
                    self.traced.append(record)
                    host = record["headers"].get("host", "")
                    w.events.put(canned_events(record["method"], record["path"], host, record["body"],
                                               headers=record["headers"]))
                    break

    def _admin_handler(self):
        gw = self

        class Admin(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_GET(self):
                self.do_POST()

            def do_POST(self):
                url = urlsplit(self.path)
                if url.path != "/debug/trace":
                    self.send_error(404)
                    return
                expression = parse_qs(url.query).get("expression", [None])[0]
                gw.expressions.append(expression)
                if expression is not None and "bad(" in expression:
                    body = b"invalid expression: undeclared reference to 'bad'"
                    self.send_response(400)
                    self.send_header("content-type", "text/plain")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                watcher = _Watcher(expression)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                self.wfile.write(b": ready\n\n")
                self.wfile.flush()
                with gw.lock:
                    gw.watchers.append(watcher)
                gw.watcher_ready.release()
                while True:
                    try:
                        events = watcher.events.get(timeout=1)
                    except queue.Empty:
                        self.wfile.write(b": keepalive\n\n")
                        self.wfile.flush()
                        continue
                    break
                if events is None:
                    return
                for event in events:
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                    self.wfile.flush()

        return Admin

    def _listener_handler(self):
        gw = self

        class Listener(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _handle(self):
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                record = {"method": self.command, "path": self.path, "body": body,
                          "headers": {k.lower(): v for k, v in self.headers.items()}}
                gw._dispatch(record)
                out = b"hello from backend\n"
                self.send_response(200)
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
                gw.request_done.release()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        return Listener
