"""remoteRateLimit: the gateway against `trioproxy ratelimit-server` on a real redis-server."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid

import httpx
import pytest
import trio

from tests.conftest import LOOPBACK_SERVERS, free_port, start_gateway, start_routes
from tests.e2e.test_ratelimit_e2e import CHAT, start_mock
from tests.rls_helpers import (
    ROOT,
    Redis,
    _accepts,
    _wait,
    ratelimit_server,
    redis_server,
)
from trioproxy.config import parse_config
from trioproxy.policies.ratelimit_remote import (
    RemoteDescriptor,
    RemoteEntry,
    RemoteRateLimitPolicy,
    RemoteRateLimitSpec,
)
from trioproxy.rls.protos import rls_pb2

RLS = """
domain: gw
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: plan
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: path
    value: /wild*
    rate_limit: {unit: day, requests_per_unit: 1}
"""

ROUTE = """
- policies:
    remoteRateLimit:
      host: "{rls}"
      domain: gw
      failureMode: {mode}
      descriptors:
      - entries: [{{key: user, value: 'request.headers["x-user"]'}}]
  backends: [{{host: "127.0.0.1:{backend}"}}]
"""


@pytest.fixture(scope="module")
def rls(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rls")
    config = tmp / "rls.yaml"
    config.write_text(RLS)
    with redis_server(tmp) as redis, ratelimit_server(config, "--redis", redis.url) as server:
        yield server


def who() -> str:
    return uuid.uuid4().hex  # each test spends its own budget in the shared Redis


async def test_requests_budget_429_with_service_headers(nursery, backend, rls):
    gw = await start_routes(nursery, ROUTE, port=free_port(), rls=rls.target, mode="failClosed", backend=backend.port)
    user = who()
    async with gw.client() as client:
        answers = [await client.get("/", headers={"x-user": user}) for _ in range(4)]
        anonymous = await client.get("/")  # entry does not evaluate: descriptor skipped
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    assert answers[0].headers["x-ratelimit-limit"] == "3, 3;w=86400"
    assert answers[2].headers["x-ratelimit-remaining"] == "0"
    over = answers[3]
    assert over.text == "rate limit exceeded"
    assert over.headers["x-ext-ratelimited"] == "true"
    assert over.headers["x-ratelimit-remaining"] == "0" and int(over.headers["x-ratelimit-reset"]) > 0
    assert anonymous.status_code == 200 and "x-ratelimit-limit" not in anonymous.headers
    assert backend.requests == 4  # the 429 was not forwarded


async def test_fail_closed_and_fail_open(nursery, backend):
    closed = free_port()  # nothing listens there
    gw = await start_gateway(nursery, """
        binds:
        - port: {port}
          listeners:
          - routes:
            - name: closed
              matches: [{{path: {{pathPrefix: /closed}}}}]
              policies: {{remoteRateLimit: {{host: "127.0.0.1:{dead}", domain: gw, timeout: 500ms,
                          descriptors: [{{entries: [{{key: user, value: '"x"'}}]}}]}}}}
              backends: [{{host: "127.0.0.1:{backend}"}}]
            - name: open
              policies: {{remoteRateLimit: {{host: "127.0.0.1:{dead}", domain: gw, failureMode: failOpen,
                          timeout: 500ms, descriptors: [{{entries: [{{key: user, value: '"x"'}}]}}]}}}}
              backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), dead=closed, backend=backend.port)
    async with gw.client() as client:
        failed = await client.get("/closed")
        opened = await client.get("/open")
    assert (failed.status_code, failed.text) == (500, "rate limit failed")
    assert opened.status_code == 200
    assert backend.requests == 1
    counted = gw.info.runtime.metrics.registry.get_sample_value(
        "trioproxy_ratelimit_decisions_total", {"policy": "remoteRateLimit", "key": "default/default/bind/"
                                                f"{gw.port}/listener0/default/closed", "result": "failed"})
    assert counted == 1  # metrics count failures


TOKENS = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: llm
      policies:
        remoteRateLimit:
          host: "{rls}"
          domain: gw
          descriptors:
          - entries: [{{key: tenant, value: 'request.headers["x-tenant"]'}}]
            type: tokens
      backends:
      - ai:
          name: mock
          provider: {{openAI: {{model: m}}}}
          hostOverride: "127.0.0.1:{mock}"
          pathOverride: /v1/chat/completions
