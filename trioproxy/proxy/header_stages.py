"""The header policies as stages: ``requestHeaderModifier``, ``responseHeaderModifier``,
``backendAuth`` and ``directResponse`` (the pure header shaping is in ``headers.py``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..asgi import Header
from ..cel import compile_expression
from ..errors import DirectResponse
from ..policies.direct_response import ConditionalDirectResponse, DirectResponsePolicy
from ..policies.headers import HeaderModifier, apply_modifier
from ..telemetry.trace import activation
from .stage import Stage

if TYPE_CHECKING:
    from .exchange import Exchange


class RequestHeaderModifierStage(Stage):
    kind = "requestHeaderModifier"
    __slots__ = ("modifier",)

    def __init__(self, modifier: HeaderModifier) -> None:
        self.modifier = modifier

    async def request(self, x: Exchange) -> None:
        x.headers = apply_modifier(x.headers, self.modifier)
        x.tracer.snapshot("requestHeaderModifier", x)


class ResponseHeaderModifierStage(Stage):
    """Response side only: no request hook, so the request path never calls it."""

    kind = "responseHeaderModifier"
    __slots__ = ("modifier",)

    def __init__(self, modifier: HeaderModifier) -> None:
        self.modifier = modifier

    def response_headers(self, x: Exchange, headers: list[Header]) -> list[Header]:
        return apply_modifier(headers, self.modifier)


class BackendAuthStage(Stage):
    """The backend's credential replaces whatever ``authorization`` the client sent."""

    kind = "backendAuth"
    __slots__ = ("header",)

    def __init__(self, key: str) -> None:
        self.header = (b"authorization", b"Bearer " + key.encode())

    async def request(self, x: Exchange) -> None:
        x.headers = [h for h in x.headers if h[0] != b"authorization"] + [self.header]
        x.tracer.snapshot("backendAuth", x)


class DirectResponseStage(Stage):
    """Answers in the backend's place (last in the route phase: every check ran before).

    With ``conditional`` entries the first whose CEL condition is true answers (an entry without
    one always does); when none does, the request goes on to the backend."""

    kind = "directResponse"
    __slots__ = ("entries", "policy")

    def __init__(self, policy: DirectResponsePolicy | ConditionalDirectResponse) -> None:
        self.policy = policy
        given = policy.entries if isinstance(policy, ConditionalDirectResponse) else (policy,)
        self.entries = tuple((compile_expression(e.condition) if e.condition is not None else None, e) for e in given)

    async def request(self, x: Exchange) -> None:
        bindings = activation(x) if any(condition is not None for condition, _ in self.entries) else {}
        for condition, entry in self.entries:
            if condition is None or condition.matches(bindings):
                if x.tracer.active:
                    x.tracer.event("policy", kind="directResponse", result="responded", status=entry.status,
                                   condition=entry.condition)
                raise DirectResponse(entry.status, entry.body)
        if x.tracer.active:
            x.tracer.event("policy", kind="directResponse", result="no condition matched")
