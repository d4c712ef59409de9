"""JWT rules the older tests left unguarded (found by mutation testing): claim types, the token
size boundary, private JWK parts, which Authorization headers go upstream, and the stage's trace."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from tests.jwt_helpers import AUDIENCE, ISSUER, jwks, make_key
from tests.unit.proxy.test_header_stages import RecordingTracer
from trioproxy.errors import AuthenticationFailed
from trioproxy.policies.jwt import (
    JwksError,
    JwksSource,
    JwtAuthSpec,
    JwtFailure,
    JwtVerifier,
    KeyHolder,
    ProviderSpec,
    VerifiedCache,
    parse_jwks,
)
from trioproxy.proxy.stages import JwtAuthStage

NOW = 1_000_000


@pytest.fixture(scope="module")
def key():
    return make_key("ES256", "k1")


def verifier_for(*keys, **options):
    holder = KeyHolder(parse_jwks(jwks(*keys)))
    spec = ProviderSpec(ISSUER, JwksSource(inline="{}"), (AUDIENCE,))
    return JwtVerifier([(spec, holder)], **options)


@pytest.mark.parametrize("nbf", ["soon", True, [1], float("nan")])
def test_a_non_numeric_nbf_is_refused_not_taken_as_absent(key, nbf):
    with pytest.raises(JwtFailure, match="token has an invalid nbf claim"):
        verifier_for(key).verify(key.token(exp=NOW + 600, iat=NOW, nbf=nbf), NOW)
    assert verifier_for(key).verify(key.token(exp=NOW + 600, iat=NOW), NOW)["sub"] == "alice"  # absent


@pytest.mark.parametrize("exp", ["later", True, None, [NOW + 600]])
def test_a_non_numeric_exp_is_no_expiry(key, exp):
    with pytest.raises(JwtFailure, match=r"token has no valid expiry \(exp\)"):
        verifier_for(key).verify(key.token(exp=exp, iat=NOW), NOW)


@pytest.mark.parametrize("iat", [NOW + 86_400, "whenever", True])
def test_iat_is_not_checked(key, iat):
    assert verifier_for(key).verify(key.token(exp=NOW + 600, iat=iat), NOW)["sub"] == "alice"


def test_a_token_of_exactly_max_token_bytes_is_verified(key):
    token = key.token(exp=NOW + 600, iat=NOW)
    assert verifier_for(key, max_token_bytes=len(token)).verify(token, NOW)["sub"] == "alice"
    with pytest.raises(JwtFailure, match=rf"token is too large \({len(token)} bytes, at most {len(token) - 1}\)"):
        verifier_for(key, max_token_bytes=len(token) - 1).verify(token, NOW)


def test_the_default_max_token_bytes_is_8192(key):
    verifier = verifier_for(key)
    assert verifier.max_token_bytes == 8192 and verifier.cache.max_entries == 10_000
    assert isinstance(verifier.cache, VerifiedCache)


@pytest.mark.parametrize(("kind", "algorithm"), [("RS256", RSAAlgorithm), ("ES256", ECAlgorithm),
                                                  ("EdDSA", OKPAlgorithm)])
def test_a_jwk_with_private_parts_verifies_with_its_public_half(kind, algorithm):
    key = make_key(kind, "priv")
    private_jwk = {**json.loads(algorithm.to_jwk(key.private)), "kid": "priv", "alg": kind}
    private_jwk.pop("key_ops", None)
    verify_key = parse_jwks({"keys": [private_jwk]}).get("priv")
    assert not hasattr(verify_key.key, "private_bytes") and not hasattr(verify_key.key, "sign")
    holder = KeyHolder(parse_jwks({"keys": [private_jwk]}))
    verifier = JwtVerifier([(ProviderSpec(ISSUER, JwksSource(inline="{}"), ()), holder)])
    assert verifier.verify(key.token(exp=NOW + 600), NOW)["sub"] == "alice"


class FakeExchange:
    def __init__(self, headers: list[tuple[bytes, bytes]], tracer: Any = None) -> None:
        self.headers = headers
        self.tracer = tracer
        self.jwt = None


def stage_for(key, mode="strict"):
    spec = JwtAuthSpec((ProviderSpec(ISSUER, JwksSource(inline="{}"), (AUDIENCE,)),), mode)
    return JwtAuthStage(spec, JwtVerifier([(spec.providers[0], KeyHolder(parse_jwks(jwks(key))))]))


async def test_only_the_bearer_header_is_removed_before_proxying(key):
    token = key.token()
    x = FakeExchange([(b"host", b"h"), (b"authorization", b"Basic dXNlcjpwdw=="),
                      (b"authorization", f"Bearer {token}".encode()), (b"authorization", b"Negotiate abc"),
                      (b"x-bearer", b"Bearer kept")])
    await stage_for(key).request(x)
    assert x.jwt["sub"] == "alice"
    assert x.headers == [(b"host", b"h"), (b"authorization", b"Basic dXNlcjpwdw=="),
                         (b"authorization", b"Negotiate abc"), (b"x-bearer", b"Bearer kept")]


async def test_a_lowercase_padded_bearer_header_is_removed(key):
    x = FakeExchange([(b"authorization", f"  bEaReR {key.token()}".encode())])
    await stage_for(key).request(x)
    assert x.headers == []


async def test_trace_events_of_each_decision(key):
    tracer = RecordingTracer()
    x = FakeExchange([(b"authorization", f"Bearer {key.token()}".encode())], tracer)
    await stage_for(key).request(x)
    assert tracer.events == [("policy", {"severity": "success", "kind": "jwt", "result": "authenticated",
                                         "issuer": ISSUER, "subject": "alice"})]
    assert tracer.snapshots == [("jwtAuth", x)]

    tracer = RecordingTracer()
    with pytest.raises(AuthenticationFailed) as failed:
        await stage_for(key).request(FakeExchange([], tracer))
    assert list(failed.value.headers) == [(b"www-authenticate", b"Bearer")]
    assert tracer.events == [("policy", {"severity": "warn", "kind": "jwt", "result": "rejected",
                                         "reason": "no bearer token found"})]

    tracer = RecordingTracer()
    await stage_for(key, "optional").request(FakeExchange([], tracer))
    assert tracer.events == [("policy", {"kind": "jwt", "result": "skipped",
                                         "reason": "no bearer token (optional mode)"})]

    expired = key.token(exp=int(time.time()) - 3600)
    tracer = RecordingTracer()
    with pytest.raises(AuthenticationFailed, match="token has expired") as failed:
        await stage_for(key, "optional").request(FakeExchange([(b"authorization", f"Bearer {expired}".encode())],
                                                              tracer))
    assert list(failed.value.headers) == [(b"www-authenticate", b"Bearer")]
    assert tracer.events == [("policy", {"severity": "warn", "kind": "jwt", "result": "rejected",
                                         "reason": "token has expired"})]

    tracer = RecordingTracer()
    x = FakeExchange([(b"authorization", f"Bearer {expired}".encode())], tracer)
    await stage_for(key, "permissive").request(x)
    assert x.jwt is None and x.headers == [(b"authorization", f"Bearer {expired}".encode())]
    assert tracer.events == [("policy", {"severity": "warn", "kind": "jwt", "result": "skipped",
                                         "reason": "token has expired (permissive mode: passed without claims)"})]


def _b64(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _forged(header: dict[str, Any], payload: bytes = b"{}") -> str:
    return f"{_b64(json.dumps(header).encode())}.{_b64(payload)}.c2ln"


def test_each_failure_gives_exactly_its_reason(key):
    verifier = verifier_for(key)
    cases = {
        "not-a-jwt": "token is malformed",
        _forged({"alg": "NoNe", "kid": "k1"}): 'token algorithm "NoNe" is not allowed',
        _forged({"alg": "NONE", "kid": "k1"}): 'token algorithm "NONE" is not allowed',
        _forged({"alg": "ES256"}): "token header does not specify a key id (kid)",
        key.token(exp=None, iat=NOW): "token has no valid expiry (exp)",
        key.token(exp=NOW + 600, nbf="x"): "token has an invalid nbf claim",
        key.token(exp=NOW - 3600): "token has expired",
        key.token(exp=NOW + 600, nbf=NOW + 3600): "token is not yet valid",
    }
    for token, reason in cases.items():
        with pytest.raises(JwtFailure) as failure:
            verifier.verify(token, NOW)
        assert failure.value.reason == reason


def test_a_signed_payload_that_is_not_an_object_is_malformed(key):
    import jwt as pyjwt

    token = pyjwt.api_jws.encode(b"[1, 2]", key.private, algorithm="ES256", headers={"kid": "k1"})
    with pytest.raises(JwtFailure) as failure:
        verifier_for(key).verify(token, NOW)
    assert failure.value.reason == "token is malformed"


@pytest.mark.parametrize(("jwk", "reason"), [
    ({"kid": "k", "kty": "EC", "crv": "P-999"}, "key 'k': unsupported EC curve 'P-999'"),
    ({"kid": "k", "kty": "EC"}, "key 'k': unsupported EC curve None"),
    ({"kid": "k", "kty": "OKP", "crv": "X25519"}, "key 'k': unsupported OKP curve 'X25519' (supported: Ed25519)"),
    ({"kid": "k", "kty": "OKP"}, "key 'k': unsupported OKP curve None (supported: Ed25519)"),
])
def test_unsupported_curves_are_named(jwk, reason):
    assert parse_jwks({"keys": [jwk, make_key("ES256", "ok").public_jwk]}).skipped == (reason,)


def test_a_given_cache_is_used():
    cache = VerifiedCache(5)
    assert JwtVerifier([], cache=cache).cache is cache


def test_a_full_cache_drops_the_expired_entries_first_then_everything():
    from trioproxy.policies.jwt import VerifyKey

    key = VerifyKey("k", None, frozenset())
    cache = VerifiedCache(3)
    cache.put("a", {}, key, 900, 0, 0)
    cache.put("b", {}, key, 940, 0, 0)
    cache.put("c", {}, key, 5000, 0, 0)
    assert list(cache.entries) == ["a", "b", "c"]  # filled up to max_entries, nothing dropped
    cache.put("d", {}, key, 5000, 0, 1000)  # a expired more than the leeway ago; b exactly the leeway
    assert list(cache.entries) == ["b", "c", "d"]
    cache.put("e", {}, key, 5000, 0, 1000)  # all live: dropped whole
    assert list(cache.entries) == ["e"]


async def test_a_strict_stage_without_a_token_fails_with_its_reason(key):
    with pytest.raises(AuthenticationFailed) as failed:
        await stage_for(key).request(FakeExchange([]))
    assert failed.value.message == "authentication failure: no bearer token found"


@pytest.mark.parametrize(("document", "message"), [
    ([], 'JWKS must be a JSON object with a "keys" list'),
    ({"keys": {}}, 'JWKS must be a JSON object with a "keys" list'),
    ({"keys": []}, "JWKS has no usable signing key"),
    ({"keys": [1, {"kty": "EC"}]}, "JWKS has no usable signing key (keys[0]: not an object; keys[1]: no kid)"),
])
def test_unusable_documents_say_exactly_why(document, message):
    with pytest.raises(JwksError) as error:
        parse_jwks(document)
    assert str(error.value) == message


def test_a_source_describes_itself():
    assert JwksSource(url="https://idp/jwks").describe() == "https://idp/jwks"
    assert JwksSource(file="/etc/jwks.json").describe() == "file /etc/jwks.json"
    assert JwksSource(inline="{}").describe() == "inline JWKS"
