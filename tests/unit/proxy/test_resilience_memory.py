"""Virtual models, failover, outlier detection and the retry budget over the in-memory harness
(docs/resilience.md): provider targets that fail on command (refuse, 503, 429 with retry-after, hang
before the first byte, break mid-stream), virtual time (``autojump_clock``) for ejection intervals and
timeouts, and a seeded random source for every pick, so no assertion depends on luck or speed."""

from __future__ import annotations

import json
import logging
import math
import random

import pytest
import trio
import trio.testing
from prometheus_client import generate_latest

from tests.memory_harness import Backend, BackendConnection, answer, hang, memory_gateway
from trioproxy.config import parse_config

JSON = [(b"content-type", b"application/json")]
SSE = [(b"content-type", b"text/event-stream"), (b"transfer-encoding", b"chunked")]


def completion(text: str, model: str = "m") -> bytes:
    return json.dumps({"id": "c1", "object": "chat.completion", "created": 0, "model": model,
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                    "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}).encode()


def openai(text: str) -> Backend:
    return Backend(answer(200, completion(text), JSON))


def chunk(text: str) -> bytes:
    return b"data: " + json.dumps({"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [
        {"index": 0, "delta": {"content": text}, "finish_reason": None}]}).encode() + b"\n\n"


def framed(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def stream_head(conn: BackendConnection) -> None:
    await conn.send_raw(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")


def streaming(text: str) -> Backend:
    async def handler(conn: BackendConnection) -> None:
        while await conn.request() is not None:
            await stream_head(conn)
            await conn.send_raw(framed(chunk(text)) + framed(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    return Backend(handler)


def llm_config(mode: str, targets: str, *, extra: str = "", models: str = "") -> str:
    return f"""
llm:
  port: 4000
  models:
  - {{name: a, provider: openAI, params: {{model: gpt-a, apiKey: key-a, hostOverride: "a.test:80"}}}}
  - {{name: b, provider: openAI, params: {{model: gpt-b, apiKey: key-b, hostOverride: "b.test:80"}}}}
  - {{name: c, provider: openAI, params: {{model: gpt-c, apiKey: key-c, hostOverride: "c.test:80"}}}}
{models}  virtualModels:
  - name: smart
{extra}    routing:
      {mode}:
        targets: {targets}
"""


FAILOVER = llm_config("failover", "[{model: a}, {model: b, priority: 1}, {model: c, priority: 2}]")
WEIGHTED = llm_config("weighted", "[{model: a}, {model: b}, {model: c}]")


def chat(model: str = "smart", stream: bool = False) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}).encode()


async def ask(gw, model: str = "smart", stream: bool = False, headers=()):  # type: ignore[no-untyped-def]
    return await gw.request("POST", "/v1/chat/completions", headers=[*JSON, *headers], body=chat(model, stream))


def refused() -> Backend:
    return Backend(answer(), refuse=10**9)


async def test_failover_takes_the_next_target_with_its_own_model_and_key_and_logs_every_attempt(
        autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="trioproxy.access")
    backends = {"a.test:80": refused(), "b.test:80": Backend(answer(503)), "c.test:80": openai("from c")}
    async with memory_gateway(FAILOVER, backends) as gw:
        watcher = gw.runtime.trace.watch()
        response = await ask(gw)
        events = []
        with trio.move_on_after(5):
            while True:
                event = await watcher.next_event()
                events.append(event["message"])
                if event["message"]["type"] == "requestFinished":
                    break
    assert response.status == 200 and json.loads(response.body)["choices"][0]["message"]["content"] == "from c"
    (b_request,) = backends["b.test:80"].received
    (c_request,) = backends["c.test:80"].received
    assert json.loads(b_request.body)["model"] == "gpt-b" and b_request.header("authorization") == "Bearer key-b"
    assert json.loads(c_request.body)["model"] == "gpt-c" and c_request.header("authorization") == "Bearer key-c"
    assert c_request.header("x-retry-attempt") == "2"
    failovers = [e for e in events if e["type"] == "failover"]
    assert [(e["previous"], e["next"]) for e in failovers] == [("a", "b"), ("b", "c")]
    assert failovers[0]["reason"].startswith("upstream connect error") and failovers[1]["reason"] == "status 503"
    assert [e["target"] for e in events if e["type"] == "backendCallStart"] == ["a.test:80", "b.test:80", "c.test:80"]
    (line,) = [r for r in caplog.records if r.name == "trioproxy.access"]
    fields = line.fields  # type: ignore[attr-defined]
    assert fields["llm.attempts"] == "a,b,c" and fields["endpoint"] == "c.test:80"
    # usage and the model are the answering target's (what token limits and spend are charged on)
    assert (fields["gen_ai.request.model"], fields["gen_ai.usage.input_tokens"]) == ("gpt-c", 3)


async def test_one_of_three_targets_down_1000_requests_succeed_and_it_gets_only_probes_after_ejection(autojump_clock):
    backends = {"a.test:80": openai("a"), "b.test:80": Backend(answer(503)), "c.test:80": openai("c")}
    async with memory_gateway(WEIGHTED, backends) as gw:
        gw.runtime.resilience.seed(random.Random(31))
        start = trio.current_time()
        statuses = []
        for _ in range(1000):
            statuses.append((await ask(gw)).status)
            await trio.sleep(0.125)  # 125 s of virtual time in all
        health = gw.runtime.resilience.health.targets["b@b.test:80"]
    assert statuses == [200] * 1000
    times = [r.at - start for r in backends["b.test:80"].received]
    # five failures in a row eject it (Envoy's consecutive_5xx); then one probe each time an ejection
    # ends, each failing and ejecting it for 30 s x the number of ejections
    assert len(times) == 7 and times[4] < 5
    first, second = times[5], times[6]
    assert times[4] + 30 <= first < times[4] + 32
    assert first + 60 <= second < first + 62
    assert health.total_ejections == 3 and health.state(trio.current_time()) == "ejected"
    served = len(backends["a.test:80"].received) + len(backends["c.test:80"].received)
    assert served == 1000


async def test_the_probe_brings_a_recovered_target_back(autojump_clock):
    state = {"down": True}

    async def flaky(conn: BackendConnection) -> None:
        while await conn.request() is not None:
            await conn.respond(503 if state["down"] else 200, completion("b"), JSON)

    backends = {"a.test:80": Backend(answer(503)), "b.test:80": Backend(flaky), "c.test:80": openai("c")}
    config = llm_config("failover", "[{model: a}, {model: b}, {model: c, priority: 1}]")
    async with memory_gateway(config, backends) as gw:
        gw.runtime.resilience.seed(random.Random(4))
        before = [await ask(gw) for _ in range(10)]  # a and b fail five times each: both ejected, c serves
        health = gw.runtime.resilience.health.targets
        assert health["a@a.test:80"].state(trio.current_time()) == "ejected"
        assert health["b@b.test:80"].state(trio.current_time()) == "ejected"
        state["down"] = False
        await trio.sleep(30)
        after = [await ask(gw) for _ in range(4)]
        now = trio.current_time()
        assert health["b@b.test:80"].state(now) == "healthy"  # its probe passed
        assert health["a@a.test:80"].state(now) == "ejected"  # due, but the two choices took the faster b
    assert all(r.status == 200 for r in before + after)
    assert json.loads(after[-1].body)["choices"][0]["message"]["content"] == "b"  # priority 0 again
    assert len(backends["a.test:80"].received) == 5 and len(backends["c.test:80"].received) == 10


async def test_429_with_retry_after_ejects_that_target_for_that_long(autojump_clock):
    async def limited(conn: BackendConnection) -> None:
        while await conn.request() is not None:
            await conn.respond(429, b'{"error": {"message": "slow down"}}', [*JSON, (b"retry-after", b"20")])

    backends = {"a.test:80": Backend(limited), "b.test:80": openai("b"), "c.test:80": openai("c")}
    async with memory_gateway(FAILOVER, backends) as gw:
        start = trio.current_time()
        first = await ask(gw)
        for _ in range(19):
            await trio.sleep(1)
            assert (await ask(gw)).status == 200
        await trio.sleep(1)
        await ask(gw)
    assert first.status == 200 and json.loads(first.body)["choices"][0]["message"]["content"] == "b"
    assert [round(r.at - start) for r in backends["a.test:80"].received] == [0, 20]  # then its probe


async def test_a_hang_before_the_first_byte_fails_over_at_first_token_timeout(autojump_clock):
    async def silent_stream(conn: BackendConnection) -> None:  # the head, then nothing
        await conn.request()
        await stream_head(conn)
        await conn.wait_closed()

    config = llm_config("failover", "[{model: a}, {model: b, priority: 1}, {model: c, priority: 2}]",
                        extra="    firstTokenTimeout: 2s\n")
    backends = {"a.test:80": Backend(silent_stream), "b.test:80": Backend(hang), "c.test:80": streaming("c")}
    async with memory_gateway(config, backends) as gw:
        start = trio.current_time()
        response = await ask(gw, stream=True)
    assert response.status == 200 and response.at - start == 4.0  # 2 s at a (a head, no token), 2 s at b (nothing)
    assert b'"content": "c"' in response.body and response.body.count(b"data: [DONE]") == 1
    assert backends["a.test:80"].connections[0].closed_at == start + 2.0
    assert backends["b.test:80"].connections[0].closed_at == start + 4.0


async def test_a_failure_after_the_first_streamed_byte_reaches_the_client_as_a_broken_stream(autojump_clock):
    async def breaks(conn: BackendConnection) -> None:
        await conn.request()
        await stream_head(conn)
        await conn.send_raw(framed(chunk("half")))
        await trio.sleep(1)
        conn.close()  # reset mid-stream

    backends = {"a.test:80": Backend(breaks), "b.test:80": streaming("b"), "c.test:80": streaming("c")}
    async with memory_gateway(FAILOVER, backends) as gw:
        client = gw.connect()
        body = chat(stream=True)
        await client.send_head("POST", "/v1/chat/completions", [*JSON, (b"content-length", str(len(body)).encode())])
        await client.send_body(body, end=True)
        raw = await client.closed()
    assert raw.startswith(b"HTTP/1.1 200") and raw.count(b'"content": "half"') == 1
    assert not raw.endswith(b"0\r\n\r\n") and b"[DONE]" not in raw  # broken, not completed by another target
    assert backends["b.test:80"].received == [] and backends["c.test:80"].received == []


async def test_each_target_speaks_its_own_dialect(autojump_clock):
    models = ("  - {name: claude, provider: anthropic, params: {model: claude-x, apiKey: key-d,"
              " hostOverride: \"d.test:80\"}}\n")
    config = llm_config("failover", "[{model: a}, {model: claude, priority: 1}]", models=models)
    message = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                          "content": [{"type": "text", "text": "from claude"}], "stop_reason": "end_turn",
                          "usage": {"input_tokens": 3, "output_tokens": 2}}).encode()
    backends = {"a.test:80": refused(), "d.test:80": Backend(answer(200, message, JSON))}
    async with memory_gateway(config, backends) as gw:
        response = await ask(gw)
    (received,) = backends["d.test:80"].received
    assert received.target == "/v1/messages" and received.header("x-api-key") == "key-d"
    assert json.loads(received.body)["model"] == "claude-x"
    answer_ = json.loads(response.body)
    assert response.status == 200 and answer_["object"] == "chat.completion"
    assert answer_["choices"][0]["message"]["content"] == "from claude"


async def test_conditional_targets_by_header_with_the_rest_as_fallbacks(autojump_clock):
    config = llm_config("conditional", "[{when: 'request.headers[\"x-tier\"] == \"gold\"', model: a}, {model: b}]")
    backends = {"a.test:80": openai("a"), "b.test:80": openai("b")}
    async with memory_gateway(config, backends) as gw:
        gold = await ask(gw, headers=[(b"x-tier", b"gold")])
        plain = await ask(gw)
    assert json.loads(gold.body)["choices"][0]["message"]["content"] == "a"
    assert json.loads(plain.body)["choices"][0]["message"]["content"] == "b"
    assert len(backends["a.test:80"].received) == 1


async def test_weighted_virtual_model_follows_its_weights_with_a_seeded_source(autojump_clock):
    config = llm_config("weighted", "[{model: a, weight: 3}, {model: b, weight: 1}]")
    backends = {"a.test:80": openai("a"), "b.test:80": openai("b")}
    async with memory_gateway(config, backends) as gw:
        gw.runtime.resilience.seed(random.Random(5))
        for _ in range(400):
            await ask(gw)
    a, b = len(backends["a.test:80"].received), len(backends["b.test:80"].received)
    assert a + b == 400 and 260 < a < 340


def bind_config(retry: str, backends: str = '[{host: "b.test:80"}]') -> str:
    return ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {retry: " + retry + "}\n"
            f"      backends: {backends}\n")


