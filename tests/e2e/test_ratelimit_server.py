"""`trioproxy ratelimit-server`: envoyproxy/ratelimit's config, fixed windows, Redis counters."""

from __future__ import annotations

import re
import subprocess
import urllib.request

import grpc
import pytest
import trio
from grpc_health.v1 import health_pb2

from tests.rls_helpers import Redis, _wait, ratelimit_server, redis_server
from trioproxy.rls.limits import LimitsError, parse_limits
from trioproxy.rls.protos import rls_pb2
from trioproxy.rls.service import should_rate_limit
from trioproxy.rls.store import MemoryStore

OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT

CONFIG = """
domain: gw
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
    descriptors:
      - key: path
        value: /slow
        rate_limit: {unit: hour, requests_per_unit: 1, name: slow}
  - key: path
    value: /api/*
    rate_limit: {unit: day, requests_per_unit: 2}
  - key: path
    value: /api/free
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 0}
"""


def request(*descriptors: list[tuple[str, str]], hits: int | None = None):
    from google.protobuf import wrappers_pb2

    req = rls_pb2.RateLimitRequest(domain="gw")
    for entries in descriptors:
        d = req.descriptors.add()
        for k, v in entries:
            d.entries.add(key=k, value=v)
        if hits is not None:
            d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=hits))
    return req


def test_most_specific_descriptor_wins():
    c = parse_limits(CONFIG)
    assert c.find([("user", "a")]).requests_per_unit == 3
    assert c.find([("user", "a"), ("path", "/slow")]).name == "slow"
    assert c.find([("user", "a"), ("path", "/other")]) is None  # walked off the tree
    assert c.find([("path", "/api/x")]).unit == "day"  # wildcard
    assert c.find([("path", "/api/free")]) is None  # exact beats wildcard; no limit there
    assert c.find([("nobody", "x")]) is None


@pytest.mark.parametrize("text, message", [
    ("domain: gw\ndescriptors: [{value: x}]", "descriptors[0].key: required"),
    ("domain: gw\ndescriptors: [{key: a, rate_limit: {unit: week, requests_per_unit: 1}}]", "unit: must be one of"),
    ("descriptors: []", "domain: required"),
    ("domain: gw\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: -1}}]", "non-negative"),
    ("domain: [", "not valid YAML"),
])
def test_bad_config_is_one_line_naming_the_place(text, message):
    with pytest.raises(LimitsError, match=re.escape(message)):
        parse_limits(text, "rls.yaml")


def test_counts_statuses_and_headers_per_window():
    c, store, now = parse_limits(CONFIG), MemoryStore(), 1_000_020.5
    for remaining in (2, 1, 0):
        resp, _ = should_rate_limit(c, store, request([("user", "a")]), now)
        assert resp.overall_code == OK and resp.statuses[0].limit_remaining == remaining
    resp, _ = should_rate_limit(c, store, request([("user", "a")]), now, headers=True)  # --response-headers
    assert resp.overall_code == OVER
    st = resp.statuses[0]
    assert (st.current_limit.requests_per_unit, st.current_limit.unit) == (3, rls_pb2.RateLimitResponse.RateLimit.DAY)
    assert st.duration_until_reset.seconds == 86400 - 1_000_020 % 86400
    headers = {h.key: h.value for h in resp.response_headers_to_add}
    assert headers == {"x-ratelimit-limit": "3, 3;w=86400", "x-ratelimit-remaining": "0",
                       "x-ratelimit-reset": str(86400 - 1_000_020 % 86400), "x-ext-ratelimited": "true"}
    # another user has their own counter; the next window starts again
    assert should_rate_limit(c, store, request([("user", "b")]), now)[0].overall_code == OK
    assert should_rate_limit(c, store, request([("user", "a")]), now + 86400)[0].overall_code == OK


