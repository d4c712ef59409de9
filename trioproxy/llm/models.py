"""The ``llm:`` format's dispatch: which model entry (and so which backend) takes a request.

A route compiled from ``llm.models`` lists ``LlmModelRoute`` entries, most specific first (the
count of non-``*`` characters, as agentgateway orders them). The request's JSON body is read
once (it is buffered for any LLM backend anyway), its ``model`` picks the entry, and the entry's
``transformation.model`` CEL (over ``llmRequest``, the parsed body) may rewrite the model sent
upstream. Errors are agentgateway's JSON answers: 404 ``model_not_found``, 400 ``missing_model``
or ``invalid_request_body``.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from ..cel import Expression, compile_expression
from ..config.model import Backend, LlmModelRoute
from ..errors import LlmRequestError

__all__ = ["model_list", "model_matches", "select_model", "transformed_model", "validate_pattern"]


def validate_pattern(pattern: str) -> str | None:
    """Why ``pattern`` is not a model name pattern (one ``*``, first or last), or None."""
    stars = pattern.count("*")
    if stars > 1:
        return f"model name wildcard may only appear once: {pattern!r}"
    if stars == 1 and pattern != "*" and not pattern.startswith("*") and not pattern.endswith("*"):
        return f"model name wildcard must be either at the beginning or the end: {pattern!r}"
    return None


def model_matches(pattern: str, model: str) -> bool:
    """``gpt-4o`` exactly, ``anthropic/*`` by prefix, ``*-mini`` by suffix, ``*`` any."""
    if pattern == "*":
        return True
    if pattern.endswith("*"):
        return model.startswith(pattern[:-1])
    if pattern.startswith("*"):
        return model.endswith(pattern[1:])
    return model == pattern


def specificity(pattern: str) -> int:
    return len(pattern) - pattern.count("*")


def select_model(models: tuple[LlmModelRoute, ...], body: bytes,
                 path_model: str | None = None) -> tuple[LlmModelRoute, dict[str, Any]]:
    """The entry for the body's model, and the parsed body; ``LlmRequestError`` otherwise.
    ``path_model``: the model a Gemini-native path names (``models/{model}:generateContent``; its body
    has none), set as the parsed body's ``model`` for the choice and ``transformation.model``."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        request = None
    if not isinstance(request, dict):
        raise LlmRequestError(400, "LLM request body must be valid JSON", "invalid_request_body")
    if path_model is not None:
        request["model"] = path_model
    model = request.get("model")
    if not isinstance(model, str):
        raise LlmRequestError(400, "LLM request body is missing string field 'model'", "missing_model",
                              detail=f"'model' is {type(model).__name__ if model is not None else 'missing'}")
    for entry in models:
        if model_matches(entry.pattern, model):
            return entry, request
    raise LlmRequestError(404, "Model not found", "model_not_found", detail=(  # the client's name, cut for the log
        f"model {model[:200]!r} matches none of {', '.join(repr(e.pattern) for e in models[:10]) or 'no models'}"
        + (f" and {len(models) - 10} more" if len(models) > 10 else "")))


@lru_cache(maxsize=256)
def _expression(source: str) -> Expression:
    return compile_expression(source)  # checked when the config was read


def transformed_model(entry: LlmModelRoute, request: dict[str, Any]) -> str | None:
    """The model ``transformation.model`` computes, or None (no transformation, or no string)."""
    if entry.model_expression is None:
        return None
    value = _expression(entry.model_expression).evaluate({"llmRequest": request})
    return value if isinstance(value, str) else None


#: ``owned_by`` of a virtual model in the list: the gateway's own name, standing for several providers
VIRTUAL_OWNER = "trioproxy"


def model_list(backends: tuple[Backend, ...], models: tuple[LlmModelRoute, ...] = ()) -> str:
    """``GET /v1/models`` on an ``llm:`` port: OpenAI's model list of the configured names, in config
    order; a wildcard entry is listed as its pattern (``anthropic/*``), the prefix it serves. Then the
    ``llm.virtualModels`` names of ``models`` (what a client may ask for too), in config order, owned
    by ``trioproxy``; a name already listed is not listed again."""
    owners = [(b.ai.name, b.ai.provider) for b in backends if b.ai is not None]
    owners += [(e.pattern, VIRTUAL_OWNER) for e in models if e.virtual is not None]
    listed: dict[str, str] = {}
    for name, owner in owners:
        listed.setdefault(name, owner)  # the first one listed under a name stays
    data = [{"id": name, "object": "model", "created": 0, "owned_by": owner} for name, owner in listed.items()]
    return json.dumps({"object": "list", "data": data})
