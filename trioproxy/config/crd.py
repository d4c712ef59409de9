"""The ProxyPolicy CustomResourceDefinition, generated from ``manifest_document.ProxyPolicySpec``
and shipped as ``trioproxy/crds/proxypolicy.yaml`` (``kubectl apply -f`` it on a cluster).

The same schema checks manifests at load (``manifest_validate.py``), so the file and the
gateway cannot disagree. A test fails when the shipped file differs from the generated one:
after changing the description run ``python -m trioproxy.config.crd > trioproxy/crds/proxypolicy.yaml``.
"""

from __future__ import annotations

import sys
from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from .describe import openapi_schema
from .manifest_document import ProxyPolicySpec

__all__ = ["CRD_PATH", "crd_text", "proxypolicy_crd"]

CRD_PATH = Path(__file__).parent.parent / "crds" / "proxypolicy.yaml"

_CONDITION = {
    "type": "object",
    "required": ["type", "status", "reason", "message", "lastTransitionTime"],
    "properties": {
        "type": {"type": "string"},
        "status": {"type": "string", "enum": ["True", "False", "Unknown"]},
        "reason": {"type": "string"},
        "message": {"type": "string"},
        "lastTransitionTime": {"type": "string", "format": "date-time"},
        "observedGeneration": {"type": "integer", "minimum": 0},
    },
}
_STATUS = {
    "type": "object",
    "description": "Per ancestor Gateway: Accepted (the policy is valid) and Attached (it applies).",
    "properties": {"ancestors": {"type": "array", "items": {
        "type": "object",
        "required": ["ancestorRef", "controllerName", "conditions"],
        "properties": {
            "ancestorRef": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "controllerName": {"type": "string"},
            "conditions": {"type": "array", "items": _CONDITION},
        },
    }}},
}


def proxypolicy_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "proxypolicies.trioproxy.dev"},
        "spec": {
            "group": "trioproxy.dev",
            "names": {"kind": "ProxyPolicy", "listKind": "ProxyPolicyList", "plural": "proxypolicies",
                      "singular": "proxypolicy"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "trioproxy policies (rate limits...) attached to a Gateway or HTTPRoute.",
                    "required": ["spec"],
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "metadata": {"type": "object"},
                        "spec": openapi_schema(ProxyPolicySpec),
                        "status": _STATUS,
                    },
                }},
            }],
        },
    }


def crd_text() -> str:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[assignment]
    yaml.width = 4096
    out = StringIO()
    out.write("# Generated from trioproxy/config/manifest_document.py by trioproxy/config/crd.py: do not edit.\n")
    yaml.dump(proxypolicy_crd(), out)
    return out.getvalue()


if __name__ == "__main__":
    sys.stdout.write(crd_text())
