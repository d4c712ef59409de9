"""Claim-based authorization (``authorization: {rules: [...]}``), agentgateway's semantics.

A rule is a CEL expression (a plain string is an ``allow`` rule) or ``{allow|deny|require: <CEL>}``.
The decision (``http/authorization.rs``):

1. no rules at all: allowed;
2. any ``deny`` rule true: denied (deny wins);
3. any ``require`` rule not true: denied (all must hold);
4. any ``allow`` rule true: allowed;
5. otherwise allowed only when there are no ``allow`` rules (a deny-list), denied when there are
   (an allow-list nobody matched).

A rule whose evaluation fails (a missing claim, a type error) counts as not true. So ``deny``
rules fail open on errors, as agentgateway warns: prefer ``allow``/``require``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from attrs import frozen

from ..cel import Expression

__all__ = ["AuthorizationDecision", "AuthorizationSpec", "Rule", "decide"]

RuleMode = Literal["allow", "deny", "require"]


@frozen
class Rule:
    mode: RuleMode
    expression: Expression


@frozen
class AuthorizationSpec:
    rules: tuple[Rule, ...]


@frozen
class AuthorizationDecision:
    allowed: bool
    reason: str                 # why, for traces: "deny rule matched: <expr>", "no allow rule matched"...
    rule: str | None = None     # the deciding rule's source, when one rule decided


def decide(spec: AuthorizationSpec, activation: Mapping[str, Any]) -> AuthorizationDecision:
    """Apply the rules to one request's CEL activation (pure)."""
    rules = spec.rules
    if not rules:
        return AuthorizationDecision(True, "no rules")
    for rule in rules:
        if rule.mode == "deny" and rule.expression.matches(activation):
            return AuthorizationDecision(False, "deny rule matched", rule.expression.source)
    for rule in rules:
        if rule.mode == "require" and not rule.expression.matches(activation):
            return AuthorizationDecision(False, "require rule not met", rule.expression.source)
    has_allow = False
    for rule in rules:
        if rule.mode == "allow":
            has_allow = True
            if rule.expression.matches(activation):
                return AuthorizationDecision(True, "allow rule matched", rule.expression.source)
    if has_allow:
        return AuthorizationDecision(False, "no allow rule matched")
    return AuthorizationDecision(True, "no deny rule matched and every require rule held")
