"""``/debug/trace`` end to end: whole event sequences over a real admin server and gateway."""

from __future__ import annotations

import base64
import json

import h11
import httpx
import pytest
import trio

from tests.conftest import free_port, start_routes

GET_SEQUENCE = [
    ("requestStarted", None),
    ("requestSnapshot", "initial request"),
    ("policySelection", "gateway"),
    ("requestSnapshot", "gateway policies"),
    ("routeSelection", None),
    ("policySelection", "route"),
    ("requestSnapshot", "route policies"),
    ("policySelection", "backend"),
    ("requestSnapshot", "final request"),
    ("backendCallStart", None),
    ("backendCallResult", None),
    ("responseSnapshot", "raw response"),
    ("responseSnapshot", "backend response ready"),
    ("responseSnapshot", "final response"),
    ("bodySnapshot", "response"),
    ("requestFinished", None),
]


def shape(events: list[dict]) -> list[tuple[str, str | None]]:
    out = []
    for event in events:
        message = event["message"]
        out.append((message["type"], message.get("stage", message.get("phase"))))
    return out


class TraceReader:
    """A ``/debug/trace`` client: ``await reader.ready`` then ``await reader.events()``."""

    def __init__(self, gw, expression: str | None = None) -> None:
        self.gw = gw
        self.expression = expression
        self.ready = trio.Event()
        self.comments: list[str] = []
        self._events: list[dict] = []
        self._done = trio.Event()
        self.status = 0
        self.text = ""

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        params = {"expression": self.expression} if self.expression else None
        # No read timeout: a watcher may wait long; ``events()`` bounds the wait instead.
        async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=None)) as client:
            async with client.stream("POST", f"{self.gw.admin_url}/debug/trace", params=params) as response:
                self.status = response.status_code
                if response.status_code != 200:
                    self.text = (await response.aread()).decode()
                    task_status.started(self)
                    self._done.set()
                    return
                buffer = ""
                started = False
                async for text in response.aiter_text():
                    buffer += text
                    while "\n\n" in buffer:
                        block, buffer = buffer.split("\n\n", 1)
                        if block.startswith(":"):
                            self.comments.append(block[1:].strip())
                            if block == ": ready" and not started:
                                started = True
                                task_status.started(self)
                        elif block.startswith("data: "):
                            self._events.append(json.loads(block[6:]))
        self._done.set()

    async def events(self) -> list[dict]:
        with trio.fail_after(10):
            await self._done.wait()
        return self._events


async def watch(nursery, gw, expression: str | None = None) -> TraceReader:
    return await nursery.start(TraceReader(gw, expression).run)