"""


async def _charged(rls, tenant: str) -> int:
    """Remaining tokens of ``tenant`` (a check-only call), once the after-response charge landed."""
    return (await trio.to_thread.run_sync(lambda: rls.call("gw", [[("tenant", tenant)]], hits=0))).statuses[0].limit_remaining


@pytest.mark.parametrize("stream", [False, True])
async def test_tokens_checked_before_and_charged_after(nursery, rls, stream):
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKENS, port=free_port(), rls=rls.target, mock=mock.port)
    tenant = who()
    body = {**CHAT, "stream": stream}
    async with gw.client() as client:
        first = await client.post("/chat", json=body, headers={"x-tenant": tenant, "x-mock-total-tokens": "60"})
        assert first.status_code == 200
        assert first.headers["x-ratelimit-remaining"] == "100"  # looked only: nothing added before
        await _wait_until(lambda: _charged(rls, tenant), 40)
        second = await client.post("/chat", json=body, headers={"x-tenant": tenant, "x-mock-total-tokens": "60"})
        assert second.status_code == 200  # 40 left: admitted, crosses the budget, delivered whole
        await _wait_until(lambda: _charged(rls, tenant), 0)
        third = await client.post("/chat", json=body, headers={"x-tenant": tenant})
    assert third.status_code == 429 and third.headers["x-ext-ratelimited"] == "true"
    assert mock.count == 2


async def _wait_until(get, expected, bound: float = 10.0) -> None:
    with trio.fail_after(bound):
        while (value := await get()) != expected:
            await trio.sleep(0.01)
    assert value == expected


async def test_redis_killed_and_restarted_mid_run(nursery, backend, tmp_path):
    config = tmp_path / "rls.yaml"
    config.write_text(RLS)
    redis = Redis(tmp_path).start()
    try:
        with ratelimit_server(config, "--redis", redis.url) as server:
            gw = await start_routes(nursery, ROUTE, port=free_port(), rls=server.target, mode="failClosed",
                                    backend=backend.port)
            user = who()
            async with gw.client() as client:
                assert (await client.get("/", headers={"x-user": user})).status_code == 200
                redis.stop()
                down = await client.get("/", headers={"x-user": user})
                assert (down.status_code, down.text) == (500, "rate limit failed")
                redis.start()
                with trio.fail_after(20):
                    while (await client.get("/", headers={"x-user": who()})).status_code != 200:
                        await trio.sleep(0.05)
                # a fresh Redis: the budget starts again and is enforced again
                codes = [(await client.get("/", headers={"x-user": user})).status_code for _ in range(4)]
            assert codes == [200, 200, 200, 429]
    finally:
        redis.stop()


async def test_nested_and_wildcard_descriptors_through_the_gateway(nursery, backend, rls):
    gw = await start_routes(nursery, """
        - policies:
            remoteRateLimit:
              host: "{rls}"
              domain: gw
              descriptors:
              - entries: [{{key: plan, value: 'request.headers["x-plan"]'}}, {{key: user, value: 'request.headers["x-user"]'}}]
              - entries: [{{key: path, value: request.path}}]
          backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), rls=rls.target, backend=backend.port)
    gold, wild = who(), who()
    async with gw.client() as client:
        nested = [(await client.get(f"/n/{gold}", headers={"x-plan": "gold", "x-user": gold})).status_code
                  for _ in range(6)]
        wildcard = [(await client.get(f"/wild/{wild}")).status_code for _ in range(2)]
        other = [(await client.get(f"/other/{wild}")).status_code for _ in range(3)]
    assert nested == [200] * 5 + [429]  # plan=gold → user: 5 a day
    assert wildcard == [200, 429]  # path /wild*: 1 a day, per path value
    assert other == [200] * 3  # no limit configured for it


