"""``rls/limits.py`` edges mutation testing found unguarded (issue 35): a middle wildcard piece
found only inside the suffix, or found again before the previous piece's end, must not match; a
config directory that cannot be listed or holds no domain file is named in the error."""

from __future__ import annotations

import errno
import os

import pytest

from trioproxy.rls import limits
from trioproxy.rls.limits import LimitsError, load_domains, wildcard_match


@pytest.mark.parametrize(("pattern", "value", "matches"), [
    ("a*b*b", "aXb", False),  # the only "b" is the suffix: the middle piece may not reuse it
    ("a*b*b", "aXbb", True),
    ("a*b*b*c", "aXXbYYc", False),  # one "b" between the ends: the second must come after the first
    ("a*b*b*c", "aXXbYbc", True),
])
def test_middle_pieces_are_found_in_order_between_prefix_and_suffix(pattern, value, matches):
    assert wildcard_match(tuple(pattern.split("*")), value) is matches


def test_a_directory_that_cannot_be_listed_is_named(tmp_path, monkeypatch):
    def refuse(path):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    monkeypatch.setattr(limits.os, "listdir", refuse)
    with pytest.raises(LimitsError) as raised:
        load_domains(str(tmp_path))
    assert str(raised.value) == f"{tmp_path}: Permission denied"


def test_a_directory_without_domain_files_is_named(tmp_path):
    (tmp_path / "notes.txt").write_text("not a domain")
    with pytest.raises(LimitsError) as raised:
        load_domains(str(tmp_path))
    assert str(raised.value) == f"{tmp_path}: a config directory needs at least one *.yaml or *.yml file (one per domain)"
