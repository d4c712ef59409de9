"""``admin/export_api.replay``'s failures, on a hub and a config of its own (the successes run
through real gateways: tests/e2e/test_export.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import trio

from tests.conftest import free_port
from tests.unit.telemetry.test_export import trace
from trioproxy.admin.export_api import ApiError, replay
from trioproxy.telemetry.export import ExportError, exchange_from_trace
from trioproxy.telemetry.trace import TraceHub


def runtime(*ports: int, hub: TraceHub | None = None) -> SimpleNamespace:
    binds = [SimpleNamespace(port=port) for port in ports]
    return SimpleNamespace(state=SimpleNamespace(config=SimpleNamespace(binds=binds)), trace=hub or TraceHub())


async def test_a_listener_that_does_not_answer_is_502_and_the_watcher_is_withdrawn():
    port = free_port()  # nothing listens there
    events = trace()
    events[1]["message"]["requestState"]["env"]["listener"] = f"default/default/bind/{port}/listener0"
    rt = runtime(port)
    with pytest.raises(ApiError) as caught:
        await replay(rt, exchange_from_trace(events), {})
    assert caught.value.status == 502 and f"127.0.0.1:{port}" in caught.value.message
    assert rt.trace.watchers == [] and rt.trace.open == 0


async def test_too_many_watchers_is_429():
    events = trace()
    hub = TraceHub(max_watchers=1)
    hub.watch()
    with pytest.raises(ApiError) as caught:
        await replay(runtime(3000, hub=hub), exchange_from_trace(events), {})
    assert caught.value.status == 429


async def test_no_answer_within_the_timeout_is_504():
    async def silent(task_status=trio.TASK_STATUS_IGNORED):
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])

        async def hold(stream):
            await trio.sleep_forever()
        await trio.serve_listeners(hold, listeners)

    async with trio.open_nursery() as nursery:
        port = await nursery.start(silent)
        events = trace()
        events[1]["message"]["requestState"]["env"]["listener"] = f"default/default/bind/{port}/listener0"
        rt = runtime(port)
        with pytest.raises(ApiError) as caught:
            await replay(rt, exchange_from_trace(events), {}, timeout=0.2)
        assert caught.value.status == 504 and rt.trace.watchers == []
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(("events", "credentials", "message"), [
    (trace(truncated=True), {}, "TRIOPROXY_TRACE_BODY_LIMIT"),
    (trace(headers={"host": "h", "upgrade": "websocket"}), {}, "WebSocket"),
    (trace(), {"x-name": "ünicode ✓"}, "x-name: a header value must be latin-1"),
])
async def test_requests_that_cannot_be_replayed(events, credentials, message):
    rt = runtime(3000)
    with pytest.raises(ExportError, match=message):
        await replay(rt, exchange_from_trace(events), credentials)
    assert rt.trace.watchers == [] and rt.trace.open == 0


async def test_the_bind_must_be_one_of_the_gateway():
    with pytest.raises(ExportError, match="bind port 3000 is not one of this gateway's"):
        await replay(runtime(4000, 5000), exchange_from_trace(trace()), {})
    events = trace()
    events[1]["message"]["requestState"]["env"]["listener"] = None
    with pytest.raises(ExportError, match="does not name its listener"):
        await replay(runtime(4000, 5000), exchange_from_trace(events), {})
