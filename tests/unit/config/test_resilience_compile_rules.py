"""The rules of ``config/resilience_compile.py`` one by one (issue 35): each ``health``,
``loadBalancer``, ``retry`` and ``llm.virtualModels`` field read into its spec (distinct values, so a
swapped or dropped field shows), the defaults shared, and each refusal with its place."""

from __future__ import annotations

import re

import pytest

from trioproxy.config import ConfigError, parse_config
from trioproxy.policies.resilience import (
    DEFAULT_HEALTH,
    DEFAULT_RETRY_BUDGET,
    ActiveCheckSpec,
    BalancerSpec,
    HealthSpec,
    RetryBudget,
    VirtualModel,
    VirtualTarget,
)


def route(policies: str, backends: str = "      - host: a.test:80\n"):  # type: ignore[no-untyped-def]
    text = ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends:\n" + backends
            + "      policies:\n" + "".join(f"        {line}\n" for line in policies.strip().splitlines()))
    return parse_config(text, env={}).binds[0].listeners[0].routes[0]


AI = "      - ai: {name: x, provider: {openAI: {}}, hostOverride: 'b.test:80'}\n"


def test_the_specs_defaults_are_envoys():
    assert HealthSpec() == HealthSpec(5, 30.0, 300.0, 10.0, None, 50, "5xx+429", None) == DEFAULT_HEALTH
    assert ActiveCheckSpec() == ActiveCheckSpec("/", 10.0, 1.0, 3, 2)
    assert BalancerSpec() == BalancerSpec("weighted", 10.0)
    assert RetryBudget() == RetryBudget(20.0, 3) == DEFAULT_RETRY_BUDGET
    assert VirtualTarget(0, "m") == VirtualTarget(0, "m", 1, 0, None)
    assert VirtualModel("failover", ()).first_token_timeout is None


def test_every_health_field_is_read_into_its_place():
    r = route("health:\n  count429: false\n  eviction: {consecutiveFailures: 7, duration: 11s, maxDuration: 99s,"
              " interval: 4s, failurePercentage: 60, minimumRequests: 8}\n"
              "  activeCheck: {path: /h, interval: 2s, timeout: 3s, unhealthyThreshold: 4, healthyThreshold: 6}")
    assert r.backends[0].health == HealthSpec(7, 11.0, 99.0, 4.0, 60, 8, "5xx", ActiveCheckSpec("/h", 2.0, 3.0, 4, 6))


def test_an_empty_health_is_the_shared_default_and_no_health_is_none():
    assert route("health: {}").backends[0].health is DEFAULT_HEALTH
    assert route("health: {count429: true, eviction: {}}").backends[0].health is DEFAULT_HEALTH
    assert route("health: {count429: false}").backends[0].health == HealthSpec(failure_statuses="5xx")
    assert route("timeout: {requestTimeout: 1s}").backends[0].health is None


def test_a_routes_active_check_applies_to_its_host_backends_only():
    r = route("health: {eviction: {consecutiveFailures: 2}, activeCheck: {path: /h}}",
              "      - host: a.test:80\n" + AI)
    assert r.backends[0].health == HealthSpec(2, check=ActiveCheckSpec("/h"))
    assert r.backends[1].health == HealthSpec(2)  # the ai backend keeps the eviction, not the check


def test_an_active_check_on_an_ai_backend_is_refused_at_its_place():
    with pytest.raises(ConfigError) as info:
        route("timeout: {requestTimeout: 1s}",
              "      - ai: {name: x, provider: {openAI: {}}, hostOverride: 'b.test:80'}\n"
              "        policies: {health: {activeCheck: {path: /}}}\n")
    (problem,) = [p for p in info.value.problems if "activeCheck" in p]
    assert "backends[0].policies.health.activeCheck" in problem
    assert problem.endswith("active health checks apply to host backends, not ai providers")


def test_a_backends_own_health_without_a_check():
    r = route("timeout: {requestTimeout: 1s}", "      - host: a.test:80\n        policies: {health: {count429: false}}\n"
              + "      - host: c.test:80\n        policies: {health: {activeCheck: {timeout: 5s}}}\n")
    assert r.backends[0].health == HealthSpec(failure_statuses="5xx")
    assert r.backends[1].health == HealthSpec(check=ActiveCheckSpec(timeout=5.0))


