"""The pure JWT parts: JWKS parsing, key selection, algorithm rules, claims and the verified cache."""

from __future__ import annotations

import json
import time

import pytest

from tests.jwt_helpers import (
    AUDIENCE,
    ISSUER,
    jwks,
    keycloak_style_jwks,
    make_key,
    token_cases,
)
from trioproxy.policies.jwt import (
    JwksError,
    JwksSource,
    JwtFailure,
    JwtVerifier,
    KeyHolder,
    ProviderSpec,
    UnknownKey,
    bearer_token,
    parse_jwks,
)

KINDS = ("RS256", "ES256", "EdDSA")


@pytest.fixture(scope="module")
def keys():
    return {kind: (make_key(kind, f"{kind.lower()}-1"), make_key(kind, "impostor")) for kind in KINDS}


def verifier_for(*test_keys, audiences=(AUDIENCE,), issuer=ISSUER):
    holder = KeyHolder(parse_jwks(jwks(*test_keys)))
    return JwtVerifier([(ProviderSpec(issuer, JwksSource(inline="{}"), tuple(audiences)), holder)]), holder


@pytest.mark.parametrize("kind", KINDS)
def test_every_token_case_gives_its_reason(keys, kind):
    key, impostor = keys[kind]
    verifier, _ = verifier_for(key)
    now = time.time()
    for case, (token, reason) in token_cases(key, impostor).items():
        if token is None:
            continue
        if reason is None:
            claims = verifier.verify(token, now)
            assert claims["sub"] == "alice" and claims["group"] == "eng", case
            continue
        with pytest.raises(JwtFailure) as failure:
            verifier.verify(token, now)
        assert failure.value.reason.startswith(reason), (case, failure.value.reason)


def test_leeway_is_sixty_seconds(keys):
    key, _ = keys["RS256"]
    verifier, _ = verifier_for(key)
    token = key.token(exp=1_000_000, nbf=999_000)
    assert verifier.verify(token, 1_000_060)["sub"] == "alice"
    with pytest.raises(JwtFailure, match="expired"):
        verifier.verify(token, 1_000_061)
    assert verifier.verify(token, 998_940)  # nbf - 60
    with pytest.raises(JwtFailure, match="not yet valid"):
        verifier.verify(token, 998_939)


def test_exp_is_required_and_audience_only_checked_when_configured(keys):
    key, _ = keys["ES256"]
    verifier, _ = verifier_for(key)
    with pytest.raises(JwtFailure, match=r"no valid expiry \(exp\)"):
        verifier.verify(key.token(exp=None), time.time())
    with pytest.raises(JwtFailure, match="wrong audience"):
        verifier.verify(key.token(aud=None), time.time())
    assert verifier.verify(key.token(aud=["x", AUDIENCE]), time.time())
    open_verifier, _ = verifier_for(key, audiences=())
    assert open_verifier.verify(key.token(aud="anything"), time.time())
    with pytest.raises(JwtFailure, match="wrong issuer"):
        open_verifier.verify(key.token(iss=ISSUER + "/"), time.time())  # exact match only


def test_several_providers_each_check_their_own_issuer(keys):
    a, _ = keys["RS256"]
    b, _ = keys["EdDSA"]
    verifier = JwtVerifier([
        (ProviderSpec(ISSUER, JwksSource(inline="{}")), KeyHolder(parse_jwks(jwks(a)))),
        (ProviderSpec("https://other.test", JwksSource(inline="{}")), KeyHolder(parse_jwks(jwks(b)))),
    ])
    assert verifier.verify(a.token(), time.time())
    assert verifier.verify(b.token(iss="https://other.test"), time.time())
    with pytest.raises(JwtFailure, match="wrong issuer"):
        verifier.verify(b.token(), time.time())  # b's key belongs to the other issuer


def test_the_jwk_alg_narrows_what_a_key_verifies(keys):
    key, _ = keys["RS256"]
    jwk = dict(key.public_jwk, alg="PS256")
    verifier = JwtVerifier([(ProviderSpec(ISSUER, JwksSource(inline="{}")),
                             KeyHolder(parse_jwks({"keys": [jwk]})))])
    with pytest.raises(JwtFailure, match='"RS256" is not allowed for key'):
        verifier.verify(key.token(), time.time())
    jwk.pop("alg")  # without alg: the whole RSA family, never HMAC
    assert parse_jwks({"keys": [jwk]}).get(key.kid).algorithms == {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}


def test_jwks_keeps_only_signing_keys(keys):
    key, _ = keys["RS256"]
    keyset = parse_jwks(keycloak_style_jwks(key))
    assert list(keyset.keys) == [key.kid]
    assert any("enc-1" in why and "use 'enc'" in why for why in keyset.skipped)
    oct_key = {"kty": "oct", "kid": "hmac", "k": "c2VjcmV0"}
    keyset = parse_jwks(jwks(key, extra=[oct_key, {"kty": "RSA"}]))
    assert list(keyset.keys) == [key.kid]
    assert any("unsupported key type 'oct'" in why for why in keyset.skipped)
    assert any("no kid" in why for why in keyset.skipped)


