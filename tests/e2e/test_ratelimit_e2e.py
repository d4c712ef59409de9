"""Local rate limits and LLM traffic through a running gateway (docs/configuration-schema.md, docs/status-codes.md).

Windows are moved with pytest-trio's ``mock_clock`` (a MockClock that only moves when told):
the sockets are real, time is not, so a refill costs no wall-clock time and cannot race. Jumps
stay below the servers' keep-alive timeouts (the mock LLM's hypercorn closes idle connections
after 5 s), which would otherwise fire in the same instant as the request that follows.
"""

from __future__ import annotations

import json

import httpx
import trio

from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway, start_routes
from tests.e2e.test_trace import TraceReader

CHAT = {"model": "client-model", "messages": [{"role": "user", "content": "hello there gateway"}]}


def limits(response: httpx.Response) -> tuple[str, str, str]:
    return (response.headers.get("x-ratelimit-limit"), response.headers.get("x-ratelimit-remaining"),
            response.headers.get("x-ratelimit-reset"))


async def start_mock(nursery) -> MockOpenAI:
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    return mock


ROUTE_LIMIT = """
    binds:
    - port: {port}
      listeners:
      - routes:
        - policies:
            localRateLimit: [{{maxTokens: {max}, tokensPerFill: {fill}, fillInterval: {interval}}}]
          backends: [{{host: "127.0.0.1:{backend}"}}]
"""


async def test_request_budget_headers_429_and_refill(nursery, backend, mock_clock):
    gw = await start_gateway(nursery, ROUTE_LIMIT, port=free_port(), backend=backend.port, max=3, fill=3,
                             interval="10s")
    async with gw.client() as client:
        allowed = [await client.get("/") for _ in range(3)]
        rejected = await client.get("/")
        assert [r.status_code for r in allowed] == [200, 200, 200]
        assert [limits(r) for r in allowed] == [("3", "2", "10"), ("3", "1", "10"), ("3", "0", "10")]
        assert rejected.status_code == 429
        assert rejected.text == "rate limit exceeded"
        assert rejected.headers["content-type"] == "text/plain"
        assert limits(rejected) == ("3", "0", "10")
        assert rejected.headers["retry-after"] == "10"
        assert backend.requests == 3  # the 429 never reached the backend
        mock_clock.jump(4)
        assert limits(await client.get("/")) == ("3", "0", "6")
        mock_clock.jump(6)  # the window refills: no manual action
        refilled = await client.get("/")
    assert refilled.status_code == 200
    assert limits(refilled) == ("3", "2", "10")


async def test_burst_raises_the_ceiling(nursery, backend, mock_clock):
    # ProxyPolicy {requests: 3, burst: 2, unit: Seconds} compiles to maxTokens 5, tokensPerFill 3.
    gw = await start_gateway(nursery, ROUTE_LIMIT, port=free_port(), backend=backend.port, max=5, fill=3,
                             interval="1s")
    async with gw.client() as client:
        statuses = [(await client.get("/")).status_code for _ in range(6)]
        mock_clock.jump(1)
        after_one_fill = [(await client.get("/")).status_code for _ in range(4)]
    assert statuses == [200] * 5 + [429]
    assert after_one_fill == [200] * 3 + [429]  # a fill adds tokensPerFill, not the burst


