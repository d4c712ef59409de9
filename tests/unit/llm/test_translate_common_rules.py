"""``llm/translate/common.py`` in-process (issue 35): compact UTF-8 JSON out, the body refusals in the
client's dialect, ``Fields.take``'s bool rule for a tuple of kinds, ``done`` checking every key left."""

from __future__ import annotations

import pytest

from trioproxy.llm.translate.common import Fields, dumps, parse_json
from trioproxy.llm.translate.errors import TranslationError


def test_dumps_is_compact_utf8():
    assert dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'.encode()


@pytest.mark.parametrize(("body", "what"), [
    (b"{", "a body that is not JSON"), (b"\xff\xfe\xfd", "a body that is not JSON"),
    (b"[1]", "a JSON body that is not an object"),
])
def test_a_body_that_is_not_a_json_object_is_refused_as_the_body(body, what):
    with pytest.raises(TranslationError) as raised:
        parse_json(body, "gemini", "anthropic")
    error = raised.value
    assert (error.field, error.provider, error.dialect) == ("body", "gemini", "anthropic")
    assert error.text == f"body: {what} cannot be translated to gemini"
    assert parse_json(b'{"a": 1}', "gemini", "anthropic") == {"a": 1}


def test_take_refuses_a_bool_unless_bool_is_one_of_the_kinds():
    f = Fields({"flag": True}, "", "p", "openai")
    assert f.take("flag", (bool, str)) is True and f.take("flag", bool) is True
    for kind in ((int, float), int):
        with pytest.raises(TranslationError) as raised:
            f.take("flag", kind)
        assert raised.value.text == "flag: a bool cannot be translated to p"


def test_done_checks_every_key_left_after_a_neutral_one():
    f = Fields({"a": None, "b": 0, "c": 1}, "", "p", "openai")
    with pytest.raises(TranslationError) as raised:
        f.done({"b": (0,)})
    assert raised.value.text == "c: the field 'c' cannot be translated to p"
