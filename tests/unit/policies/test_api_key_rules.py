"""apiKey details mutation testing found unguarded: a query key with ``=`` in its value (base64
padding) is removed before proxying, and the cookies left after the key keep their separator."""

from __future__ import annotations

from tests.unit.proxy.test_header_stages import RecordingTracer
from trioproxy.policies.api_key import ApiKeySpec, CredentialLocation, key_digest
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.stages import ApiKeyStage

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


def test_cookie_pieces_are_read_leniently_in_place():
    """Every ``;``-separated piece of every Cookie header, in order: names and values trimmed,
    quotes taken off a quoted value, pieces without ``=`` or a name kept aside (name None)."""
    from trioproxy.policies.api_key import cookie_pairs

    x = exchange(headers=[(b"cookie", b' a = 1 ;junk;; =v; q="x y"; e=; "=\'; s="'),
                          (b"x-other", b"k=v"), (b"cookie", b"b=2=3")])
    assert cookie_pairs(x) == [("a", "1", "a = 1"), (None, "", "junk"), (None, "v", "=v"),
                                ("q", "x y", 'q="x y"'), ("e", "", "e="), ('"', "'", "\"='"),
                                ("s", '"', 's="'), ("b", "2=3", "b=2=3")]


def test_cookie_key_is_the_first_non_empty_value_of_its_name_and_removal_keeps_the_rest_as_sent():
    location = CredentialLocation(kind="cookie", name="key")
    x = exchange(headers=[(b"cookie", b'junk; key=; key="K1"; other=1'), (b"cookie", b"key=K2;x")])
    assert location.extract(x) == "K1"
    location.remove(x)
    assert x.headers == [(b"host", b"h"), (b"cookie", b"junk; other=1; x")]
    only = exchange(headers=[(b"cookie", b"key=K")])
    location.remove(only)
    assert only.headers == [(b"host", b"h")]
