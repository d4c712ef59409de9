"""The statuses a manifest's resources get (config/manifest_status.py): a Gateway's conditions and
listener entries, the Accepted condition of an invalid edit that keeps the last valid version
(``mark_kept``), and ``lastTransitionTime`` carried per resource, per parent/ancestor and per condition
(``carry_times``)."""

from __future__ import annotations

import copy
import textwrap
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from trioproxy.config.manifest import compile_manifest, parse_documents, read_resources
from trioproxy.config.manifest_status import (
    CONTROLLER,
    KEPT,
    ancestor,
    carry_times,
    condition,
    gateway_status,
    mark_kept,
    parent,
    timestamp,
)

STAMP = "2026-01-02T03:04:05Z"


def cond(kind: str, ok: bool, reason: str, message: str, generation: int = 4, now: str = STAMP) -> dict:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message,
            "lastTransitionTime": now, "observedGeneration": generation}


def test_the_constants():
    assert CONTROLLER == "trioproxy.dev/gateway"
    assert KEPT == "; the last valid version keeps applying"


def test_a_valid_gateway_is_accepted_and_programmed_with_one_entry_per_listener():
    assert gateway_status([], [("main", 2), ("tls", 0)], 4, STAMP) == {
        "conditions": [cond("Accepted", True, "Accepted", "Gateway is valid"),
                       cond("Programmed", True, "Programmed", "Gateway is serving")],
        "listeners": [
            {"name": name, "attachedRoutes": attached,
             "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
             "conditions": [cond("Accepted", True, "Accepted", "Listener is valid"),
                            cond("Programmed", True, "Programmed", "Listener is serving")]}
            for name, attached in (("main", 2), ("tls", 0))],
    }


def test_an_invalid_gateway_says_every_problem_and_has_no_listeners():
    assert gateway_status(["a: bad", "b: worse"], [("main", 1)], 4, STAMP) == {
        "conditions": [cond("Accepted", False, "Invalid", "a: bad; b: worse"),
                       cond("Programmed", False, "Invalid", "the Gateway is not valid")]}


def test_a_compiled_gateways_status_is_the_same():
    text = textwrap.dedent("""
        apiVersion: gateway.networking.k8s.io/v1
        kind: Gateway
        metadata: {name: gw, namespace: ns, generation: 4}
        spec:
          gatewayClassName: trioproxy
          listeners:
          - {name: main, port: 3000, protocol: HTTP}
        """)
    resources, _ = read_resources(parse_documents(text, "m.yaml"), "m.yaml")
    result = compile_manifest(resources, now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), env={})
    assert result.statuses[0]["status"] == gateway_status([], [("main", 0)], 4, STAMP)


def test_parent_and_ancestor_entries():
    conditions = [cond("Accepted", True, "Accepted", "ok")]
    assert parent({"name": "gw", "namespace": "ns"}, conditions) == {
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw", "namespace": "ns"},
        "controllerName": "trioproxy.dev/gateway", "conditions": conditions}
    ref = {"group": "g", "kind": "HTTPRoute", "name": "r"}
    assert ancestor(ref, conditions) == {"ancestorRef": ref, "controllerName": "trioproxy.dev/gateway",
                                         "conditions": conditions}


