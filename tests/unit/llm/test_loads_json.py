"""``usage.loads_json``: ``json.loads`` on bytes without its encoding detection for UTF-8, and the
same result (value or error) as ``json.loads`` for every input, whatever its encoding."""

from __future__ import annotations

import codecs
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trioproxy.llm.usage import loads_json

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _outcome(load: Any, data: bytes) -> tuple[str, Any]:
    try:
        return "value", load(data)
    except (ValueError, UnicodeDecodeError) as error:
        return "error", type(error).__name__


@given(JSON, st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le",
                              "utf-32-be"]), st.booleans())
def test_any_json_in_any_encoding_loads_as_json_loads_loads_it(value, encoding, ascii_only):
    data = json.dumps(value, ensure_ascii=ascii_only).encode(encoding)
    assert _outcome(loads_json, data) == _outcome(json.loads, data)


@given(st.binary(max_size=24))
def test_any_bytes_load_or_fail_as_json_loads(data):
    assert _outcome(loads_json, data) == _outcome(json.loads, data)


@pytest.mark.parametrize("data", [
    b"", b" ", b"{", b"{}", b"[1, 2]", b'"\xed\xa0\x80"',  # a lone surrogate, which json.loads lets through
    codecs.BOM_UTF8 + b"{}", b"\xef", b"\x00{", b"{\x00", b'{"a": 1} x', b'  {"a": "\xc3\xa9"}  ',
])
def test_the_edges_of_the_detection(data):
    assert _outcome(loads_json, data) == _outcome(json.loads, data)