def test_two_gateway_processes_share_one_budget(rls, tmp_path):
    from fixtures.echo_backend import EchoBackend  # noqa: F401 (the gateways answer directly)

    ports, procs = [free_port(), free_port()], []
    user = who()
    try:
        for port in ports:
            path = tmp_path / f"gw{port}.yaml"
            path.write_text(f"""
binds:
- port: {port}
  listeners:
  - routes:
    - policies:
        remoteRateLimit:
          host: "{rls.target}"
          domain: gw
          descriptors: [{{entries: [{{key: user, value: 'request.headers["x-user"]'}}]}}]
        directResponse: {{status: 200, body: ok}}
""")
            procs.append(subprocess.Popen([sys.executable, "-m", "trioproxy", "--config", str(path)], cwd=ROOT,
                                          env={**os.environ, **LOOPBACK_SERVERS}, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL))
        for port in ports:
            _wait(lambda port=port: _accepts(port), "gateway process")
        codes = [httpx.get(f"http://127.0.0.1:{ports[i % 2]}/", headers={"x-user": user}, timeout=10).status_code
                 for i in range(5)]
        assert codes == [200, 200, 200, 429, 429]
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(10)


def test_config_warns_about_entries_that_never_evaluate(caplog):
    with caplog.at_level(logging.WARNING, logger="trioproxy.config"):
        config = parse_config("""
binds:
- port: 3000
  listeners:
  - routes:
    - policies:
        remoteRateLimit:
          host: 127.0.0.1:8081
          domain: gw
          descriptors: [{entries: [{key: kind, value: users}]}]
      backends: [{host: "127.0.0.1:1"}]
""", env=LOOPBACK_SERVERS)
    assert config.binds[0].listeners[0].routes[0].policies.remote_rate_limit is not None
    assert "descriptors[0].entries[0] (kind: users): can never evaluate" in caplog.text
    assert '\'"users"\'' in caplog.text


def test_bad_cel_is_a_config_error():
    from trioproxy.config import ConfigError

    with pytest.raises(ConfigError) as err:
        parse_config("""
binds:
- port: 3000
  listeners:
  - routes:
    - policies:
        remoteRateLimit: {host: "a:1", domain: gw, descriptors: [{entries: [{key: k, value: 'request.path +'}]}]}
""", env=LOOPBACK_SERVERS)
    assert "remoteRateLimit.descriptors[0].entries[0].value" in str(err.value.problems)


def _response(code: int, *statuses: tuple[int, int, int], headers=(), request_headers=(), raw=b""):
    r = rls_pb2.RateLimitResponse(overall_code=code, raw_body=raw)
    for limit, remaining, unit in statuses:
        s = r.statuses.add(code=1, limit_remaining=remaining)
        s.current_limit.requests_per_unit, s.current_limit.unit = limit, unit
        s.duration_until_reset.seconds = 7
    for k, v in headers:
        r.response_headers_to_add.add(key=k, value=v)
    for k, v in request_headers:
        r.request_headers_to_add.add(key=k, value=v)
    return r


def test_decision_derives_headers_from_fewest_remaining_unless_service_sent_them():
    d = RemoteRateLimitPolicy.decide(_response(1, (10, 8, 2), (5, 1, 1), request_headers=[("x-tier", "b")]))
    assert d.allowed and d.request_headers == ((b"x-tier", b"b"),)
    assert dict(d.response_headers) == {b"x-ratelimit-limit": b"5, 5;w=1", b"x-ratelimit-remaining": b"1",
                                        b"x-ratelimit-reset": b"7"}
    d = RemoteRateLimitPolicy.decide(_response(2, (5, 0, 1), headers=[("X-RateLimit-Limit", "9")], raw=b"slow down"))
    assert not d.allowed and d.body == "slow down" and d.response_headers == ((b"x-ratelimit-limit", b"9"),)


