"""JWT authentication (``jwtAuth``): the frozen spec, JWKS parsing, the pure verifier and its thin stage.

Behaviour follows agentgateway's ``http/jwt.rs``:

- the token comes from ``Authorization: Bearer <token>``;
- its header must name a ``kid``; the key is looked up by ``kid`` across every provider, and
  the provider owning the key decides the expected ``iss`` (exact) and audiences (any overlap,
  only when audiences are configured); ``exp`` is required;
- modes: ``strict`` (a valid token is required), ``optional`` (the default: no token passes,
  an invalid one is rejected), ``permissive`` (missing or invalid tokens pass without claims).

Security decisions that are ours:

- a key only verifies algorithms of its own family (RSA: RS*/PS*, EC: the ES* of its curve,
  OKP Ed25519: EdDSA), narrowed to its ``alg`` when the JWK names one; ``none`` and HMAC are
  never accepted, so a public key can never be used as an HMAC secret (algorithm confusion);
- symmetric (``oct``) keys and encryption keys (``use: enc``, e.g. Keycloak's RSA-OAEP key)
  are skipped, never used to verify;
- tokens longer than :data:`MAX_TOKEN_BYTES` are refused before any parsing.

Verified tokens are cached until their ``exp`` (``VerifiedCache``): a repeated token costs a
dict lookup instead of an RSA verification. The cache is keyed by the whole token, not by the
signature alone, since a signature copied onto another payload must not hit. A hit also
checks that the key that verified it is still the one published under its ``kid``, so a
rotated-out key stops accepting its cached tokens.

Time is passed in (``now``, Unix seconds), so tests need no clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import attrs
import jwt as pyjwt
from attrs import frozen
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from ..errors import duration_text

__all__ = [
    "LEEWAY_SECONDS",
    "MAX_TOKEN_BYTES",
    "JwksError",
    "JwksSource",
    "JwtAuthSpec",
    "JwtFailure",
    "JwtVerifier",
    "KeySet",
    "Mode",
    "ProviderSpec",
    "UnknownKey",
    "VerifiedCache",
    "VerifyKey",
    "bearer_token",
    "parse_jwks",
]

Mode = Literal["strict", "optional", "permissive"]
MODES: tuple[str, ...] = ("strict", "optional", "permissive")

#: Clock skew allowed on ``exp`` and ``nbf`` (agentgateway's jsonwebtoken default).
LEEWAY_SECONDS = 60
#: Longest token accepted. Keycloak access tokens with groups and roles are 1-3 KiB.
MAX_TOKEN_BYTES = 8192

# Signature algorithms per key family. HS* and "none" appear nowhere, on purpose.
_RSA_ALGS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
_EC_ALGS = {"P-256": frozenset({"ES256"}), "P-384": frozenset({"ES384"}), "P-521": frozenset({"ES512"}),
            "secp256k1": frozenset({"ES256K"})}
_OKP_ALGS = {"Ed25519": frozenset({"EdDSA"})}


@frozen
class JwksSource:
    """Where a provider's keys come from: exactly one of ``url``, ``file``, ``inline`` (JSON text)."""

    url: str | None = None
    file: str | None = None
    inline: str | None = attrs.field(default=None, repr=False)

    def describe(self) -> str:
        if self.url is not None:
            return self.url
        if self.file is not None:
            return f"file {self.file}"
        return "inline JWKS"


@frozen
class ProviderSpec:
    """One trusted issuer and its keys."""

    issuer: str
    jwks: JwksSource
    audiences: tuple[str, ...] = ()


@frozen
class JwtAuthSpec:
    """``jwtAuth`` as configured: the single-issuer form is one provider."""

    providers: tuple[ProviderSpec, ...]
    mode: Mode = "optional"


class JwksError(ValueError):
    """A JWKS document that cannot be used; the message is one line."""


