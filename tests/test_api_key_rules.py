"""apiKey details mutation testing found unguarded: a query key with ``=`` in its value (base64
padding) is removed before proxying, and the cookies left after the key keep their separator."""

from __future__ import annotations

from trioproxy.exchange import Exchange
from trioproxy.policies.api_key import ApiKeySpec, ApiKeyStage, CredentialLocation, key_digest

from .test_header_stages_mutants import RecordingTracer

KEY = "c2VjcmV0LWtleQ=="  # base64, padded


def exchange(query: bytes = b"", headers: list[tuple[bytes, bytes]] | None = None) -> Exchange:
    scope = {"type": "http", "method": "GET", "path": "/p", "query_string": query,
             "headers": [(b"host", b"h"), *(headers or [])]}
    x = Exchange(scope, None, None, 0.0)  # type: ignore[arg-type]
    x.tracer = RecordingTracer()  # type: ignore[assignment]
    return x


def stage(location: CredentialLocation) -> ApiKeyStage:
    return ApiKeyStage(ApiKeySpec(((key_digest(KEY), (("team", "a"),)),), "strict", location))


async def test_a_query_key_with_padding_is_read_and_removed():
    x = exchange(b"a=1&api_key=" + KEY.encode() + b"&b=x=y")
    await stage(CredentialLocation("queryParameter", "api_key")).request(x)
    assert x.api_key == {"team": "a", "key": "<redacted>"}
    assert x.scope["query_string"] == b"a=1&b=x=y"


async def test_the_cookies_left_keep_their_separator():
    x = exchange(headers=[(b"cookie", f"a=1; session={KEY}; b=2".encode())])
    await stage(CredentialLocation("cookie", "session")).request(x)
    assert x.api_key is not None
    assert x.headers == [(b"host", b"h"), (b"cookie", b"a=1; b=2")]
