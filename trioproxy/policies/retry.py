"""``retry``: which failed backend calls are tried again (agentgateway's ``RetryPolicy``).

The stage only marks the request (``x.retry``), at agentgateway's place in the order (after
authorization, before rate limits): the attempts themselves wrap the upstream call in
``gateway.py``. The rules, as agentgateway's ``httpproxy.rs``:

- ``attempts`` counts the calls *after* the first (agentgateway's schema says "total", its proxy
  makes ``attempts + 1`` calls; trioproxy does what agentgateway does);
- a response whose status is in ``codes`` is retried, and so are the calls that failed to
  produce one (connect failure, a broken answer, ``backendRequestTimeout``);
- only a body that can be replayed: empty, an LLM body (buffered anyway), or one declared by
  ``content-length`` up to ``MAX_RETRY_BODY`` (buffered for it); a chunked or larger body is
  streamed and the request is not retried;
- the decision is made on the response head, so no byte has reached the client yet;
- ``backoff`` waits between attempts; ``requestTimeout`` caps every attempt and wait together;
- each retried attempt carries ``x-retry-attempt: N`` upstream and is a ``retry`` trace event.
"""

from __future__ import annotations

from attrs import frozen

from ..errors import BackendUnreachable, BadUpstreamResponse, ProxyError, UpstreamTimeout
from .resilience import DEFAULT_RETRY_BUDGET, RetryBudget

__all__ = ["MAX_RETRY_BODY", "RetrySpec", "retryable_error", "retryable_status"]

#: largest request body buffered so that it can be sent again (agentgateway's 64 KiB)
MAX_RETRY_BODY = 64 * 1024


@frozen
class RetrySpec:
    attempts: int                 # calls after the first
    codes: tuple[int, ...]  # sorted
    backoff: float | None = None  # seconds between attempts
    max_backoff: float | None = None  # set: exponential waits with full jitter, capped here (policies/resilience)
    budget: RetryBudget = DEFAULT_RETRY_BUDGET


def retryable_status(spec: RetrySpec, status: int) -> bool:
    return status in spec.codes


def retryable_error(error: ProxyError) -> bool:
    """A call that produced no response: agentgateway's ``is_retryable``."""
    return isinstance(error, (BackendUnreachable, BadUpstreamResponse, UpstreamTimeout))