async def test_several_entries_are_independent_and_all_must_pass(nursery, backend, mock_clock):
    gw = await start_routes(nursery, """
            - policies:
                localRateLimit:
                - {{maxTokens: 10, tokensPerFill: 10, fillInterval: 60s}}
                - {{maxTokens: 2, tokensPerFill: 2, fillInterval: 1s}}
              backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        first = [await client.get("/") for _ in range(3)]
        assert [r.status_code for r in first] == [200, 200, 429]
        assert limits(first[0]) == ("2", "1", "1")  # the most constrained entry is reported
        for _ in range(4):  # 4 more seconds: the per-second entry refills, the minute one drains
            mock_clock.jump(1)
            assert [(await client.get("/")).status_code for _ in range(2)] == [200, 200]
        mock_clock.jump(1)
        drained = await client.get("/")
    assert drained.status_code == 429
    assert limits(drained) == ("10", "0", "55")


async def test_listener_budget_is_shared_by_all_its_routes(nursery, backend, mock_clock):
    gw = await start_gateway(nursery, """
        binds:
        - port: {port}
          listeners:
          - policies:
              localRateLimit: [{{maxTokens: 2, tokensPerFill: 2, fillInterval: 1m}}]
            routes:
            - name: a
              matches: [{{path: {{pathPrefix: /a}}}}]
              backends: [{{host: "127.0.0.1:{backend}"}}]
            - name: b
              backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        statuses = [(await client.get(path)).status_code for path in ("/a", "/b", "/a", "/b")]
    assert statuses == [200, 200, 429, 429]


async def test_concurrent_requests_never_exceed_the_budget(nursery, backend, mock_clock):
    gw = await start_gateway(nursery, ROUTE_LIMIT, port=free_port(), backend=backend.port, max=10, fill=10,
                             interval="1h")
    statuses = []

    async def one(client: httpx.AsyncClient) -> None:
        statuses.append((await client.get("/")).status_code)

    async with gw.client(limits=httpx.Limits(max_connections=60)) as client:
        async with trio.open_nursery() as requests:
            for _ in range(60):
                requests.start_soon(one, client)
    assert sorted(statuses) == [200] * 10 + [429] * 50
    assert backend.requests == 10


TOKEN_LIMIT = """
    binds:
    - port: {port}
      listeners:
      - routes:
        - name: llm
          policies:
            localRateLimit: [{{maxTokens: 100, tokensPerFill: 100, fillInterval: 3s, type: tokens}}]
          backends:
          - ai:
              name: mock
              provider: {{openAI: {{model: forced-model}}}}
              hostOverride: "127.0.0.1:{mock}"
              pathOverride: /v1/chat/completions
            policies:
              backendAuth: {{key: sk-test}}
"""


async def test_token_budget_json_crossing_request_delivered_then_429(nursery, mock_clock):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKEN_LIMIT, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        first = await client.post("/chat", json=CHAT, headers={"x-mock-total-tokens": "60"})
        second = await client.post("/chat", json=CHAT, headers={"x-mock-total-tokens": "60"})
        third = await client.post("/chat", json=CHAT, headers={"x-mock-total-tokens": "60"})
        assert (first.status_code, second.status_code, third.status_code) == (200, 200, 429)
        # remaining at admission: tokens left before this response was charged
        assert limits(first) == ("100", "100", "3")
        assert limits(second) == ("100", "40", "3")
        assert second.json()["usage"]["total_tokens"] == 60  # the crossing response, unchanged
        assert third.json()["error"]["message"] == "rate limit exceeded"  # an ai route: OpenAI's error JSON
        assert mock.count == 2
        mock_clock.jump(3)
        # One fill of 100 repays the 20-token overshoot: 80 left.
        after = await client.post("/chat", json=CHAT, headers={"x-mock-total-tokens": "10"})
    assert after.status_code == 200
    assert limits(after) == ("100", "80", "3")


async def test_ai_backend_rewrites_model_path_and_auth(nursery, mock_clock):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKEN_LIMIT, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        response = await client.post("/anything", json=CHAT, headers={"authorization": "Bearer client-token"})
    assert response.status_code == 200
    received = mock.chat_requests[-1]
    assert received.path == "/v1/chat/completions"
    assert received.json["model"] == "forced-model"
    assert received.json["messages"] == CHAT["messages"]
    assert received.header("authorization") == "Bearer sk-test"
    assert received.header("host") == f"127.0.0.1:{mock.port}"
    assert received.header("content-length") == str(len(received.body))


async def test_token_budget_sse_stream_is_charged_not_cut(nursery, mock_clock):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKEN_LIMIT, port=free_port(), mock=mock.port)
    stream_request = {**CHAT, "stream": True}
    async with gw.client() as client:
        first = await client.post("/chat", json=stream_request, headers={"x-mock-total-tokens": "150"})
        blocked = await client.post("/chat", json=stream_request)
    assert first.status_code == 200
    assert first.headers["content-type"].startswith("text/event-stream")
    lines = [line for line in first.text.split("\n") if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"  # stream delivered whole, although it crossed
    # stream_options were added upstream because the client did not ask for usage; what they
    # brought (the usage-only chunk, "usage": null) is not the client's to see, but was charged.
    assert mock.chat_requests[0].json["stream_options"] == {"include_usage": True}
    assert not any("usage" in chunk for chunk in chunks)
    assert blocked.status_code == 429 and limits(blocked)[1] == "0"
    assert mock.count == 1


async def test_token_limit_on_plain_host_backend_reads_sse_usage(nursery, mock_clock):
    mock = await start_mock(nursery)
    gw = await start_routes(nursery, """
            - policies:
                localRateLimit: [{{maxTokens: 50, tokensPerFill: 50, fillInterval: 1h, type: tokens}}]
              backends: [{{host: "127.0.0.1:{mock}"}}]
        """, port=free_port(), mock=mock.port)
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    async with gw.client() as client:
        first = await client.post("/v1/chat/completions", json=body, headers={"x-mock-total-tokens": "49"})
        second = await client.post("/v1/chat/completions", json=body, headers={"x-mock-total-tokens": "5"})
        third = await client.post("/v1/chat/completions", json=body)
    assert [r.status_code for r in (first, second, third)] == [200, 200, 429]
    assert limits(second)[1] == "1"


async def test_concurrent_streams_are_all_charged(nursery, mock_clock):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKEN_LIMIT.replace("maxTokens: 100, tokensPerFill: 100",
                                                          "maxTokens: 1000, tokensPerFill: 1000"),
                             port=free_port(), mock=mock.port)
    statuses = []

    async def stream(client: httpx.AsyncClient) -> None:
        response = await client.post("/chat", json={**CHAT, "stream": True}, headers={"x-mock-total-tokens": "100"})
        statuses.append(response.status_code)

    async with gw.client() as client:
        async with trio.open_nursery() as streams:
            for _ in range(5):
                streams.start_soon(stream, client)
        probe = await client.post("/chat", json=CHAT, headers={"x-mock-total-tokens": "1"})
    assert statuses == [200] * 5
    assert limits(probe)[1] == "500"


