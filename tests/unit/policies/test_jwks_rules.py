"""Remote JWKS and JWKS parsing rules the older tests left unguarded (found by mutation testing).

A skipped JWK must not cut the key set short, ``key_ops`` must allow ``verify``, one
:class:`RemoteJwks` per URL is shared, redirects are followed, refreshes keep their cadence, and
the fetch counter and key gauge say what happened. Sockets are real; time is ``mock_clock``.
"""

from __future__ import annotations

import pytest
import trio
from prometheus_client import CollectorRegistry

from tests.jwks_server import JwksServer
from tests.jwt_helpers import jwks, make_key
from tests.unit.policies.test_jwks import settle
from trioproxy.policies import jwks as jwks_module
from trioproxy.policies.jwks import JwksRegistry, RemoteJwks
from trioproxy.policies.jwt import JwksError, parse_jwks


@pytest.fixture(scope="module")
def key():
    return make_key("ES256", "good")


@pytest.mark.parametrize(("odd", "why"), [
    ("not a key", "keys[0]: not an object"),
    ({"kty": "EC"}, "keys[0]: no kid"),
    ({"kid": "", "kty": "EC"}, "keys[0]: no kid"),
    ({"kid": "enc", "kty": "RSA", "use": "enc"}, "key 'enc': use 'enc'"),
    ({"kid": "signer", "kty": "EC", "key_ops": ["sign"]}, "key 'signer': key_ops without verify"),
    ({"kid": "sym", "kty": "oct", "k": "c2VjcmV0"}, "key 'sym': unsupported key type 'oct'"),
])
def test_a_skipped_jwk_does_not_drop_the_keys_after_it(key, odd, why):
    keys = parse_jwks({"keys": [odd, key.public_jwk]})
    assert list(keys.keys) == ["good"]
    assert len(keys.skipped) == 1 and keys.skipped[0].startswith(why)


def test_key_ops_must_include_verify(key):
    jwk = dict(key.public_jwk)
    with pytest.raises(JwksError, match="key_ops without verify"):
        parse_jwks({"keys": [{**jwk, "key_ops": ["sign"]}]})
    assert list(parse_jwks({"keys": [{**jwk, "key_ops": ["sign", "verify"]}]}).keys) == ["good"]
    assert list(parse_jwks({"keys": [jwk]}).keys) == ["good"]  # no key_ops: usable


def test_a_duplicate_kid_keeps_the_first_key(key):
    other = make_key("ES256", "good")
    keys = parse_jwks({"keys": [key.public_jwk, other.public_jwk]})
    assert keys.skipped == ("key 'good': duplicate kid",)
    assert keys.get("good").key.public_numbers() == key.private.public_key().public_numbers()


def test_one_remote_set_per_url_shared_by_every_get():
    registry = JwksRegistry(CollectorRegistry(), refresh_interval=60.0)
    first = registry.get("http://a/jwks")
    assert registry.get("http://a/jwks") is first
    assert registry.get("http://b/jwks") is not first
    assert first.metrics is registry.metrics and first.refresh_interval == 60.0


def test_remote_defaults_are_the_documented_ones():
    remote = RemoteJwks("http://a/jwks")
    assert (remote.refresh_interval, remote.retry_interval, remote.min_refetch_interval, remote.timeout) == (
        300.0, 10.0, 10.0, 5.0)
    assert jwks_module.MAX_JWKS_BYTES == 1024 * 1024
    assert remote.last_error is None and remote.last_success is None and not remote.stale
    assert not remote.holder.keys.keys


async def test_options_reach_every_remote_set(nursery, mock_clock, key):
    server = await nursery.start(JwksServer(jwks(key)).serve)
    registry = JwksRegistry(CollectorRegistry(), refresh_interval=50.0, retry_interval=7.0,
                            min_refetch_interval=3.0, timeout=2.0)
    remote = registry.get(server.url)
    assert (remote.refresh_interval, remote.retry_interval, remote.min_refetch_interval, remote.timeout) == (
        50.0, 7.0, 3.0, 2.0)


async def test_a_redirect_to_the_keys_is_followed(nursery, mock_clock, key):
    server = await nursery.start(JwksServer(jwks(key)).serve)
    remote = RemoteJwks(server.url.replace("/jwks", "/moved"))
    assert await remote.fetch()
    assert list(remote.holder.keys.keys) == ["good"] and server.fetches == 2


