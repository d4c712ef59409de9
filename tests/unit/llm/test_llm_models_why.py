"""The ``why`` of an LLM request the ``llm:`` models cannot take (docs/history.md, "Why"): the
client's body stays agentgateway's, the operator learns which model was asked and what was tried."""

from __future__ import annotations

import json

import pytest

from trioproxy.config.model import LlmModelRoute
from trioproxy.errors import LlmRequestError
from trioproxy.llm.models import select_model

MODELS = (LlmModelRoute("gpt-*", 0), LlmModelRoute("claude-x", 1))


def refused(body: bytes, models: tuple[LlmModelRoute, ...] = MODELS) -> LlmRequestError:
    with pytest.raises(LlmRequestError) as info:
        select_model(models, body)
    return info.value


def test_an_unknown_model_names_it_and_the_patterns_tried():
    error = refused(json.dumps({"model": "llama"}).encode())
    assert (error.status, error.code, error.message) == (404, "model_not_found", "Model not found")
    assert error.why == {"policy": "llm", "check": "model_not_found",
                         "detail": "model 'llama' matches none of 'gpt-*', 'claude-x'"}


def test_past_ten_patterns_the_rest_are_counted():
    many = tuple(LlmModelRoute(f"m{i}", 0) for i in range(12))
    assert refused(b'{"model": "x"}', many).why["detail"] == (  # type: ignore[index]
        "model 'x' matches none of " + ", ".join(f"'m{i}'" for i in range(10)) + " and 2 more")
    assert refused(b'{"model": "x"}', ()).why["detail"] == "model 'x' matches none of no models"  # type: ignore[index]


@pytest.mark.parametrize("body, code, detail", [
    (b'{"messages": []}', "missing_model", "'model' is missing"),
    (b'{"model": 4}', "missing_model", "'model' is int"),
    (b"not json", "invalid_request_body", "LLM request body must be valid JSON"),
    (b"[1]", "invalid_request_body", "LLM request body must be valid JSON"),
])
def test_a_body_without_a_usable_model_says_what_it_had(body, code, detail):
    error = refused(body)
    assert (error.status, error.why) == (400, {"policy": "llm", "check": code, "detail": detail})


def test_a_huge_model_name_is_cut_in_the_why():
    detail = refused(json.dumps({"model": "m" * 10_000}).encode()).why["detail"]  # type: ignore[index]
    assert detail == f"model '{'m' * 200}' matches none of 'gpt-*', 'claude-x'"
