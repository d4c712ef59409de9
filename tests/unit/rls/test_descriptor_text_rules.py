"""``rls/descriptor_text.bounded`` exactly (issue 35): the hash is SHA-256 of the UTF-8 bytes, and a
long text holding a lone surrogate (what a non-UTF-8 byte decodes to) is hashed, not an error."""

from __future__ import annotations

import hashlib

from trioproxy.rls.descriptor_text import MAX_DESCRIPTOR_TEXT, bounded


def test_the_hash_is_sha256_of_the_utf8_bytes():
    text = "é" * (MAX_DESCRIPTOR_TEXT + 1)
    assert bounded(text) == "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_a_lone_surrogate_is_hashed_with_its_surrogatepass_bytes():
    text = "x" * MAX_DESCRIPTOR_TEXT + "\udcff"
    assert bounded(text) == "sha256:" + hashlib.sha256(b"x" * MAX_DESCRIPTOR_TEXT + b"\xed\xb3\xbf").hexdigest()