def test_timestamp_is_utc_whatever_the_local_zone(monkeypatch):
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        assert timestamp(datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2)))) == "2026-01-02T01:04:05Z"
        now = datetime.now(UTC)
        stamped = datetime.strptime(timestamp(None), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        assert abs((stamped - now).total_seconds()) < 5
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def _statuses() -> dict:
    return {
        "route": {"parents": [parent({"name": "gw"}, [cond("Accepted", True, "Accepted", "Route was valid"),
                                                      cond("ResolvedRefs", True, "ResolvedRefs", "ok")]),
                              parent({"name": "gw2"}, [cond("Accepted", True, "Accepted", "Route was valid")])]},
        "policy": {"ancestors": [ancestor({"name": "gw"}, [cond("Accepted", True, "Valid", "Policy is valid"),
                                                            cond("Attached", True, "Attached", "attached")])]},
        "gateway": {"conditions": [cond("Accepted", True, "Accepted", "Gateway is valid"),
                                   cond("Programmed", True, "Programmed", "serving")]},
    }


def test_mark_kept_turns_every_parents_accepted_into_unsupported_value():
    status = _statuses()["route"]
    mark_kept(status, "bad" + KEPT)
    for entry in status["parents"]:
        accepted = entry["conditions"][0]
        assert (accepted["status"], accepted["reason"], accepted["message"]) == (
            "False", "UnsupportedValue", "bad; the last valid version keeps applying")
    assert status["parents"][0]["conditions"][1] == cond("ResolvedRefs", True, "ResolvedRefs", "ok")


def test_mark_kept_turns_a_policys_or_a_gateways_accepted_into_invalid():
    statuses = _statuses()
    for name in ("policy", "gateway"):
        mark_kept(statuses[name], "wrong")
    accepted, attached = statuses["policy"]["ancestors"][0]["conditions"]
    assert (accepted["status"], accepted["reason"], accepted["message"]) == ("False", "Invalid", "wrong")
    assert attached["status"] == "True"
    accepted, programmed = statuses["gateway"]["conditions"]
    assert (accepted["status"], accepted["reason"], accepted["message"]) == ("False", "Invalid", "wrong")
    assert programmed == cond("Programmed", True, "Programmed", "serving")


def test_mark_kept_of_a_status_without_conditions_changes_nothing():
    status: dict = {"parents": [{"parentRef": {"name": "gw"}}]}
    mark_kept(status, "wrong")
    assert status == {"parents": [{"parentRef": {"name": "gw"}}]}
    empty: dict = {}
    mark_kept(empty, "wrong")
    assert empty == {}


def _item(kind: str, status: dict) -> dict:
    return {"kind": kind, "metadata": {"name": "x", "namespace": "ns"}, "status": status}


def _times(status: dict, key: str) -> list[str]:
    """The conditions' times of every ``key`` entry (``parents``, ``ancestors``) or of the status's own."""
    entries = [status] if key == "conditions" else status[key]
    return [c["lastTransitionTime"] for e in entries for c in e["conditions"]]


def test_carry_times_keeps_each_parents_and_ancestors_own_time():
    before = _statuses()
    before["route"]["parents"][0]["conditions"][0]["lastTransitionTime"] = "T-gw"
    before["route"]["parents"][1]["conditions"][0]["lastTransitionTime"] = "T-gw2"
    before["policy"]["ancestors"].append(ancestor({"name": "gw2"}, [cond("Accepted", True, "Valid", "x")]))
    before["policy"]["ancestors"][0]["conditions"][0]["lastTransitionTime"] = "T-a1"
    before["policy"]["ancestors"][1]["conditions"][0]["lastTransitionTime"] = "T-a2"
    before["gateway"]["conditions"][0]["lastTransitionTime"] = "T-g"
    old = tuple(_item(k.title(), before[k]) for k in ("route", "policy", "gateway"))
    now = _statuses()
    now["policy"]["ancestors"].append(ancestor({"name": "gw2"}, [cond("Accepted", True, "Valid", "x")]))
    new = tuple(_item(k.title(), now[k]) for k in ("route", "policy", "gateway"))
    carry_times(new, old)
    assert _times(now["route"], "parents") == ["T-gw", STAMP, "T-gw2"]
    assert _times(now["policy"], "ancestors") == ["T-a1", STAMP, "T-a2"]
    assert _times(now["gateway"], "conditions") == ["T-g", STAMP]


def test_carry_times_only_for_the_same_resource_condition_status_and_reason():
    before = _statuses()["gateway"]
    for c in before["conditions"]:
        c["lastTransitionTime"] = "OLD"
    now = _statuses()["gateway"]
    now["conditions"][1]["reason"] = "Other"
    carry_times((_item("Gateway", now),), (_item("Gateway", before),))
    assert _times(now, "conditions") == ["OLD", STAMP]
    other = _statuses()["gateway"]
    carry_times((_item("Policy", other),), (_item("Gateway", before),))  # another resource
    assert _times(other, "conditions") == [STAMP, STAMP]


def test_carry_times_skips_what_the_previous_config_did_not_hold():
    now = _statuses()
    items = (_item("Gateway", now["gateway"]),)
    before = ("not a status", {"kind": "Gateway", "metadata": {"name": "x", "namespace": "ns"}})
    assert carry_times(items, before) is items
    assert _times(now["gateway"], "conditions") == [STAMP, STAMP]


@pytest.mark.parametrize("ok", [True, False])
def test_condition(ok):
    assert condition("Ready", ok, "Why", "text", 9, "now") == {
        "type": "Ready", "status": "True" if ok else "False", "reason": "Why", "message": "text",
        "lastTransitionTime": "now", "observedGeneration": 9}


def test_copies_do_not_share_conditions():
    a = _statuses()
    b = copy.deepcopy(a)
    mark_kept(a["gateway"], "x")
    assert b["gateway"]["conditions"][0]["status"] == "True"
