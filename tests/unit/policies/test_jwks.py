"""Remote JWKS against a real JWKS server on port 0: key rotation, rate-limited refetch, IdP outage.

Time is pytest-trio's ``mock_clock`` (moves only when told), so the refetch rate limit and the
refresh interval are exercised without waiting; the sockets are real.
"""

from __future__ import annotations

import time

import pytest
import trio
from prometheus_client import CollectorRegistry

from tests.jwks_server import JwksServer
from tests.jwt_helpers import AUDIENCE, ISSUER, jwks, make_key
from trioproxy.errors import AuthenticationFailed
from trioproxy.policies.jwks import JwksRegistry
from trioproxy.policies.jwt import (
    JwksSource,
    JwtAuthSpec,
    JwtVerifier,
    ProviderSpec,
)
from trioproxy.proxy.stages import JwtAuthStage


class FakeExchange:
    def __init__(self, token: str | None) -> None:
        self.headers = [(b"host", b"x")] + ([(b"authorization", f"Bearer {token}".encode())] if token else [])
        self.tracer = None
        self.jwt = None


@pytest.fixture(scope="module")
def keys():
    return make_key("RS256", "old"), make_key("ES256", "new")


async def settle(condition, seconds: float = 5.0) -> None:
    """Let background tasks run (real I/O, frozen clock) until ``condition()``."""
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "condition not reached"
        await trio.sleep(0)


async def start(nursery, document, **options):
    server = await nursery.start(JwksServer(document).serve)
    metrics = CollectorRegistry()
    registry = JwksRegistry(metrics, **options)
    remote = registry.get(server.url)
    await nursery.start(registry.run)
    spec = JwtAuthSpec((ProviderSpec(ISSUER, JwksSource(url=server.url), (AUDIENCE,)),), "strict")
    verifier = JwtVerifier([(spec.providers[0], remote.holder)])
    return server, remote, metrics, JwtAuthStage(spec, verifier, [remote])


async def test_rotation_needs_one_refetch_and_refetches_are_rate_limited(nursery, mock_clock, keys):
    old, new = keys
    server, remote, _, stage = await start(nursery, jwks(old), min_refetch_interval=10)
    assert server.fetches == 1  # fetched at start, before the registry reported started
    x = FakeExchange(old.token())
    await stage.request(x)
    assert x.jwt["sub"] == "alice" and all(name != b"authorization" for name, _ in x.headers)

    server.document = jwks(old, new)  # the IdP rotates: a new key appears
    x = FakeExchange(new.token())
    await stage.request(x)
    assert x.jwt["sub"] == "alice"
    assert server.fetches == 2  # exactly one refetch

    for _ in range(3):  # an unknown kid again, within the rate limit: no further fetch
        with pytest.raises(AuthenticationFailed, match='unknown key "bogus"'):
            await stage.request(FakeExchange(new.token(kid="bogus")))
    assert server.fetches == 2
    mock_clock.jump(11)
    with pytest.raises(AuthenticationFailed, match='unknown key "bogus"'):
        await stage.request(FakeExchange(new.token(kid="bogus")))
    assert server.fetches == 3


async def test_outage_keeps_the_last_good_keys_and_says_so(nursery, mock_clock, keys):
    old, _ = keys
    server, remote, metrics, stage = await start(nursery, jwks(old), refresh_interval=300, retry_interval=10)
    assert metrics.get_sample_value("trioproxy_jwks_stale", {"url": server.url}) == 0
    server.down = True
    mock_clock.jump(300)  # the refresh is due
    await settle(lambda: server.fetches == 2 and remote.stale)
    assert metrics.get_sample_value("trioproxy_jwks_stale", {"url": server.url}) == 1
    assert metrics.get_sample_value("trioproxy_jwks_fetches_total", {"url": server.url, "result": "error"}) == 1
    x = FakeExchange(old.token())
    await stage.request(x)  # cached keys keep working
    assert x.jwt["sub"] == "alice"

    mock_clock.jump(10)  # while down, retried on the shorter interval
    await settle(lambda: server.fetches == 3)
    server.down = False
    mock_clock.jump(10)
    await settle(lambda: server.fetches == 4 and not remote.stale)
    assert metrics.get_sample_value("trioproxy_jwks_stale", {"url": server.url}) == 0


async def test_idp_down_at_start_gives_unknown_key_not_a_crash(nursery, mock_clock, keys):
    old, _ = keys
    server = await nursery.start(JwksServer(jwks(old)).serve)
    server.down = True
    registry = JwksRegistry(CollectorRegistry())
    remote = registry.get(server.url)
    await nursery.start(registry.run)
    assert remote.stale and not remote.holder.keys.keys
    spec = JwtAuthSpec((ProviderSpec(ISSUER, JwksSource(url=server.url), (AUDIENCE,)),), "strict")
    stage = JwtAuthStage(spec, JwtVerifier([(spec.providers[0], remote.holder)]), [remote])
    with pytest.raises(AuthenticationFailed, match='unknown key "old"'):
        await stage.request(FakeExchange(old.token()))
    server.down = False
    mock_clock.jump(11)
    x = FakeExchange(old.token())
    await stage.request(x)  # the IdP is back: the unknown kid refetches and passes
    assert x.jwt["sub"] == "alice"
