"""envoyproxy/ratelimit's configuration format, and which limit a request descriptor gets.

A file holds one ``domain`` and a tree of ``descriptors`` ``{key, value?, rate_limit?, descriptors?,
shadow_mode?}``. A request descriptor (a list of ``(key, value)`` entries) walks the tree one entry
per level; at each level the most specific node wins: ``key`` with exactly ``value``, then a wildcard
value (``*`` anywhere, any number of times: ``/api/*``, ``/v*/items/*.json``; the first that matches,
in file order), then ``key`` without a value (every value counted on its own). The limit is the one
of the node reached by the last entry; a descriptor that walks off the tree is not limited.

A limit with ``replaces: [{name: N}]`` drops, for the request it matched in, every other matched
limit named ``N`` (not counted, not applied). ``--config`` is one file or a directory of them
(``load_domains``): each file one domain, a domain in two files is an error, as in envoyproxy/ratelimit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from attrs import frozen

UNIT_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
#: RateLimitResponse.RateLimit.Unit numbers
UNIT_NUMBERS = {"second": 1, "minute": 2, "hour": 3, "day": 4}


class LimitsError(ValueError):
    """A bad rate-limit config: the message names the place."""


@frozen
class Limit:
    requests_per_unit: int
    unit: str
    name: str = ""
    unlimited: bool = False
    shadow_mode: bool = False
    replaces: tuple[str, ...] = ()  # names of the limits this one replaces when both match

    @property
    def seconds(self) -> int:
        return UNIT_SECONDS[self.unit]


@frozen
class Node:
    limit: Limit | None
    exact: Mapping[tuple[str, str], Node]
    wildcard: tuple[tuple[str, tuple[str, ...], Node], ...]  # (key, value split on "*", node), in file order
    any_value: Mapping[str, Node]


@frozen
class LimitsConfig:
    domain: str
    root: Node

    def find(self, entries: Sequence[tuple[str, str]]) -> Limit | None:
        """The limit of a request descriptor, or None when no configured descriptor matches it."""
        node = self.root
        for key, value in entries:
            nxt = node.exact.get((key, value))
            if nxt is None:
                for wkey, parts, wnode in node.wildcard:
                    if wkey == key and wildcard_match(parts, value):
                        nxt = wnode
                        break
            if nxt is None:
                nxt = node.any_value.get(key)
            if nxt is None:
                return None
            node = nxt
        return node.limit if entries else None


def wildcard_match(parts: tuple[str, ...], value: str) -> bool:
    """Does ``value`` match the pattern whose literal pieces (split on ``*``) are ``parts``? As
    envoyproxy/ratelimit: the first piece a prefix, the last a suffix, the others in order between."""
    first, *middle, last = parts
    if not value.startswith(first) or not value.endswith(last) or len(value) < sum(map(len, parts)):
        return False
    rest = value[len(first):len(value) - len(last)]
    for part in middle:
        at = rest.find(part)
        if at < 0:
            return False
        rest = rest[at + len(part):]
    return True


def _node(items: Any, where: str) -> Node:
    if items is None:
        items = []
    if not isinstance(items, list):
        raise LimitsError(f"{where}: descriptors must be a list")
    exact: dict[tuple[str, str], Node] = {}
    wildcard: list[tuple[str, tuple[str, ...], Node]] = []
    any_value: dict[str, Node] = {}
    for i, item in enumerate(items):
        place = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise LimitsError(f"{place}: a descriptor must be a mapping")
        unknown = set(item) - {"key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric"}
        if unknown:
            raise LimitsError(f"{place}: unknown field {min(unknown)!r}")
        key = item.get("key")
        if not isinstance(key, str) or not key:
            raise LimitsError(f"{place}.key: required, a non-empty string")
        value = item.get("value")
        if value is not None and not isinstance(value, (str, int)):
            raise LimitsError(f"{place}.value: must be a string")
        node_where = f"{place}({key}{'=' + str(value) if value is not None else ''})"
        limit = _limit(item.get("rate_limit"), f"{place}.rate_limit", bool(item.get("shadow_mode", False)))
        child = _node(item.get("descriptors"), f"{node_where}.descriptors")
        node = Node(limit, child.exact, child.wildcard, child.any_value)
        if value is None:
            if key in any_value:
                raise LimitsError(f"{place}: duplicate descriptor {key!r}")
            any_value[key] = node
        elif "*" in str(value):
            wildcard.append((key, tuple(str(value).split("*")), node))
        else:
            if (key, str(value)) in exact:
                raise LimitsError(f"{place}: duplicate descriptor {key}={value}")
            exact[(key, str(value))] = node
    return Node(None, exact, tuple(wildcard), any_value)


def _replaces(raw: Any, name: str, where: str) -> tuple[str, ...]:
    """``replaces: [{name}]``, checked as envoyproxy/ratelimit does (no empty name, not its own)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise LimitsError(f"{where}: must be a list of {{name: ...}}")
    names = []
    for i, entry in enumerate(raw):
        replaced = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(replaced, str) or not replaced:
            raise LimitsError(f"{where}[{i}].name: should not have an empty replaces entry")
        if replaced == name:
            raise LimitsError(f"{where}[{i}].name: replaces should not contain name of same descriptor")
        names.append(replaced)
    return tuple(names)