async def test_fetch_counter_and_key_gauge(nursery, mock_clock, key):
    other = make_key("EdDSA", "other")
    server = await nursery.start(JwksServer(jwks(key, other)).serve)
    metrics = CollectorRegistry()
    registry = JwksRegistry(metrics)
    remote = registry.get(server.url)
    assert await remote.fetch() and await remote.fetch()

    def sample(name, **labels):
        return metrics.get_sample_value(name, {"url": server.url, **labels})

    assert sample("trioproxy_jwks_fetches_total", result="ok") == 2
    assert sample("trioproxy_jwks_fetches_total", result="error") is None
    assert sample("trioproxy_jwks_keys") == 2 and sample("trioproxy_jwks_stale") == 0
    assert remote.last_success == trio.current_time() and remote.last_error is None
    server.down = True
    assert not await remote.fetch()
    assert remote.last_error == "HTTP 503"
    assert sample("trioproxy_jwks_fetches_total", result="error") == 1
    assert sample("trioproxy_jwks_keys") == 2  # the last good keys still serve
    server.document = {"keys": []}
    server.down = False
    assert not await remote.fetch()
    assert remote.last_error.startswith("JWKS has no usable signing key")


async def test_refresh_cadence_on_success_and_on_failure(nursery, mock_clock, key):
    server = await nursery.start(JwksServer(jwks(key)).serve)
    registry = JwksRegistry(CollectorRegistry(), refresh_interval=100.0, retry_interval=10.0)
    remote = registry.get(server.url)
    await nursery.start(registry.run)
    assert server.fetches == 1
    started = remote._last_attempt  # fetch() sets it before any I/O
    mock_clock.jump(99.5)
    for _ in range(20):
        await trio.sleep(0)
    assert remote._last_attempt == started  # not before the refresh interval
    mock_clock.jump(0.5)
    await settle(lambda: server.fetches == 2)
    server.down = True
    mock_clock.jump(100)
    await settle(lambda: server.fetches == 3)
    failed = remote._last_attempt
    mock_clock.jump(9.5)
    for _ in range(20):
        await trio.sleep(0)
    assert remote._last_attempt == failed  # retried after retry_interval, not sooner
    mock_clock.jump(0.5)
    await settle(lambda: server.fetches == 4)


async def test_a_url_added_after_start_is_fetched_then_refreshed(nursery, mock_clock, key):
    server = await nursery.start(JwksServer(jwks(key)).serve)
    registry = JwksRegistry(CollectorRegistry(), refresh_interval=100.0)
    await nursery.start(registry.run)
    remote = registry.get(server.url)  # a reload names a new URL
    await settle(lambda: server.fetches == 1 and remote.last_success is not None)
    assert list(remote.holder.keys.keys) == ["good"]
    mock_clock.jump(100)
    await settle(lambda: server.fetches == 2)


async def test_a_set_never_fetched_is_fetched_at_once_by_run(nursery, mock_clock, key):
    server = await nursery.start(JwksServer(jwks(key)).serve)
    remote = RemoteJwks(server.url)
    nursery.start_soon(remote.run)
    await settle(lambda: remote.last_success is not None)
    assert trio.current_time() == 0 and server.fetches == 1


async def test_the_registry_stopped_adds_urls_without_fetching(nursery, mock_clock, key):
    registry = JwksRegistry(CollectorRegistry())
    async with trio.open_nursery() as inner:
        await inner.start(registry.run)
        inner.cancel_scope.cancel()
    assert registry._nursery is None
    assert registry.get("http://a/jwks").last_success is None  # no nursery to fetch in: no crash


async def test_the_request_asks_for_json(nursery, mock_clock, key):
    server = await nursery.start(JwksServer(jwks(key)).serve)
    assert await RemoteJwks(server.url).fetch()
    assert server.request_headers[b"accept"] == b"application/json"


def _document_of_size(key, size: int) -> bytes:
    import json

    document = {"keys": [key.public_jwk], "pad": ""}
    document["pad"] = "x" * (size - len(json.dumps(document)))
    text = json.dumps(document).encode()
    assert len(text) == size
    return text


