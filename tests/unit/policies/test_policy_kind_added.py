"""docs/pipeline.md, "Adding a policy kind", followed once: a trivial kind ``stamp`` that adds one
response header is added as the note says (in this test only) and is compiled into the route's
phase and run in its place of the stage order."""

from __future__ import annotations

import attrs
from attrs import frozen

from trioproxy.asgi import Header
from trioproxy.config import model as m
from trioproxy.config import parse_config
from trioproxy.policies import kinds
from trioproxy.proxy import stages
from trioproxy.proxy.runtime import GatewayState
from trioproxy.proxy.stage import Stage


# 1. policies/stamp.py: the spec (frozen attrs) and its pure decision, nothing from exchange/trace/routing
@frozen
class StampSpec:
    value: str


def stamp_header(spec: StampSpec) -> Header:
    return (b"x-stamp", spec.value.encode())


# 3. the stage, in proxy/stages.py: the thin shell over the decision
class StampStage(Stage):
    kind = "stamp"

    def __init__(self, spec: StampSpec) -> None:
        self.spec = spec

    def response_headers(self, x: object, headers: list[Header]) -> list[Header]:
        return [*headers, stamp_header(self.spec)]


# 4. the typed attribute on model.Policies (the document phase classes too, for a config file)
@frozen
class StampedPolicies(m.Policies):
    stamp: StampSpec | None = None


CONFIG = """
binds:
- port: 3000
  listeners:
  - routes:
    - name: r
      policies:
        cors: {allowOrigins: ["https://a.example"]}
        responseHeaderModifier: {set: {x-a: "1"}}
        delay: {duration: 1ms}
      backends: [{host: "127.0.0.1:1"}]
"""


def stamped(policies: m.Policies, stamp: StampSpec | None = None) -> StampedPolicies:
    return StampedPolicies(**attrs.asdict(policies, recurse=False), stamp=stamp)


def with_route_policies(config: m.Config, policies: m.Policies) -> m.Config:
    """``config`` with its route's policies replaced; every other level's gets the new (unset) kind."""
    bind = config.binds[0]
    listener = bind.listeners[0]
    route = listener.routes[0]
    backends = tuple(attrs.evolve(b, policies=stamped(b.policies)) for b in route.backends)
    route = attrs.evolve(route, policies=policies, backends=backends)
    listener = attrs.evolve(listener, policies=stamped(listener.policies), routes=(route,))
    return attrs.evolve(config, binds=(attrs.evolve(bind, listeners=(listener,)),))


def test_a_kind_added_as_the_note_says_is_compiled_and_runs_in_its_place(monkeypatch):
    # 2. its row in the kinds table
    monkeypatch.setattr(kinds, "POLICY_KINDS", (*kinds.POLICY_KINDS,
                                                kinds.PolicyKind("stamp", "stamp", frozenset({"route"}))))
    # 3. its row in the one stage order: right after responseHeaderModifier
    order = list(stages.STAGE_ORDER)
    at = [name for name, _ in order].index("responseHeaderModifier") + 1
    order.insert(at, ("stamp", stages.of_spec("stamp", StampStage)))
    monkeypatch.setattr(stages, "STAGE_ORDER", order)

    config = parse_config(CONFIG, env={})
    plain = config.binds[0].listeners[0].routes[0].policies
    state = GatewayState(with_route_policies(config, stamped(plain, StampSpec("yes"))))

    phase = state.routes[config.binds[0].listeners[0].routes[0].key].phase
    assert [s.kind for s in phase.stages] == ["cors", "responseHeaderModifier", "stamp", "delay"]
    assert [s.kind for s in phase.response] == ["responseHeaderModifier", "stamp"]
    headers: list[Header] = [(b"x-a", b"0")]
    for stage in phase.response:
        headers = stage.response_headers(None, headers)  # type: ignore[arg-type]
    assert headers == [(b"x-a", b"1"), (b"x-stamp", b"yes")]

    # unset, the kind has no stage: the phase is as before
    state = GatewayState(with_route_policies(config, stamped(plain)))
    assert "stamp" not in repr(state.routes[config.binds[0].listeners[0].routes[0].key].phase)
