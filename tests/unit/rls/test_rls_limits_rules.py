"""envoyproxy/ratelimit's config format (``rls/limits.py``): the rules mutation testing found
unguarded: wildcard values (their prefix, their key, their order), ``unlimited``, the fields a
descriptor may have, duplicates, the type of ``requests_per_unit``, and where errors point."""

from __future__ import annotations

import re

import pytest

from trioproxy.rls.limits import Limit, LimitsError, load_limits, parse_limits


def limits(descriptors: str, domain: str = "gw"):
    return parse_limits(f"domain: {domain}\ndescriptors:\n{descriptors}", "rls.yaml")


WILD = """\
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 1, name: api}
  - key: path
    value: /api/v*
    rate_limit: {unit: minute, requests_per_unit: 2, name: v}
  - key: any
    value: "*"
    rate_limit: {unit: minute, requests_per_unit: 3, name: all}
"""


def test_a_wildcard_value_matches_its_prefix_for_its_own_key_only():
    c = limits(WILD)
    assert c.find([("path", "/api/")]).name == "api"   # the prefix itself
    assert c.find([("path", "/api/x")]).name == "api"
    assert c.find([("path", "/api/v2")]).name == "api"  # the first wildcard in file order wins
    assert c.find([("path", "/api")]) is None
    assert c.find([("path", "/ap")]) is None
    assert c.find([("other", "/api/x")]) is None        # another key with a matching value
    assert c.find([("any", "")]).name == "all" and c.find([("any", "whatever")]).name == "all"
    assert c.find([("path", "x"), ("any", "y")]) is None


def test_an_exact_value_beats_a_wildcard_which_beats_any_value():
    c = limits("""\
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1, name: any}
  - key: k
    value: a*
    rate_limit: {unit: second, requests_per_unit: 1, name: wild}
  - key: k
    value: ab
    rate_limit: {unit: second, requests_per_unit: 1, name: exact}
""")
    assert [c.find([("k", v)]).name for v in ("ab", "abc", "b")] == ["exact", "wild", "any"]
    assert c.find([]) is None


def test_unlimited_needs_no_unit_or_count_and_keeps_its_name_and_shadow_mode():
    c = limits("""\
  - key: vip
    shadow_mode: true
    rate_limit: {unlimited: true, name: vips}
  - key: free
    rate_limit: {unlimited: true, unit: bogus, requests_per_unit: -5}
  - key: capped
    rate_limit: {unlimited: false, unit: hour, requests_per_unit: 0}
""")
    assert c.find([("vip", "x")]) == Limit(0, "second", "vips", unlimited=True, shadow_mode=True)
    assert c.find([("free", "x")]) == Limit(0, "second", "", unlimited=True, shadow_mode=False)
    assert c.find([("capped", "x")]) == Limit(0, "hour", "", unlimited=False, shadow_mode=False)
    with pytest.raises(LimitsError, match=re.escape("descriptors[0].rate_limit.unit: must be one of")):
        limits("  - key: a\n    rate_limit: {unlimited: false}\n")


def test_units_and_their_seconds():
    c = limits("  - key: a\n    rate_limit: {unit: MINUTE, requests_per_unit: 7}\n")
    assert c.find([("a", "x")]) == Limit(7, "minute", "", False, False)
    assert [Limit(1, u).seconds for u in ("second", "minute", "hour", "day")] == [1, 60, 3600, 86400]


