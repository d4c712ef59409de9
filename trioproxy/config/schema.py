"""The config's JSON Schema, generated from ``document.py`` and shipped as ``schema.json``.

``trioproxy schema`` prints it; editors use it through the first line of a config file:
``# yaml-language-server: $schema=<path or URL of schema.json>``. A test fails when the shipped
file differs from what the description generates: after changing ``document.py`` run
``python -m trioproxy schema > trioproxy/config/schema.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .describe import json_schema, openapi_schema
from .document import Document

__all__ = ["SCHEMA_PATH", "document_schema", "openapi_schema", "schema_text"]

SCHEMA_PATH = Path(__file__).with_name("schema.json")


def document_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the standalone config file."""
    return json_schema(Document, title="trioproxy configuration")


def schema_text() -> str:
    """``document_schema()`` as the shipped file's text (stable key order, trailing newline)."""
    return json.dumps(document_schema(), indent=2) + "\n"
