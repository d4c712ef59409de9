"""Read a config file: YAML 1.2 with positions (ruamel.yaml) → ``document`` → ``model.Config``.

Every problem is one line, ``<file>:<line>:<col>: <path>: <what is wrong>`` (path such as
``binds[0].listeners[0].routes[1].backends[0].host``), all of them at once, sorted by place.
``ConfigError.problems`` holds the lines. What the fields are lives in ``document.py``; what
they become lives in ``compile.py``; this module only reads, expands and reports.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode

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


def _raise_if_any(problems: list[Problem], source: str | None) -> None:
    if problems:
        placed = sorted(problems, key=lambda p: (p.line is None, p.line or 0, p.column or 0))
        raise ConfigError([p.render(source) for p in placed])


def compose(text: str, source: str) -> list[Node]:
    """The YAML documents of ``text`` as nodes (YAML 1.2; the C parser when installed)."""
    yaml = YAML(typ="safe")
    try:
        return [node for node in yaml.compose_all(text) if node is not None]
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


def build_from_node(node: Node | None, *, source: str | None, env: Mapping[str, str]) -> m.Config:
    """Read, check and compile one standalone document node (raises ``ConfigError``)."""
    reader = Reader(env)
    document = read_document(Document, node, reader)
    if document is INVALID:
        _raise_if_any(reader.problems, source)
    config = compile_document(document, env, reader)
    _raise_if_any(reader.problems, source)
    return config


def parse_config(text: str, *, source: str = "<config>", env: Mapping[str, str] | None = None) -> m.Config:
    """Parse and validate config text (raises ``ConfigError``; problems name ``source``)."""
    env = os.environ if env is None else env
    documents = compose(text, source)
    if len(documents) > 1 or (documents and _is_manifest(documents[0])):
        raise ConfigError([f"{source}: Kubernetes-style manifests are not supported by this version of trioproxy"])
    return build_from_node(documents[0] if documents else None, source=source, env=env)


def load_config(path: str | os.PathLike[str], *, env: Mapping[str, str] | None = None) -> m.Config:
    """Read, parse and validate a config file (raises ``ConfigError``)."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{name}: cannot read config file: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{name}: config file is not UTF-8 text"]) from None
    return parse_config(text, source=name, env=env)


def build_config(document: Any, *, env: Mapping[str, str] | None = None) -> m.Config:
    """Validate an already-parsed document (dicts and lists); problems carry no position."""
    try:
        text = json.dumps(document)
    except (TypeError, ValueError) as exc:
        raise ConfigError([f"expected plain YAML data: {exc}"]) from None
    nodes = compose(text, "<document>")
    return build_from_node(nodes[0] if nodes else None, source=None, env=os.environ if env is None else env)
