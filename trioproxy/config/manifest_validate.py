"""Check a resource's spec as a Kubernetes API server with the CRD would, and say it the same way.

The schema is the CRD's (``describe.openapi_schema`` of a ``manifest_document`` class): types,
enums, minimums and required fields are checked by ``jsonschema``, the CRD's
``x-kubernetes-validations`` rules (``tokens`` xor ``requests``...) by trioproxy's CEL engine, and
unknown fields as ``kubectl --validate=strict`` reports them. Messages are the API server's:
``spec.traffic.rateLimit.local[1].unit: Unsupported value: "Fortnights": supported values: ...``.
A ``pattern`` is matched as the API server's Go (RE2) regexp does: ``$`` is the end of the text,
not "before a final newline" as in Python. Rules see the schema's defaults filled in, since the
API server defaults a resource before it validates it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

import jsonschema  # type: ignore[import-untyped]

from ..cel import engine as cel
from .describe import openapi_schema

__all__ = ["schema_of", "strip_nulls", "validate_spec"]

_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
               type(None): "null"}


@cache
def _go_regexp(pattern: str) -> re.Pattern[str]:
    """``pattern`` with each ``$`` outside a character class as RE2 reads it: the end of the text."""
    out, escaped, in_class = [], False, False
    for char in pattern:
        if escaped:
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "[":
            in_class = True
        elif char == "]":
            in_class = False
        elif char == "$" and not in_class:
            char = r"\Z"
        out.append(char)
    return re.compile("".join(out))


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not _go_regexp(pattern).search(instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(jsonschema.Draft7Validator, {"pattern": _pattern})


@cache
def _validator(cls: type) -> jsonschema.Draft7Validator:
    return _Validator(openapi_schema(cls))


@cache
def _rule(source: str) -> Any:
    return cel.compile(source)


def schema_of(cls: type) -> dict[str, Any]:
    return _validator(cls).schema  # type: ignore[no-any-return]


def strip_nulls(value: Any) -> Any:
    """A null field is an absent one (the API server prunes nulls of nullable fields)."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def _path(prefix: str, parts: Any) -> str:
    out = prefix
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _quoted(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else (
        json.dumps(_TYPE_NAMES.get(type(value), "object")) if isinstance(value, (dict, list)) else json.dumps(value))


def _message(error: jsonschema.ValidationError, prefix: str) -> list[str]:
    path = _path(prefix, error.absolute_path)
    kind, expected, value = error.validator, error.validator_value, error.instance
    if kind == "required":
        return [f"{path}.{name}: Required value" for name in expected if name not in value]
    if kind == "enum":
        supported = ", ".join(json.dumps(str(v)) for v in expected)  # the API server quotes each, numbers too
        return [f"{path}: Unsupported value: {_quoted(value)}: supported values: {supported}"]
    if kind == "minimum":
        return [f"{path}: Invalid value: {value}: {path} in body should be greater than or equal to {expected}"]
    if kind == "maximum":
        return [f"{path}: Invalid value: {value}: {path} in body should be less than or equal to {expected}"]
    if kind == "type":
        got = _TYPE_NAMES.get(type(value), "object")
        return [f'{path}: Invalid value: "{got}": {path} in body must be of type {expected}: "{got}"']
    if kind == "minLength":
        return [f"{path}: Invalid value: {_quoted(value)}: {path} in body should be at least {expected} chars long"]
    if kind == "maxLength":
        return [f"{path}: Too long: may not be more than {expected} bytes"]
    if kind == "pattern":
        return [f"{path}: Invalid value: {_quoted(value)}: {path} in body should match '{expected}'"]
    if kind == "minItems":
        return [f"{path}: Invalid value: {len(value)}: {path} in body should have at least {expected} items"]
    return [f"{path}: Invalid value: {_quoted(value)}: {error.message}"]


def _holds(rule: str, value: Any) -> bool:
    try:  # the engine itself: the gateway's CEL wrapper allows only request roots
        return _rule(rule).execute({"self": value}) is True
    except Exception:  # noqa: BLE001 - the engine raises its own types; a failing rule is a failed rule
        return False


def _walk(value: Any, schema: dict[str, Any], path: str, out: list[str]) -> None:
    """Unknown fields and ``x-kubernetes-validations`` rules, depth first."""
    if isinstance(value, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            return
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key not in properties:
                out.append(f'unknown field "{path}.{key}"')
            else:
                _walk(item, properties[key], f"{path}.{key}", out)
        rules = schema.get("x-kubernetes-validations", ())
        if rules:
            defaults = {k: p["default"] for k, p in properties.items() if "default" in p and k not in value}
            value = {**defaults, **value} if defaults else value
        for rule in rules:
            if not _holds(rule["rule"], value):
                out.append(f'{path}: Invalid value: "object": {rule["message"]}')
    elif isinstance(value, list) and schema.get("type") == "array":
        for i, item in enumerate(value):
            _walk(item, schema.get("items", {}), f"{path}[{i}]", out)
        for rule in schema.get("x-kubernetes-validations", ()):
            if not _holds(rule["rule"], value):
                out.append(f'{path}: Invalid value: "array": {rule["message"]}')


def validate_spec(cls: type, spec: Any, prefix: str = "spec") -> list[str]:
    """Every problem of ``spec`` (nulls already stripped) against ``cls``'s CRD schema, in order."""
    validator = _validator(cls)
    problems: list[str] = []
    for error in sorted(validator.iter_errors(spec), key=lambda e: [str(p) for p in e.absolute_path]):
        if error.validator == "oneOf" and not error.absolute_path:
            continue
        problems.extend(_message(error, prefix))
    _walk(spec, validator.schema, prefix, problems)
    return list(dict.fromkeys(problems))
