"""The rules of ``proxy/virtual_models.py`` one by one (issue 35), in-process over a parsed ``llm:``
config: the route plan and its cache, the prompt size estimate, the model each target is asked for,
and the plan of each virtual model mode (groups, balancer, conditions, quotas)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from trioproxy.config import parse_config
from trioproxy.errors import LlmRequestError
from trioproxy.policies.resilience import BalancerSpec, VirtualModel, VirtualTarget
from trioproxy.proxy import virtual_models as vm
from trioproxy.proxy.attempts import WEIGHTED
from trioproxy.proxy.exchange import Exchange

CONFIG = """
llm:
  port: 4000
  models:
  - {name: a, provider: openAI, params: {model: gpt-a, apiKey: key-a}}
  - {name: "c/*", provider: openAI, params: {apiKey: key-c}, transformation: {model: 'llmRequest.model.stripPrefix("c/")'}}
  - {name: "d/*", provider: openAI, params: {apiKey: key-d}, transformation: {model: 'llmRequest.model == "d/x" ? 1 : "d-" + llmRequest.model'}}
  - {name: e, provider: openAI, params: {apiKey: key-e}}
"""


def llm_route(extra: str = ""):  # type: ignore[no-untyped-def]
    return parse_config(CONFIG + extra, env={}).binds[0].listeners[0].routes[0]


def exchange(*headers: tuple[bytes, bytes]) -> Exchange:
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": list(headers),
             "client": ("10.0.0.1", 5555)}
    return Exchange(scope, None, None, 0.0)  # type: ignore[arg-type]


PHASES: list[Any] = ["p0", "p1", "p2", "p3"]  # handed through to each candidate as they are


def plan(mode: str, *targets: VirtualTarget, x: Exchange | None = None, request: dict[str, Any] | None = None,
         route=None, limiters=()):  # type: ignore[no-untyped-def]
    route = route if route is not None else llm_route()
    return vm.virtual_plan(x or exchange(), route, PHASES, VirtualModel(mode, targets),  # type: ignore[arg-type]
                           request if request is not None else {"model": "v"}, b"body", limiters)


@pytest.mark.parametrize("request_, size", [
    ({}, 0),
    ({"messages": [{"role": "user", "content": "abcd"}]}, 2),       # "user" + "abcd": 8 characters
    ({"input": "abcde"}, 2),                                        # rounded up
    ({"prompt": ["abc", "d"]}, 1),
    ({"system": {"text": "a" * 8}}, 2),
    ({"contents": [{"parts": [{"text": "a" * 12}]}]}, 3),
    ({"model": "a" * 40, "other": "b" * 40, "messages": [{"n": 5, "b": True}]}, 0),  # only the texts of those keys
    ({"messages": "a", "input": "b", "prompt": "c", "system": "d", "contents": "e"}, 2),
])
def test_prompt_size_counts_four_characters_a_token_rounded_up(request_, size):
    assert vm.prompt_size(request_) == size


def test_the_route_plan_is_computed_once_per_compiled_route():
    vm._plans.clear()
    route = llm_route()
    first = vm.route_plan(route, route.backends, PHASES)
    assert first is not None and vm.route_plan(route, route.backends, PHASES) is first
    assert [(c.backend, c.phase, c.weight) for c in first.candidates] == [
        (b, p, b.weight) for b, p in zip(route.backends, PHASES)]
    assert first.groups == [[0, 1, 2, 3]] and first.balancer is WEIGHTED
    other = llm_route()  # equal, but another compiled route (a reload)
    assert vm.route_plan(other, other.backends, PHASES) is not first
    assert vm.route_plan(route, (), ()) is first  # cached by the route
    vm._plans.clear()
    assert vm.route_plan(route, (), ()) is None


def test_the_route_plans_cache_is_cleared_past_4096_routes():
    route = llm_route()
    vm._plans.clear()
    vm._plans.update({-i: (route, None) for i in range(4096)})
    vm.route_plan(route, route.backends, PHASES)
    assert len(vm._plans) == 4097  # not yet
    vm.route_plan(llm_route(), route.backends, PHASES)
    assert len(vm._plans) == 1  # 4097 entries: cleared, then this route's
    vm._plans.clear()


def test_the_model_each_target_is_asked_for():
    request = {"model": "v", "messages": []}
    p = plan("weighted", VirtualTarget(0, "a"), VirtualTarget(1, "c/x"), VirtualTarget(2, "d/y"),
             VirtualTarget(2, "d/x"), VirtualTarget(3, "e"), request=request)
    # a: params.model is the backend's own (None: not overridden); c/x: its transformation over the
    # target's name; d/y: the same; d/x: a transformation giving no string falls back to the name;
    # e: no params.model, no transformation: the target's name
    assert [c.override for c in p.candidates] == [None, "x", "d-d/y", "d/x", "e"]
    assert request == {"model": "v", "messages": []}  # the client's request is left as it was


def test_weighted_is_one_group_by_weight_with_the_weighted_balancer():
    p = plan("weighted", VirtualTarget(0, "a", weight=3), VirtualTarget(3, "e", weight=0))
    route = llm_route()
    assert [(c.backend, c.phase, c.weight) for c in p.candidates] == [
        (route.backends[0], "p0", 3), (route.backends[3], "p3", 0)]
    assert p.groups == [[0, 1]] and p.balancer == WEIGHTED
    assert p.body == b"body" and p.virtual == VirtualModel("weighted", (VirtualTarget(0, "a", weight=3),
                                                                        VirtualTarget(3, "e", weight=0)))


def test_failover_groups_equal_priorities_and_balances_by_least_request():
    p = plan("failover", VirtualTarget(0, "a", priority=0), VirtualTarget(3, "e", priority=0),
             VirtualTarget(1, "c/x", priority=1), VirtualTarget(2, "d/y", priority=2), VirtualTarget(0, "a", priority=2))
    assert p.groups == [[0, 1], [2], [3, 4]]
    assert p.balancer == BalancerSpec("leastRequest")
    assert plan("failover", VirtualTarget(0, "a")).groups == [[0]]


def test_a_routes_load_balancer_wins_over_the_modes():
    own = attrs.evolve(llm_route(), balancer=BalancerSpec("leastRequest", 2.0))
    for mode in ("weighted", "failover", "conditional"):
        assert plan(mode, VirtualTarget(0, "a"), route=own).balancer == BalancerSpec("leastRequest", 2.0)


def test_conditional_keeps_the_targets_whose_condition_holds_each_its_own_group():
    targets = (VirtualTarget(0, "a", when='request.headers["x-tier"] == "gold"'),
               VirtualTarget(1, "c/x", when="llm.promptSize > 2"),
               VirtualTarget(2, "d/y", when='llm.requestModel == "smart"'),
               VirtualTarget(3, "e"))
    big = {"model": "smart", "messages": [{"role": "user", "content": "a" * 20}]}
    p = plan("conditional", *targets, x=exchange((b"x-tier", b"gold")), request=big)
    assert [c.override for c in p.candidates] == [None, "x", "d-d/y", "e"] and p.groups == [[0], [1], [2], [3]]
    assert p.balancer == BalancerSpec("leastRequest")
    small = {"model": "other", "messages": [{"role": "user", "content": "a"}]}  # promptSize 2
    assert [c.override for c in plan("conditional", *targets, request=small).candidates] == ["e"]
    assert [c.override for c in plan("conditional", *targets, request=big).candidates] == ["x", "d-d/y", "e"]
    # a condition that is not exactly true (here a string) does not hold
    assert [c.override for c in plan("conditional", VirtualTarget(0, "a", when='"yes"'), VirtualTarget(3, "e"))
            .candidates] == ["e"]


def test_conditions_see_the_runtime_key_and_team_and_the_earlier_llm_fields():
    x = exchange()
    x.key = {"alias": "k1"}  # type: ignore[assignment]
    x.team = {"id": "t1"}  # type: ignore[assignment]
    x.llm = {"provider": "openai"}  # type: ignore[assignment]
    targets = (VirtualTarget(0, "a", when='key.alias == "k1" && team.id == "t1" && llm.provider == "openai"'),
               VirtualTarget(3, "e", when="llm.promptSize == 0"))
    assert [c.override for c in plan("conditional", *targets, x=x, request={"model": "v"}).candidates] == [None, "e"]


def test_no_condition_holding_is_a_404_model_not_found():
    with pytest.raises(LlmRequestError) as info:
        plan("conditional", VirtualTarget(0, "a", when="false"))
    assert (info.value.status, info.value.code) == (404, "model_not_found")
    assert str(info.value) == "no target of the virtual model matches the request"
    assert info.value.why == {"policy": "llm", "check": "model_not_found", "detail": "no 'when' of virtual model 'v' holds"}


def test_each_candidate_gets_its_backends_limiter():
    limiters: list[Any] = ["l0", None, "l2", "l3"]
    p = plan("weighted", VirtualTarget(2, "d/y"), VirtualTarget(1, "c/x"), limiters=limiters)
    assert [c.limiter for c in p.candidates] == ["l2", None] and p.limited
    assert [c.limiter for c in plan("weighted", VirtualTarget(2, "d/y")).candidates] == [None]