@pytest.mark.parametrize("document, message", [
    ("{", "not valid JSON"),
    ('{"keys": {}}', 'a "keys" list'),
    ('{"keys": []}', "no usable signing key"),
    ('{"keys": [{"kty": "oct", "kid": "h", "k": "AA"}]}', "unsupported key type 'oct'"),
    ('{"keys": [{"kty": "EC", "kid": "e", "crv": "P-256", "x": "AA", "y": "AA"}]}', "invalid EC key"),
])
def test_bad_jwks_documents_are_one_line_errors(document, message):
    with pytest.raises(JwksError, match=message) as error:
        parse_jwks(document)
    assert "\n" not in str(error.value)


def test_unknown_kid_is_its_own_failure(keys):
    key, _ = keys["RS256"]
    verifier, _ = verifier_for(key)
    with pytest.raises(UnknownKey) as failure:
        verifier.verify(key.token(kid="rotated"), time.time())
    assert failure.value.kid == "rotated"
    assert failure.value.reason == 'token uses the unknown key "rotated"'
    with pytest.raises(JwtFailure, match=r"does not specify a key id \(kid\)"):
        verifier.verify(key.token(kid=""), time.time())


def test_verified_tokens_are_cached_until_exp_and_dropped_on_rotation(keys, monkeypatch):
    key, _ = keys["RS256"]
    other, _ = keys["ES256"]
    verifier, holder = verifier_for(key)
    token = key.token(exp=2_000_000)
    assert verifier.verify(token, 1_000_000)["sub"] == "alice"
    calls = []
    import jwt as pyjwt
    real_decode = pyjwt.decode
    monkeypatch.setattr(pyjwt, "decode", lambda *a, **k: calls.append(1) or real_decode(*a, **k))
    assert verifier.verify(token, 1_000_001)["sub"] == "alice"
    assert calls == []  # a cache hit: no signature check
    with pytest.raises(JwtFailure, match="expired"):
        verifier.verify(token, 2_000_061)  # the cache honours exp too
    # a copied signature on another payload is not a hit
    head, body, sig = token.split(".")
    forged_body = key.token(sub="mallory", exp=2_000_000).split(".")[1]
    with pytest.raises(JwtFailure, match="signature is invalid"):
        verifier.verify(f"{head}.{forged_body}.{sig}", 1_000_001)
    # the IdP stops publishing the key: its cached tokens stop passing
    holder.keys = parse_jwks(jwks(other))
    with pytest.raises(UnknownKey):
        verifier.verify(token, 1_000_002)


def test_cache_is_bounded(keys):
    key, _ = keys["EdDSA"]
    verifier, _ = verifier_for(key)
    verifier.cache.max_entries = 3
    for i in range(5):
        verifier.verify(key.token(exp=2_000_000, n=i), 1_000_000)
    assert len(verifier.cache.entries) <= 3


@pytest.mark.parametrize("headers, token", [
    ([(b"authorization", b"Bearer abc.def.ghi")], "abc.def.ghi"),
    ([(b"authorization", b"bearer  abc ")], "abc"),
    ([(b"authorization", b"Basic dXNlcg==")], None),
    ([(b"authorization", b"Bearer ")], None),
    ([(b"x-other", b"Bearer abc")], None),
    ([], None),
])
def test_bearer_token(headers, token):
    assert bearer_token(headers) == token


def test_private_parts_in_a_jwk_are_never_used(keys):
    key, _ = keys["RS256"]
    from jwt.algorithms import RSAAlgorithm
    private_jwk = json.loads(RSAAlgorithm.to_jwk(key.private))
    private_jwk.update(kid=key.kid)
    private_jwk.pop("key_ops", None)
    verify_key = parse_jwks({"keys": [private_jwk]}).get(key.kid)
    assert not hasattr(verify_key.key, "sign")


def _b64(data: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.parametrize("token", [
    "", ".", "..", "a.b.c", "a.b", "a.b.c.d.e", "\x00.\x01.\x02", "é.é.é",
    _b64(b"[]") + ".e30.sig",
    _b64(b'{"alg": ["RS256"], "kid": "rs256-1"}') + ".e30.sig",
    _b64(b'{"alg": "RS256", "kid": {"a": 1}}') + ".e30.sig",
    _b64(b'{"alg": "RS256", "kid": "rs256-1"}') + "." + _b64(b"[1, 2]") + ".c2ln",
    _b64(b'{"alg": "RS256", "kid": "rs256-1"}') + "." + _b64(b"not json") + ".c2ln",
    _b64(b'{"alg": "RS256", "kid": "rs256-1", "crit": ["x"]}') + ".e30.c2ln",
])
def test_garbage_is_always_a_failure_never_a_crash(keys, token):
    verifier, _ = verifier_for(keys["RS256"][0])
    with pytest.raises(JwtFailure):
        verifier.verify(token, time.time())