async def test_rate_limit_decisions_are_traced(nursery, backend, mock_clock):
    gw = await start_gateway(nursery, ROUTE_LIMIT, port=free_port(), backend=backend.port, max=1, fill=1,
                             interval="1m")
    async with gw.client() as client:
        allowed_trace = await nursery.start(TraceReader(gw).run)
        await client.get("/")
        rejected_trace = await nursery.start(TraceReader(gw).run)
        await client.get("/")
    allowed_events = await allowed_trace.events()
    allowed = [e["message"] for e in allowed_events if e["message"]["type"] == "policy"]
    assert allowed == [{"type": "policy", "kind": "localRateLimit", "result": "allowed", "limit": 1,
                        "remaining": 0, "reset": 60}]
    stages = [(e["message"]["type"], e["message"].get("stage", e["message"].get("phase"))) for e in allowed_events]
    # the applied route policy gets its own snapshot, between the route's selection and its summary
    assert stages[stages.index(("policySelection", "route")):stages.index(("requestSnapshot", "route policies"))] == [
        ("policySelection", "route"), ("policy", None), ("requestSnapshot", "localRateLimit")]
    rejected = await rejected_trace.events()
    policy = [e for e in rejected if e["message"]["type"] == "policy"]
    assert policy[0]["message"]["result"] == "rejected" and policy[0]["severity"] == "warn"
    assert rejected[-1]["message"] == {"type": "requestFinished", "status": 429, "error": "rate limit exceeded", "why": {
        "policy": "localRateLimit", "index": 0, "remaining": 0, "resetSeconds": 60,
        "limit": {"maxTokens": 1, "tokensPerFill": 1, "fillInterval": 60.0, "type": "requests"}}}
    assert "backendCallStart" not in [e["message"]["type"] for e in rejected]


