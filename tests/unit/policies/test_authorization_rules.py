"""Authorization details mutation testing found unguarded: the rule a decision names (the
first matching one of its kind, none when no single rule decided) and the stage's trace event."""

from __future__ import annotations

import pytest

from tests.unit.policies.test_authorization import activation, spec
from tests.unit.proxy.test_header_stages import RecordingTracer
from trioproxy.errors import AuthorizationDenied
from trioproxy.policies.authorization import decide
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.stages import AuthorizationStage


@pytest.mark.parametrize(("rules", "claims", "rule"), [
    ((("deny", "jwt.a == 1"), ("deny", "jwt.b == 1")), {"a": 2, "b": 1}, "jwt.b == 1"),
    ((("require", "jwt.a == 1"), ("require", "jwt.b == 1")), {"a": 1, "b": 2}, "jwt.b == 1"),
    ((("allow", "jwt.a == 1"), ("allow", "jwt.b == 1")), {"a": 2, "b": 1}, "jwt.b == 1"),
    ((("allow", "jwt.a == 1"), ("allow", "jwt.b == 1")), {"a": 1, "b": 1}, "jwt.a == 1"),
    ((("allow", "jwt.a == 1"),), {"a": 2}, None),
    ((("deny", "jwt.a == 1"), ("require", "jwt.b == 1")), {"a": 2, "b": 1}, None),
    ((), {}, None),
])
def test_the_decision_names_the_rule_that_decided(rules, claims, rule):
    assert decide(spec(*rules), activation(**claims)).rule == rule


def test_rules_are_sorted_by_mode_in_order():
    policy = spec(("allow", "true"), ("deny", "false"), ("require", "true"), ("deny", "jwt.x == 1"))
    assert [e.source for e in policy.deny] == ["false", "jwt.x == 1"]
    assert [e.source for e in policy.require] == ["true"] and [e.source for e in policy.allow] == ["true"]
    assert policy.any and not spec().any


def exchange(tracer):
    scope = {"type": "http", "method": "GET", "path": "/p", "query_string": b"", "headers": [(b"host", b"h")]}
    x = Exchange(scope, None, None, 0.0)  # type: ignore[arg-type]
    x.tracer = tracer
    return x


async def test_the_stage_traces_its_decision_and_denies_with_403():
    tracer = RecordingTracer()
    await AuthorizationStage(spec(("allow", 'request.path == "/p"'))).request(exchange(tracer))
    assert tracer.events == [("policy", {"severity": "info", "kind": "authorization", "result": "allowed",
                                         "reason": "allow rule matched", "rule": 'request.path == "/p"'})]
    tracer = RecordingTracer()
    with pytest.raises(AuthorizationDenied) as denied:
        await AuthorizationStage(spec(("allow", 'request.path == "/q"'))).request(exchange(tracer))
    assert denied.value.status == 403 and denied.value.message == "authorization failed"
    assert tracer.events == [("policy", {"severity": "warn", "kind": "authorization", "result": "denied",
                                         "reason": "no allow rule matched", "rule": None})]