def test_detailed_metric_is_accepted_and_unknown_fields_are_named():
    assert limits("  - key: a\n    detailed_metric: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
    with pytest.raises(LimitsError, match=re.escape("rls.yaml: descriptors[0]: unknown field 'aa'")):
        limits("  - key: a\n    zz: 1\n    aa: 2\n")


def test_duplicates_are_errors_naming_the_place():
    with pytest.raises(LimitsError, match=re.escape("rls.yaml: descriptors[1]: duplicate descriptor k=v")):
        limits("  - {key: k, value: v}\n  - {key: k, value: v}\n")
    with pytest.raises(LimitsError, match=re.escape("rls.yaml: descriptors[1]: duplicate descriptor 'k'")):
        limits("  - {key: k}\n  - {key: k}\n")
    c = limits("  - {key: k, value: v}\n  - {key: k}\n  - {key: j, value: v}\n  - {key: k, value: w}\n")
    assert c.root.exact.keys() == {("k", "v"), ("j", "v"), ("k", "w")} and c.root.any_value.keys() == {"k"}


@pytest.mark.parametrize("count", ["1.5", "true", "'3'", "null", "[]"])
def test_requests_per_unit_must_be_an_integer(count):
    with pytest.raises(LimitsError, match=re.escape(
            "rls.yaml: descriptors[0].rate_limit.requests_per_unit: must be a non-negative integer")):
        limits(f"  - key: a\n    rate_limit: {{unit: second, requests_per_unit: {count}}}\n")


def test_an_integer_value_is_its_text_and_other_values_are_errors():
    c = limits("  - key: code\n    value: 5\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
    assert c.find([("code", "5")]).requests_per_unit == 1
    with pytest.raises(LimitsError, match=re.escape("rls.yaml: descriptors[0].value: must be a string")):
        limits("  - key: code\n    value: 1.5\n")


@pytest.mark.parametrize(("text", "message"), [
    ("domain: ''\ndescriptors: []", "rls.yaml: domain: required, a non-empty string"),
    ("domain: 5\ndescriptors: []", "rls.yaml: domain: required, a non-empty string"),
    ("domain: gw\ndescriptors: [{key: ''}]", "rls.yaml: descriptors[0].key: required, a non-empty string"),
    ("domain: gw\ndescriptors: [{key: 5}]", "rls.yaml: descriptors[0].key: required, a non-empty string"),
    ("domain: gw\ndescriptors: {key: a}", "rls.yaml: descriptors: descriptors must be a list"),
    ("domain: gw\ndescriptors: [a]", "rls.yaml: descriptors[0]: a descriptor must be a mapping"),
    ("domain: gw\ndescriptors: [{key: a, rate_limit: 5}]", "rls.yaml: descriptors[0].rate_limit: must be a mapping"),
    ("domain: gw\ndescriptors: [{key: a, rate_limit: {unit: week, requests_per_unit: 1}}]",
     "rls.yaml: descriptors[0].rate_limit.unit: must be one of second, minute, hour, day (got 'week')"),
    ("domain: gw\ndescriptors: [{key: u, descriptors: [{key: p, value: /x, descriptors: [{value: 1}]}]}]",
     "rls.yaml: descriptors[0](u).descriptors[0](p=/x).descriptors[0].key: required"),
    ("- a list", "rls.yaml: must be a mapping with 'domain' and 'descriptors'"),
    ("domain: gw\ndescriptors: [\n  {key: a,\n", "rls.yaml:4: not valid YAML"),
])
def test_errors_name_the_place(text, message):
    with pytest.raises(LimitsError) as error:
        parse_limits(text, "rls.yaml")
    assert str(error.value).startswith(message), str(error.value)


def test_no_descriptors_is_an_empty_tree_and_the_default_source_is_config():
    c = parse_limits("domain: gw")
    assert c.domain == "gw" and c.find([("a", "b")]) is None
    with pytest.raises(LimitsError, match="^config: domain: required"):
        parse_limits("descriptors: []")


def test_load_limits_reads_a_file_and_names_a_missing_one(tmp_path):
    path = tmp_path / "rls.yaml"
    path.write_text("domain: gw\ndescriptors: [{key: a, rate_limit: {unit: second, requests_per_unit: 2}}]\n")
    assert load_limits(str(path)).find([("a", "x")]).requests_per_unit == 2
    with pytest.raises(LimitsError, match=re.escape(f"{tmp_path}/nope.yaml: No such file or directory")):
        load_limits(str(tmp_path / "nope.yaml"))
    path.write_text("domain: [\n")
    with pytest.raises(LimitsError, match=re.escape(f"{path}:2: not valid YAML")):
        load_limits(str(path))


def test_shadow_mode_reaches_a_counted_limit():
    c = limits("  - key: a\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
    assert c.find([("a", "x")]) == Limit(1, "second", "", False, True)


def test_a_yaml_error_without_a_position_names_only_the_source():
    with pytest.raises(LimitsError) as error:
        parse_limits("domain: \x01", "rls.yaml")
    assert str(error.value) == "rls.yaml: not valid YAML"
