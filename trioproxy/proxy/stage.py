"""The Stage interface: one policy kind, compiled once per listener, route or backend.

A phase (``gateway`` = listener, ``route``, ``backend``) is a ``Phase``: its stages in the one
fixed order of ``stages.STAGE_ORDER``, split at compile time by the hooks they override, so a
stage without a response or finish hook costs nothing there, and an unconfigured policy kind is
simply absent (docs/pipeline.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..asgi import Header

if TYPE_CHECKING:
    from .exchange import Exchange


class Stage:
    """One policy kind of one listener, route or backend.

    ``request`` may raise a ``ProxyError`` (401/403/429/500...), which ends the request with
    that answer. The optional hooks are detected at compile time (see ``Phase``):
    ``response_headers`` shapes the upstream response's headers (return a new list), and
    ``finish`` runs after the response body has been sent (token charges), also for a request
    cancelled by its client leaving; it is a plain function, so it cannot make the client wait,
    nor the connection's next keep-alive request, nor be cancelled half-way: anything that waits
    (a remote limiter's call) goes to ``after_response.AFTER_RESPONSE.spawn``.
    """

    kind: str = ""

    async def request(self, x: Exchange) -> None:
        return None

    def response_headers(self, x: Exchange, headers: list[Header]) -> list[Header]:
        return headers

    def finish(self, x: Exchange) -> None:
        return None


S = TypeVar("S")


class SpecStage(Stage, Generic[S]):
    """A stage whose whole state is its frozen spec (``self.spec``)."""

    __slots__ = ("spec",)

    def __init__(self, spec: S) -> None:
        self.spec = spec


def _overrides(stage: Any, hook: str) -> bool:
    own = getattr(type(stage), hook, None)
    return own is not None and own is not getattr(Stage, hook)


class Phase:
    """The stages of one listener, route or backend, grouped by hook once when compiled."""

    __slots__ = ("finish", "name", "policies", "request", "response", "stages")

    def __init__(self, name: str, policies: Any, stages: tuple[Stage, ...]) -> None:
        self.name = name  # "gateway", "route" or "backend" (the trace's policySelection phase)
        self.policies = policies  # what the trace's policySelection shows
        self.stages = stages
        self.request = tuple(s for s in stages if _overrides(s, "request"))
        self.response = tuple(s for s in stages if _overrides(s, "response_headers"))
        self.finish = tuple(s for s in stages if _overrides(s, "finish"))

    def __repr__(self) -> str:
        return f"<Phase {self.name}: {' → '.join(s.kind for s in self.stages) or 'empty'}>"
