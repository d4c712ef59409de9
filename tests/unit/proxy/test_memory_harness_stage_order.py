"""Stage order (docs/pipeline.md's table, ``runtime.STAGE_ORDER``) over the in-memory harness: a
request an earlier stage refuses never reaches a later one, which each test shows by the state the
later stage keeps (a rate-limit budget, the backend's request log)."""

from __future__ import annotations

import trio

from tests.memory_harness import Backend, answer, memory_gateway

KEY = [(b"authorization", b"Bearer k1")]


def route(policies: str) -> str:
    return ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies:\n"
            + "".join(f"        {line}\n" for line in policies.strip().splitlines())
            + '      backends: [{host: "b.test:80"}]\n')


async def test_authentication_runs_before_the_rate_limit_so_refused_requests_spend_no_budget(autojump_clock):
    config = route("""
apiKey: {mode: strict, keys: [{key: k1}]}
localRateLimit: [{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s}]
""")
    backend = Backend(answer())
    async with memory_gateway(config, {"b.test:80": backend}) as gw:
        refused = [(await gw.request()).status for _ in range(3)]
        first = await gw.request(headers=KEY)
        second = await gw.request(headers=KEY)
    assert refused == [401, 401, 401]
    assert first.status == 200 and first.header("x-ratelimit-remaining") == "0"
    assert second.status == 429  # the one token went to the authenticated request
    assert [r.connection for r in backend.received] == [0]


async def test_the_per_client_rate_limit_runs_before_authentication_and_counts_per_address(autojump_clock):
    config = route("""
apiKey: {mode: strict, keys: [{key: k1}]}
localRateLimit: [{maxTokens: 2, tokensPerFill: 2, fillInterval: 60s, perClientAddress: true}]
""")
    async with memory_gateway(config, {"b.test:80": answer()}) as gw:
        guesses = [(await gw.request(client=("192.0.2.1", 1000 + i))).status for i in range(3)]
        with_key = await gw.request(headers=KEY, client=("192.0.2.1", 2000))
        other = await gw.request(headers=KEY, client=("192.0.2.2", 1000))
    assert guesses == [401, 401, 429]  # counted before the credential check; the port is not the client
    assert with_key.status == 429 and other.status == 200


async def test_a_cors_preflight_is_answered_before_authentication_and_never_reaches_the_backend(autojump_clock):
    config = route("""
cors: {allowOrigins: ["https://app.test"], allowMethods: [GET, POST], allowHeaders: [authorization]}
apiKey: {mode: strict, keys: [{key: k1}]}
""")
    backend = Backend(answer())
    async with memory_gateway(config, {"b.test:80": backend}) as gw:
        preflight = await gw.request("OPTIONS", "/", headers=[
            (b"origin", b"https://app.test"), (b"access-control-request-method", b"POST")])
        anonymous = await gw.request(headers=[(b"origin", b"https://app.test")])
        keyed = await gw.request(headers=[(b"origin", b"https://app.test"), *KEY])
    assert preflight.status == 200 and preflight.header("access-control-allow-origin") == "https://app.test"
    assert anonymous.status == 401
    assert keyed.status == 200 and keyed.header("access-control-allow-origin") == "https://app.test"
    assert len(backend.received) == 1  # only the keyed request; and the key was removed before it went up
    assert backend.received[0].header("authorization") is None


async def test_the_listener_phase_runs_before_routing_so_an_unrouted_request_spends_the_listener_budget(
        autojump_clock):
    config = """
binds:
- port: 3000
  listeners:
  - policies:
      localRateLimit: [{maxTokens: 1, tokensPerFill: 1, fillInterval: 60s}]
    routes:
    - matches: [{path: {pathPrefix: /api}}]
      backends: [{host: "b.test:80"}]
"""
    async with memory_gateway(config, {"b.test:80": answer()}) as gw:
        unrouted = await gw.request(path="/elsewhere")
        routed = await gw.request(path="/api")
        await trio.sleep(60)  # one token back, at the fill interval
        later = await gw.request(path="/api")
    assert unrouted.status == 404 and routed.status == 429 and later.status == 200


async def test_a_direct_response_answers_only_once_authentication_passed(autojump_clock):
    config = route("""
apiKey: {mode: strict, keys: [{key: k1}]}
directResponse: {status: 202, body: "from the gateway"}
""")
    backend = Backend(answer())
    async with memory_gateway(config, {"b.test:80": backend}) as gw:
        anonymous = await gw.request()
        keyed = await gw.request(headers=KEY)
    assert anonymous.status == 401
    assert keyed.status == 202 and keyed.text == "from the gateway"
    assert backend.connects == 0  # the backend phase never ran


async def test_backend_auth_runs_after_the_request_header_modifier_and_wins(autojump_clock):
    config = """
binds:
- port: 3000
  listeners:
  - routes:
    - backends:
      - host: "b.test:80"
        policies:
          requestHeaderModifier: {set: [{name: authorization, value: from-modifier}, {name: x-team, value: t1}]}
          backendAuth: {key: sk-backend}
"""
    backend = Backend(answer())
    async with memory_gateway(config, {"b.test:80": backend}) as gw:
        response = await gw.request(headers=[(b"authorization", b"client")])
    assert response.status == 200
    assert backend.received[0].header("authorization") == "Bearer sk-backend"
    assert backend.received[0].header("x-team") == "t1"


async def test_a_delay_waits_inside_the_request_timeout_and_the_backend_is_never_called(autojump_clock):
    config = route("""
delay: {duration: 3s}
timeout: {requestTimeout: 2s}
""")
    backend = Backend(answer())
    async with memory_gateway(config, {"b.test:80": backend}) as gw:
        start = trio.current_time()
        response = await gw.request()
    assert response.status == 504 and response.text == "request timeout"
    assert response.at - start == 2.0 and backend.connects == 0
