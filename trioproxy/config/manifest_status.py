"""The statuses a manifest's resources get (docs/manifests.md "Status"): conditions and the
``parents`` / ``ancestors`` / ``listeners`` entries, as Gateway API and its policy attachment say.
``manifest.compile_manifest`` decides what each says; this module only writes them."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from .manifest_document import GATEWAY_GROUP

__all__ = ["CONTROLLER", "KEPT", "ancestor", "carry_times", "condition", "gateway_status", "mark_kept", "parent",
           "timestamp"]

CONTROLLER = "trioproxy.dev/gateway"
KEPT = "; the last valid version keeps applying"


def timestamp(now: datetime | None) -> str:
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, ok: bool, reason: str, message: str, generation: int, now: str) -> dict[str, Any]:
    return {"type": kind, "status": "True" if ok else "False", "reason": reason, "message": message,
            "lastTransitionTime": now, "observedGeneration": generation}


def parent(ref: dict[str, Any], conditions: list[dict[str, Any]]) -> dict[str, Any]:
    """An HTTPRoute's ``status.parents[]`` entry for ``ref`` (a parentRef, its namespace filled in)."""
    return {"parentRef": {"group": GATEWAY_GROUP, "kind": "Gateway", **ref}, "controllerName": CONTROLLER,
            "conditions": conditions}


def ancestor(ref: dict[str, Any], conditions: list[dict[str, Any]]) -> dict[str, Any]:
    """A ProxyPolicy's ``status.ancestors[]`` entry."""
    return {"ancestorRef": ref, "controllerName": CONTROLLER, "conditions": conditions}


def gateway_status(problems: list[str], listeners: Iterable[tuple[str, int]], generation: int,
                   stamp: str) -> dict[str, Any]:
    """A Gateway's status: invalid (``problems``), or serving ``listeners`` (name, attached routes)."""
    if problems:
        message = "; ".join(problems)
        return {"conditions": [condition("Accepted", False, "Invalid", message, generation, stamp),
                               condition("Programmed", False, "Invalid", "the Gateway is not valid", generation,
                                         stamp)]}
    entries = [{"name": name, "attachedRoutes": attached,
                "supportedKinds": [{"group": GATEWAY_GROUP, "kind": "HTTPRoute"}],
                "conditions": [condition("Accepted", True, "Accepted", "Listener is valid", generation, stamp),
                               condition("Programmed", True, "Programmed", "Listener is serving", generation, stamp)]}
               for name, attached in listeners]
    return {"conditions": [condition("Accepted", True, "Accepted", "Gateway is valid", generation, stamp),
                           condition("Programmed", True, "Programmed", "Gateway is serving", generation, stamp)],
            "listeners": entries}


def mark_kept(status: dict[str, Any], message: str) -> None:
    """An invalid edit of a resource whose last valid version still applies: Accepted says why."""
    entries = status.get("parents") or status.get("ancestors") or [status]
    for entry in entries:
        for found in entry.get("conditions", []):
            if found["type"] == "Accepted":
                reason = "UnsupportedValue" if "parents" in status else "Invalid"
                found.update(status="False", reason=reason, message=message)


def carry_times(statuses: tuple[dict[str, Any], ...], before: tuple[Any, ...]) -> tuple[dict[str, Any], ...]:
    """Keep ``lastTransitionTime`` of every condition whose status and reason did not change."""
    old_times: dict[str, str] = {}

    def walk(status: Any, prefix: str, record: bool) -> None:
        entries = [(str(e.get("parentRef") or e.get("ancestorRef")), e)
                   for e in status.get("parents", []) + status.get("ancestors", [])] + [("", status)]
        for ref, entry in entries:
            for c in entry.get("conditions", []):
                key = f"{prefix}|{ref}|{c['type']}|{c['status']}|{c['reason']}"
                if record:
                    old_times[key] = c["lastTransitionTime"]
                elif key in old_times:
                    c["lastTransitionTime"] = old_times[key]

    for item in before:
        if isinstance(item, dict):
            walk(item.get("status", {}), f"{item['kind']}|{item['metadata']}", True)
    for item in statuses:
        walk(item["status"], f"{item['kind']}|{item['metadata']}", False)
    return statuses
