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

from ..cel import compile_expression

__all__ = ["AuthorizationDecision", "AuthorizationPolicy", "AuthorizationSpec", "Rule", "decide"]

RuleMode = Literal["allow", "deny", "require"]


@frozen
class Rule:
    mode: RuleMode
    expression: str             # CEL source (checked when the config is read)


@frozen
class AuthorizationSpec:
    rules: tuple[Rule, ...]


class AuthorizationPolicy:
    """A spec with its expressions compiled once, per mode, in rule order."""

    def __init__(self, spec: AuthorizationSpec) -> None:
        self.spec = spec
        compiled = [(rule.mode, compile_expression(rule.expression)) for rule in spec.rules]
        self.deny = tuple(e for mode, e in compiled if mode == "deny")
        self.require = tuple(e for mode, e in compiled if mode == "require")
        self.allow = tuple(e for mode, e in compiled if mode == "allow")
        self.any = bool(compiled)


@frozen
class AuthorizationDecision:
    allowed: bool
    reason: str                 # why, for traces: "deny rule matched: <expr>", "no allow rule matched"...
    rule: str | None = None     # the deciding rule's source, when one rule decided


def decide(policy: AuthorizationPolicy, activation: Mapping[str, Any]) -> AuthorizationDecision:
    """Apply the rules to one request's CEL activation (pure)."""
    if not policy.any:
        return AuthorizationDecision(True, "no rules")
    for expression in policy.deny:
        if expression.matches(activation):
            return AuthorizationDecision(False, "deny rule matched", expression.source)
    for expression in policy.require:
        if not expression.matches(activation):
            return AuthorizationDecision(False, "require rule not met", expression.source)
    for expression in policy.allow:
        if expression.matches(activation):
            return AuthorizationDecision(True, "allow rule matched", expression.source)
    if policy.allow:
        return AuthorizationDecision(False, "no allow rule matched")
    return AuthorizationDecision(True, "no deny rule matched and every require rule held")
