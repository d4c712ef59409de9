"""HAR 1.2 validation for the export tests: the schema fixture (fixtures/har/har-1.2.schema.json),
checked as a schema itself, then applied with jsonschema."""

from __future__ import annotations

import json

import jsonschema

from tests.conftest import ROOT

HAR_SCHEMA = json.loads((ROOT / "fixtures" / "har" / "har-1.2.schema.json").read_text())


def assert_har(document: dict) -> None:
    jsonschema.Draft202012Validator.check_schema(HAR_SCHEMA)
    jsonschema.validate(document, HAR_SCHEMA, cls=jsonschema.Draft202012Validator)
