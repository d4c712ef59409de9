"""ProxyPolicy ``spec.traffic.rateLimit.global`` → the ``RemoteRateLimitSpec`` the standalone
``remoteRateLimit`` builds::

    global: {host: HOST:PORT, domain, failureMode: FailClosed|FailOpen (default FailClosed), timeout,
             descriptors: [{entries: [{name, expression: <CEL>}], unit: Requests|Tokens}]}

Problems raise ``ManifestValueError`` whose message starts with the field's path, fit for the
policy's ``Accepted=False`` condition.
"""

from __future__ import annotations

from typing import Any

from ..cel import CelError
from ..config.scalars import parse_address, parse_duration
from .manifest_values import ManifestValueError, expect_mapping, expect_text
from .ratelimit_remote import RemoteDescriptor, RemoteEntry, RemoteRateLimitSpec, compile_entry

__all__ = ["translate_global_rate_limit"]

PATH = "spec.traffic.rateLimit.global"
FAILURE_MODES = {"FailClosed": "failClosed", "FailOpen": "failOpen", "failClosed": "failClosed",
                 "failOpen": "failOpen"}
UNITS = {"Requests": "requests", "Tokens": "tokens"}


def _descriptor(value: Any, path: str) -> RemoteDescriptor:
    descriptor = expect_mapping(value, path, {"entries", "unit"})
    raw_entries = descriptor.get("entries")
    if not isinstance(raw_entries, list) or not raw_entries:
        raise ManifestValueError(f"{path}.entries: expected a non-empty list")
    entries = []
    for i, raw in enumerate(raw_entries):
        where = f"{path}.entries[{i}]"
        entry = expect_mapping(raw, where, {"name", "expression"})
        name = expect_text(entry.get("name"), f"{where}.name")
        source = expect_text(entry.get("expression"), f"{where}.expression")
        try:
            compile_entry(source)
        except CelError as exc:
            raise ManifestValueError(f"{where}.expression: {exc}") from None
        entries.append(RemoteEntry(name, source))
    unit = descriptor.get("unit", "Requests")
    if unit not in UNITS:
        raise ManifestValueError(f'{path}.unit: Unsupported value: "{unit}": supported values: "Requests", "Tokens"')
    return RemoteDescriptor(tuple(entries), UNITS[unit])  # type: ignore[arg-type]


def translate_global_rate_limit(value: Any) -> RemoteRateLimitSpec:
    spec = expect_mapping(value, PATH, {"host", "domain", "descriptors", "failureMode", "timeout"})
    host = expect_text(spec.get("host"), f"{PATH}.host")
    try:
        parse_address(host)
    except ValueError:
        raise ManifestValueError(f"{PATH}.host: expected HOST:PORT, got {host!r}") from None
    domain = expect_text(spec.get("domain"), f"{PATH}.domain")
    raw = spec.get("descriptors")
    if not isinstance(raw, list) or not raw:
        raise ManifestValueError(f"{PATH}.descriptors: expected a non-empty list")
    descriptors = tuple(_descriptor(d, f"{PATH}.descriptors[{i}]") for i, d in enumerate(raw))
    mode = spec.get("failureMode", "FailClosed")
    if mode not in FAILURE_MODES:
        raise ManifestValueError(f'{PATH}.failureMode: Unsupported value: "{mode}": supported values: '
                                 '"FailClosed", "FailOpen"')
    timeout = 1.0
    if "timeout" in spec:
        try:
            timeout = parse_duration(str(spec["timeout"]))
        except ValueError:
            raise ManifestValueError(f"{PATH}.timeout: expected a duration such as 500ms or 1s, "
                                     f"got {spec['timeout']!r}") from None
    return RemoteRateLimitSpec(host, domain, descriptors, FAILURE_MODES[mode], timeout)  # type: ignore[arg-type]
