"""Whatever the input, the loader answers with a Config or a ConfigError of one-line problems.

Random YAML documents built from the description's own field names (so they get deep), random
edits of the bundled examples, and raw text. Bounded: a few hundred examples, a deadline each.
"""

from __future__ import annotations

import io

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from ruamel.yaml import YAML

from tests.conftest import ROOT
from trioproxy.config import Config, ConfigError, parse_config
from trioproxy.config import document as d
from trioproxy.config.describe import plan_of

EXAMPLES = [p.read_text() for p in sorted((ROOT / "fixtures" / "configs").glob("*.yaml"))]
FIELD_NAMES = sorted({f.wire for cls in vars(d).values() if isinstance(cls, type) and hasattr(cls, "__describe_one_of__")
                      for f in plan_of(cls).fields})
ENV = {"PORT": "3000", "HOST": "127.0.0.1", "EMPTY": ""}
FUZZ = settings(max_examples=100, deadline=2000, suppress_health_check=[HealthCheck.too_slow],
                derandomize=True, database=None)

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.sampled_from(["", "off", "no", "1.10", "0o17", "1s", "500ms", "1h", "127.0.0.1:8080", "[::1]:1", "a:0",
                     "$PORT", "${HOST}:1", "$MISSING", "$$", "/v1", "(", "GET", "requests", "tokens", "HTTP",
                     "*.example.com", "x-a", "bad\nvalue"]),
    st.text(max_size=12),
)
keys = st.one_of(st.sampled_from(FIELD_NAMES), st.text(max_size=8))
documents = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)), max_leaves=40)


def check(text: str) -> None:
    try:
        result = parse_config(text, env=ENV)
    except ConfigError as error:
        assert error.problems
        for line in error.problems:
            assert line and "\n" not in line, line
    else:
        assert isinstance(result, Config)


def dump(value) -> str:
    out = io.StringIO()
    YAML(typ="safe", pure=True).dump(value, out)
    return out.getvalue()


@FUZZ
@given(st.fixed_dictionaries({}, optional={"binds": st.lists(documents, max_size=3), "config": documents})
       | documents)
def test_random_documents(value):
    check(dump(value))


@FUZZ
@given(st.sampled_from(EXAMPLES), st.lists(st.tuples(
    st.sampled_from(["delete", "insert", "duplicate", "indent"]), st.integers(0, 10_000), st.integers(0, 40),
    st.text(alphabet=":-[]{}&*!|>'\"#%@` \n\t$abc01/", max_size=6)), min_size=1, max_size=4))
def test_random_edits_of_the_examples(text, edits):
    for op, at, size, insert in edits:
        at %= len(text) + 1
        if op == "delete":
            text = text[:at] + text[at + size:]
        elif op == "insert":
            text = text[:at] + insert + text[at:]
        elif op == "duplicate":
            text = text[:at] + text[at:at + size] + text[at:]
        else:
            lines = text.splitlines(keepends=True)
            i = at % max(len(lines), 1)
            text = "".join(lines[:i] + [" " * (size % 5) + line for line in lines[i:i + 1]] + lines[i + 1:])
    check(text)


@FUZZ
@given(st.text(max_size=200))
def test_random_text(text):
    check(text)