class JwtFailure(Exception):
    """A token that does not authenticate; ``reason`` completes ``authentication failure: ...``.

    ``check`` names the check that refused it (``size``, ``malformed``, ``alg``, ``kid``,
    ``signature``, ``iss``, ``aud``, ``exp``, ``nbf``) and ``facts`` what an operator reads beside
    it (``detail`` such as ``expired 3m12s ago``, the ``kid``, the token's and the expected issuer
    or audience): the request's ``why`` (docs/history.md), never the client's body."""

    def __init__(self, reason: str, check: str = "malformed", **facts: Any) -> None:
        super().__init__(reason)
        self.reason = reason
        self.check = check
        self.facts = facts

    def why(self, policy: str = "jwtAuth") -> dict[str, Any]:
        return {"policy": policy, "check": self.check, "detail": self.reason,
                **{k: v for k, v in self.facts.items() if v is not None}}


class UnknownKey(JwtFailure):
    """The token names a ``kid`` no provider publishes (a JWKS refetch may find it)."""

    def __init__(self, kid: str) -> None:
        super().__init__(f"token uses the unknown key {json.dumps(kid)}", "kid", kid=kid,
                         detail=f"no provider publishes key {json.dumps(kid)}")
        self.kid = kid


@attrs.frozen(eq=False)
class VerifyKey:
    """One public signing key: what it may verify (``algorithms``) and the key object itself."""

    kid: str
    key: Any = attrs.field(repr=False)
    algorithms: frozenset[str]


@attrs.frozen(eq=False)
class KeySet:
    """The usable signing keys of one JWKS, by ``kid``; ``skipped`` says what was left out and why."""

    keys: Mapping[str, VerifyKey]
    skipped: tuple[str, ...] = ()

    def get(self, kid: str) -> VerifyKey | None:
        return self.keys.get(kid)


EMPTY_KEYSET = KeySet({})


def _key_of(jwk: Mapping[str, Any], kid: str) -> VerifyKey | str:
    """The verify key of one JWK, or the reason it is skipped."""
    kty = jwk.get("kty")
    alg = jwk.get("alg")
    data = json.dumps(jwk)
    key: Any
    try:
        if kty == "RSA":
            allowed = _RSA_ALGS
            key = RSAAlgorithm.from_jwk(data)
        elif kty == "EC":
            allowed = _EC_ALGS.get(jwk.get("crv", ""), frozenset())
            if not allowed:
                return f"key {kid!r}: unsupported EC curve {jwk.get('crv')!r}"
            key = ECAlgorithm.from_jwk(data)
        elif kty == "OKP":
            allowed = _OKP_ALGS.get(jwk.get("crv", ""), frozenset())
            if not allowed:
                return f"key {kid!r}: unsupported OKP curve {jwk.get('crv')!r} (supported: Ed25519)"
            key = OKPAlgorithm.from_jwk(data)
        else:
            return f"key {kid!r}: unsupported key type {kty!r} (supported: RSA, EC, OKP)"
    except (pyjwt.InvalidKeyError, ValueError, TypeError, KeyError) as exc:
        return f"key {kid!r}: invalid {kty} key ({exc})"
    if hasattr(key, "public_key"):  # a JWK carrying private parts: only its public half verifies
        key = key.public_key()
    if alg is not None:
        if alg not in allowed:
            return f"key {kid!r}: algorithm {alg!r} is not a signature algorithm of a {kty} key"
        allowed = frozenset({alg})
    return VerifyKey(kid, key, allowed)


