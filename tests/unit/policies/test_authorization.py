"""Authorization rules: agentgateway's deny → require → allow decision, on CEL over JWT claims."""

from __future__ import annotations

import pytest

from trioproxy.cel import build_activation
from trioproxy.policies.authorization import (
    AuthorizationPolicy,
    AuthorizationSpec,
    Rule,
    decide,
)


def spec(*rules):
    return AuthorizationPolicy(AuthorizationSpec(tuple(Rule(mode, src) for mode, src in rules)))


def activation(**claims):
    return build_activation(method="GET", path="/x", host="h", headers=[], source_address="10.0.0.7",
                            jwt=claims or None)


@pytest.mark.parametrize("rules, claims, allowed, reason", [
    ((), {}, True, "no rules"),
    ((("allow", 'jwt.group == "eng"'),), {"group": "eng"}, True, "allow rule matched"),
    ((("allow", 'jwt.group == "eng"'),), {"group": "ops"}, False, "no allow rule matched"),
    ((("allow", 'jwt.group == "eng"'),), {}, False, "no allow rule matched"),  # no JWT: evaluation error = false
    ((("allow", 'jwt.group == "eng"'), ("allow", 'jwt.sub == "bob"')), {"group": "x", "sub": "bob"}, True,
     "allow rule matched"),
    ((("deny", 'jwt.sub == "mallory"'),), {"sub": "alice"}, True, "no deny rule matched and every require rule held"),
    ((("deny", 'jwt.sub == "mallory"'),), {"sub": "mallory"}, False, "deny rule matched"),
    ((("deny", 'jwt.sub == "mallory"'), ("allow", "true")), {"sub": "mallory"}, False, "deny rule matched"),
    ((("require", 'has(jwt.sub)'), ("allow", 'jwt.group == "eng"')), {"group": "eng"}, False, "require rule not met"),
    ((("require", 'has(jwt.sub)'), ("allow", 'jwt.group == "eng"')), {"group": "eng", "sub": "a"}, True,
     "allow rule matched"),
    ((("require", 'has(jwt.sub)'),), {"sub": "a"}, True, "no deny rule matched and every require rule held"),
    ((("deny", 'jwt.missing == "x"'),), {"sub": "a"}, True, "no deny rule matched and every require rule held"),
    ((("allow", 'source.address == "10.0.0.7"'),), {}, True, "allow rule matched"),
    ((("allow", '"admins" in jwt.groups'),), {"groups": ["users", "admins"]}, True, "allow rule matched"),
])
def test_decision(rules, claims, allowed, reason):
    decision = decide(spec(*rules), activation(**claims))
    assert (decision.allowed, decision.reason) == (allowed, reason)


def test_the_deciding_rule_is_named():
    decision = decide(spec(("deny", 'jwt.sub == "mallory"')), activation(sub="mallory"))
    assert decision.rule == 'jwt.sub == "mallory"'


@pytest.mark.parametrize("source, address, allowed", [
    ('cidr("10.0.0.0/8").containsIP(source.address)', "10.0.0.7", True),
    ('cidr("10.0.0.0/8").containsIP(source.address)', "192.168.1.1", False),
    ('cidr("10.0.0.0/8").containsIP(source.address)', "::ffff:10.1.1.1", True),
    ('cidr("fd00::/8").containsIP(source.address)', "fd00::1", True),
    ('cidr("not-a-net").containsIP(source.address)', "10.0.0.7", False),
])
def test_cidr_extension(source, address, allowed):
    policy = spec(("allow", source))
    act = build_activation(method="GET", path="/", host="h", headers=[], source_address=address)
    assert decide(policy, act).allowed is allowed