def test_hits_addend_zero_only_looks_and_n_adds_n():
    c, store = parse_limits(CONFIG), MemoryStore()
    resp, _ = should_rate_limit(c, store, request([("path", "/api/x")], hits=0), 5.0)
    assert resp.statuses[0].limit_remaining == 2
    resp, _ = should_rate_limit(c, store, request([("path", "/api/x")], hits=5), 5.0)
    assert resp.overall_code == OVER
    # check only, and already over: OVER without adding
    assert should_rate_limit(c, store, request([("path", "/api/x")], hits=0), 5.0)[0].overall_code == OVER
    # wildcard: each value counted on its own
    assert should_rate_limit(c, store, request([("path", "/api/y")]), 5.0)[0].overall_code == OK


def test_shadow_mode_reports_ok_and_all_descriptors_count():
    c, store = parse_limits(CONFIG), MemoryStore()
    resp, seen = should_rate_limit(c, store, request([("shadow", "x")], [("user", "z"), ("path", "/slow")]), 9.0)
    assert resp.overall_code == OK and seen[0][1] is True  # over, but in shadow mode
    resp, _ = should_rate_limit(c, store, request([("user", "z"), ("path", "/slow")]), 9.0)
    assert resp.overall_code == OVER and resp.statuses[0].current_limit.name == "slow"


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "rls.yaml"
    path.write_text(CONFIG)
    return path


def test_server_on_redis_shares_counts_and_survives_redis_restart(tmp_path, config_file):
    with redis_server(tmp_path) as redis, \
            ratelimit_server(config_file, "--redis", redis.url) as a, \
            ratelimit_server(config_file, "--redis", redis.url) as b:
        codes = [(a if i % 2 else b).call("gw", [[("user", "shared")]]).overall_code for i in range(4)]
        assert codes == [OK, OK, OK, OVER]  # two servers, one budget
        redis.stop()
        with pytest.raises(grpc.RpcError) as err:
            a.call("gw", [[("user", "x")]])
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert a.proc.poll() is None
        Redis(tmp_path, port=redis.port).start()
        try:
            _wait(lambda: _answers(a), "ratelimit-server after redis restart")
            assert a.call("gw", [[("user", "after")]]).overall_code == OK
        finally:
            subprocess.run(["redis-cli", "-p", str(redis.port), "shutdown", "nosave"], capture_output=True, check=False)


def _answers(rls) -> bool:
    try:
        rls.call("gw", [[("user", "probe")]])
        return True
    except grpc.RpcError:
        return False


