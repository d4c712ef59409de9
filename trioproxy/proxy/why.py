"""A request's ``why`` once it has ended (docs/history.md, "Why"): the reason its refusal carried
(``ProxyError.why``, set where the gateway refused), and, when it took more than one attempt, each
attempt's target and outcome. Built only for such requests: most requests have no ``why``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .exchange import Exchange

__all__ = ["attempts_why", "with_attempts"]


def attempts_why(attempts: list[str], outcomes: list[str] | None, last: str | None) -> list[dict[str, str]]:
    """``[{"backend", "outcome"}]`` per attempt, in order; an attempt with no recorded outcome (its
    call raised past the retry loop) shows ``last`` (the request's own error), else ``failed``."""
    known = outcomes or []
    return [{"backend": backend, "outcome": known[i] if i < len(known) else last or "failed"}
            for i, backend in enumerate(attempts)]


def with_attempts(x: Exchange) -> dict[str, Any]:
    """``x.why`` with ``attempts`` added (``x.attempts`` has more than one)."""
    assert x.attempts is not None
    why = dict(x.why) if x.why is not None else {}
    why["attempts"] = attempts_why(x.attempts, x.outcomes, x.error)
    if x.skipped:
        why["skipped"] = list(x.skipped)
    return why
