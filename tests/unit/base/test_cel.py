"""trioproxy.cel: compiling, evaluating and the request activation (no timing asserts)."""

from __future__ import annotations

import pytest

from trioproxy.cel import (
    ALLOWED_ROOTS,
    MAX_EXPRESSION_LENGTH,
    CelError,
    CelEvaluationError,
    Expression,
    build_activation,
    compile_expression,
)

HEADERS = [
    (b"host", b"api.example.com"),
    (b"user-agent", b"curl/8.5.0"),
    (b"x-trace-id", b"abc"),
    (b"accept", b"*/*"),
    (b"x-multi", b"one"),
    (b"x-multi", b"two"),
]


def activation(**overrides):
    kwargs = dict(
        method="POST",
        path="/v1/chat/completions?stream=1",
        host="api.example.com",
        headers=HEADERS,
        source_address="127.0.0.1",
        source_port=53422,
        jwt={"sub": "alice", "group": "admins", "roles": ["a", "b"], "nested": {"key": "value"}},
        llm={"model": "my-model", "provider": "openai"},
    )
    kwargs.update(overrides)
    return build_activation(**kwargs)


@pytest.fixture
def act():
    return activation()


@pytest.fixture
def other():
    """A GET from elsewhere without trace id, JWT or llm data."""
    return activation(
        method="GET",
        path="/v2/models",
        host="localhost",
        headers=[(b"host", b"localhost")],
        source_address="10.0.0.7",
        jwt=None,
        llm=None,
    )


TYPICAL = [
    'request.headers["x-trace-id"] == "abc"',
    'request.path.startsWith("/v1") && request.method == "POST"',
    'jwt.group == "admins"',
    'source.address == "127.0.0.1"',
    '"x-trace-id" in request.headers',
    'request.path.endsWith("/completions")',
    'request.host.contains("example")',
    'request.path.matches("^/v[0-9]+/chat")',
    'has(jwt.group)',
    'has(llm.model) && llm.model == "my-model"',
]


@pytest.mark.parametrize("source", TYPICAL)
def test_typical_expressions_true(source, act):
    expr = compile_expression(source)
    assert expr.evaluate(act) is True
    assert expr.matches(act) is True


@pytest.mark.parametrize("source", TYPICAL)
def test_typical_expressions_false_on_other_request(source, other):
    expr = compile_expression(source)
    assert expr.matches(other) is False


def test_in_on_map_false_for_absent_header(act):
    assert compile_expression('"x-user" in request.headers').evaluate(act) is False


def test_llm_model_value(act, other):
    expr = compile_expression("llm.model")
    assert expr.evaluate(act) == "my-model"
    assert expr.evaluate(other) is None  # no llm data: missing key, no exception
    assert expr.matches(act) is False  # a string is not a match


def test_missing_header_key_does_not_raise(act):
    expr = compile_expression('request.headers["x-missing"] == "abc"')
    assert expr.evaluate(act) is None
    assert expr.matches(act) is False
    with pytest.raises(CelEvaluationError, match="no such key: x-missing"):
        expr.evaluate_strict(act)


def test_missing_jwt_claim_is_not_a_match_and_has_is_false(other):
    assert compile_expression('jwt.group == "admins"').matches(other) is False
    assert compile_expression("has(jwt.sub)").evaluate(other) is False
    assert compile_expression("has(request.headers.foo)").evaluate(other) is False


def test_missing_key_absorbed_by_or(act):
    # CEL's commutative error handling: `error || true` is true.
    expr = compile_expression('request.headers["x-missing"] == "a" || request.method == "POST"')
    assert expr.matches(act) is True


def test_absent_optional_roots_are_empty_maps(act):
    assert "response" not in act and "backend" not in act
    assert compile_expression("has(response.code)").evaluate(act) is False
    expr = compile_expression("response.code >= 500")
    assert expr.matches(act) is False
    assert expr.matches(activation(response={"code": 503, "headers": {}})) is True
    assert compile_expression('backend.name == "b"').matches(activation(backend={"name": "b"})) is True


def test_nested_claims_and_lists(act):
    assert compile_expression('jwt.nested.key == "value"').matches(act)
    assert compile_expression('"b" in jwt.roles').matches(act)
    assert compile_expression('jwt.roles.exists(r, r == "a")').matches(act)


@pytest.mark.parametrize(
    "source",
    ['request.path + "x"', "source.port", "1", '"true"', "null", "request.headers", "jwt.roles"],
)
def test_non_bool_results_never_match(source, act):
    expr = compile_expression(source)
    assert expr.evaluate(act) is not True
    assert expr.matches(act) is False


def test_evaluation_errors_become_none_or_false(act):
    for source in ['request.path.matches("(")', "1 / 0", 'request.method == "POST" && 1 / 0 == 1']:
        expr = compile_expression(source)
        assert expr.evaluate(act) is None
        assert expr.matches(act) is False
        with pytest.raises(CelEvaluationError):
            expr.evaluate_strict(act)


def test_unknown_function_is_an_evaluation_error_not_an_exception(act):
    expr = compile_expression("request.path.noSuchFunction()")
    assert expr.matches(act) is False
    with pytest.raises(CelEvaluationError, match="noSuchFunction"):
        expr.evaluate_strict(act)