async def slow_503(conn: BackendConnection) -> None:
    while await conn.request() is not None:
        await trio.sleep(1)
        await conn.respond(503)


@pytest.mark.parametrize(("budget", "most"), [(20, 125), (100, 300)])
async def test_the_retry_budget_caps_attempts_under_a_full_outage(autojump_clock, budget, most):
    config = bind_config(f"{{attempts: 2, codes: [503], budgetPercent: {budget}}}")
    backend = Backend(slow_503)
    async with memory_gateway(config, {"b.test:80": backend}) as gw:
        statuses: list[int] = []

        async def one() -> None:
            statuses.append((await gw.request()).status)

        async with trio.open_nursery() as nursery:
            for _ in range(100):
                nursery.start_soon(one)
    assert statuses == [503] * 100
    calls = len(backend.received)
    if budget == 100:
        assert calls == 300  # every request: the first call and two retries
    else:
        assert 120 <= calls <= most  # 20 retries at once (20 % of 100 in flight), then a few as the rest end


@pytest.mark.parametrize(("mode", "failures"), [("weighted", 3), ("leastRequest", 1)])
async def test_a_bind_route_with_health_avoids_a_failing_backend_and_retries_elsewhere(autojump_clock, mode, failures):
    backends = '[{host: "a.test:80"}, {host: "b.test:80"}, {host: "c.test:80"}]'
    config = bind_config("{attempts: 2, codes: [503]}", backends).replace(
        "policies: {retry:", "policies: {health: {eviction: {consecutiveFailures: 3}}, loadBalancer: {mode: " + mode
        + "}, retry:")
    servers = {"a.test:80": Backend(answer(200, b"a")), "b.test:80": Backend(answer(503)),
               "c.test:80": Backend(answer(200, b"c"))}
    async with memory_gateway(config, servers) as gw:
        gw.runtime.resilience.seed(random.Random(2))
        statuses = [(await gw.request()).status for _ in range(300)]
        upstreams = gw.runtime.resilience.snapshot(
            (r.key, b) for r in gw.config.binds[0].listeners[0].routes for b in r.backends)
        exposition = generate_latest(gw.runtime.metrics.registry).decode()
    assert statuses == [200] * 300
    # weighted: three failures eject it (no time passes, so no probe yet); leastRequest: a failure
    # counts as a 1 s latency, so the two choices never take it again while that average lasts
    assert len(servers["b.test:80"].received) == failures
    states = {u["target"]: u["state"] for u in upstreams}
    assert states == {"a.test:80": "healthy", "b.test:80": "ejected" if failures == 3 else "healthy",
                      "c.test:80": "healthy"}
    ejected = 1.0 if failures == 3 else 0.0
    assert f'trioproxy_upstream_ejected{{target="b.test:80"}} {ejected}' in exposition
    assert ('trioproxy_upstream_ejections_total{reason="consecutiveFailures",target="b.test:80"} 1.0'
            in exposition) is (failures == 3)