async def test_get_is_traced_in_the_newer_build_order(nursery, gateway):
    reader = await watch(nursery, gateway)
    async with gateway.client() as client:
        response = await client.get("/traced?x=1", headers={"authorization": "Bearer secret", "x-api-key": "k",
                                                            "cookie": "c=1", "x-visible": "yes"})
    events = await reader.events()
    assert shape(events) == GET_SEQUENCE
    by_type = {}
    for event in events:
        by_type.setdefault(event["message"]["type"], []).append(event)
    # Timing fields: microseconds from arrival, eventEnd never decreasing, eventStart only on spans.
    ends = [e["eventEnd"] for e in events]
    assert ends == sorted(ends)
    assert all(e["eventStart"] is None for e in events if e["message"]["type"] != "backendCallResult")
    result = by_type["backendCallResult"][0]
    assert 0 <= result["eventStart"] <= result["eventEnd"]
    assert result["message"] == {"type": "backendCallResult", "status": 200, "error": None}
    assert all(e["severity"] in ("info", "success", "warn", "error") for e in events)
    assert all("scope" not in e for e in events)  # omitted when empty (docs/trace-events.md)
    # Route selection with contract keys.
    key = f"default/default/bind/{gateway.port}/listener0/default/echo"
    assert by_type["routeSelection"][0]["message"]["selectedRoute"] == key
    assert by_type["routeSelection"][0]["message"]["evaluatedRoutes"] == [key]
    # Every policy kind of a phase is listed, null when unset.
    gateway_policy = by_type["policySelection"][0]["message"]["effectivePolicy"]
    assert gateway_policy["localRateLimit"] is None and "jwtAuth" in gateway_policy
    # Request state, credentials redacted.
    initial = by_type["requestSnapshot"][0]["message"]["requestState"]
    assert initial["request"]["method"] == "GET"
    assert initial["request"]["path"] == "/traced"
    assert initial["request"]["uri"] == "/traced?x=1"
    assert initial["request"]["headers"]["authorization"] == "<redacted>"
    assert initial["request"]["headers"]["x-api-key"] == "<redacted>"
    assert initial["request"]["headers"]["cookie"] == "<redacted>"
    assert initial["request"]["headers"]["x-visible"] == "yes"
    assert initial["source"]["address"] == "127.0.0.1"
    final_request = by_type["requestSnapshot"][-1]["message"]["requestState"]
    assert final_request["backend"] == {"name": f"127.0.0.1:{gateway_backend_port(gateway)}", "type": "host",
                                        "protocol": "http"}
    assert final_request["request"]["headers"]["x-forwarded-for"] == "127.0.0.1"
    raw = by_type["responseSnapshot"][0]["message"]["requestState"]
    assert raw["response"]["code"] == 200
    assert raw["proxy"]["requestProcessingDuration"].endswith(("ms", "µs", "s"))
    assert raw["proxy"]["upstreamDuration"].endswith(("ms", "µs", "s"))
    body = base64.b64decode(by_type["bodySnapshot"][0]["message"]["body"])
    assert json.loads(body) == response.json()
    assert events[-1]["message"] == {"type": "requestFinished", "status": 200, "error": None}
    assert "secret" not in json.dumps(events)


def gateway_backend_port(gw) -> int:
    route = gw.info.runtime.state.config.binds[0].listeners[0].routes[0]
    return route.backends[0].target.port


async def test_post_body_is_snapshotted_and_passes_unchanged(nursery, gateway):
    reader = await watch(nursery, gateway)
    payload = bytes(range(256)) * 10
    async with gateway.client() as client:
        response = await client.post("/upload", content=payload)
    assert response.json()["body_length"] == len(payload)
    events = await reader.events()
    types = shape(events)
    assert types.index(("backendCallStart", None)) < types.index(("bodySnapshot", "final request")) \
        < types.index(("backendCallResult", None))
    bodies = {e["message"]["stage"]: base64.b64decode(e["message"]["body"]) for e in events
              if e["message"]["type"] == "bodySnapshot"}
    assert bodies == {"final request": payload, "response": response.content}


async def test_body_snapshots_are_truncated_at_the_limit(nursery, gateway):
    gateway.info.runtime.trace.body_limit = 1000
    reader = await watch(nursery, gateway)
    async with gateway.client() as client:
        response = await client.get("/bytes/5000")
    assert len(response.content) == 5000
    events = await reader.events()
    snapshot = next(e["message"] for e in events if e["message"]["type"] == "bodySnapshot")
    assert len(base64.b64decode(snapshot["body"])) == 1000
    assert snapshot["truncated"] is True


