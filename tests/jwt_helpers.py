"""Keys, JWKS documents and tokens for the JWT tests (generated once per test module)."""

from __future__ import annotations

import base64
import json
import time
from typing import Any

import attrs
import jwt as pyjwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

ISSUER = "https://idp.test/realms/demo"
AUDIENCE = "trioproxy"


@attrs.frozen
class TestKey:
    kid: str
    alg: str
    private: Any
    public_jwk: dict[str, Any]

    def token(self, claims: dict[str, Any] | None = None, *, kid: str | None = None,
              headers: dict[str, Any] | None = None, **overrides: Any) -> str:
        now = int(time.time())
        body: dict[str, Any] = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "exp": now + 600,
                                "iat": now, "group": "eng"}
        body.update(claims or {})
        body.update(overrides)
        body = {k: v for k, v in body.items() if v is not None}
        return pyjwt.encode(body, self.private, algorithm=self.alg,
                            headers={"kid": kid if kid is not None else self.kid, **(headers or {})})

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo)


def make_key(kind: str, kid: str) -> TestKey:
    """``kind``: RS256, ES256 or EdDSA."""
    if kind == "RS256":
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        jwk = json.loads(RSAAlgorithm.to_jwk(private.public_key()))
    elif kind == "ES256":
        private = ec.generate_private_key(ec.SECP256R1())
        jwk = json.loads(ECAlgorithm.to_jwk(private.public_key()))
    elif kind == "EdDSA":
        private = ed25519.Ed25519PrivateKey.generate()
        jwk = json.loads(OKPAlgorithm.to_jwk(private.public_key()))
    else:
        raise ValueError(kind)
    jwk.update(kid=kid, use="sig", alg=kind)
    return TestKey(kid, kind, private, jwk)


def jwks(*keys: TestKey, extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"keys": [k.public_jwk for k in keys] + list(extra or [])}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(kid: str, claims: dict[str, Any] | None = None) -> str:
    """An ``alg: none`` token (the classic bypass attempt)."""
    now = int(time.time())
    body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": now + 600, **(claims or {})}
    return f"{_b64(json.dumps({'alg': 'none', 'typ': 'JWT', 'kid': kid}).encode())}.{_b64(json.dumps(body).encode())}."


def hmac_with_public_key(key: TestKey) -> str:
    """HS256 signed with the public key's PEM as the secret (algorithm confusion attempt)."""
    import hashlib
    import hmac

    now = int(time.time())
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": key.kid}).encode())
    body = _b64(json.dumps({"iss": ISSUER, "aud": AUDIENCE, "sub": "mallory", "exp": now + 600}).encode())
    signature = hmac.new(key.public_pem(), f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{_b64(signature)}"


def keycloak_style_jwks(signing: TestKey) -> dict[str, Any]:
    """A JWKS as Keycloak publishes it: a signing key plus an RSA-OAEP encryption key."""
    enc = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    enc_jwk = json.loads(RSAAlgorithm.to_jwk(enc.public_key()))
    enc_jwk.update(kid="enc-1", use="enc", alg="RSA-OAEP")
    return jwks(signing, extra=[enc_jwk])


#: The token cases of the matrix: name -> (token or None for "no header", reason or None when valid).
#: ``impostor`` holds a different private key published nowhere, used under ``key``'s kid.
def token_cases(key: TestKey, impostor: TestKey) -> dict[str, tuple[str | None, str | None]]:
    now = int(time.time())
    wrong_key = impostor.token(kid=key.kid)
    return {
        "valid": (key.token(), None),
        "missing": (None, "no bearer token found"),
        "expired": (key.token(exp=now - 3600), "token has expired"),
        "not yet valid": (key.token(nbf=now + 3600), "token is not yet valid"),
        "wrong issuer": (key.token(iss="https://evil.test"), "token has the wrong issuer"),
        "wrong audience": (key.token(aud="someone-else"), "token has the wrong audience"),
        "unknown kid": (key.token(kid="nope"), 'token uses the unknown key "nope"'),
        "right kid wrong key": (wrong_key, "token signature is invalid"),
        "alg none": (unsigned_token(key.kid), 'token algorithm "none" is not allowed'),
        "hs256 with public key": (hmac_with_public_key(key),
                                  f'token algorithm "HS256" is not allowed for key "{key.kid}"'),
        "malformed": ("not-a-jwt.at-all", "token is malformed"),
        "oversized": (key.token(pad="x" * 9000), "token is too large"),
    }