async def test_exponential_backoff_with_full_jitter_stays_under_its_cap(autojump_clock):
    config = bind_config("{attempts: 4, codes: [503], backoff: 100ms, maxBackoff: 250ms}")
    backend = Backend(answer(503))
    async with memory_gateway(config, {"b.test:80": backend}) as gw:
        gw.runtime.resilience.seed(random.Random(7))
        start = trio.current_time()
        await gw.request()
    times = [r.at - start for r in backend.received]
    waits = [b - a for a, b in zip(times, times[1:])]
    caps = [0.1, 0.2, 0.25, 0.25]
    assert len(waits) == 4 and all(0 <= w <= cap for w, cap in zip(waits, caps))
    assert len(set(waits)) == 4  # random, not a fixed step


async def test_a_binds_route_of_ai_backends_fails_over_to_another_provider_in_its_dialect(autojump_clock):
    config = """
binds:
- port: 3000
  listeners:
  - routes:
    - policies:
        retry: {attempts: 1, codes: [429, 503]}
        health: {eviction: {consecutiveFailures: 2}}
      backends:
      - ai: {name: oai, provider: {openAI: {model: gpt-x}}, hostOverride: "a.test:80"}
        weight: 1000000
        policies: {backendAuth: {key: key-a}}
      - ai: {name: claude, provider: {anthropic: {model: claude-x}}, hostOverride: "d.test:80"}
        weight: 1
        policies: {backendAuth: {key: key-d}}
"""
    message = json.dumps({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                          "content": [{"type": "text", "text": "from claude"}], "stop_reason": "end_turn",
                          "usage": {"input_tokens": 3, "output_tokens": 2}}).encode()
    backends = {"a.test:80": Backend(answer(503)), "d.test:80": Backend(answer(200, message, JSON))}
    async with memory_gateway(config, backends) as gw:
        gw.runtime.resilience.seed(random.Random(0))
        responses = [await ask(gw, model="anything") for _ in range(5)]
    assert [r.status for r in responses] == [200] * 5
    assert all(json.loads(r.body)["choices"][0]["message"]["content"] == "from claude" for r in responses)
    assert len(backends["a.test:80"].received) == 2  # then ejected: the heavy weight no longer counts
    (first, *_) = backends["d.test:80"].received
    assert first.target == "/v1/messages" and first.header("x-api-key") == "key-d"
    assert json.loads(first.body)["model"] == "claude-x"


