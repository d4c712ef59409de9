"""The header stages on one exchange, with a recording tracer (proxy/header_stages.py).

The end-to-end tests see their effect on the wire; these pin what a mutation run found
unguarded by the in-process tests: the trace events the stages emit (what ``/debug/trace``
shows) and ``directResponse``'s ``conditional`` entries.
"""

from __future__ import annotations

from typing import Any

import pytest

from trioproxy.config.model import ConditionalDirectResponse, DirectResponsePolicy, HeaderModifier
from trioproxy.errors import DirectResponse
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.header_stages import BackendAuthStage, DirectResponseStage, RequestHeaderModifierStage

SCOPE: dict[str, Any] = {"type": "http", "method": "GET", "path": "/p", "query_string": b"",
                         "headers": [(b"host", b"h"), (b"authorization", b"Basic client"), (b"x-tier", b"gold")]}


class RecordingTracer:
    active = True

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.snapshots: list[tuple[str, Exchange]] = []

    def event(self, message_type: str, **fields: Any) -> None:
        self.events.append((message_type, fields))

    def snapshot(self, stage: str, x: Exchange, **_: Any) -> None:
        self.snapshots.append((stage, x))


def exchange() -> tuple[Exchange, RecordingTracer]:
    x = Exchange(dict(SCOPE), None, None, 0.0)  # type: ignore[arg-type]
    tracer = RecordingTracer()
    x.tracer = tracer  # type: ignore[assignment]
    return x, tracer


async def test_header_stages_snapshot_the_request_under_their_own_name():
    x, tracer = exchange()
    await RequestHeaderModifierStage(HeaderModifier(set=((b"x-tier", b"silver"),))).request(x)
    await BackendAuthStage("k").request(x)
    assert x.headers == [(b"host", b"h"), (b"x-tier", b"silver"), (b"authorization", b"Bearer k")]
    assert tracer.snapshots == [("requestHeaderModifier", x), ("backendAuth", x)]


async def test_a_plain_direct_response_answers_and_says_so_in_the_trace():
    x, tracer = exchange()
    with pytest.raises(DirectResponse) as raised:
        await DirectResponseStage(DirectResponsePolicy(418, "teapot")).request(x)
    assert (raised.value.status, raised.value.message) == (418, "teapot")
    assert tracer.events == [("policy", {"kind": "directResponse", "result": "responded", "status": 418,
                                         "condition": None})]


async def test_the_first_conditional_entry_whose_condition_holds_answers():
    """Conditions read the request (the CEL activation); an entry without one always answers."""
    x, tracer = exchange()
    policy = ConditionalDirectResponse((
        DirectResponsePolicy(401, "a", condition='request.headers["x-tier"] == "bronze"'),
        DirectResponsePolicy(402, "b", condition='request.headers["x-tier"] == "gold"'),
    ))
    with pytest.raises(DirectResponse) as raised:
        await DirectResponseStage(policy).request(x)
    assert raised.value.status == 402
    assert tracer.events == [("policy", {"kind": "directResponse", "result": "responded", "status": 402,
                                         "condition": 'request.headers["x-tier"] == "gold"'})]


async def test_an_entry_without_condition_answers_when_those_before_it_do_not():
    x, tracer = exchange()
    policy = ConditionalDirectResponse((DirectResponsePolicy(401, "a", condition='request.method == "POST"'),
                                        DirectResponsePolicy(403, "c")))
    with pytest.raises(DirectResponse) as raised:
        await DirectResponseStage(policy).request(x)
    assert raised.value.status == 403
    assert tracer.events[-1][1]["condition"] is None


async def test_no_condition_holding_lets_the_request_go_on():
    x, tracer = exchange()
    policy = ConditionalDirectResponse((DirectResponsePolicy(401, "a", condition='request.headers["x-tier"] == "x"'),))
    await DirectResponseStage(policy).request(x)
    assert tracer.events == [("policy", {"kind": "directResponse", "result": "no condition matched"})]
