"""The JSON Schema is generated from the one description, shipped, and agrees with the loader."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from tests.conftest import ROOT, run_cli
from trioproxy.config import document, parse_config
from trioproxy.config.describe import openapi_schema
from trioproxy.config.schema import SCHEMA_PATH, document_schema, schema_text

EXAMPLES = sorted((ROOT / "fixtures" / "configs").glob("*.yaml"))


def test_shipped_schema_is_the_generated_one():
    assert SCHEMA_PATH.read_text() == schema_text(), "run: python -m trioproxy schema > trioproxy/config/schema.json"


def test_schema_command_prints_it():
    result = run_cli("schema")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == document_schema()


def test_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(document_schema())


def _fields(schema, where="$"):
    """Every (place, property schema) under any ``properties``."""
    if isinstance(schema, dict):
        for name, sub in schema.get("properties", {}).items():
            yield f"{where}.{name}", sub
        for key, sub in schema.items():
            yield from _fields(sub, f"{where}.{key}")
    elif isinstance(schema, list):
        for i, sub in enumerate(schema):
            yield from _fields(sub, f"{where}[{i}]")


def test_every_field_and_class_has_a_description():
    schema = document_schema()
    fields = list(_fields(schema))
    assert len(fields) > 40
    assert [place for place, sub in fields if not sub.get("description")] == []
    assert [name for name, sub in schema["$defs"].items() if not sub.get("description")] == []


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_validates_against_the_schema_and_names_it(path: Path):
    text = path.read_text()
    assert text.startswith("# yaml-language-server: $schema=")
    schema_ref = text.splitlines()[0].split("$schema=", 1)[1]
    assert (path.parent / schema_ref).resolve() == SCHEMA_PATH.resolve()
    jsonschema.validate(YAML(typ="safe").load(text), document_schema())
    parse_config(text, env={})  # and the loader agrees


def test_schema_rejects_what_the_loader_rejects():
    validator = jsonschema.Draft202012Validator(document_schema())
    assert not validator.is_valid({"binds": [{"port": 3000, "listeners": [{"rotues": []}]}]})
    assert not validator.is_valid({"binds": [{"port": 70000}]})
    assert not validator.is_valid({"binds": [{"port": 1, "listeners": [{"routes": [
        {"backends": [{"host": "a:1", "ai": {"name": "x", "provider": {"openAI": None}, "hostOverride": "a:1"}}]}]}]}]})
    assert validator.is_valid({"binds": [{"port": "$PORT"}]})  # env references are strings


def _walk(schema):
    if isinstance(schema, dict):
        yield schema
        for sub in schema.values():
            yield from _walk(sub)
    elif isinstance(schema, list):
        for sub in schema:
            yield from _walk(sub)


def test_openapi_flavour_is_inline_and_structural():
    """What a Kubernetes CRD's openAPIV3Schema accepts: no $ref/$defs, no 2020-12 keywords."""
    schema = openapi_schema(document.Route)
    forbidden = {"$ref", "$defs", "$schema", "const", "prefixItems", "unevaluatedProperties", "propertyNames",
                 "dependentRequired", "dependentSchemas", "additionalProperties"}
    for sub in _walk(schema):
        assert not forbidden & {k for k in sub if k != "additionalProperties" or sub[k] is False}, sub
        assert not isinstance(sub.get("type"), list)
    assert schema["properties"]["backends"]["items"]["properties"]["weight"] == {
        "type": "integer", "minimum": 0, "maximum": 1000000,
        "description": "Share of the route's requests (0: none).", "default": 1}
    assert "retry" in schema["properties"]["policies"]["properties"]
    assert "jwtAuth" in schema["properties"]["policies"]["properties"]