async def test_no_route_ends_with_final_response_and_finished(nursery, backend):
    gw = await start_routes(nursery, """
            - matches: [{{path: {{exact: /only}}}}]
              backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port)
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        assert (await client.get("/elsewhere")).status_code == 404
    events = await reader.events()
    assert shape(events) == [
        ("requestStarted", None), ("requestSnapshot", "initial request"), ("policySelection", "gateway"),
        ("requestSnapshot", "gateway policies"), ("routeSelection", None), ("responseSnapshot", "final response"),
        ("requestFinished", None),
    ]
    assert events[4]["message"]["selectedRoute"] is None
    assert events[4]["message"]["evaluatedRoutes"] == [f"default/default/bind/{gw.port}/listener0/default/route0"]
    assert events[5]["message"]["requestState"]["response"]["code"] == 404
    assert events[-1]["message"] == {"type": "requestFinished", "status": 404, "error": "route not found", "why": {
        "routes": [{"route": "default/route0", "missed": "path", "detail": "path '/elsewhere' is not exact '/only'"}],
        "evaluated": 1}}


async def test_backend_down_sets_backend_call_result_error(nursery):
    gw = await start_routes(nursery, """
            - backends: [{{host: "127.0.0.1:{dead}"}}]
        """, port=free_port(), dead=free_port())
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        assert (await client.get("/")).status_code == 503
    events = await reader.events()
    types = shape(events)
    assert types[-4:] == [("backendCallStart", None), ("backendCallResult", None),
                          ("responseSnapshot", "final response"), ("requestFinished", None)]
    result = events[-3]["message"]
    assert result["status"] is None and result["error"].startswith("upstream connect error")
    assert events[-3]["severity"] == "error"
    assert events[-1]["message"]["status"] == 503
    assert events[-1]["message"]["error"].startswith("upstream connect error")


async def test_keep_alive_sibling_is_not_traced(nursery, gateway):
    reader = await watch(nursery, gateway)
    async with gateway.client() as client:  # one connection, two requests
        first = await client.get("/first")
        second = await client.get("/second")
    assert first.status_code == second.status_code == 200
    events = await reader.events()
    assert events[1]["message"]["requestState"]["request"]["path"] == "/first"
    assert gateway.info.runtime.trace.traced == 1
    assert [e["message"]["type"] for e in events].count("requestStarted") == 1


async def test_expression_selects_the_request(nursery, gateway):
    reader = await watch(nursery, gateway, expression='request.headers["x-pick"] == "me"')
    async with gateway.client() as client:
        await client.get("/not-me")
        await client.get("/me", headers={"x-pick": "me"})
    events = await reader.events()
    assert events[1]["message"]["requestState"]["request"]["path"] == "/me"


async def test_invalid_expression_is_400(nursery, gateway):
    reader = await watch(nursery, gateway, expression="request.path ==")
    assert reader.status == 400
    assert reader.text.startswith("invalid expression: syntax error")


async def test_two_concurrent_watchers_get_one_request_each(nursery, gateway):
    first = await watch(nursery, gateway)
    second = await watch(nursery, gateway)
    async with gateway.client() as client:
        await client.get("/one")
        await client.get("/two")
    paths = [(await r.events())[1]["message"]["requestState"]["request"]["path"] for r in (first, second)]
    assert paths == ["/one", "/two"]  # first come, first served


async def test_a_watcher_that_disconnects_is_dropped(nursery, gateway):
    hub = gateway.info.runtime.trace
    scope = trio.CancelScope()

    async def watch_then_leave(task_status=trio.TASK_STATUS_IGNORED) -> None:
        with scope:
            await TraceReader(gateway).run(task_status=task_status)

    await nursery.start(watch_then_leave)
    assert len(hub.watchers) == 1
    scope.cancel()
    with trio.fail_after(5):
        while hub.watchers:
            await trio.sleep(0.01)
    async with gateway.client() as client:
        assert (await client.get("/")).status_code == 200
    assert hub.traced == 0


async def test_keepalive_comments_while_waiting(nursery, gateway):
    gateway.info.runtime.trace.keepalive = 0.05
    reader = await watch(nursery, gateway)
    with trio.fail_after(5):
        while "keepalive" not in reader.comments:
            await trio.sleep(0.01)
    assert reader.comments[0] == "ready"


async def test_stalled_reader_never_delays_requests(nursery, gateway):
    """A reader that never reads: 100 concurrent requests still complete, and its stream still ends."""
    hub = gateway.info.runtime.trace
    hub.buffer = 8  # small, so this trace must drop events
    stream = await trio.open_tcp_stream("127.0.0.1", gateway.info.admin.port)
    conn = h11.Connection(h11.CLIENT)
    await stream.send_all(conn.send(h11.Request(method="POST", target="/debug/trace",
                                                headers=[("host", "localhost"), ("content-length", "0")])))
    await stream.send_all(conn.send(h11.EndOfMessage()))
    with trio.fail_after(5):
        while not hub.watchers:
            await trio.sleep(0.01)
    statuses = []

    async def one(client: httpx.AsyncClient) -> None:
        statuses.append((await client.get("/bytes/20000")).status_code)

    with trio.fail_after(30):
        async with gateway.client(limits=httpx.Limits(max_connections=100)) as client:
            async with trio.open_nursery() as requests:
                for _ in range(100):
                    requests.start_soon(one, client)
    assert statuses == [200] * 100
    assert hub.traced == 1
    # Now read: the stream carries what fitted, ends with requestFinished, and reports the drops.
    data = b""
    with trio.fail_after(10):
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Data):
                data += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
    await stream.aclose()
    blocks = [b for b in data.decode().split("\n\n") if b]
    events = [json.loads(b[6:]) for b in blocks if b.startswith("data: ")]
    assert events[-1]["message"]["type"] == "requestFinished"
    dropped = int(blocks[-1].split()[2]) if blocks[-1].startswith(": dropped ") else 0
    assert len(events) + dropped == len(GET_SEQUENCE)
    assert dropped > 0
    metric = gateway.info.runtime.metrics.registry.get_sample_value("trioproxy_trace_events_dropped_total")
    assert metric == dropped


async def test_tracer_drops_when_the_buffer_is_full_but_always_finishes():
    from trioproxy.telemetry.trace import TraceHub

    hub = TraceHub(buffer=4)
    watcher = hub.watch()
    tracer = hub.claim(trio.current_time(), dict)
    for _ in range(10):
        tracer.event("requestSnapshot", stage="x")
    tracer.finish(200, None)
    received = [event async for event in watcher.receive]
    assert [e["message"]["type"] for e in received] == ["requestSnapshot"] * 3 + ["requestFinished"]
    assert tracer.dropped == watcher.dropped == 7
    assert hub.watchers == []


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_get_and_post_both_open_the_stream(nursery, gateway, method):
    async with httpx.AsyncClient(timeout=5) as client:
        async with client.stream(method, f"{gateway.admin_url}/debug/trace") as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            first = await response.aiter_text().__anext__()
    assert first.startswith(": ready\n\n")


async def test_a_watcher_waits_longer_than_a_minute(nursery, gateway, mock_clock):
    reader = await watch(nursery, gateway)
    for _ in range(3):
        mock_clock.jump(61)
        await trio.testing.wait_all_tasks_blocked()
    async with gateway.client() as client:
        await client.get("/late")
    events = await reader.events()
    assert events[-1]["message"]["type"] == "requestFinished"
    assert reader.comments.count("keepalive") >= 3


def test_credential_headers_are_redacted_in_snapshots():
    from trioproxy.telemetry.trace import REDACTED, headers_map

    shown = headers_map([(b"authorization", b"Bearer a"), (b"proxy-authorization", b"Basic b"),
                         (b"cookie", b"c=1"), (b"set-cookie", b"s=1"), (b"set-cookie", b"t=2"),
                         (b"x-api-key", b"k"), (b"x-plain", b"v")])
    assert shown == {"authorization": REDACTED, "proxy-authorization": REDACTED, "cookie": REDACTED,
                     "set-cookie": f"{REDACTED}, {REDACTED}", "x-api-key": REDACTED, "x-plain": "v"}


async def test_a_value_json_cannot_encode_is_shown_as_text_and_the_stream_goes_on(nursery, gateway, monkeypatch):
    from trioproxy.telemetry.trace import Tracer

    class Odd:
        def __str__(self) -> str:
            return "odd"

    real = Tracer.policy_selection

    def odd_selection(self, phase, policies):
        real(self, phase, policies)
        self.event("policy", kind="odd", value=Odd())  # as a set in a policy spec once did

    monkeypatch.setattr(Tracer, "policy_selection", odd_selection)
    reader = await watch(nursery, gateway)
    async with gateway.client() as client:
        assert (await client.get("/")).status_code == 200
    events = await reader.events()
    assert any(e["message"].get("value") == "odd" for e in events)
    assert events[-1]["message"]["type"] == "requestFinished"
