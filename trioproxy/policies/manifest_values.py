"""Checks shared by the translators of ProxyPolicy's free-form traffic fields (``auth_manifest``,
``ratelimit_remote_manifest``): those fields are ``x-kubernetes-preserve-unknown-fields`` in the CRD,
so their translators check the values themselves, each message starting with the field's path."""

from __future__ import annotations

from typing import Any

__all__ = ["ManifestValueError", "expect_mapping", "expect_text"]


class ManifestValueError(ValueError):
    """An invalid traffic field; the message names its path."""


def expect_mapping(value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
    """``value`` as a mapping whose keys are all in ``allowed``."""
    if not isinstance(value, dict):
        raise ManifestValueError(f"{path}: expected a mapping")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ManifestValueError(f"{path}.{unknown[0]}: unknown field (expected one of: {', '.join(sorted(allowed))})")
    return value


def expect_text(value: Any, path: str) -> str:
    """``value`` as a non-empty string."""
    if not isinstance(value, str) or not value:
        raise ManifestValueError(f"{path}: expected a non-empty string")
    return value
