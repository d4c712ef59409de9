"""``remoteRateLimit``'s stage and decision in process, with a fake service client (found
unguarded by mutation testing): the service's request headers, the allowed/rejected/failed
counters, the tightest status, entry values of every type, the 429 body, the token charge after
the response (and its failures), and the stage's trace events."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import trio

from tests.e2e.test_ratelimit_remote import _response
from tests.unit.proxy.test_header_stages import RecordingTracer
from trioproxy.errors import RateLimited, RateLimitFailed
from trioproxy.policies import ratelimit_remote
from trioproxy.policies.ratelimit_remote import (
    RemoteDescriptor,
    RemoteEntry,
    RemoteRateLimitPolicy,
    RemoteRateLimitSpec,
)
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.stages import RemoteRateLimitStage, RemoteTokenRateLimitStage, remote_rate_limit_stage
from trioproxy.rls.protos import rls_pb2
from trioproxy.rls.wire_client import RlsCallFailed
from trioproxy.telemetry.trace import NULL_TRACER


@pytest.fixture(autouse=True)
def fresh_names(monkeypatch):
    """The header-name cache starts empty in every test: filled in mutmut's parent process, it
    would hide ``_name`` from every mutant."""
    monkeypatch.setattr(ratelimit_remote, "_NAMES", {})


class FakeClient:
    def __init__(self, response: Any = None, fail: str | None = None, stall: bool = False) -> None:
        self.response = response if response is not None else _response(1)
        self.fail = fail
        self.stall = stall
        self.calls: list[tuple[str, list[Any], float]] = []

    async def should_rate_limit(self, domain: str, calls: list[Any], timeout: float) -> Any:
        self.calls.append((domain, calls, timeout))
        if self.stall:
            await trio.sleep_forever()
        if self.fail is not None:
            raise RlsCallFailed(self.fail)
        return self.response


def spec(*descriptors: RemoteDescriptor, mode: str = "failClosed") -> RemoteRateLimitSpec:
    return RemoteRateLimitSpec("rls:1", "gw", descriptors or (RemoteDescriptor((RemoteEntry("path", "request.path"),)),),
                               mode, 0.25)  # type: ignore[arg-type]


TOKENS = RemoteDescriptor((RemoteEntry("user", 'request.headers["x-user"]'),), "tokens")


def exchange(tracer: Any = None, headers: list[tuple[bytes, bytes]] | None = None) -> Exchange:
    scope = {"type": "http", "method": "GET", "path": "/p", "query_string": b"",
             "headers": headers if headers is not None else [(b"host", b"h"), (b"x-user", b"ann")]}
    x = Exchange(scope, None, None, 0.0)  # type: ignore[arg-type]
    x.tracer = tracer if tracer is not None else NULL_TRACER  # type: ignore[assignment]
    return x


def stage_for(client: FakeClient, *descriptors: RemoteDescriptor, mode: str = "failClosed",
              after_response: Any = None):
    counted: list[tuple[str, str, str]] = []
    stage = remote_rate_limit_stage(spec(*descriptors, mode=mode), "route/r", lambda *a: counted.append(a), client)
    if after_response is not None:
        stage.after_response = after_response
    return stage, counted


async def test_the_services_request_headers_replace_the_clients_and_go_upstream():
    response = _response(1, headers=[("x-seen", "1")], request_headers=[("X-Tier", "gold"), ("x-a", "")])
    response.request_headers_to_add[1].raw_value = b"raw"
    stage, counted = stage_for(FakeClient(response))
    x = exchange(headers=[(b"host", b"h"), (b"x-tier", b"forged"), (b"x-keep", b"k")])
    await stage.request(x)
    assert x.headers == [(b"host", b"h"), (b"x-keep", b"k"), (b"x-tier", b"gold"), (b"x-a", b"raw")]
    assert x.extra_response_headers == [(b"x-seen", b"1")]
    assert counted == [("remoteRateLimit", "route/r", "allowed")]


async def test_over_limit_is_a_429_with_the_services_body_and_headers_and_is_counted():
    response = _response(2, (5, 0, 2), raw=b"slow \xff down")
    stage, counted = stage_for(FakeClient(response))
    x = exchange()
    with pytest.raises(RateLimited) as limited:
        await stage.request(x)
    assert limited.value.message == "slow \ufffd down"
    assert limited.value.headers == [(b"x-ratelimit-limit", b"5, 5;w=60"), (b"x-ratelimit-remaining", b"0"),
                                     (b"x-ratelimit-reset", b"7")]
    assert counted == [("remoteRateLimit", "route/r", "rejected")]
    assert x.extra_response_headers == [] and x.headers == exchange().headers
    with pytest.raises(RateLimited) as limited:
        await stage_for(FakeClient(_response(2)))[0].request(exchange())
    assert limited.value.message == "rate limit exceeded" and limited.value.headers == []


@pytest.mark.parametrize(("unit", "window"), [(1, 1), (2, 60), (3, 3600), (4, 86400), (0, 0), (9, 0)])
def test_the_window_of_each_unit(unit, window):
    headers = dict(RemoteRateLimitPolicy.decide(_response(1, (3, 2, unit))).response_headers)
    assert headers[b"x-ratelimit-limit"] == f"3, 3;w={window}".encode()


def test_a_status_without_a_current_limit_is_never_the_tightest():
    response = _response(1, (10, 4, 1))
    response.statuses.add(code=1, limit_remaining=0)  # e.g. an unlimited descriptor
    decision = RemoteRateLimitPolicy.decide(response)
    assert (decision.limit, decision.remaining) == (10, 4)
    assert dict(decision.response_headers)[b"x-ratelimit-remaining"] == b"4"
    only = rls_pb2.RateLimitResponse(overall_code=1)
    only.statuses.add(code=1, limit_remaining=0)
    assert RemoteRateLimitPolicy.decide(only) == (True, "", (), (), None, None)


def test_equal_remaining_keeps_the_first_status():
    decision = RemoteRateLimitPolicy.decide(_response(1, (10, 3, 1), (20, 3, 2)))
    assert decision.limit == 10 and dict(decision.response_headers)[b"x-ratelimit-limit"] == b"10, 10;w=1"


def test_header_values_and_names_from_the_service():
    response = _response(1, headers=[("X-Custom", ""), ("X-RATELIMIT-Reset", "3")])
    response.response_headers_to_add[0].raw_value = b"r\xe9"
    decision = RemoteRateLimitPolicy.decide(response, False)
    assert decision.response_headers == ((b"x-custom", b"r\xe9"), (b"x-ratelimit-reset", b"3"))
    assert ratelimit_remote._NAMES == {"X-Custom": (b"x-custom", False), "X-RATELIMIT-Reset": (b"x-ratelimit-reset", True)}


def test_the_header_name_cache_is_bounded():
    for i in range(70):
        ratelimit_remote._name(f"X-H{i}")
    assert len(ratelimit_remote._NAMES) == 64
    assert ratelimit_remote._name("X-RateLimit-Limit") == (b"x-ratelimit-limit", True)
    assert ratelimit_remote._name("x-ratelimitx") == (b"x-ratelimitx", False)


@pytest.mark.parametrize(("value", "text"), [
    ("true", "true"), ("false", "false"), ("3", "3"), ("2.5", "2.5"), ('b"by\\xfftes"', "by\ufffdtes"),
    ('"s"', "s"), ("[1]", None), ("{'a': 1}", None), ("null", None),
])
def test_entry_values_of_every_type(value, text):
    policy = RemoteRateLimitPolicy(spec(RemoteDescriptor((RemoteEntry("k", value),))))
    chosen, skipped = policy.descriptors({"request": {}})
    if text is None:
        assert chosen == [] and skipped == [f"descriptors[0]: entry k ({value}) did not evaluate to a value"]
    else:
        assert chosen == [(0, [("k", text)])] and skipped == []


def test_text_of_python_values():
    text = ratelimit_remote._text
    assert (text(True), text(False), text(0), text(1.5), text(b"a\xffb"), text("s"), text(None), text([1])) == (
        "true", "false", "0", "1.5", "a\ufffdb", "s", None, None)


async def test_failures_follow_the_mode_are_counted_and_traced():
    for mode, severity, result in (("failClosed", "error", "failed"), ("failOpen", "warn", "failedOpen")):
        tracer = RecordingTracer()
        stage, counted = stage_for(FakeClient(fail="unreachable"), mode=mode)
        x = exchange(tracer)
        if mode == "failClosed":
            with pytest.raises(RateLimitFailed):
                await stage.request(x)
        else:
            await stage.request(x)
        assert counted == [("remoteRateLimit", "route/r", "failed")]
        assert tracer.events == [("policy", {"severity": severity, "scope": ["rate_limit"],
                                             "kind": "remoteRateLimit", "result": result,
                                             "reason": "unreachable"})]


async def test_decisions_and_skipped_descriptors_are_traced():
    tracer = RecordingTracer()
    missing = RemoteDescriptor((RemoteEntry("team", 'request.headers["x-team"]'),))
    client = FakeClient(_response(1, (10, 4, 1)))
    stage, _ = stage_for(client, RemoteDescriptor((RemoteEntry("path", "request.path"),)), missing)
    await stage.request(exchange(tracer))
    assert tracer.events == [
        ("policy", {"severity": "warn", "scope": ["rate_limit"], "kind": "remoteRateLimit", "result": "skipped",
                    "reason": 'descriptors[1]: entry team (request.headers["x-team"]) did not evaluate to a value'}),
        ("policy", {"severity": "info", "scope": ["rate_limit"], "kind": "remoteRateLimit", "result": "allowed",
                    "descriptors": [{"path": "/p"}], "limit": 10, "remaining": 4}),
    ]
    assert client.calls == [("gw", [([("path", "/p")], None)], 0.25)]
    tracer = RecordingTracer()
    stage, _ = stage_for(FakeClient(_response(2, (10, 0, 1))))
    with pytest.raises(RateLimited):
        await stage.request(exchange(tracer))
    assert tracer.events[-1] == ("policy", {"severity": "warn", "scope": ["rate_limit"], "kind": "remoteRateLimit",
                                            "result": "rejected", "descriptors": [{"path": "/p"}], "limit": 10,
                                            "remaining": 0})


async def test_no_descriptor_chosen_makes_no_call():
    client = FakeClient()
    stage, counted = stage_for(client, RemoteDescriptor((RemoteEntry("team", 'request.headers["x-team"]'),)))
    await stage.request(exchange())
    assert client.calls == [] and counted == []


class FakeAfter:
    def __init__(self, accept: bool = True) -> None:
        self.accept = accept
        self.spawned: list[tuple[Any, tuple[Any, ...], str]] = []

    def spawn(self, job: Any, *args: Any, name: str = "") -> bool:
        if self.accept:
            self.spawned.append((job, args, name))
        return self.accept


async def test_tokens_are_looked_at_first_then_charged_after_the_response():
    client = FakeClient()
    after = FakeAfter()
    tracer = RecordingTracer()
    stage, counted = stage_for(client, RemoteDescriptor((RemoteEntry("path", "request.path"),)), TOKENS)
    assert isinstance(stage, RemoteTokenRateLimitStage)
    stage.after_response = after
    x = exchange(tracer)
    await stage.request(x)
    assert client.calls == [("gw", [([("path", "/p")], None), ([("user", "ann")], 0)], 0.25)]
    assert x.remote_charges == [(stage, [[("user", "ann")]])]
    x.usage = SimpleNamespace(total_tokens=42)
    stage.finish(x)
    assert [(args, name) for _, args, name in after.spawned] == [
        (([([("user", "ann")], 42)],), "remoteRateLimit charge route/r")]
    assert tracer.events[-1] == ("policy", {"severity": "info", "scope": ["rate_limit"], "kind": "remoteRateLimit",
                                            "result": "charging", "tokens": 42})
    await after.spawned[0][0](*after.spawned[0][1])
    assert client.calls[-1] == ("gw", [([("user", "ann")], 42)], 0.25)
    assert counted == [("remoteRateLimit", "route/r", "allowed"), ("remoteRateLimit", "route/r", "charged")]


async def test_a_request_stage_has_no_finish_hook_and_only_tokens_ones_are_charged():
    stage, _ = stage_for(FakeClient())
    assert type(stage) is RemoteRateLimitStage
    x = exchange()
    await stage.request(x)
    assert x.remote_charges == []
    other, _ = stage_for(FakeClient(), TOKENS)
    x = exchange()
    await other.request(x)
    x.usage = SimpleNamespace(total_tokens=5)
    after = FakeAfter()
    stage2, _ = stage_for(FakeClient(), TOKENS, after_response=after)
    stage2.finish(x)  # the charges belong to another stage
    assert after.spawned == []


@pytest.mark.parametrize("case", ["no usage", "no charges", "zero tokens"])
async def test_finish_charges_only_with_usage_and_charges(case):
    after = FakeAfter()
    stage, counted = stage_for(FakeClient(), TOKENS, after_response=after)
    x = exchange(RecordingTracer(), headers=[(b"host", b"h")] if case == "no charges" else None)
    await stage.request(x)
    x.usage = None if case == "no usage" else SimpleNamespace(total_tokens=0 if case == "zero tokens" else 9)
    stage.finish(x)
    assert after.spawned == [] and x.tracer.events[-1][1]["result"] != "charging"


async def test_a_charge_refused_or_failed_or_timed_out_is_counted_chargefailed(autojump_clock):
    stage, counted = stage_for(FakeClient(), TOKENS, after_response=FakeAfter(accept=False))
    tracer = RecordingTracer()
    x = exchange(tracer)
    await stage.request(x)
    x.usage = SimpleNamespace(total_tokens=3)
    stage.finish(x)
    assert counted[-1] == ("remoteRateLimit", "route/r", "chargeFailed")
    assert tracer.events[-1] == ("policy", {"severity": "warn", "scope": ["rate_limit"], "kind": "remoteRateLimit",
                                            "result": "chargeFailed", "tokens": 3,
                                            "reason": "too many charges pending"})
    for client in (FakeClient(fail="down"), FakeClient(stall=True)):
        charger, counted = stage_for(client, TOKENS)
        start = trio.current_time()
        await charger._charge([([("user", "ann")], 3)])
        assert counted == [("remoteRateLimit", "route/r", "chargeFailed")]
        assert trio.current_time() - start == (0.25 if client.stall else 0)


def test_compiled_entries_keep_their_source_and_only_a_bare_word_gets_the_quotes_hint():
    from trioproxy.policies.ratelimit_remote import compile_entry

    for source in ('request.headers["x-user"]', '"gold"', "request.path"):
        assert compile_entry(source)[0].source == source
    no_hint = compile_entry("users + 1")[1]  # not a bare word: no hint
    assert no_hint.startswith("can never evaluate: unknown variable 'users'") and "needs quotes" not in no_hint
    assert compile_entry("users")[1].endswith("(a string needs quotes: '\"users\"')")
    policy_spec = spec()
    assert RemoteRateLimitPolicy(policy_spec).spec is policy_spec


def test_over_limit_decides_nothing_for_upstream():
    assert RemoteRateLimitPolicy.decide(_response(2, request_headers=[("x-a", "1")])) == (
        False, "rate limit exceeded", (), (), None, None)


def test_a_stage_without_a_client_uses_the_processes_client_for_its_host():
    from trioproxy.proxy.after_response import AFTER_RESPONSE
    from trioproxy.rls.wire_client import client_for

    stage = remote_rate_limit_stage(spec(TOKENS), "route/r", lambda *a: None)
    assert stage.client is client_for("rls:1")
    assert stage.after_response is AFTER_RESPONSE