async def test_active_health_checks_take_a_backend_out_and_bring_it_back(autojump_clock):
    health = {"ok": False}

    async def checked(conn: BackendConnection) -> None:
        while (request := await conn.request()) is not None:
            if request.target == "/healthz":
                await conn.respond(200 if health["ok"] else 503)
            else:
                await conn.respond(200, b"b")  # its traffic works: only the check says it is down

    config = ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {health: {activeCheck: "
              "{path: /healthz, interval: 5s, unhealthyThreshold: 2, healthyThreshold: 2}}}\n"
              '      backends: [{host: "a.test:80"}, {host: "b.test:80"}]\n')
    backends = {"a.test:80": Backend(answer(200, b"a")), "b.test:80": Backend(checked)}
    async with memory_gateway(config, backends) as gw:
        gw.runtime.resilience.seed(random.Random(9))
        await gw.nursery.start(gw.runtime.resilience.run_checks)
        await trio.sleep(5.1)  # checks at 0 and 5: two failures
        down = [(await gw.request()).body for _ in range(50)]
        health["ok"] = True
        await trio.sleep(10)  # checks at 10 and 15 pass
        up = [(await gw.request()).body for _ in range(50)]
        states = {u["target"]: u["state"] for u in gw.runtime.resilience.snapshot(
            (r.key, b) for r in gw.config.binds[0].listeners[0].routes for b in r.backends)}
    assert down == [b"a"] * 50
    assert b"b" in up and states == {"a.test:80": "healthy", "b.test:80": "healthy"}
    checks = [r for r in backends["b.test:80"].received if r.target == "/healthz"]
    assert len(checks) == 4 and checks[0].header("user-agent") == "trioproxy-health-check"


async def test_without_active_checks_the_checker_sleeps_until_a_reload_brings_some(autojump_clock):
    """No wake-ups 4 times a second for nothing (production idle CPU, and every MockClock test's
    autojump stepping by 0.25 s); a reload that adds a check starts it."""
    plain = 'binds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends: [{host: "b.test:80"}]\n'
    checked = plain.replace("    - backends:", "    - policies: {health: {activeCheck: {path: /healthz, interval: 5s}}}\n"
                            "      backends:")
    backends = {"b.test:80": Backend(answer(200, b"b"))}
    async with memory_gateway(plain, backends) as gw:
        await gw.nursery.start(gw.runtime.resilience.run_checks)
        await trio.testing.wait_all_tasks_blocked()
        assert trio.lowlevel.current_statistics().seconds_to_next_deadline == math.inf
        start = trio.current_time()
        await trio.sleep(3600)
        assert trio.current_time() - start == 3600 and backends["b.test:80"].received == []
        gw.runtime.apply(parse_config(plain, env={}))  # a reload without checks: it looks, and sleeps again
        await trio.testing.wait_all_tasks_blocked()
        assert trio.lowlevel.current_statistics().seconds_to_next_deadline == math.inf
        gw.runtime.apply(parse_config(checked, env={}))
        await trio.sleep(5.1)  # checks at once and 5 s later
        assert [r.target for r in backends["b.test:80"].received] == ["/healthz"] * 2


async def test_checks_are_gets_to_each_target_one_at_a_time_and_only_a_2xx_in_time_passes(autojump_clock):
    """Each check is ``GET path`` with the target's own host; a check still running is not started
    again, and does not hold up the other targets'; a 3xx, or an answer past ``timeout``, fails."""
    seen: dict[str, list[tuple[str, str, str | None, float]]] = {"b.test:80": [], "c.test:80": []}
    status = {"b.test:80": 200, "c.test:80": 300}

    def recording(name: str):  # type: ignore[no-untyped-def]
        async def handler(conn: BackendConnection) -> None:
            while (request := await conn.request()) is not None:
                seen[name].append((request.method, request.target, request.header("host"), trio.current_time()))
                if status[name] == 0:
                    await trio.sleep(60)  # past the check's timeout
                await conn.respond(status[name] or 200)
        return handler

    config = ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {health: {activeCheck: "
              "{path: /healthz, interval: 1s, timeout: 1900ms, unhealthyThreshold: 1, healthyThreshold: 1}}}\n"
              '      backends: [{host: "b.test:80"}, {host: "c.test:80"}, {host: "d.test:80"}]\n')
    backends = {name: Backend(recording(name)) for name in seen}  # d.test refuses connections

    def states(gw) -> dict[str, str]:  # type: ignore[no-untyped-def]
        return {u["target"]: u["state"] for u in gw.runtime.resilience.snapshot(
            (r.key, b) for r in gw.config.binds[0].listeners[0].routes for b in r.backends)}

    async with memory_gateway(config, backends) as gw:
        await gw.nursery.start(gw.runtime.resilience.run_checks)
        await trio.sleep(0.5)
        assert [r[:3] for r in seen["b.test:80"]] == [("GET", "/healthz", "b.test:80")]
        assert [r[:3] for r in seen["c.test:80"]] == [("GET", "/healthz", "c.test:80")]
        # a 300 is not a pass, nor a refused connection
        assert states(gw) == {"b.test:80": "healthy", "c.test:80": "ejected", "d.test:80": "ejected"}
        status["b.test:80"] = 0  # b now hangs; c recovers
        status["c.test:80"] = 200
        await trio.sleep(5)
        # b: the hung check at 1.0 s ends at its timeout (2.9 s), the next starts at the tick after
        # (3.0 s) and hangs again; c goes on every second beside it
        assert [round(r[3], 2) for r in seen["b.test:80"]] == [0.0, 1.0, 3.0, 5.0]
        assert [round(r[3], 2) for r in seen["c.test:80"]] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert states(gw) == {"b.test:80": "ejected", "c.test:80": "healthy", "d.test:80": "ejected"}


def test_an_active_check_on_an_ai_backend_is_refused():
    from trioproxy.config import ConfigError, parse_config

    text = ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends:\n"
            "      - ai: {name: x, provider: {openAI: {}}, hostOverride: 'a.test:80'}\n"
            "        policies: {health: {activeCheck: {path: /}}}\n")
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    assert "active health checks apply to host backends" in str(info.value)


async def test_a_request_cut_by_its_timeout_mid_retry_gives_its_budget_back(autojump_clock):
    config = bind_config("{attempts: 50, codes: [503], backoff: 1s}").replace(
        "policies: {retry:", "policies: {timeout: {requestTimeout: 2500ms}, retry:")
    async with memory_gateway(config, {"b.test:80": Backend(answer(503))}) as gw:
        response = await gw.request()
        (state,) = gw.runtime.resilience.budgets.values()
    assert response.status == 504
    assert (state.requests, state.retries) == (0, 0)


# --- per-target limits (llm.models[].localRateLimit) ---------------------------------------------

def limited(a: str, b: str = "") -> str:
    """A failover from a to b (two providers), each with the ``localRateLimit`` given (flow YAML)."""
    a_limit = f", localRateLimit: {a}" if a else ""
    b_limit = f", localRateLimit: {b}" if b else ""
    return f"""
llm:
  port: 4000
  models:
  - {{name: a, provider: openAI, params: {{model: gpt-a, apiKey: key-a, hostOverride: "a.test:80"}}{a_limit}}}
  - {{name: b, provider: openAI, params: {{model: gpt-b, apiKey: key-b, hostOverride: "b.test:80"}}{b_limit}}}
  virtualModels:
  - name: smart
    routing:
      failover:
        targets: [{{model: a}}, {{model: b, priority: 1}}]
"""


TWO_A_MINUTE = "[{maxTokens: 2, tokensPerFill: 2, fillInterval: 60s}]"


async def traced(gw, model: str = "smart"):  # type: ignore[no-untyped-def]
    """One request and its trace events' messages (to requestFinished)."""
    watcher = gw.runtime.trace.watch()
    response = await ask(gw, model)
    events = []
    with trio.move_on_after(5):
        while True:
            event = await watcher.next_event()
            events.append(event["message"])
            if event["message"]["type"] == "requestFinished":
                break
    return response, events


async def test_a_target_over_its_request_quota_is_skipped_until_its_window_refills(autojump_clock, caplog):
    caplog.set_level(logging.INFO, logger="trioproxy.access")
    backends = {"a.test:80": openai("from a"), "b.test:80": openai("from b")}
    async with memory_gateway(limited(TWO_A_MINUTE), backends) as gw:
        answered = [json.loads((await ask(gw)).body)["choices"][0]["message"]["content"] for _ in range(2)]
        third, events = await traced(gw)
        fourth = await ask(gw)
        await trio.sleep(60)  # the next fill
        after = [json.loads((await ask(gw)).body)["choices"][0]["message"]["content"] for _ in range(3)]
    assert answered == ["from a", "from a"]
    assert third.status == 200 and json.loads(third.body)["choices"][0]["message"]["content"] == "from b"
    assert json.loads(fourth.body)["choices"][0]["message"]["content"] == "from b"
    assert after == ["from a", "from a", "from b"]
    assert len(backends["a.test:80"].received) == 4 and len(backends["b.test:80"].received) == 3
    (failover,) = [e for e in events if e["type"] == "failover"]
    assert (failover["reason"], failover["previous"], failover["next"]) == ("rate limited", "a", "b")
    assert [e["target"] for e in events if e["type"] == "backendCallStart"] == ["b.test:80"]
    logged = [(f.get("llm.attempts"), f.get("llm.skipped"), f["endpoint"])
              for f in (r.fields for r in caplog.records if r.name == "trioproxy.access")]  # type: ignore[attr-defined]
    a, b = (None, None, "a.test:80"), (None, "a", "b.test:80")  # the skipped target was not called
    assert logged == [a, a, b, b, a, a, b]


async def test_a_token_quota_is_charged_with_the_usage_of_the_target_that_answered(autojump_clock):
    backends = {"a.test:80": openai("from a"), "b.test:80": openai("from b")}
    config = limited("[{maxTokens: 5, tokensPerFill: 5, fillInterval: 60s, type: tokens}]",
                     "[{maxTokens: 100, tokensPerFill: 100, fillInterval: 60s, type: tokens}]")
    async with memory_gateway(config, backends) as gw:
        compiled = gw.runtime.state.routes["default/default/bind/4000/listener0/default/llm"]
        a_limiter, b_limiter = compiled.target_limiters
        assert a_limiter is not None and b_limiter is not None
        first = await ask(gw)
        balances = [(a_limiter.buckets[0].tokens, b_limiter.buckets[0].tokens)]
        second = await ask(gw)  # a has no token left: b answers, and pays
        balances.append((a_limiter.buckets[0].tokens, b_limiter.buckets[0].tokens))
        direct = await ask(gw, "b")
        balances.append((a_limiter.buckets[0].tokens, b_limiter.buckets[0].tokens))
    assert [json.loads(r.body)["choices"][0]["message"]["content"] for r in (first, second, direct)] == [
        "from a", "from b", "from b"]
    assert balances == [(0, 100), (0, 95), (0, 90)]  # completion() reports total_tokens 5


async def test_a_target_that_failed_is_not_charged_the_tokens_of_the_one_that_answered(autojump_clock):
    backends = {"a.test:80": Backend(answer(503)), "b.test:80": openai("from b")}
    config = limited("[{maxTokens: 50, tokensPerFill: 50, fillInterval: 60s, type: tokens}]")
    async with memory_gateway(config, backends) as gw:
        (a_limiter, b_limiter) = gw.runtime.state.routes["default/default/bind/4000/listener0/default/llm"].target_limiters
        response = await ask(gw)
    assert response.status == 200 and b_limiter is None and a_limiter is not None
    assert a_limiter.buckets[0].tokens == 50


async def test_every_target_over_its_quota_is_a_429_in_the_clients_dialect(autojump_clock):
    one = "[{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s}]"
    backends = {"a.test:80": openai("from a"), "b.test:80": openai("from b")}
    async with memory_gateway(limited(one, "[{maxTokens: 3, tokensPerFill: 1, fillInterval: 30s}]"), backends) as gw:
        served = [json.loads((await ask(gw)).body)["choices"][0]["message"]["content"] for _ in range(4)]
        refused, events = await traced(gw)
    assert served == ["from a", "from b", "from b", "from b"]
    assert refused.status == 429
    error = json.loads(refused.body)["error"]
    assert (error["message"], error["type"]) == ("rate limit exceeded", "rate_limit_error")
    # the most constrained: b is at 0 too, but a's refill is further away (most_constrained's rule)
    assert (refused.header("x-ratelimit-limit"), refused.header("x-ratelimit-remaining")) == ("1", "0")
    assert refused.header("retry-after") == refused.header("x-ratelimit-reset") == "60"
    assert not [e for e in events if e["type"] == "backendCallStart"]
    assert len(backends["a.test:80"].received) == 1 and len(backends["b.test:80"].received) == 3


async def test_a_direct_request_to_a_model_over_its_quota_is_429(autojump_clock):
    backends = {"a.test:80": openai("from a"), "b.test:80": openai("from b")}
    async with memory_gateway(limited(TWO_A_MINUTE), backends) as gw:
        statuses = [(await ask(gw, "a")).status for _ in range(3)]
        other = await ask(gw, "b")
        refused = await ask(gw, "a")
    assert statuses == [200, 200, 429] and other.status == 200
    assert json.loads(refused.body)["error"]["type"] == "rate_limit_error"
    assert refused.header("x-ratelimit-limit") == "2" and refused.header("retry-after") is not None
    assert len(backends["a.test:80"].received) == 2


async def test_a_reload_keeps_a_target_quota_whose_specs_did_not_change(autojump_clock):
    from trioproxy.config import parse_config

    backends = {"a.test:80": openai("from a"), "b.test:80": openai("from b")}
    async with memory_gateway(limited(TWO_A_MINUTE), backends) as gw:
        for _ in range(2):
            await ask(gw)
        gw.runtime.apply(parse_config(limited(TWO_A_MINUTE, "[{maxTokens: 9, tokensPerFill: 9, fillInterval: 1s}]"),
                                      env={}))
        kept = json.loads((await ask(gw)).body)["choices"][0]["message"]["content"]
        gw.runtime.apply(parse_config(limited("[{maxTokens: 3, tokensPerFill: 3, fillInterval: 60s}]"), env={}))
        fresh = json.loads((await ask(gw)).body)["choices"][0]["message"]["content"]
    assert kept == "from b"  # a's two requests of the minute were spent before the reload
    assert fresh == "from a"  # new specs: a new, full bucket


def test_a_bad_target_quota_names_its_path():
    from trioproxy.config import ConfigError, parse_config

    text = limited("[{maxTokens: 1, tokensPerFill: 2, fillInterval: 60s}]",
                   "[{maxTokens: 5, tokensPerFill: 5, fillInterval: 1s, perClientAddress: true}]")
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    problems = "\n".join(info.value.problems)
    assert "llm.models[0].localRateLimit[0].maxTokens" in problems and "at least tokensPerFill" in problems
    assert "llm.models[1].localRateLimit[0].perClientAddress" in problems


async def test_a_failure_is_answered_as_is_when_the_other_targets_are_over_their_quota(autojump_clock):
    backends = {"a.test:80": Backend(answer(503)), "b.test:80": openai("from b")}
    async with memory_gateway(limited("", "[{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s}]"), backends) as gw:
        first = await ask(gw)  # a fails, b answers (its one request of the minute)
        second, events = await traced(gw)  # a fails, b is over its quota: a's 503, not a 429
        from trioproxy.admin.api import limiters

        listed = {entry["key"]: (entry["scope"], entry["entries"][0]["remaining"])
                  for entry in limiters(gw.runtime, trio.current_time())}
    assert first.status == 200 and second.status == 503
    assert [(e["reason"], e["next"]) for e in events if e["type"] == "failover"] == [("rate limited", None)]
    assert len(backends["a.test:80"].received) == 2 and len(backends["b.test:80"].received) == 1
    assert listed == {"default/default/bind/4000/listener0/default/llm/model/b": ("target", 0)}
