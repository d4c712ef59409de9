"""The policy kinds are listed once (``policies/kinds.py``); what cannot be derived from that table
(the typed phase classes mypy and the JSON Schema read, the compilers, the stage rows) is checked
against it here."""

from __future__ import annotations

import attrs
import pytest

from trioproxy.config import document as d
from trioproxy.config import model as m
from trioproxy.config.agentgateway_fields import UNIMPLEMENTED
from trioproxy.config.compile import POLICY_COMPILERS
from trioproxy.config.describe import wire_name
from trioproxy.policies.kinds import PHASES, POLICY_KINDS, kinds_of, runtime_kinds_of
from trioproxy.proxy.stages import STAGE_ORDER

PHASE_CLASSES = {"gateway": d.GatewayPolicies, "route": d.RoutePolicies, "backend": d.BackendPolicies}
#: kinds the gateway applies itself (timeouts, the TLS of its connection), with no stage
WITHOUT_STAGE = {"timeout", "backendTLS"}
#: stage rows that are not kinds of their own: localRateLimit's perClientAddress entries
STAGE_ONLY = {"clientRateLimit"}


@pytest.mark.parametrize("phase", PHASES)
def test_each_phase_class_has_exactly_the_table_s_kinds_with_their_wire_names(phase):
    fields = {a.name: wire_name(a) for a in attrs.fields(PHASE_CLASSES[phase])}
    assert fields == {kind.attribute: kind.name for kind in kinds_of(phase)}


def test_the_model_and_the_compilers_have_one_entry_per_kind():
    attributes = [kind.attribute for kind in POLICY_KINDS]
    assert {a.name for a in attrs.fields(m.Policies)} == {k.attribute for k in POLICY_KINDS if not k.backend_setting}
    assert set(POLICY_COMPILERS) == set(attributes)
    assert len(set(attributes)) == len(attributes) == len({kind.name for kind in POLICY_KINDS})


def test_every_kind_with_a_stage_has_one_row_in_the_stage_order():
    rows = [name for name, _ in STAGE_ORDER]
    assert len(rows) == len(set(rows))
    with_stage = {kind.name for kind in POLICY_KINDS if not kind.backend_setting} - WITHOUT_STAGE
    assert set(rows) == with_stage | STAGE_ONLY


def test_trace_kinds_are_the_table_per_phase():
    assert m.TRACE_KINDS == {phase: tuple((k.name, k.attribute) for k in runtime_kinds_of(phase)) for phase in PHASES}
    assert "ai" not in dict(m.TRACE_KINDS["route"])  # a backend setting, compiled into the ai backends
    assert list(m.TRACE_KINDS["backend"]) == [("requestHeaderModifier", "request_header_modifier"),
                                              ("responseHeaderModifier", "response_header_modifier"),
                                              ("backendAuth", "backend_auth"), ("backendTLS", "backend_tls")]


@pytest.mark.parametrize("phase", PHASES)
def test_a_kind_agentgateway_has_in_a_phase_trioproxy_leaves_out_gets_the_not_implemented_error(phase):
    cls = PHASE_CLASSES[phase].__name__
    left_out = {kind.name for kind in POLICY_KINDS if phase in kind.agentgateway_only}
    assert left_out <= UNIMPLEMENTED.get(cls, frozenset())
    assert not {kind.name for kind in kinds_of(phase)} & UNIMPLEMENTED.get(cls, frozenset())
    assert not any(phase in kind.phases and phase in kind.agentgateway_only for kind in POLICY_KINDS)


def test_a_row_puts_each_word_in_its_place():
    """``_kind`` as the table's rows call it, run inside the test: the table itself is built at
    import, where mutation testing cannot reach it."""
    from trioproxy.policies.kinds import PolicyKind, _kind

    assert _kind("stamp", "stamp_it", "route backend") == PolicyKind(
        "stamp", "stamp_it", frozenset({"route", "backend"}), frozenset(), False)
    assert _kind("x", "x", "gateway", agentgateway_only="route backend", backend_setting=True) == PolicyKind(
        "x", "x", frozenset({"gateway"}), frozenset({"route", "backend"}), True)
