"""Path normalisation (trioproxy/frontend/paths.py): the bypass forms of issue 16 row 2 all become /admin."""

import posixpath
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trioproxy.frontend.paths import PathError, normalize_path, remove_dot_segments


@pytest.mark.parametrize("target", [
    "/admin", "/x/../admin", "/./admin", "//admin", "http://x/admin", "https://x:8080//admin",
    "/x/%2e%2e/admin", "/x/%2E./admin", "/a/b/../../admin", "/../admin", "/../../admin",
    "///./admin", "/admin/.",
])
def test_bypass_forms_normalise_to_admin(target: str) -> None:
    assert normalize_path(target).rstrip("/") == "/admin"


@pytest.mark.parametrize("target, expected", [
    ("/", "/"), ("/a/b/", "/a/b/"), ("/a/./b", "/a/b"), ("/a/b/..", "/a/"), ("/a/b/.", "/a/b/"),
    ("http://x", "/"), ("/a%20b", "/a%20b"), ("/v1/chat/completions", "/v1/chat/completions"),
    ("/a/..b/c", "/a/..b/c"), ("/a/.b", "/a/.b"),
])
def test_examples(target: str, expected: str) -> None:
    assert normalize_path(target) == expected


@pytest.mark.parametrize("target", [
    "admin", "*", "", "/a%2fadmin", "/a%5Cb", "/a\\b", "/a%zz", "/a%2", "/a\x00b", "/a b", "/a\tb",
    "http:/x", "x://y?z",
])
def test_refused(target: str) -> None:
    with pytest.raises(PathError):
        normalize_path(target)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", ".", "..", "", "%2e", "c.d"]), max_size=8))
def test_result_has_no_dot_segments_or_empty_runs_and_agrees_with_posixpath(parts: list[str]) -> None:
    path = normalize_path("/" + "/".join(parts))
    segments = path.split("/")[1:-1]
    assert "." not in segments and ".." not in segments and "" not in segments
    joined = re.sub("/+", "/", "/" + "/".join(p.replace("%2e", ".") for p in parts))
    assert (path.rstrip("/") or "/") == posixpath.normpath(joined)


def test_remove_dot_segments_rfc_examples() -> None:
    assert remove_dot_segments("/a/b/c/./../../g") == "/a/g"
    assert remove_dot_segments("/mid/content=5/../6") == "/mid/6"


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="/.%2eEfF5cC\\ \x00\x7fab:?é", max_size=12))
def test_the_already_normal_shortcut_agrees_with_the_full_normalisation(target: str) -> None:
    from trioproxy.frontend.paths import _normalize

    try:
        expected: str | type[PathError] = _normalize(target)
    except PathError:
        expected = PathError
    try:
        got: str | type[PathError] = normalize_path(target)
    except PathError:
        got = PathError
    assert got == expected