async def test_llm_details_and_token_charge_appear_in_the_trace(nursery, mock_clock):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKEN_LIMIT, port=free_port(), mock=mock.port)
    reader = await nursery.start(TraceReader(gw).run)
    async with gw.client() as client:
        await client.post("/chat", json={**CHAT, "stream": True}, headers={"x-mock-total-tokens": "42"})
    events = await reader.events()
    final = next(e["message"]["requestState"] for e in events if e["message"].get("stage") == "final request"
                 and e["message"]["type"] == "requestSnapshot")
    assert final["llm"] == {"provider": "openAI", "model": "forced-model", "streaming": True}
    assert final["backend"]["type"] == "ai"
    charged = [e["message"] for e in events if e["message"].get("result") == "charged"]
    assert charged == [{"type": "policy", "kind": "localRateLimit", "result": "charged", "tokens": 42,
                        "limit": 100, "remaining": 58, "reset": 3}]


async def test_an_abandoned_llm_stream_stops_upstream(nursery):
    """The client leaves mid-stream: the gateway drops the upstream call, the provider stops generating."""
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKEN_LIMIT, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        async with client.stream("POST", "/chat", json={**CHAT, "stream": True},
                                 headers={"x-mock-chunks": "1000", "x-mock-chunk-delay-ms": "20"}) as response:
            chunks = response.aiter_raw()
            await chunks.__anext__()  # the stream is flowing
    with trio.fail_after(5):
        await mock.wait_until(lambda m: m.disconnects == 1)


async def test_route_level_backend_auth_reaches_every_backend_without_its_own(nursery, mock_clock):
    """agentgateway's examples put backendAuth on the route: each backend gets it unless it has one."""
    mock = await start_mock(nursery)
    gw = await start_routes(nursery, """
        - name: llm
          policies:
            backendAuth: {{key: sk-route}}
          backends:
          - ai:
              name: mock
              provider: {{openAI: {{}}}}
              hostOverride: "127.0.0.1:{mock}"
              pathOverride: /v1/chat/completions
        - name: own
          matches: [{{headers: [{{name: x-own, value: {{exact: "1"}}}}]}}]
          policies:
            backendAuth: {{key: sk-route}}
          backends:
          - host: "127.0.0.1:{mock}"
            policies:
              backendAuth: {{key: sk-backend}}
        """, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        await client.post("/chat", json=CHAT, headers={"authorization": "Bearer client"})
        await client.post("/v1/chat/completions", json=CHAT, headers={"x-own": "1"})
    assert [r.header("authorization") for r in mock.chat_requests] == ["Bearer sk-route", "Bearer sk-backend"]


LISTENER_AND_ROUTE_TOKEN_LIMITS = """
    binds:
    - port: {port}
      listeners:
      - policies:
          localRateLimit: [{{maxTokens: 1000, tokensPerFill: 1000, fillInterval: 60s, type: tokens}}]
        routes:
        - name: llm
          policies:
            localRateLimit: [{{maxTokens: 100, tokensPerFill: 100, fillInterval: 60s, type: tokens}}]
          backends:
          - ai:
              name: mock
              provider: {{openAI: {{model: forced-model}}}}
              hostOverride: "127.0.0.1:{mock}"
              pathOverride: /v1/chat/completions
"""


async def test_every_token_limiter_of_the_request_is_charged(nursery, mock_clock):
    """The listener's and the route's token budgets both pay for the response, not only the first."""
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, LISTENER_AND_ROUTE_TOKEN_LIMITS, port=free_port(), mock=mock.port)
    async with gw.client() as client:
        first = await client.post("/chat", json=CHAT, headers={"x-mock-total-tokens": "60"})
        second = await client.post("/chat", json=CHAT, headers={"x-mock-total-tokens": "10"})
    assert (first.status_code, second.status_code) == (200, 200)
    assert limits(second)[:2] == ("100", "40")  # the route's budget (checked second) was charged
    limiters = [limiter for _, limiter in gw.info.runtime.state.limiters.values()]
    for _ in range(1000):  # the second charge lands just after its response ended
        if sorted(lim.buckets[0].tokens for lim in limiters) == [30, 930]:
            break
        await trio.sleep(0)
    assert sorted(lim.buckets[0].tokens for lim in limiters) == [30, 930]  # and the listener's too