def parse_jwks(document: str | bytes | Mapping[str, Any]) -> KeySet:
    """The signing keys of a JWKS document; :class:`JwksError` when none is usable.

    Keys for encryption (``use: enc``), keys without ``kid`` and keys of unsupported types are
    skipped (listed in ``KeySet.skipped``), so one odd key published by an IdP does not take
    the others down.
    """
    if isinstance(document, (str, bytes)):
        try:
            document = json.loads(document)
        except ValueError as exc:
            raise JwksError(f"JWKS is not valid JSON ({exc})") from None
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise JwksError("JWKS must be a JSON object with a \"keys\" list")
    keys: dict[str, VerifyKey] = {}
    skipped: list[str] = []
    for index, jwk in enumerate(document["keys"]):
        if not isinstance(jwk, Mapping):
            skipped.append(f"keys[{index}]: not an object")
            continue
        kid = jwk.get("kid")
        if not isinstance(kid, str) or not kid:
            skipped.append(f"keys[{index}]: no kid")
            continue
        if jwk.get("use", "sig") != "sig":
            skipped.append(f"key {kid!r}: use {jwk.get('use')!r} (only signing keys verify tokens)")
            continue
        if "verify" not in jwk.get("key_ops", ["verify"]):
            skipped.append(f"key {kid!r}: key_ops without verify")
            continue
        key = _key_of(jwk, kid)
        if isinstance(key, str):
            skipped.append(key)
        elif kid in keys:
            skipped.append(f"key {kid!r}: duplicate kid")
        else:
            keys[kid] = key
    if not keys:
        why = f" ({'; '.join(skipped)})" if skipped else ""
        raise JwksError(f"JWKS has no usable signing key{why}")
    return KeySet(keys, tuple(skipped))