def test_load_balancer_and_retry():
    r = route("loadBalancer: {mode: leastRequest, decayTime: 3s}\n"
              "retry: {attempts: 4, codes: [503, 502, 503, 429], backoff: 1s, maxBackoff: 9s,"
              " budgetPercent: 35, minRetryConcurrency: 7}")
    assert r.balancer == BalancerSpec("leastRequest", 3.0)
    retry = r.policies.retry
    assert (retry.attempts, retry.codes, retry.backoff, retry.max_backoff) == (4, (429, 502, 503), 1.0, 9.0)
    assert retry.budget == RetryBudget(35.0, 7) and type(retry.budget.percent) is float
    assert route("timeout: {requestTimeout: 1s}").balancer is None


LLM = """
llm:
  port: 4000
  models:
  - {name: a, provider: openAI, params: {model: gpt-a, apiKey: key-a}}
  - {name: b, provider: openAI, params: {model: gpt-b, apiKey: key-b}}
  - {name: "c/*", provider: openAI, params: {apiKey: key-c}}
  virtualModels:
"""


def virtual(text: str):  # type: ignore[no-untyped-def]
    return parse_config(LLM + text, env={}).binds[0].listeners[0].routes[0].models


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(LLM + text, env={})
    return sorted(re.sub(r"^<config>:\d+:\d+: ", "", p) for p in info.value.problems)


def test_virtual_models_come_first_with_their_targets_resolved_like_a_clients_model():
    models = virtual("""\
  - name: smart
    firstTokenTimeout: 2s
    routing:
      failover:
        targets: [{model: b, priority: 2}, {model: c/x, priority: 1}, {model: a, priority: 2}]
  - name: w
    routing:
      weighted:
        targets: [{model: a, weight: 3}, {model: b}]
  - name: cond
    routing:
      conditional:
        targets: [{model: c/y, when: 'true'}, {model: b}]
""")
    assert [(m.pattern, m.backend, m.virtual is not None) for m in models] == [
        ("smart", 2, True), ("w", 0, True), ("cond", 2, True), ("c/*", 2, False), ("a", 0, False), ("b", 1, False)]
    # failover: by priority, config order within one (stable); the first target's backend is the entry's
    assert models[0].virtual == VirtualModel("failover", (VirtualTarget(2, "c/x", 1, 1), VirtualTarget(1, "b", 1, 2),
                                                          VirtualTarget(0, "a", 1, 2)), 2.0)
    assert models[1].virtual == VirtualModel("weighted", (VirtualTarget(0, "a", 3), VirtualTarget(1, "b", 1)))
    assert models[2].virtual == VirtualModel("conditional", (VirtualTarget(2, "c/y", when="true"), VirtualTarget(1, "b")))


def test_virtual_model_refusals_name_their_place():
    assert problems("""\
  - name: a
    routing:
      failover:
        targets: [{model: zz}, {model: b}]
""") == ["llm.virtualModels[0].name: 'a' is also an llm.models name",
          "llm.virtualModels[0].routing.failover.targets[0].model: model 'zz' matches no llm.models entry"]
    assert problems("""\
  - name: none
    routing:
      weighted:
        targets: [{model: zz}]
""") == ["llm.virtualModels[0].routing.weighted.targets[0].model: model 'zz' matches no llm.models entry",
          "llm.virtualModels[0].routing: a virtual model needs at least one target"]
    assert problems("""\
  - name: cond
    routing:
      conditional:
        targets: [{model: a}, {model: b, when: 'true'}, {model: a}]
""") == ["llm.virtualModels[0].routing.conditional.targets[0]: "
          "a target without a condition is the fallback and must be the last one"]


def test_every_virtual_model_is_checked_after_one_without_routing_or_targets():
    assert problems("""\
  - name: empty
    routing: {}
  - name: none
    routing:
      weighted:
        targets: [{model: zz}]
  - name: a
    routing:
      weighted:
        targets: [{model: a}]
""") == ["llm.virtualModels[0].routing: expected exactly one of: failover, weighted, conditional",
         "llm.virtualModels[1].routing.weighted.targets[0].model: model 'zz' matches no llm.models entry",
         "llm.virtualModels[1].routing: a virtual model needs at least one target",
         "llm.virtualModels[2].name: 'a' is also an llm.models name"]