def test_decision_without_detail_skips_the_statuses_only_when_the_service_sent_its_headers():
    """The stage asks for ``limit``/``remaining`` only when a trace watcher will show them."""
    sent = _response(1, (5, 1, 1), headers=[("X-RateLimit-Remaining", "1"), ("x-other", "o")])
    assert RemoteRateLimitPolicy.decide(sent, False) == (
        True, "", ((b"x-ratelimit-remaining", b"1"), (b"x-other", b"o")), (), None, None)
    assert RemoteRateLimitPolicy.decide(sent, True)[4:] == (5, 1)
    derived = RemoteRateLimitPolicy.decide(_response(1, (10, 8, 2), (5, 1, 1), headers=[("x-other", "o")]), False)
    assert derived.response_headers == ((b"x-other", b"o"), (b"x-ratelimit-limit", b"5, 5;w=1"),
                                        (b"x-ratelimit-remaining", b"1"), (b"x-ratelimit-reset", b"7"))
    assert (derived.limit, derived.remaining) == (5, 1)


def test_descriptor_with_failing_entry_is_skipped_with_reason():
    spec = RemoteRateLimitSpec("h:1", "gw", (
        RemoteDescriptor((RemoteEntry("user", "jwt.sub"),)),
        RemoteDescriptor((RemoteEntry("kind", "users"),)),
        RemoteDescriptor((RemoteEntry("path", "request.path"),), "tokens"),
    ))
    chosen, skipped = RemoteRateLimitPolicy(spec).descriptors({"request": {"path": "/x"}, "jwt": {}})
    assert chosen == [(2, [("path", "/x")])]
    assert "descriptors[0]: entry user (jwt.sub) did not evaluate" in skipped[0]
    assert "descriptors[1]: entry kind can never evaluate" in skipped[1]


async def test_a_service_slower_than_the_timeout_fails_closed(nursery, backend):
    listeners = await nursery.start(trio.serve_tcp, _silent, 0)
    port = listeners[0].socket.getsockname()[1]
    gw = await start_routes(nursery, """
        - policies:
            remoteRateLimit: {{host: "127.0.0.1:{rls}", domain: gw, timeout: 200ms,
                              descriptors: [{{entries: [{{key: user, value: '"x"'}}]}}]}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), rls=port, backend=backend.port)
    async with gw.client() as client:
        with trio.fail_after(5):
            answer = await client.get("/")
    assert (answer.status_code, answer.text) == (500, "rate limit failed")
    assert backend.requests == 0


async def _silent(stream: trio.SocketStream) -> None:
    """Accepts HTTP/2 and never answers."""
    while await stream.receive_some(65536):
        pass


async def test_concurrent_requests_multiplexed_are_each_counted_once(nursery, backend, rls):
    gw = await start_routes(nursery, ROUTE.replace("per_unit", ""), port=free_port(), rls=rls.target,
                            mode="failClosed", backend=backend.port)
    users = [who() for _ in range(10)]
    statuses: list[int] = []

    async def one(client: httpx.AsyncClient, user: str) -> None:
        statuses.append((await client.get("/", headers={"x-user": user})).status_code)

    async with gw.client(limits=httpx.Limits(max_connections=50)) as client, trio.open_nursery() as requests:
        for user in users:
            for _ in range(4):
                requests.start_soon(one, client, user)
    assert sorted(statuses) == [200] * 30 + [429] * 10  # 3 per user, exactly, under concurrency


async def test_decisions_and_skipped_descriptors_are_traced(nursery, backend, rls):
    from tests.e2e.test_trace import TraceReader

    gw = await start_routes(nursery, """
        - policies:
            remoteRateLimit:
              host: "{rls}"
              domain: gw
              descriptors:
              - entries: [{{key: user, value: jwt.sub}}]
              - entries: [{{key: user, value: 'request.headers["x-user"]'}}]
          backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), rls=rls.target, backend=backend.port)
    user = who()
    reader = await nursery.start(TraceReader(gw).run)
    async with gw.client() as client:
        await client.get("/", headers={"x-user": user})
    events = [e for e in await reader.events() if e["message"]["type"] == "policy"]
    assert [(e["message"]["kind"], e["message"]["result"], e.get("scope")) for e in events] == [
        ("remoteRateLimit", "skipped", ["rate_limit"]), ("remoteRateLimit", "allowed", ["rate_limit"])]
    assert "entry user (jwt.sub) did not evaluate" in events[0]["message"]["reason"]
    assert events[1]["message"]["descriptors"] == [{"user": user}]
    assert events[1]["message"]["remaining"] == 2


