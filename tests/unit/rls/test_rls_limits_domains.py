"""``rls/limits.py`` in-process: the domain directory, ``replaces`` and wildcards anywhere in a
value (envoyproxy/ratelimit's rules), so mutation testing sees them (the server tests run them in
a subprocess, which mutmut never reaches)."""

from __future__ import annotations

import re

import pytest

from trioproxy.rls.limits import (
    Limit,
    LimitsError,
    domain_files,
    load_domains,
    parse_domains,
    parse_limits,
    wildcard_match,
)


def domain_text(domain: str, n: int) -> str:
    return f"domain: {domain}\ndescriptors: [{{key: user, rate_limit: {{unit: day, requests_per_unit: {n}}}}}]\n"


@pytest.mark.parametrize(("pattern", "value", "matches"), [
    ("/v1/*", "/v1/", True), ("/v1/*", "/v1/a/b", True), ("/v1/*", "/v2/a", False),
    ("*.json", "a.json", True), ("*.json", ".json", True), ("*.json", "a.jsonx", False),
    ("/v*/items/*.json", "/v1/items/a.json", True), ("/v*/items/*.json", "/v1/items/a.xml", False),
    ("/v*/items/*.json", "/v1/things/a.json", False),
    ("a*b*c", "abc", True), ("a*b*c", "aXbYc", True), ("a*b*c", "acb", False), ("a*b*c", "ab", False),
    ("ab*ba", "aba", False),  # prefix and suffix may not overlap
    ("a*bb*c", "abbc", True), ("a*bb*bb*c", "abbc", False), ("a*bb*bb*c", "abbbbc", True),
    ("*", "", True), ("*", "anything", True), ("**", "x", True),
])
def test_a_wildcard_matches_as_upstream(pattern, value, matches):
    assert wildcard_match(tuple(pattern.split("*")), value) is matches


def test_replaces_is_parsed_onto_the_limit():
    config = parse_limits("domain: d\ndescriptors:\n- key: k\n  rate_limit: {unit: day, requests_per_unit: 1, "
                          "name: big, replaces: [{name: a}, {name: b}]}\n- key: j\n  rate_limit: "
                          "{unit: day, requests_per_unit: 2}\n", "rls.yaml")
    assert config.find([("k", "x")]) == Limit(1, "day", "big", replaces=("a", "b"))
    assert config.find([("j", "x")]) == Limit(2, "day")


@pytest.mark.parametrize(("replaces", "message"), [
    ("[{name: ''}]", "rls.yaml: descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry"),
    ("[other]", "rls.yaml: descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry"),
    ("[{name: 3}]", "rls.yaml: descriptors[0].rate_limit.replaces[0].name: should not have an empty replaces entry"),
    ("[{name: a}, {name: me}]",
     "rls.yaml: descriptors[0].rate_limit.replaces[1].name: replaces should not contain name of same descriptor"),
    ("me", "rls.yaml: descriptors[0].rate_limit.replaces: must be a list of {name: ...}"),
])
def test_bad_replaces_names_the_entry(replaces, message):
    text = f"domain: d\ndescriptors: [{{key: k, rate_limit: {{unit: day, requests_per_unit: 1, name: me, " \
           f"replaces: {replaces}}}}}]"
    with pytest.raises(LimitsError) as raised:
        parse_limits(text, "rls.yaml")
    assert str(raised.value) == message


def test_unlimited_keeps_its_name_shadow_mode_and_replaces():
    config = parse_limits("domain: d\ndescriptors: [{key: k, shadow_mode: true, rate_limit: "
                          "{unlimited: true, name: free, replaces: [{name: x}]}}]", "rls.yaml")
    assert config.find([("k", "v")]) == Limit(0, "second", "free", unlimited=True, shadow_mode=True, replaces=("x",))
    with pytest.raises(LimitsError, match=re.escape("descriptors[0].rate_limit.unit: should not specify")):
        parse_limits("domain: d\ndescriptors: [{key: k, rate_limit: {unlimited: true, unit: Day}}]", "rls.yaml")


def test_parse_domains_keeps_one_config_per_domain_and_names_a_duplicate():
    domains = parse_domains({"a.yaml": domain_text("alpha", 1).encode(), "b.yml": domain_text("beta", 5).encode()},
                            "dir")
    assert sorted(domains.by_name) == ["alpha", "beta"]
    assert domains.find("alpha").find([("user", "u")]).requests_per_unit == 1
    assert domains.find("beta").domain == "beta" and domains.find("gamma") is None
    with pytest.raises(LimitsError) as raised:
        parse_domains({"a.yaml": domain_text("alpha", 1).encode(), "b.yaml": domain_text("alpha", 2).encode()}, "d")
    assert str(raised.value) == "b.yaml: duplicate domain 'alpha' in config file (also in a.yaml)"
    with pytest.raises(LimitsError) as raised:
        parse_domains({}, "empty")
    assert str(raised.value) == "empty: a config directory needs at least one *.yaml or *.yml file (one per domain)"
    with pytest.raises(LimitsError) as raised:
        parse_domains({"bad.yaml": b"domain: \xff"}, "d")
    assert str(raised.value) == "bad.yaml: not UTF-8 text"
    with pytest.raises(LimitsError, match=r"^c\.yaml:1: not valid YAML"):
        parse_domains({"c.yaml": b"domain: ["}, "d")


def test_a_directory_reads_its_yaml_files_in_name_order(tmp_path):
    (tmp_path / "b.yml").write_text(domain_text("beta", 5))
    (tmp_path / "a.yaml").write_text(domain_text("alpha", 1))
    (tmp_path / ".hidden.yaml").write_text("not read")
    (tmp_path / "notes.txt").write_text("not read")
    (tmp_path / "sub.yaml").mkdir()  # a directory named like a file is not read
    assert domain_files(str(tmp_path)) == [str(tmp_path / "a.yaml"), str(tmp_path / "b.yml")]
    assert sorted(load_domains(str(tmp_path)).by_name) == ["alpha", "beta"]
    single = tmp_path / "a.yaml"
    assert domain_files(str(single)) == [str(single)]
    assert list(load_domains(str(single)).by_name) == ["alpha"]
    with pytest.raises(LimitsError) as raised:
        load_domains(str(tmp_path / "missing.yaml"))
    assert str(raised.value) == f"{tmp_path / 'missing.yaml'}: No such file or directory"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(LimitsError, match="needs at least one"):
        load_domains(str(empty))
