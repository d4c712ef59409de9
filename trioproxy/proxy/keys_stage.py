"""Runtime keys on the request path (docs/keys.md): the model check and the budget reserved before
the upstream call, and the settlement after it.

The ``apiKey`` stage (stages.py) authenticates a runtime key and leaves its ``Principal`` in
``x.principal``. Once the body is known (its model, its size, its ``max_tokens``), ``admit``
refuses a model outside the key's ``models`` (403, in the client's dialect) and reserves the
request's estimate against every limited window of the key and its team (429 ``budget exceeded``
with when it resets). ``settle`` runs once at the end of every admitted request, whatever its end
(answered, refused upstream, timed out, client gone): the real usage replaces the estimate. It
does no I/O: the service batches settlements (keys/service.py).

The estimate: prompt bytes ÷ 3 (a generous count of tokens for any tokenizer: English runs about
4 bytes a token) plus the completion the request allows (``max_tokens`` and its dialects'
spellings) or ``config.keys.defaultMaxTokens``; priced by the model's catalog entry when there is
one. A request therefore holds its worst case while it runs, so N concurrent requests against a
nearly spent budget overspend by at most one request's real usage beyond its estimate.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ..errors import KeyStoreUnavailable, ModelNotAllowed
from ..keys.metrics import KeysMetrics
from ..llm.pricing import PriceCatalog
from ..redaction import REDACTED

if TYPE_CHECKING:
    from ..keys.service import KeyService
    from .exchange import Exchange

__all__ = ["PAYLOAD_LIMIT", "admit", "cost_estimate", "estimate_tokens", "payload_text", "requested_model", "settle"]

#: the completion-size fields of each dialect: OpenAI chat (old and new), Responses, Anthropic; Gemini's
#: is under ``generationConfig``
_MAX_FIELDS = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def cost_estimate(prices: PriceCatalog, provider: str | None, model: str | None, prompt: int,
                  completion: int) -> float | None:
    """The estimate's price: its prompt at the input price, its completion at the output price
    (the dearest case: no cache discount); None for a model without a price (its cost budget is
    then charged only what the answer's usage costs, which is nothing)."""
    price = prices.price(provider, model)
    if price is None:
        return None
    return (prompt * price.input + completion * price.output) / 1_000_000


#: the longest body text the request log keeps, per body
PAYLOAD_LIMIT = 16 * 1024
#: JSON member names whose values the request log never keeps (``max_tokens`` is not one: plural)
_SECRET_NAME = re.compile(r"(?i)^(?:.*[_-])?(?:api[_-]?key|authorization|password|passwd|secret|token|"
                          r"cookie|credentials?|private[_-]?key)$")
#: the same members written in text that is not one JSON document (an event stream)
_SECRET_MEMBER = re.compile(r'"((?:[^"\\]*[_-])?(?:api[_-]?key|authorization|password|passwd|secret|token|cookie|'
                            r'credentials?|private[_-]?key))"(\s*:\s*)"(?:[^"\\]|\\.)*"', re.IGNORECASE)


def _redacted(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: REDACTED if isinstance(k, str) and _SECRET_NAME.match(k) else _redacted(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def payload_text(body: bytes, truncated: bool = False) -> str:
    """A body as the request log keeps it: credential-named JSON members redacted, cut at
    ``PAYLOAD_LIMIT`` characters (``...[truncated]`` says so)."""
    try:
        text = json.dumps(_redacted(json.loads(body)), ensure_ascii=False, separators=(",", ":"))
    except (ValueError, UnicodeDecodeError):  # an event stream, a cut body, not JSON at all
        text = _SECRET_MEMBER.sub(lambda m: f'"{m.group(1)}"{m.group(2)}"{REDACTED}"',
                                  body.decode("utf-8", "replace"))
    if truncated or len(text) > PAYLOAD_LIMIT:
        return text[:PAYLOAD_LIMIT] + "...[truncated]"
    return text


def _payloads(payloads: dict[str, Any] | None) -> dict[str, str]:
    if not payloads:
        return {}
    out = {}
    if "request" in payloads:
        out["request"] = payload_text(payloads["request"])
    capture = payloads.get("response")
    if capture is not None:
        out["response"] = payload_text(b"".join(capture.parts), capture.truncated)
    return out


def _body_object(body: bytes | None) -> dict[str, Any] | None:
    if not body:
        return None
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


def requested_model(obj: dict[str, Any] | None, fallback: str | None) -> str | None:
    """The model the client asked for: the body's ``model``, else the one in the path (Gemini)."""
    model = obj.get("model") if obj is not None else None
    return model if isinstance(model, str) and model else fallback


def _max_tokens(obj: dict[str, Any]) -> int | None:
    for name in _MAX_FIELDS:
        value = obj.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    config = obj.get("generationConfig")
    if isinstance(config, dict):
        value = config.get("maxOutputTokens")
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def estimate_tokens(body: bytes | None, obj: dict[str, Any] | None, default_max_tokens: int) -> tuple[int, int]:
    """(prompt, completion) tokens a request may use at most, by the rule in the module docstring."""
    prompt = -(-len(body or b"") // 3)
    completion = _max_tokens(obj) if obj is not None else None
    return prompt, default_max_tokens if completion is None else completion


async def admit(x: Exchange, service: KeyService, body: bytes | None, *, provider: str | None,
                provider_model: str | None, path_model: str | None, prices: PriceCatalog | None,
                default_max_tokens: int, fail_open: bool) -> None:
    """The model check and the reservation of one keyed request (no-op without a runtime key).

    ``body`` is the client's (None: not an LLM request); the model checked is the one the client
    asked for (the body's, else ``path_model``), the one priced is the provider's
    (``provider_model``, else the asked one)."""
    principal = x.principal
    if principal is None or x.reservation is not None:  # a failover's next attempt: reserved once
        return
    if x.payloads is not None and body is not None:
        x.payloads["request"] = body
    tr = x.tracer
    obj = _body_object(body) if body is not None else None
    asked = requested_model(obj, path_model)
    if asked is not None and not principal.key.allows_model(asked):
        tr.event("policy", severity="warn", kind="keys", result="denied", reason=f"model '{asked}' not allowed")
        raise ModelNotAllowed(asked, principal.key.name or principal.key.id)
    if body is None:  # not an LLM request: the request counts, no tokens
        prompt = completion = 0
    else:
        prompt, completion = estimate_tokens(body, obj, default_max_tokens)
    cost = cost_estimate(prices, provider, provider_model or asked, prompt, completion) \
        if prices is not None and body is not None else None
    try:
        x.reservation = await service.reserve(principal, tokens=prompt + completion, cost=cost)
    except KeyStoreUnavailable:
        if not fail_open:
            raise
        tr.event("policy", severity="warn", kind="keys", result="unmetered",
                 reason="key store unavailable (failureMode: open)")
        return
    if tr:
        tr.event("policy", kind="keys", result="reserved", key=principal.key.id,
                 tokens=prompt + completion, cost=cost)


def settle(x: Exchange, service: KeyService, status: int, duration: float, metrics: KeysMetrics | None = None) -> None:
    """The admitted request's real usage (0 when it never reached a provider) replacing its estimate,
    charged to the provider and model that answered."""
    reservation = x.reservation
    if reservation is None:
        return
    x.reservation = None  # once
    usage = x.usage
    llm = x.llm or {}
    tokens = getattr(usage, "total_tokens", None) or 0
    cost = llm.get("cost") or 0.0
    model = llm.get("responseModel") or llm.get("model")
    service.settle(reservation, tokens=tokens, cost=cost, model=model, provider=llm.get("provider"), status=status,
                   input_tokens=getattr(usage, "prompt_tokens", None),
                   output_tokens=getattr(usage, "completion_tokens", None),
                   log={"latency_ms": round(duration * 1000, 3), **_payloads(x.payloads)})
    if metrics is not None:
        key = reservation.principal.key
        team = reservation.principal.team
        metrics.settled(key.name, team.name if team is not None else "", model or "", tokens, cost)