def test_reload_health_metrics_and_unknown_domain(config_file):
    with ratelimit_server(config_file, "--store", "memory", stats=True) as rls:
        health = rls.channel.unary_unary("/grpc.health.v1.Health/Check",
                                         request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                                         response_deserializer=health_pb2.HealthCheckResponse.FromString)
        assert health(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:
            rls.call("other", [[("user", "x")]])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert rls.call("gw", [[("team", "a")]]).statuses[0].limit_remaining == 0  # not limited
        config_file.write_text(CONFIG + "  - key: team\n    rate_limit: {unit: minute, requests_per_unit: 7}\n")
        _wait(lambda: rls.call("gw", [[("team", "a")]], hits=0).statuses[0].current_limit.requests_per_unit == 7,
              "reloaded config", bound=15)
        config_file.write_text("domain: [")  # a bad file keeps the previous config
        _wait(lambda: b"reloads_total{result=\"error\"} 1.0" in _metrics(rls), "rejected reload", bound=15)
        assert rls.call("gw", [[("team", "a")]], hits=0).statuses[0].current_limit.requests_per_unit == 7
        body = _metrics(rls).decode()
        assert 'ratelimit_server_calls_total{code="ok",domain="gw"}' in body


def _metrics(rls) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{rls.stats_port}/metrics", timeout=5) as r:
        return r.read()


def test_bad_config_exits_with_one_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("domain: gw\ndescriptors: [{key: a, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n")
    import sys

    from tests.rls_helpers import ROOT
    out = subprocess.run([sys.executable, "-m", "trioproxy", "ratelimit-server", "--config", str(bad),
                          "--addr", "127.0.0.1:0"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "descriptors[0].rate_limit.unit" in out.stderr


def test_redis_cluster_of_three_nodes(tmp_path, config_file):
    nodes = [Redis(tmp_path, cluster=True).start() for _ in range(3)]
    try:
        subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{n.port}" for n in nodes],
                        "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True, timeout=60)
        _wait(lambda: b"cluster_state:ok" in subprocess.run(
            ["redis-cli", "-p", str(nodes[0].port), "cluster", "info"], capture_output=True, check=False).stdout, "cluster")
        with ratelimit_server(config_file, "--redis-cluster", nodes[0].url) as rls:
            # many users: keys on every node; each gets exactly 3 in its window
            for user in range(12):
                codes = [rls.call("gw", [[("user", f"u{user}")]]).overall_code for _ in range(4)]
                assert codes == [OK, OK, OK, OVER]
            keys = [int(subprocess.run(["redis-cli", "-p", str(n.port), "dbsize"], capture_output=True,
                                       text=True, check=True).stdout) for n in nodes]
            assert sum(keys) == 12 and sum(k > 0 for k in keys) >= 2  # spread over the nodes
    finally:
        for n in nodes:
            n.stop()


def test_health_watch_streams_status_with_grpcio_health_stub(config_file):
    """grpc.health.v1 Watch through grpcio's own health stub: the status at once, NOT_SERVING when
    the server starts shutting down; unknown services get SERVICE_UNKNOWN; watchers are bounded."""
    import signal

    from grpc_health.v1 import health_pb2 as gh
    from grpc_health.v1 import health_pb2_grpc

    service = "envoy.service.ratelimit.v3.RateLimitService"
    with ratelimit_server(config_file, "--store", "memory", "--health-watchers", "2") as rls:
        stub = health_pb2_grpc.HealthStub(rls.channel)
        assert stub.Check(gh.HealthCheckRequest(service=service), timeout=5).status == gh.HealthCheckResponse.SERVING
        whole = stub.Watch(gh.HealthCheckRequest(), timeout=30)
        unknown = stub.Watch(gh.HealthCheckRequest(service="nope"), timeout=30)
        assert next(whole).status == gh.HealthCheckResponse.SERVING
        assert next(unknown).status == gh.HealthCheckResponse.SERVICE_UNKNOWN
        with pytest.raises(grpc.RpcError) as err:
            next(stub.Watch(gh.HealthCheckRequest(service=service), timeout=30))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED  # two watchers already
        assert rls.call("gw", [[("user", "w")]]).overall_code == OK  # checks still have their threads
        unknown.cancel()  # a watcher that goes away frees its slot
        _wait(lambda: _watch_first(stub, service) == gh.HealthCheckResponse.SERVING, "freed watcher slot")
        rls.proc.send_signal(signal.SIGTERM)
        assert next(whole).status == gh.HealthCheckResponse.NOT_SERVING  # heard before the stream ends


def _watch_first(stub, service: str):
    from grpc_health.v1 import health_pb2 as gh

    stream = stub.Watch(gh.HealthCheckRequest(service=service), timeout=30)
    try:
        return next(stream).status
    except grpc.RpcError:
        return None
    finally:
        stream.cancel()


class _FakeCall:
    """What CheckBatcher answers: records the answer and wakes the test."""

    def __init__(self) -> None:
        self.done = False
        self.answer = None
        self.answered = trio.Event()

    def reply(self, message: bytes) -> None:
        self.done, self.answer = True, ("ok", rls_pb2.RateLimitResponse.FromString(message))
        self.answered.set()

    def fail(self, code: int, text: str) -> None:
        self.done, self.answer = True, (code, text)
        self.answered.set()


async def test_calls_queued_during_a_round_trip_share_the_next_one(config_file):
    """The Trio group commit: calls arriving while a batch is out at the store go together in the
    next one, each gets its own counts back; a failed round trip fails every call of its batch
    with UNAVAILABLE; unknown domains and unparsable requests fail alone, without a round trip."""
    import threading

    from trioproxy.rls.server import RateLimitServer
    from trioproxy.rls.store import StoreUnavailable
    from trioproxy.rls.wire_server import INTERNAL, INVALID_ARGUMENT, UNAVAILABLE

    entered, gate, batches = threading.Event(), threading.Event(), []

    class Store:
        blocking = True  # called in a worker thread, like RedisStore

        def incr(self, items):
            batches.append([key.split("_")[2] for key, _, _ in items])
            if len(batches) == 1:
                entered.set()
                gate.wait(10)  # the first batch is out while the others arrive
            if any(key.split("_")[2] == "bad" for key, _, _ in items):
                raise StoreUnavailable("redis: down")
            return [hits * 10 for _, hits, _ in items]

    server = RateLimitServer(str(config_file), Store())

    def submit(*users: str, domain: str = "gw", raw: bytes | None = None) -> _FakeCall:
        call = _FakeCall()
        req = request(*[[("user", u)] for u in users])
        req.domain = domain
        server.batcher.submit(call, req.SerializeToString() if raw is None else raw)
        return call

    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.batcher.run)
        a = submit("a")
        await trio.to_thread.run_sync(entered.wait, 10)
        b, c = submit("b", "b2"), submit("c")
        other, garbage = submit("x", domain="other"), submit(raw=b"\xff\xff")
        gate.set()
        for call in (a, b, c, other, garbage):
            await call.answered.wait()
        assert batches == [["a"], ["b", "b2", "c"]]  # two round trips for three calls
        assert [s.limit_remaining for s in b.answer[1].statuses] == [0, 0]  # counts 10 and 10 > 3
        assert a.answer[1].overall_code == OVER and c.answer[0] == "ok"
        assert other.answer == (INVALID_ARGUMENT, "unknown domain 'other'")
        assert garbage.answer[0] == INTERNAL
        bad, e = submit("bad"), submit("e")
        await bad.answered.wait()
        await e.answered.wait()
        assert bad.answer == (UNAVAILABLE, "redis: down") and e.answer == (UNAVAILABLE, "redis: down")
        assert batches[-1] == ["bad", "e"] and server.batcher.batches == 3
        body = __import__("prometheus_client").generate_latest(server.metrics.registry).decode()
        assert 'ratelimit_server_calls_total{code="error",domain="gw"} 2.0' in body  # bad, e
        assert 'ratelimit_server_calls_total{code="error",domain=""} 1.0' in body  # garbage: no domain
        assert "ratelimit_server_store_errors_total 2.0" in body
        nursery.cancel_scope.cancel()


def test_reload_waits_for_the_file_to_settle(config_file):
    """A file caught half-written (truncated, not yet written) is not loaded: a change is read once
    the file held for the settle interval (settle.py); a bad settled file keeps the previous config."""
    from prometheus_client import generate_latest

    from trioproxy.rls.server import RateLimitServer

    server = RateLimitServer(str(config_file), MemoryStore())
    config_file.write_text("")
    server.reload_if_changed(0.0)  # changed since the last look: wait
    config_file.write_text(CONFIG.replace("requests_per_unit: 3", "requests_per_unit: 44"))
    server.reload_if_changed(0.5)  # changed again: wait
    assert server.domains.find("gw").find([("user", "x")]).requests_per_unit == 3
    server.reload_if_changed(1.5)  # held for the settle interval: loaded
    assert server.domains.find("gw").find([("user", "x")]).requests_per_unit == 44
    config_file.write_text("domain: [")
    server.reload_if_changed(2.0)
    server.reload_if_changed(3.0)
    assert server.domains.find("gw").find([("user", "x")]).requests_per_unit == 44
    body = generate_latest(server.metrics.registry).decode()
    assert 'result="error"} 1.0' in body and 'result="ok"} 1.0' in body


@pytest.mark.parametrize("flags, exit_code, message", [
    (["--addr", "127.0.0.1:99999"], 2, "--addr: port 99999 is over 65535"),
    (["--addr", "127.0.0.1:0", "--stats-addr", "nowhere"], 2, "--stats-addr: expected HOST:PORT"),
    (["--addr", "203.0.113.1:0"], 1, "--addr: cannot listen on 203.0.113.1:0"),
])
def test_bad_flags_exit_with_one_line(config_file, flags, exit_code, message):
    import sys

    from tests.rls_helpers import ROOT
    out = subprocess.run([sys.executable, "-m", "trioproxy", "ratelimit-server", "--config", str(config_file), *flags],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == exit_code
    assert out.stderr.strip().count("\n") == 0 and message in out.stderr
