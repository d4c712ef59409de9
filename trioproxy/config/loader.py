"""Read a config file: YAML 1.2 with positions (ruamel.yaml) → ``document`` → ``model.Config``.

Every problem is one line, ``<file>:<line>:<col>: <path>: <what is wrong>`` (path such as
``binds[0].listeners[0].routes[1].backends[0].host``), all of them at once, sorted by place.
``ConfigError.problems`` holds the lines. What the fields are lives in ``document.py``; what
they become lives in ``compile.py``; this module only reads, expands and reports.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode
from ruamel.yaml.resolver import VersionedResolver, implicit_resolvers
from ruamel.yaml.tag import Tag

from . import model as m
from .compile import compile_document
from .describe import INVALID, Problem, Reader, read_document
from .document import Document

__all__ = ["ConfigError", "build_config", "load_config", "parse_config"]


class ConfigError(Exception):
    """The config is invalid; ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


#: More problems than this are summed up in one last line (a broken generated file can have
#: thousands; the first ones are what a person fixes first).
MAX_PROBLEMS = 200


def _raise_if_any(problems: list[Problem], source: str | None) -> None:
    if problems:
        placed = sorted(problems, key=lambda p: (p.line is None, p.line or 0, p.column or 0))
        lines = [p.render(source) for p in placed[:MAX_PROBLEMS]]
        if len(placed) > MAX_PROBLEMS:
            lines.append(f"{source or '<document>'}: {len(placed) - MAX_PROBLEMS} more problems not shown")
        raise ConfigError(lines)


def _yaml_1_2_table() -> dict[Any, list[tuple[Tag, re.Pattern[str]]]]:
    table: dict[Any, list[tuple[Tag, re.Pattern[str]]]] = {}
    for versions, tag, regexp, first in implicit_resolvers:
        if (1, 2) in versions:
            compiled = re.compile(regexp.pattern, regexp.flags)  # ruamel's are lazy proxies
            for char in first or [None]:  # type: ignore[list-item]
                table.setdefault(char, []).append((Tag(suffix=tag), compiled))
    return table


class Yaml12Resolver(VersionedResolver):
    """YAML 1.2 core tags whatever a ``%YAML`` directive says (as agentgateway reads files).

    ruamel's own resolver works out the version again for every scalar, which was half of the
    parse time of a large file; this one looks the first character up in a table made once."""

    processing_version = (1, 2)
    TABLE = _yaml_1_2_table()

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is ScalarNode and implicit[0]:
            for tag, regexp in self.TABLE.get(value[:1], ()):
                if regexp.match(value):
                    return tag
            for tag, regexp in self.TABLE.get(None, ()):
                if regexp.match(value):
                    return tag
            return self.DEFAULT_SCALAR_TAG
        return super().resolve(kind, value, implicit)


def _compose(text: str, *, pure: bool) -> list[Node]:
    yaml = YAML(typ="safe", pure=pure)
    yaml.Resolver = Yaml12Resolver
    return [node for node in yaml.compose_all(text) if node is not None]


def _place(error: MarkedYAMLError) -> tuple[int, int]:
    mark = error.problem_mark or error.context_mark
    return (mark.line, mark.column) if mark else (-1, -1)


def compose(text: str, source: str) -> list[Node]:
    """The YAML documents of ``text`` as nodes (YAML 1.2; the C parser when installed).

    ruamel's C parser (an older libyaml) rejects a ``:`` inside a plain scalar of a flow
    collection — ``[{host: 127.0.0.1:8080}]`` — which YAML 1.2, PyYAML and agentgateway's
    serde_yaml accept; so a document it rejects is read again by ruamel's pure-Python parser,
    and only when that one fails too is it invalid: reported by the parser that read further
    (the C one on a tie, whose messages are libyaml's, as for any other YAML error)."""
    try:
        try:
            return _compose(text, pure=False)
        except MarkedYAMLError as first:
            try:
                return _compose(text, pure=True)
            except MarkedYAMLError as second:
                raise (second if _place(second) > _place(first) else first) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = exc.problem or exc.context or str(exc).splitlines()[0]
        raise ConfigError([f"{where}: invalid YAML: {problem}"]) from None
    except YAMLError as exc:
        raise ConfigError([f"{source}: invalid YAML: {str(exc).splitlines()[0] if str(exc) else exc!r}"]) from None
    except RecursionError:
        raise ConfigError([f"{source}: invalid YAML: nested too deeply"]) from None


def _is_manifest(node: Node) -> bool:
    return isinstance(node, MappingNode) and any(
        isinstance(k, ScalarNode) and k.value == "apiVersion" for k, _ in node.value)


def build_from_node(node: Node | None, *, source: str | None, env: Mapping[str, str],
                    base_dir: str | None = None) -> m.Config:
    """Read, check and compile one standalone document node (raises ``ConfigError``); ``base_dir``
    is the config file's directory (relative paths are resolved against it)."""
    reader = Reader(env)
    document = read_document(Document, node, reader)
    if document is INVALID or reader.over_budget:
        _raise_if_any(reader.problems, source)
    config = compile_document(document, env, reader, base_dir)
    _raise_if_any(reader.problems, source)
    for warning in reader.warnings:
        logging.getLogger("trioproxy.config").warning("%s", warning.render(source))
    return config


@contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic GC while a config loads: it allocates tens of thousands of acyclic objects,
    and the collections they trigger were half of the load time of a 1,000-route file."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def parse_config(text: str, *, source: str = "<config>", env: Mapping[str, str] | None = None,
                 previous: m.Config | None = None, base_dir: str | None = None) -> m.Config:
    """Parse and validate config text (raises ``ConfigError``; problems name ``source``).

    ``previous`` (the running config, on a reload) lets a manifest keep the last valid version
    of a resource whose edit is invalid (docs/manifests.md)."""
    env = os.environ if env is None else env
    with _gc_paused():
        documents = compose(text, source)
        if len(documents) > 1 or (documents and _is_manifest(documents[0])):
            from .manifest import (  # Gateway/HTTPRoute/ProxyPolicy: docs/manifests.md
                ManifestError,
                load_manifest,
            )

            try:
                return load_manifest(text, source, env=env, previous=previous).config
            except ManifestError as error:
                raise ConfigError(error.problems) from None
        return build_from_node(documents[0] if documents else None, source=source, env=env, base_dir=base_dir)


def load_config(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None,
                previous: m.Config | None = None) -> m.Config:
    """Read, parse and validate a config file (raises ``ConfigError``)."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{name}: cannot read config file: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{name}: config file is not UTF-8 text"]) from None
    return parse_config(text, source=name, env=env, previous=previous,
                        base_dir=os.path.dirname(os.path.abspath(name)))


def build_config(document: Any, *, env: Mapping[str, str] | None = None) -> m.Config:
    """Validate an already-parsed document (dicts and lists); problems carry no position."""
    try:
        text = json.dumps(document)
    except (TypeError, ValueError) as exc:
        raise ConfigError([f"expected plain YAML data: {exc}"]) from None
    nodes = compose(text, "<document>")
    return build_from_node(nodes[0] if nodes else None, source=None, env=os.environ if env is None else env)