async def test_a_jwks_of_exactly_the_size_cap_is_used_one_byte_more_is_not(nursery, mock_clock, key):
    server = await nursery.start(JwksServer({}).serve)
    server.document = _document_of_size(key, jwks_module.MAX_JWKS_BYTES)
    remote = RemoteJwks(server.url)
    assert await remote.fetch()
    server.document = _document_of_size(key, jwks_module.MAX_JWKS_BYTES + 1)
    assert not await remote.fetch()
    assert remote.last_error == f"JWKS larger than {jwks_module.MAX_JWKS_BYTES} bytes"


async def test_concurrent_fetches_share_one_and_report_its_outcome(nursery, mock_clock, key):
    server = await nursery.start(JwksServer(jwks(key)).serve)
    remote = RemoteJwks(server.url)
    results = []

    async def fetch():
        results.append(await remote.fetch())

    async with trio.open_nursery() as both:
        both.start_soon(fetch)
        both.start_soon(fetch)
    assert results == [True, True] and server.fetches == 1
    server.down = True
    results.clear()
    async with trio.open_nursery() as both:
        both.start_soon(fetch)
        both.start_soon(fetch)
    assert results == [False, False] and server.fetches == 2


async def test_refetch_for_an_unknown_kid_is_rate_limited_to_the_interval(nursery, mock_clock, key):
    server = await nursery.start(JwksServer(jwks(key)).serve)
    remote = RemoteJwks(server.url, min_refetch_interval=10.0)
    assert await remote.refetch_for_unknown_kid()
    mock_clock.jump(9.5)
    assert not await remote.refetch_for_unknown_kid() and server.fetches == 1
    mock_clock.jump(0.5)  # exactly the interval since the last refetch
    assert await remote.refetch_for_unknown_kid() and server.fetches == 2


async def _silent(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()


async def _trickle(stream: trio.SocketStream) -> None:
    """Answers a byte at a time, 1.5 s apart: no single read waits longer than the timeout."""
    await stream.receive_some(65536)
    for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n":
        await stream.send_all(bytes([byte]))
        await trio.sleep(1.5)


async def _serve(nursery, handler) -> str:
    listeners = await nursery.start(trio.serve_tcp, handler, 0)
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/jwks"


async def test_a_silent_idp_fails_on_the_http_timeout(nursery, autojump_clock):
    remote = RemoteJwks(await _serve(nursery, _silent), timeout=2.0)
    assert not await remote.fetch()
    assert remote.last_error == "ReadTimeout" and trio.current_time() == pytest.approx(2.0, abs=0.1)


async def test_a_trickling_idp_is_cut_one_second_after_the_timeout(nursery, autojump_clock):
    remote = RemoteJwks(await _serve(nursery, _trickle), timeout=2.0)
    start = trio.current_time()
    assert not await remote.fetch()
    assert remote.last_error == "timed out" and trio.current_time() - start == pytest.approx(3.0, abs=0.01)


async def test_a_failure_is_logged_once_saying_whether_keys_remain(nursery, mock_clock, key, caplog):
    server = await nursery.start(JwksServer(jwks(key)).serve)
    server.down = True
    remote = RemoteJwks(server.url)
    caplog.set_level("WARNING", logger="trioproxy.jwks")
    assert not await remote.fetch() and not await remote.fetch()
    assert [r.getMessage() for r in caplog.records] == [
        f"JWKS fetch from {server.url} failed (HTTP 503); no keys yet"]
    caplog.clear()
    server.down = False
    assert await remote.fetch()
    server.down = True
    assert not await remote.fetch()
    assert [r.getMessage() for r in caplog.records] == [
        f"JWKS fetch from {server.url} failed (HTTP 503); keeping the last good keys"]


def test_the_metrics_say_what_they_count():
    from prometheus_client import generate_latest

    metrics = CollectorRegistry()
    JwksRegistry(metrics)
    text = generate_latest(metrics).decode()
    for line in ("# HELP trioproxy_jwks_fetches_total JWKS fetches by URL and result (ok, error).",
                 "# HELP trioproxy_jwks_stale 1 while the newest JWKS fetch failed and the last good keys keep serving.",
                 "# HELP trioproxy_jwks_keys Signing keys currently served from the JWKS."):
        assert line in text
