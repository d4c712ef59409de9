"""``GET /v1/models`` on an ``llm:`` port (``llm.models.model_list``): the concrete models, then the
``llm.virtualModels`` names a client may ask for too, each name once. docs/resilience.md, "Virtual
models"; docs/llm-providers.md, "GET /v1/models on an llm: port"."""

from __future__ import annotations

import json

from trioproxy.config import parse_config
from trioproxy.llm.models import model_list

CONFIG = """
llm:
  port: 4000
  models:
  - {name: a, provider: openAI, params: {model: gpt-a, apiKey: k, hostOverride: "a.test:80"}}
  - {name: a, provider: anthropic, params: {apiKey: k, hostOverride: "b.test:80"}}
  - {name: "claude/*", provider: anthropic, params: {apiKey: k, hostOverride: "b.test:80"}}
  virtualModels:
  - name: smart
    routing: {failover: {targets: [{model: a}]}}
  - name: cheap
    routing: {weighted: {targets: [{model: claude/haiku}]}}
  - name: smart
    routing: {conditional: {targets: [{model: claude/opus}]}}
"""


def listed(text: str) -> list[tuple[str, str]]:
    route = parse_config(text, env={}).binds[0].listeners[0].routes[0]
    body = json.loads(model_list(route.backends, route.models))
    assert body["object"] == "list" and all(m["object"] == "model" and m["created"] == 0 for m in body["data"])
    return [(m["id"], m["owned_by"]) for m in body["data"]]


def test_virtual_models_follow_the_concrete_ones_in_config_order_each_name_once():
    # the compiled route holds the virtual entries first (they win over wildcards), the list does not
    assert listed(CONFIG) == [("a", "openAI"), ("claude/*", "anthropic"), ("smart", "trioproxy"),
                              ("cheap", "trioproxy")]


def test_without_virtual_models_the_list_is_the_concrete_models():
    assert listed(CONFIG.split("  virtualModels:")[0]) == [("a", "openAI"), ("claude/*", "anthropic")]
