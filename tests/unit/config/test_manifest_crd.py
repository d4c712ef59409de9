"""The shipped ProxyPolicy CRD is the one the description generates, and bundled manifests satisfy it."""

from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest
import yaml

from trioproxy.config.crd import CRD_PATH, crd_text
from trioproxy.config.manifest_document import ProxyPolicySpec
from trioproxy.config.manifest_validate import schema_of

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = sorted((ROOT / "fixtures" / "configs" / "manifests").glob("*.yaml"))


def shipped_schema() -> dict:
    crd = yaml.safe_load(CRD_PATH.read_text())
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_shipped_crd_is_the_generated_one():
    assert CRD_PATH.read_text() == crd_text(), "run: python -m trioproxy.config.crd > trioproxy/crds/proxypolicy.yaml"


def test_load_time_validation_uses_the_shipped_schema():
    assert shipped_schema()["properties"]["spec"] == schema_of(ProxyPolicySpec)


def test_crd_is_packaged():
    assert "crds/*.yaml" in (ROOT / "pyproject.toml").read_text()


@pytest.mark.parametrize("path", MANIFESTS, ids=[p.name for p in MANIFESTS])
def test_bundled_manifests_validate_against_the_shipped_crd(path):
    validator = jsonschema.Draft7Validator(shipped_schema())
    policies = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "ProxyPolicy"]
    assert policies
    for document in policies:
        assert list(validator.iter_errors(document)) == []


def test_the_shipped_crd_rejects_what_the_gateway_rejects():
    validator = jsonschema.Draft7Validator(shipped_schema())
    bad = {"apiVersion": "trioproxy.dev/v1alpha1", "kind": "ProxyPolicy", "metadata": {"name": "x"},
           "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "r"}],
                    "traffic": {"rateLimit": {"local": [{"requests": 0, "unit": "Fortnights"}]}}}}
    assert sorted(e.validator for e in validator.iter_errors(bad)) == ["enum", "minimum"]


def test_the_readme_manifest_is_the_bundled_example():
    import re

    readme = (ROOT / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.DOTALL) if "kind: ProxyPolicy" in b)
    assert list(yaml.safe_load_all(block)) == list(yaml.safe_load_all(MANIFESTS[0].read_text()))