@pytest.mark.parametrize(
    "source",
    ['request.path.startsWith("/v1"', "1 +", 'request.headers["a" == "b"', "a ==== b", '"unterminated'],
)
def test_syntax_error_message(source):
    with pytest.raises(CelError) as info:
        compile_expression(source)
    err = info.value
    message = str(err)
    assert message.startswith("syntax error")
    assert "\n" not in message  # fits `400 invalid expression: <message>`
    assert "line 1, column" in message
    assert err.line == 1 and err.column >= 1
    assert err.source == source
    assert isinstance(err, ValueError)


def test_syntax_error_points_at_the_problem():
    with pytest.raises(CelError) as info:
        compile_expression("request.method == ")
    assert info.value.column == len("request.method == ") + 1
    assert "mismatched input '<EOF>'" in str(info.value)


@pytest.mark.parametrize("source", ["", "   ", None, 42])
def test_empty_or_non_string(source):
    with pytest.raises(CelError):
        compile_expression(source)


def test_unknown_variable():
    with pytest.raises(CelError) as info:
        compile_expression('foo == "bar"')
    message = str(info.value)
    assert message.startswith("unknown variable 'foo'")
    for root in ALLOWED_ROOTS:
        assert root in message


def test_unknown_variables_are_all_named():
    with pytest.raises(CelError, match=r"unknown variables 'headers', 'method'"):
        compile_expression('method == "GET" && headers["a"] == "b"')


def test_typo_in_root_is_rejected():
    with pytest.raises(CelError, match="'requests'"):
        compile_expression('requests.path == "/"')


@pytest.mark.parametrize(
    "source",
    [
        'request.headers.exists(k, k.startsWith("x-"))',
        "[1, 2, 3].map(x, x * 2).size() == 3",
        "[1, 2].all(n, n > 0)",
        "type(request.path) == string",
        "dyn(source.port) > 0",
    ],
)
def test_comprehension_variables_and_type_names_are_allowed(source, act):
    assert compile_expression(source).matches(act) is True


def test_too_long_expression_is_refused():
    source = "1" + "+1" * MAX_EXPRESSION_LENGTH
    with pytest.raises(CelError, match="too long"):
        compile_expression(source)


def test_expression_keeps_source_and_roots():
    source = 'request.method == "GET" && source.address == "::1"'
    expr = compile_expression(source)
    assert isinstance(expr, Expression)
    assert expr.source == source
    assert expr.roots == ("request", "source")
    assert expr == compile_expression(source)
    assert source in repr(expr)


def test_field_trimming_keeps_whole_root_when_used_as_value(act):
    # `request` used bare or with a receiver call: the whole map must reach the engine.
    assert compile_expression('size(request) >= 8').matches(act)
    assert compile_expression('request.exists(k, k == "uri")').matches(act)
    assert compile_expression('jwt.all(k, k != "missing")').matches(act)
    assert compile_expression('request["method"] == "POST"').matches(act)
    assert compile_expression('has(request.uri) && !has(request.nope)').matches(act)


def test_plain_mapping_activation():
    expr = compile_expression('request.method == "GET" && jwt.sub == "bob"')
    assert expr.matches({"request": {"method": "GET"}, "jwt": {"sub": "bob"}}) is True
    assert expr.matches({}) is False


def test_build_activation_variables(act):
    request = act["request"]
    assert request["method"] == "POST"
    assert request["path"] == "/v1/chat/completions"
    assert request["pathAndQuery"] == "/v1/chat/completions?stream=1"
    assert request["host"] == "api.example.com"
    assert request["scheme"] == "http"
    assert request["uri"] == "http://api.example.com/v1/chat/completions?stream=1"
    assert request["headers"]["x-trace-id"] == "abc"
    assert request["headers"]["x-multi"] == "one,two"
    assert all(isinstance(v, str) for v in request["headers"].values())
    assert act["source"] == {"address": "127.0.0.1", "port": 53422}
    assert act["jwt"]["group"] == "admins"
    assert act["llm"]["model"] == "my-model"


def test_build_activation_defaults_and_header_case():
    act = build_activation(method="GET", path="/", host="h:3000", headers=[(b"X-Upper", b"V")], scheme="https")
    assert act["jwt"] == {} and act["llm"] == {}
    assert act["source"] == {"address": "", "port": 0}
    assert act["request"]["headers"] == {"x-upper": "V"}
    assert act["request"]["uri"] == "https://h:3000/"
    assert compile_expression('request.headers["x-upper"] == "V"').matches(act)
    assert compile_expression('request.scheme == "https"').matches(act)


def test_non_ascii_header_bytes_do_not_fail():
    act = build_activation(method="GET", path="/", host="h", headers=[(b"x-bin", b"\xff\xfe")])
    assert compile_expression('"x-bin" in request.headers').matches(act)


def test_headers_as_generator_and_repeated_join_order():
    pairs = ((n, v) for n, v in [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")])
    act = build_activation(method="GET", path="/", host="h", headers=pairs)
    assert act["request"]["headers"] == {"a": "1,3", "b": "2"}
    assert compile_expression('request.headers.a == "1,3"').matches(act)


def test_cel_error_is_value_error_for_config_messages():
    try:
        compile_expression("jwt.sub ==")
    except ValueError as exc:  # config loaders catch ValueError and prefix the path
        line = f"binds[0].listeners[0].routes[0].policies.authorization.rules[0]: {exc}"
    assert line.endswith("at line 1, column 11")
