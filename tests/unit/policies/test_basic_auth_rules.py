"""basicAuth details mutation testing found unguarded: the thread limiter bcrypt runs under,
the exact end of the verified-password cache, the cache key, and the stage's trace events."""

from __future__ import annotations

import base64

import pytest
import trio

from tests.e2e.test_basic_auth import ALICE
from tests.e2e.test_basic_auth import BOB as SHA_BOB
from tests.unit.proxy.test_header_stages import RecordingTracer
from trioproxy.errors import BasicAuthenticationFailed
from trioproxy.policies import basic_auth
from trioproxy.policies.basic_auth import BasicAuthSpec
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.stages import BasicAuthStage


def exchange(tracer, credentials: str | None = None):
    headers = [(b"host", b"h")]
    if credentials is not None:
        headers.append((b"authorization", b"Basic " + base64.b64encode(credentials.encode())))
    scope = {"type": "http", "method": "GET", "path": "/p", "query_string": b"", "headers": headers}
    x = Exchange(scope, None, None, 0.0)  # type: ignore[arg-type]
    x.tracer = tracer
    return x


async def test_bcrypt_runs_in_threads_under_the_stages_limiter(monkeypatch):
    stage = BasicAuthStage(BasicAuthSpec((("alice", ALICE),)))
    assert stage.limiter.total_tokens == basic_auth.BCRYPT_THREADS == 2
    seen = []
    real = trio.to_thread.run_sync

    async def recording(fn, *args, limiter=None, **kw):
        seen.append(limiter)
        return await real(fn, *args, limiter=limiter, **kw)

    monkeypatch.setattr(trio.to_thread, "run_sync", recording)
    assert await stage._verify("alice", b"wonderland", ALICE)
    assert seen == [stage.limiter]
    assert await stage._verify("bob", b"builder", SHA_BOB) and seen == [stage.limiter]  # SHA: on the loop


async def test_a_verified_password_is_remembered_until_exactly_cache_seconds(mock_clock, monkeypatch):
    calls = []
    real = basic_auth.verify_password
    monkeypatch.setattr(basic_auth, "verify_password", lambda h, p: calls.append(p) or real(h, p))
    stage = BasicAuthStage(BasicAuthSpec((("bob", SHA_BOB),)))
    assert await stage._verify("bob", b"builder", SHA_BOB)
    mock_clock.jump(basic_auth.CACHE_SECONDS - 0.5)
    assert await stage._verify("bob", b"builder", SHA_BOB) and len(calls) == 1
    mock_clock.jump(0.5)  # exactly CACHE_SECONDS after: checked again
    assert await stage._verify("bob", b"builder", SHA_BOB) and len(calls) == 2
    assert not await stage._verify("bob", b"wrong", SHA_BOB) and len(calls) == 3
    assert not await stage._verify("bob", b"wrong", SHA_BOB) and len(calls) == 4  # failures never cached
    assert basic_auth.CACHE_SECONDS == 300.0 and basic_auth.CACHE_SIZE == 10_000


async def test_the_cache_key_separates_user_password_and_hash(mock_clock, monkeypatch):
    calls = []
    monkeypatch.setattr(basic_auth, "verify_password", lambda h, p: calls.append((h, p)) or True)
    stage = BasicAuthStage(BasicAuthSpec((("bob", SHA_BOB),)))
    for user, password, hashed in (("bob", b"x", "h1"), ("bo", b"bx", "h1"), ("bob", b"x", "h2"),
                                   ("bob", b"x\x00h1", ""), ("bob", b"x", "h1")):
        assert await stage._verify(user, password, hashed)
    assert len(calls) == 4 and len(stage.verified) == 4


async def test_trace_events_and_challenge():
    stage = BasicAuthStage(BasicAuthSpec((("bob", SHA_BOB),), realm="Ops", mode="strict"))
    assert stage.challenge == ((b"www-authenticate", b'Basic realm="Ops"'),)
    tracer = RecordingTracer()
    x = exchange(tracer, "bob:builder")
    await stage.request(x)
    assert x.basic_auth == {"username": "bob"} and x.headers == [(b"host", b"h")]
    assert tracer.events == [("policy", {"severity": "success", "kind": "basicAuth", "result": "authenticated",
                                         "username": "bob"})]
    assert tracer.snapshots == [("basicAuth", x)]
    for credentials, reason in ((None, "no basic authentication credentials found"), ("bob:no", "invalid credentials"),
                                ("eve:builder", "invalid credentials"), ("bob", "invalid credentials")):
        tracer = RecordingTracer()
        with pytest.raises(BasicAuthenticationFailed) as failed:
            await stage.request(exchange(tracer, credentials))
        assert failed.value.message == f"basic authentication failure: {reason}" and list(failed.value.headers) == list(stage.challenge)
        assert tracer.events == [("policy", {"severity": "warn", "kind": "basicAuth", "result": "rejected",
                                             "reason": reason})]
    tracer = RecordingTracer()
    await BasicAuthStage(BasicAuthSpec((("bob", SHA_BOB),))).request(exchange(tracer))
    assert tracer.events == [("policy", {"kind": "basicAuth", "result": "skipped",
                                         "reason": "no credentials (optional mode)"})]


def test_the_user_ends_at_the_first_colon_of_an_htpasswd_line():
    from trioproxy.policies.basic_auth import HtpasswdError, parse_htpasswd

    with pytest.raises(HtpasswdError, match="line 1: user 'a' has an unsupported hash"):
        parse_htpasswd(f"a:b:{SHA_BOB}")
