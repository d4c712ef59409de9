"""The rules of ``mcp/session.py`` one by one (issue 35): the key a supervisor hands its workers, the
id's exact format (base64url JSON without padding, a canonical payload), and what a signed but
unexpected payload decodes to."""

from __future__ import annotations

import base64
import json

import pytest

from trioproxy.mcp.session import SESSION_KEY_ENV, SessionCodec, inherited_key

KEY = bytes(range(32))


@pytest.mark.parametrize("value, key", [
    (None, None),                   # not a worker of a supervisor
    ("", None),
    ("zz" * 32, None),              # not hex
    (KEY.hex(), KEY),
    (KEY.hex()[:-2], None),         # 31 bytes
    (KEY.hex() + "00", None),       # 33 bytes
])
def test_inherited_key_is_32_bytes_of_hex_or_nothing(monkeypatch, value, key):
    assert SESSION_KEY_ENV == "TRIOPROXY_MCP_SESSION_KEY"
    if value is None:
        monkeypatch.delenv(SESSION_KEY_ENV, raising=False)
    else:
        monkeypatch.setenv(SESSION_KEY_ENV, value)
    assert inherited_key() == key


def test_a_random_key_is_32_bytes():
    assert len(SessionCodec().key) == 32
    assert SessionCodec(b"").key == b""  # a given key is used as is, even an empty one


def unpadded(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def test_the_id_is_a_canonical_payload_and_its_hmac_both_base64url_without_padding():
    import hashlib
    import hmac
    codec = SessionCodec(KEY)
    sid = codec.encode({"text": (None, "2025-03-26"), "math": ("abc", "2025-06-18")})
    payload = unpadded(b'{"t":{"math":["abc","2025-06-18"],"text":[null,"2025-03-26"]},"v":1}')
    assert sid == f"{payload}.{unpadded(hmac.new(KEY, payload.encode(), hashlib.sha256).digest())}"
    # the same sessions in another order are the same id (every worker signs the same bytes)
    assert codec.encode({"math": ("abc", "2025-06-18"), "text": (None, "2025-03-26")}) == sid


def test_ids_of_every_length_round_trip_without_padding():
    codec = SessionCodec(KEY)
    for n in range(40):  # payload and mac lengths of every residue mod 4 and 5
        sessions = {"t": ("x" * n, "v")}
        sid = codec.encode(sessions)
        assert "=" not in sid
        assert codec.decode(sid) == sessions, n


def signed(codec: SessionCodec, data: object) -> str:
    payload = unpadded(json.dumps(data).encode())
    return f"{payload}.{codec._mac(payload)}"


def test_a_signed_payload_of_an_unexpected_shape():
    codec = SessionCodec(KEY)
    # a session id that is not a string is no session; names and versions are read as text
    assert codec.decode(signed(codec, {"v": 1, "t": {"a": [5, "v"], "1": ["s", 2]}})) == {"a": (None, "v"), "1": ("s", "2")}
    # refused, not raised: a "t" that is a list or text once crashed decode with AttributeError (a 500)
    for data in ({"v": 1}, {"v": 1, "t": {"a": ["s"]}}, {"v": 1, "t": {"a": 3}}, [1], {"v": 2, "t": ["a"]}, {"t": "ab"}):
        assert codec.decode(signed(codec, data)) is None, data
    payload = unpadded(b"not json")
    assert codec.decode(f"{payload}.{codec._mac(payload)}") is None