async def test_proxy_policy_global_limit_through_a_gateway_started_from_a_manifest(nursery, backend, rls):
    """ProxyPolicy spec.traffic.rateLimit.global: the same budget as remoteRateLimit, from a manifest."""
    port = free_port()
    manifest = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: ns}}
spec:
  gatewayClassName: trioproxy
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: api, namespace: ns}}
spec:
  parentRefs: [{{name: gw}}]
  rules: [{{backendRefs: [{{name: 127.0.0.1, port: {backend.port}}}]}}]
---
apiVersion: trioproxy.dev/v1alpha1
kind: ProxyPolicy
metadata: {{name: shared, namespace: ns}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: Gateway, name: gw}}]
  traffic:
    rateLimit:
      global:
        host: "{rls.target}"
        domain: gw
        descriptors:
        - entries: [{{name: user, expression: 'request.headers["x-user"]'}}]
"""
    gw = await start_gateway(nursery, manifest.replace("{", "{{").replace("}", "}}"))
    statuses = gw.info.runtime.state.config.statuses
    policy = next(s for s in statuses if s["kind"] == "ProxyPolicy")
    assert policy["status"]["ancestors"][0]["conditions"][0]["status"] == "True"
    user = who()
    async with gw.client() as client:
        answers = [await client.get("/", headers={"x-user": user}) for _ in range(4)]
    assert [r.status_code for r in answers] == [200, 200, 200, 429]
    assert answers[3].headers["x-ext-ratelimited"] == "true"


class StallingCharges:
    """An RLS client that answers checks at once and stalls every charge until ``release``."""

    def __init__(self) -> None:
        self.charging = trio.Event()
        self.release = trio.Event()
        self.charged: list[int] = []
        self.cancelled = False

    async def should_rate_limit(self, domain, descriptors, timeout):
        hits = [h for _, h in descriptors if h]
        if hits:
            self.charging.set()
            try:
                await self.release.wait()
            except trio.Cancelled:
                self.cancelled = True
                raise
            self.charged += hits
        return rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)

    def close(self) -> None:
        pass


def _client_port(response: httpx.Response) -> int:
    return response.extensions["network_stream"].get_extra_info("client_addr")[1]


async def test_a_stalled_charge_does_not_delay_the_next_keep_alive_request(nursery, monkeypatch):
    """The charge after the response runs outside the request: while the service sits on it, the
    same keep-alive connection's next request is served at once."""
    from trioproxy.rls import wire_client as rls_client

    stalling = StallingCharges()
    monkeypatch.setitem(rls_client._clients, "127.0.0.1:1", stalling)
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKENS.replace("domain: gw", "domain: gw\n          timeout: 60s"),
                             port=free_port(), rls="127.0.0.1:1", mock=mock.port)
    headers = {"x-tenant": "t", "x-mock-total-tokens": "60"}
    async with gw.client(limits=httpx.Limits(max_connections=1)) as client:
        first = await client.post("/chat", json=CHAT, headers=headers)
        with trio.fail_after(10):  # a bound for the failure case only: the charge's timeout is 60 s
            await stalling.charging.wait()
            second = await client.post("/chat", json=CHAT, headers=headers)
        assert (first.status_code, second.status_code) == (200, 200)
        assert _client_port(first) == _client_port(second)  # the same keep-alive connection
        assert stalling.charging.is_set() and not stalling.cancelled and stalling.charged == []
        stalling.release.set()  # the service answers: both charges land and are counted
    key = f"default/default/bind/{gw.port}/listener0/default/llm"
    with trio.fail_after(10):
        while gw.info.runtime.metrics.registry.get_sample_value("trioproxy_ratelimit_decisions_total", {
                "policy": "remoteRateLimit", "key": key, "result": "charged"}) != 2:
            await trio.sleep(0.01)
    assert stalling.charged == [60, 60]