def _limit(raw: Any, where: str, shadow: bool) -> Limit | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise LimitsError(f"{where}: must be a mapping")
    name = str(raw.get("name", ""))
    replaces = _replaces(raw.get("replaces"), name, f"{where}.replaces")
    if raw.get("unlimited"):
        if str(raw.get("unit", "")).lower() in UNIT_SECONDS:  # upstream refuses the contradiction too
            raise LimitsError(f"{where}.unit: should not specify rate limit unit when unlimited")
        return Limit(0, "second", name, unlimited=True, shadow_mode=shadow, replaces=replaces)
    unit = str(raw.get("unit", "")).lower()
    if unit not in UNIT_SECONDS:
        raise LimitsError(f"{where}.unit: must be one of second, minute, hour, day (got {raw.get('unit')!r})")
    rpu = raw.get("requests_per_unit")
    if not isinstance(rpu, int) or isinstance(rpu, bool) or rpu < 0:
        raise LimitsError(f"{where}.requests_per_unit: must be a non-negative integer")
    return Limit(rpu, unit, name, shadow_mode=shadow, replaces=replaces)


def parse_limits(text: str, source: str = "config") -> LimitsConfig:
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        raise LimitsError(f"{source}{at}: not valid YAML") from None
    if not isinstance(doc, dict):
        raise LimitsError(f"{source}: must be a mapping with 'domain' and 'descriptors'")
    domain = doc.get("domain")
    if not isinstance(domain, str) or not domain:
        raise LimitsError(f"{source}: domain: required, a non-empty string")
    return LimitsConfig(domain, _node(doc.get("descriptors"), f"{source}: descriptors"))


def load_limits(path: str) -> LimitsConfig:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise LimitsError(f"{path}: {exc.strerror}") from None
    return parse_limits(text, path)


@frozen
class Domains:
    """Every domain the server answers for: one file's, or a directory's (one per file)."""

    by_name: Mapping[str, LimitsConfig]

    def find(self, domain: str) -> LimitsConfig | None:
        return self.by_name.get(domain)


#: The files of a config directory that are read: hidden files (an editor's swap file) are not.
DOMAIN_FILE_SUFFIXES = (".yaml", ".yml")


def domain_files(path: str) -> list[str]:
    """The files ``load_domains`` reads for ``path`` (a file, or a directory's ``*.yaml``/``*.yml``)."""
    if not os.path.isdir(path):
        return [path]
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise LimitsError(f"{path}: {exc.strerror}") from None
    return [str(Path(path) / name) for name in names
            if name.endswith(DOMAIN_FILE_SUFFIXES) and not name.startswith(".")
            and os.path.isfile(Path(path) / name)]


def load_domains(path: str) -> Domains:
    """One config file, or a directory of them (each one domain; a domain twice is an error)."""
    files = domain_files(path)
    contents: dict[str, bytes] = {}
    for file in files:
        try:
            with open(file, "rb") as f:
                contents[file] = f.read()
        except OSError as exc:
            raise LimitsError(f"{file}: {exc.strerror}") from None
    return parse_domains(contents, path)


def parse_domains(contents: Mapping[str, bytes], path: str) -> Domains:
    """The domains of ``contents`` (file name -> bytes, in ``domain_files`` order) of config ``path``."""
    if not contents:
        raise LimitsError(f"{path}: a config directory needs at least one *.yaml or *.yml file (one per domain)")
    by_name: dict[str, LimitsConfig] = {}
    source: dict[str, str] = {}
    for file, raw in contents.items():
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise LimitsError(f"{file}: not UTF-8 text") from None
        config = parse_limits(text, file)
        if config.domain in by_name:
            raise LimitsError(f"{file}: duplicate domain {config.domain!r} in config file "
                              f"(also in {source[config.domain]})")
        by_name[config.domain], source[config.domain] = config, file
    return Domains(by_name)