def bearer_token(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """The token of the first ``Authorization: Bearer`` header, or None."""
    for name, value in headers:
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            if scheme.lower() == b"bearer":
                token = token.strip()
                if token:
                    return token.decode("latin-1")
    return None


class KeyHolder:
    """The current key set of one provider: fixed for ``file``/inline, replaced by the JWKS cache for a URL."""

    __slots__ = ("keys",)

    def __init__(self, keys: KeySet = EMPTY_KEYSET) -> None:
        self.keys = keys


class _Provider:
    __slots__ = ("audiences", "holder", "issuer")

    def __init__(self, issuer: str, audiences: tuple[str, ...], holder: KeyHolder) -> None:
        self.issuer = issuer
        self.audiences = frozenset(audiences)
        self.holder = holder


class VerifiedCache:
    """Verified tokens → (claims, key, exp, nbf), until ``exp``; bounded, dropped whole when full."""

    def __init__(self, max_entries: int = 10_000) -> None:
        self.max_entries = max_entries
        self.entries: dict[str, tuple[dict[str, Any], VerifyKey, float, float]] = {}

    def get(self, token: str) -> tuple[dict[str, Any], VerifyKey, float, float] | None:
        return self.entries.get(token)

    def put(self, token: str, claims: dict[str, Any], key: VerifyKey, exp: float, nbf: float, now: float) -> None:
        if len(self.entries) >= self.max_entries:
            self.entries = {t: e for t, e in self.entries.items() if now <= e[2] + LEEWAY_SECONDS}
            if len(self.entries) >= self.max_entries:
                self.entries.clear()
        self.entries[token] = (claims, key, exp, nbf)

    def discard(self, token: str) -> None:
        self.entries.pop(token, None)


def _number(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


class JwtVerifier:
    """Verifies a bearer token against a policy's providers (pure: no I/O, time passed in)."""

    def __init__(self, providers: Sequence[tuple[ProviderSpec, KeyHolder]], *,
                 max_token_bytes: int = MAX_TOKEN_BYTES, cache: VerifiedCache | None = None) -> None:
        self.providers = tuple(_Provider(spec.issuer, spec.audiences, holder) for spec, holder in providers)
        self.max_token_bytes = max_token_bytes
        self.cache = cache if cache is not None else VerifiedCache()

    def _find(self, kid: str) -> tuple[_Provider, VerifyKey] | None:
        for provider in self.providers:
            key = provider.holder.keys.get(kid)
            if key is not None:
                return provider, key
        return None

    def verify(self, token: str, now: float) -> dict[str, Any]:
        """The claims of a valid token; :class:`JwtFailure` (or :class:`UnknownKey`) otherwise."""
        if len(token) > self.max_token_bytes:
            raise JwtFailure(f"token is too large ({len(token)} bytes, at most {self.max_token_bytes})", "size")
        hit = self.cache.get(token)
        if hit is not None:
            claims, key, exp, nbf = hit
            found = self._find(key.kid)
            if found is not None and found[1] is key:
                self._check_times(exp, nbf, now, claims, key.kid)
                return claims
            self.cache.discard(token)  # its key was rotated out: verify from scratch
        try:
            header = pyjwt.get_unverified_header(token)
        except pyjwt.PyJWTError:
            raise JwtFailure("token is malformed", detail="the token header is not readable") from None
        alg = header.get("alg")
        if not isinstance(alg, str) or alg.lower() == "none":
            raise JwtFailure(f"token algorithm {json.dumps(alg)} is not allowed", "alg", alg=alg)
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise JwtFailure("token header does not specify a key id (kid)", "kid")
        found = self._find(kid)
        if found is None:
            raise UnknownKey(kid)
        provider, key = found
        if alg not in key.algorithms:
            raise JwtFailure(f"token algorithm {json.dumps(alg)} is not allowed for key {json.dumps(kid)}", "alg",
                             alg=alg, kid=kid, allowed=sorted(key.algorithms))
        try:
            claims = pyjwt.decode(token, key.key, algorithms=[alg], options={
                "verify_exp": False, "verify_nbf": False, "verify_iat": False, "verify_aud": False,
                "verify_iss": False})
        except pyjwt.InvalidSignatureError:
            raise JwtFailure("token signature is invalid", "signature", kid=kid,
                             detail=f"the signature does not verify with key {json.dumps(kid)}") from None
        except pyjwt.PyJWTError:
            raise JwtFailure("token is malformed", kid=kid, detail="the token payload is not readable") from None
        if not isinstance(claims, dict):
            raise JwtFailure("token is malformed", kid=kid, detail="the token payload is not a JSON object")
        if claims.get("iss") != provider.issuer:
            raise JwtFailure("token has the wrong issuer", "iss", kid=kid, issuer=claims.get("iss"),
                             expected=provider.issuer,
                             detail=f"issuer {json.dumps(claims.get('iss'))}, expected {json.dumps(provider.issuer)}")
        if provider.audiences:
            aud = claims.get("aud")
            auds = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not any(isinstance(a, str) and a in provider.audiences for a in auds):
                expected = sorted(provider.audiences)
                raise JwtFailure("token has the wrong audience", "aud", kid=kid, issuer=provider.issuer, audience=aud,
                                 expected=expected,
                                 detail=f"audience {json.dumps(aud)}, expected one of {json.dumps(expected)}")
        expiry = _number(claims, "exp")
        if expiry is None:
            raise JwtFailure("token has no valid expiry (exp)", "exp", kid=kid, issuer=provider.issuer)
        nbf_claim = _number(claims, "nbf")
        if "nbf" in claims and nbf_claim is None:
            raise JwtFailure("token has an invalid nbf claim", "nbf", kid=kid, issuer=provider.issuer)
        nbf = nbf_claim if nbf_claim is not None else -math.inf
        self._check_times(expiry, nbf, now, claims, kid)
        self.cache.put(token, claims, key, expiry, nbf, now)
        return claims

    @staticmethod
    def _check_times(exp: float, nbf: float, now: float, claims: Mapping[str, Any], kid: str | None = None) -> None:
        if now > exp + LEEWAY_SECONDS:
            raise JwtFailure("token has expired", "exp", kid=kid, issuer=claims.get("iss"),
                             detail=f"expired {duration_text(now - exp)} ago")
        if now < nbf - LEEWAY_SECONDS:
            raise JwtFailure("token is not yet valid", "nbf", kid=kid, issuer=claims.get("iss"),
                             detail=f"valid in {duration_text(nbf - now)}")