async def test_charges_past_the_pending_bound_are_counted_failed_not_queued(nursery, monkeypatch):
    from trioproxy.proxy import after_response

    stalling = StallingCharges()
    from trioproxy.rls import wire_client as rls_client

    monkeypatch.setitem(rls_client._clients, "127.0.0.1:1", stalling)
    monkeypatch.setattr(after_response.AFTER_RESPONSE, "limit", after_response.AFTER_RESPONSE.pending + 1)
    mock = await start_mock(nursery)
    gw = await start_gateway(nursery, TOKENS.replace("domain: gw", "domain: gw\n          timeout: 60s"),
                             port=free_port(), rls="127.0.0.1:1", mock=mock.port)
    headers = {"x-tenant": "t", "x-mock-total-tokens": "60"}
    async with gw.client() as client:
        codes = [(await client.post("/chat", json=CHAT, headers=headers)).status_code for _ in range(2)]
    assert codes == [200, 200]
    key = f"default/default/bind/{gw.port}/listener0/default/llm"

    def failed():
        return gw.info.runtime.metrics.registry.get_sample_value(
            "trioproxy_ratelimit_decisions_total", {"policy": "remoteRateLimit", "key": key, "result": "chargeFailed"})

    with trio.fail_after(10):  # the finish hook runs just after the client has the response's end
        while failed() is None:
            await trio.sleep(0.01)
    assert failed() == 1  # the second charge found one pending: refused at once, not queued
    assert stalling.charged == [] and not stalling.cancelled
    stalling.release.set()
    with trio.fail_after(10):
        while not stalling.charged:
            await trio.sleep(0.01)
    assert stalling.charged == [60]


@pytest.mark.parametrize("source", ['request.headers["x-user"]', "request.headers['X-User']", 'request.headers["x-none"]',
                                    '"users"', "'gold'", "request.path", "request.method", "request.host",
                                    'request.headers["x-user"] + "!"'])
def test_direct_entries_give_what_cel_gives(source):
    """The common entry forms skip the CEL engine; their values (and misses) must be CEL's."""
    from trioproxy.cel import build_activation, compile_expression
    from trioproxy.policies.ratelimit_remote import DirectEntry, compile_entry

    headers = [(b"X-User", b"ann"), (b"x-user", b"bo"), (b"x-other", b"o")]
    activation = build_activation(method="GET", path="/p?q=1", host="h", headers=headers)
    compiled, problem = compile_entry(source)
    assert problem == "" and compiled is not None
    assert isinstance(compiled, DirectEntry) == ("+" not in source)
    expected = compile_expression(source).evaluate(activation)
    assert compiled.evaluate(activation) == expected
    if isinstance(compiled, DirectEntry):  # read straight from the exchange: no activation built
        from types import SimpleNamespace

        x = SimpleNamespace(headers=headers, scope={"method": "GET"}, host="h", uri=lambda: "/p?q=1")
        assert compiled.read(x) == expected


def test_a_policy_of_direct_entries_builds_no_activation(monkeypatch):
    from types import SimpleNamespace

    import trioproxy.telemetry.trace
    from trioproxy.policies.ratelimit_remote import RemoteRateLimitPolicy
    from trioproxy.proxy import stages

    def spec(value: str) -> RemoteRateLimitSpec:
        return RemoteRateLimitSpec(host="h:1", domain="d", descriptors=(
            RemoteDescriptor((RemoteEntry("user", 'request.headers["x-user"]'), RemoteEntry("v", value))),
            RemoteDescriptor((RemoteEntry("none", 'request.headers["x-none"]'),), kind="tokens")))

    built = []
    real = trioproxy.telemetry.trace.activation
    monkeypatch.setattr(stages, "activation", lambda x: built.append(x) or real(x))
    x = SimpleNamespace(headers=[(b"x-user", b"ann")], scope={"method": "GET", "path": "/p"}, host="h",
                        uri=lambda: "/p", llm=None, jwt=None, api_key=None, basic_auth=None, key=None, team=None)
    chosen, skipped = stages.descriptors_of(RemoteRateLimitPolicy(spec('"gold"')), x)
    assert (chosen, built) == ([(0, [("user", "ann"), ("v", "gold")])], [])
    assert skipped == ['descriptors[1]: entry none (request.headers["x-none"]) did not evaluate to a value']
    chosen, _ = stages.descriptors_of(RemoteRateLimitPolicy(spec('request.headers["x-user"] + "!"')), x)
    assert chosen == [(0, [("user", "ann"), ("v", "ann!")])] and built == [x]  # CEL: one activation
