"""``basicAuth``: users and passwords from an htpasswd file, as agentgateway's ``http/basicauth.rs``.

Hashes: bcrypt (``$2y$``, ``$2b$``, ``$2a$``; what ``htpasswd -B`` writes), Apache's MD5
(``$apr1$``, ``htpasswd -m``) and SHA-1 (``{SHA}``, ``htpasswd -s``); the config is refused for
any other (crypt, plain text). bcrypt is slow by design (its cost factor is chosen so), so it
runs in a worker thread, never on the event loop, at most ``BCRYPT_THREADS`` at once; a user whose
password verified is remembered for ``CACHE_SECONDS`` (by a digest of user and password, never the
password) so a client sending the same credentials on every request pays it once.

Wrong passwords are a CPU lever (issue 27: ~25 a second kept both cores busy, and a real user's
first login waited 2.6 s behind 64 attackers): at most ``BCRYPT_QUEUE`` more checks may wait for
a thread; past that a request gets ``503 basic authentication busy`` with ``retry-after: 1`` at
once. An unknown user is checked against a dummy bcrypt hash of the users' own cost, so it costs
and takes what a known user with a wrong password does (an unknown one answered in 1.2 ms, a known
one in 93 ms: the user list could be read off the timing).

Modes: ``strict`` needs valid credentials; ``optional`` (the default) lets requests without
credentials pass and rejects wrong ones. Failures are ``401 basic authentication failure: no basic
authentication credentials found`` / ``invalid credentials``, with ``WWW-Authenticate: Basic
realm="<realm>"`` (``Restricted`` by default). The user is CEL's ``basicAuth.username``; the
credentials are removed from the request once they verified.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from typing import Literal

import attrs
import bcrypt
from attrs import frozen

from .api_key import CredentialLocation

__all__ = ["BCRYPT_PREFIXES", "BasicAuthSpec", "HtpasswdError", "apr1", "credentials_of", "dummy_hash", "parse_htpasswd",
           "verify_password"]

CACHE_SECONDS = 300.0
CACHE_SIZE = 10_000
BCRYPT_THREADS = 2
BCRYPT_QUEUE = 8  # checks that may wait for one of the threads; past it: 503 at once
BCRYPT_PREFIXES = ("$2y$", "$2b$", "$2a$")


class HtpasswdError(ValueError):
    pass


def parse_htpasswd(text: str) -> tuple[tuple[str, str], ...]:
    """``user:hash`` lines (blank lines and ``#`` comments skipped); HtpasswdError names the line."""
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, hashed = line.partition(":")
        if not sep or not user or not hashed:
            raise HtpasswdError(f"line {number}: expected user:hash")
        if not (hashed.startswith((*BCRYPT_PREFIXES, "$apr1$", "{SHA}"))):
            raise HtpasswdError(f"line {number}: user {user!r} has an unsupported hash "
                                "(supported: bcrypt $2y$, $apr1$, {SHA}; htpasswd -B writes bcrypt)")
        if user in users:
            raise HtpasswdError(f"line {number}: user {user!r} is listed twice")
        users[user] = hashed
    return tuple(users.items())


_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def apr1(password: bytes, salt: bytes) -> str:
    """Apache's MD5-crypt (``$apr1$<salt>$<hash>``)."""
    salt = salt[:8]
    final = hashlib.md5(password + salt + password).digest()
    ctx = password + b"$apr1$" + salt
    for length in range(len(password), 0, -16):
        ctx += final[:min(16, length)]
    i = len(password)
    while i:
        ctx += b"\x00" if i & 1 else password[:1]
        i >>= 1
    final = hashlib.md5(ctx).digest()
    for i in range(1000):
        round_ = (password if i & 1 else final) + (salt if i % 3 else b"") + (password if i % 7 else b"")
        final = hashlib.md5(round_ + (final if i & 1 else password)).digest()

    def to64(value: int, n: int) -> str:
        out = ""
        for _ in range(n):
            out += _ITOA64[value & 0x3F]
            value >>= 6
        return out

    f = final
    encoded = "".join(to64((f[a] << 16) | (f[b] << 8) | f[c], 4)
                      for a, b, c in ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5))) + to64(f[11], 2)
    return f"$apr1${salt.decode('latin-1')}${encoded}"


def verify_password(hashed: str, password: bytes) -> bool:
    """Does ``password`` match an htpasswd hash (bcrypt: slow, call it from a thread)."""
    if hashed.startswith(BCRYPT_PREFIXES):
        try:
            return bcrypt.checkpw(password, hashed.encode())  # bcrypt reads $2y$ (htpasswd's) as $2b$
        except ValueError:  # a malformed bcrypt hash matches nothing
            return False
    if hashed.startswith("$apr1$"):
        salt = hashed[6:].split("$", 1)[0].encode("latin-1")
        return hmac.compare_digest(apr1(password, salt), hashed)
    if hashed.startswith("{SHA}"):
        return hmac.compare_digest(base64.b64encode(hashlib.sha1(password).digest()).decode(), hashed[5:])
    return False


def credentials_of(encoded: str) -> tuple[str, bytes] | None:
    try:
        decoded = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    try:
        return user.decode(), password
    except UnicodeDecodeError:
        return None


@frozen
class BasicAuthSpec:
    users: tuple[tuple[str, str], ...] = attrs.field(metadata={"secret": True})  # (user, htpasswd hash)
    realm: str = "Restricted"
    mode: Literal["strict", "optional"] = "optional"
    location: CredentialLocation = CredentialLocation("header", "authorization", "Basic ")


def dummy_hash(users: tuple[tuple[str, str], ...]) -> str:
    """A well-formed hash nothing matches, of the first user's kind and bcrypt cost (an unknown user
    costs what a wrong password does); a fixed salt and digest: checking computes, never matches."""
    hashed = users[0][1] if users else "{SHA}"
    if hashed.startswith(BCRYPT_PREFIXES):
        return hashed[:7] + "." * 53  # $2y$NN$ + 22 salt + 31 digest characters
    if hashed.startswith("$apr1$"):
        return "$apr1$........$" + "." * 22
    return "{SHA}" + "." * 28
