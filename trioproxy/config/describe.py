"""The mechanism behind the one description of the config (``document.py`` is the description).

A *described class* is an attrs frozen class made with ``@described``; each attribute is made
with ``field(description, default=...)`` and typed by its annotation. From those classes alone
come:

- reading: ``read_document`` turns YAML nodes (ruamel.yaml, with positions) into instances and
  collects every problem with its path and line/column (``Reader``);
- the JSON Schema (draft 2020-12) for editors: ``json_schema``;
- the Kubernetes CRD flavour (``openAPIV3Schema``: no ``$ref``, no 2020-12-only keywords) of any
  described class: ``openapi_schema``.

Types an annotation may use: ``str`` (non-empty), ``int``, ``bool``, ``Literal[...]`` (words, or integers),
``X | None`` (null or absent → ``None``), ``tuple[X, ...]`` (a YAML list; null → ``()``),
``dict[str, X]``, another described class, a union of kinds YAML tells apart (mapping /
list / scalar), and ``Annotated[T, <kind>]`` with a kind from this module (``Integer(low, high)``,
``Text(min_length=0)``, ``Items(min_items=1)``, a ``Scalar`` such as ``DURATION``, or
``NOT_SUPPORTED``). A new scalar syntax is one ``Scalar(name, parse, schema, expected)`` whose
``parse`` raises ``ValueError`` with the message to show.

Reading follows serde_yaml (which agentgateway uses): a plain scalar read where a string is
expected is its text as written (``1.10`` and ``off`` stay strings); YAML 1.2 resolves the rest.
``$VAR``/``${VAR}`` in scalars are expanded from the environment before a value is read.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, get_args, get_origin

import attrs
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

__all__ = [
    "NOT_SUPPORTED",
    "Integer",
    "Items",
    "Origin",
    "Problem",
    "Reader",
    "Scalar",
    "Text",
    "described",
    "field",
    "json_schema",
    "openapi_schema",
    "read_document",
    "wire_name",
]

INVALID: Any = attrs.NOTHING  # what a read returns when it has recorded a problem
SIMPLE_ENV = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*)|(\$))")
NULL_TAG = "tag:yaml.org,2002:null"
STR_TAG = "tag:yaml.org,2002:str"
INT_TAG = "tag:yaml.org,2002:int"
FLOAT_TAG = "tag:yaml.org,2002:float"
BOOL_TAG = "tag:yaml.org,2002:bool"
#: Most mapping and list values a document may expand to, aliases counted each time they are
#: used (a 1,000-route file has ~15,000): bounds reading and compiling alike.
NODE_BUDGET = 250_000


# --- the description: fields and classes -----------------------------------------------------


def field(description: str, *, default: Any = attrs.NOTHING, name: str | None = None,
          missing: str = "required field is missing") -> Any:
    """One field of a described class.

    ``description`` goes into the schema (editors show it); ``default`` absent = required;
    ``name`` is the wire name (default: the attribute in camelCase); ``missing`` is the message
    when a required field is absent.
    """
    metadata = {"description": description, "name": name, "missing": missing}
    if default is attrs.NOTHING:
        return attrs.field(metadata=metadata)
    return attrs.field(default=default, metadata=metadata)


def described(cls: type | None = None, *, one_of: tuple[str, ...] = (),
              rules: tuple[tuple[str, str], ...] = ()) -> Any:
    """Make ``cls`` a described class (attrs, frozen, keyword-only).

    ``one_of`` names wire fields of which exactly one must be present (``host`` xor ``ai``);
    when that rule is broken none of them is read further, so the one message says it all.
    ``rules`` are ``(CEL rule over self, message)`` pairs: a CRD's ``x-kubernetes-validations``
    (``config/manifest_validate.py`` evaluates them as the API server would).
    """

    def wrap(klass: type) -> type:
        klass.__describe_one_of__ = one_of  # type: ignore[attr-defined]
        klass.__describe_rules__ = rules  # type: ignore[attr-defined]
        return attrs.frozen(kw_only=True)(klass)

    return wrap(cls) if cls is not None else wrap


def wire_name(attribute: attrs.Attribute[Any]) -> str:
    explicit = attribute.metadata.get("name")
    if explicit:
        return str(explicit)
    head, *rest = attribute.name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# --- problems and where they are ---------------------------------------------------------------


@attrs.frozen
class Problem:
    path: str
    message: str
    line: int | None = None  # 0-based, as ruamel marks are
    column: int | None = None

    def render(self, source: str | None) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        if source is None or self.line is None or self.column is None:
            return text
        return f"{source}:{self.line + 1}:{self.column + 1}: {text}"


@attrs.frozen
class Origin:
    """Where a described instance was read from (for problems found after reading)."""

    path: str
    node: Node
    index: int | None  # its index when it is a list item


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def describe_node(node: Node) -> str:
    """How a message names a value it rejects: ``'text'``, ``70000``, ``null``, ``a list``."""
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    plain = not getattr(node, "style", None)
    if node.tag == NULL_TAG and plain:
        return "null"
    if node.tag == BOOL_TAG and plain:
        return "a boolean"
    if node.tag in (INT_TAG, FLOAT_TAG) and plain:
        return str(node.value)
    return repr(node.value)


class Reader:
    """Reads nodes against the description; collects problems instead of raising."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.problems: list[Problem] = []
        self.warnings: list[Problem] = []  # valid but likely a mistake: logged once the config loads
        self.origins: dict[int, Origin] = {}
        self.expanded = 0  # mapping and list nodes read, aliases counted as often as used
        self.over_budget = False
        self._active: set[int] = set()  # mapping/list nodes being read
        self.memo: dict[tuple[int, int], tuple[Any, int]] = {}  # (node, kind) -> (value, expanded size)

    def problem(self, path: str, message: str, node: Node | None = None) -> None:
        mark = node.start_mark if node is not None else None
        self.problems.append(Problem(path, message, mark.line if mark else None, mark.column if mark else None))

    def at(self, obj: Any, key: str | None, message: str) -> None:
        """A problem about field ``key`` (wire name) of a read instance, placed at its value."""
        origin = self.origins[id(obj)]
        node = origin.node
        if key is not None and isinstance(node, MappingNode):
            node = next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == key), node)
        self.problem(_join(origin.path, key) if key else origin.path, message, node)

    def warn(self, obj: Any, key: str | None, message: str) -> None:
        """Like ``at``, for a warning; an instance read from no node (an empty file) has no position."""
        origin = self.origins.get(id(obj))
        if origin is None:
            self.warnings.append(Problem(key or "", message))
            return
        node = origin.node
        if key is not None and isinstance(node, MappingNode):
            node = next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == key), node)
        mark = node.start_mark if node is not None else None
        self.warnings.append(Problem(_join(origin.path, key) if key else origin.path, message,
                                     mark.line if mark else None, mark.column if mark else None))

    def origin(self, obj: Any) -> Origin:
        return self.origins[id(obj)]

    def scalar_text(self, node: Node, path: str) -> tuple[str, str, bool]:
        """(tag, text, plain) of a scalar after ``$VAR`` expansion (expanded text is a string)."""
        text = str(node.value)
        if "$" not in text:
            return str(node.tag), text, not getattr(node, "style", None)

        def substitute(found: re.Match[str]) -> str:
            if found.group(3):
                return "$"
            name = found.group(1) or found.group(2)
            if name not in self.env:
                self.problem(path, f"environment variable {name} is not set", node)
                return ""
            return self.env[name]

        return STR_TAG, SIMPLE_ENV.sub(substitute, text), False

    def nested(self, kind: Kind, node: Node, path: str, read: Callable[[], Any]) -> Any:
        """Read a mapping or list node once per kind, whatever the number of aliases to it.

        The expanded size (what a reader without sharing would walk) is counted against
        ``NODE_BUDGET``, so aliases cannot make a small file compile to millions of routes;
        a node that contains itself is a problem, not endless recursion.
        """
        key = (id(node), id(kind))
        hit = self.memo.get(key)
        if hit is not None:
            self.expanded += hit[1]
            return hit[0] if self._within_budget(node, path) else INVALID
        if id(node) in self._active:
            self.problem(path, "recursive alias", node)
            return INVALID
        before = self.expanded
        self.expanded += 1
        if not self._within_budget(node, path):
            return INVALID
        self._active.add(id(node))
        try:
            value = read()
        finally:
            self._active.discard(id(node))
        self.memo[key] = (value, self.expanded - before)
        return value

    def _within_budget(self, node: Node, path: str) -> bool:
        if self.expanded <= NODE_BUDGET:
            return True
        if not self.over_budget:
            self.over_budget = True
            self.problem(path, f"document too large: aliases expand it past {NODE_BUDGET} values", node)
        return False


# --- kinds: how one type is read and how its schema looks ------------------------------------


class Kind:
    """How values of one type are read from nodes and shown in the schema."""

    def read(self, r: Reader, node: Node, path: str) -> Any:
        raise NotImplementedError

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        raise NotImplementedError

    #: which YAML node shape this kind takes ("scalar", "mapping", "list", "any")
    shape = "scalar"


def _expected_scalar(r: Reader, node: Node, path: str, expected: str) -> bool:
    if isinstance(node, ScalarNode):
        return True
    r.problem(path, f"expected {expected}, got {describe_node(node)}", node)
    return False


@attrs.frozen(eq=False)
class Text(Kind):
    """A string; plain scalars are taken as written. ``min_length=1`` by default. ``expand=False``
    keeps ``$`` as written (htpasswd hashes are full of it): no ``$VAR`` expansion. ``pattern`` and
    ``max_length`` go into the schema only (the Gateway API resources' own, checked by
    ``manifest_validate``)."""

    min_length: int = 1
    expand: bool = True
    pattern: str | None = None
    max_length: int | None = None

    def read(self, r: Reader, node: Node, path: str) -> Any:
        expected = "a non-empty string" if self.min_length else "a string"
        if not _expected_scalar(r, node, path, expected):
            return INVALID
        if self.expand:
            tag, text, plain = r.scalar_text(node, path)
        else:
            tag, text, plain = str(node.tag), str(node.value), not getattr(node, "style", None)
        if (tag == NULL_TAG and plain) or len(text) < self.min_length:
            r.problem(path, f"expected {expected}, got {describe_node(node) if text else repr(text)}", node)
            return INVALID
        return text

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.min_length:
            out["minLength"] = self.min_length
        if self.max_length is not None:
            out["maxLength"] = self.max_length
        if self.pattern is not None:
            out["pattern"] = self.pattern
        return out


@attrs.frozen(eq=False)
class Integer(Kind):
    """An integer in ``[low, high]``; a string of digits (from ``$VAR``) is read as one."""

    low: int = -(2**63)
    high: int = 2**63 - 1

    def read(self, r: Reader, node: Node, path: str) -> Any:
        if not _expected_scalar(r, node, path, "an integer"):
            return INVALID
        tag, text, plain = r.scalar_text(node, path)
        value: int | None = None
        if tag == INT_TAG and plain:
            try:
                value = int(text.replace("_", ""), 0)
            except ValueError:
                value = int(text.replace("_", ""), 10) if text.lstrip("+-").isdigit() else None
        elif tag == STR_TAG and text.strip().isdigit():
            value = int(text.strip())
        if value is None:
            got = describe_node(node) if tag != STR_TAG or plain else repr(text)
            r.problem(path, f"expected an integer, got {got}", node)
            return INVALID
        if not self.low <= value <= self.high:
            r.problem(path, f"expected an integer from {self.low} to {self.high}, got {value}", node)
            return INVALID
        return value

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        out = {"type": "integer", "minimum": self.low, "maximum": self.high}
        if s.openapi:
            return out
        return {"anyOf": [out, {"type": "string", "pattern": r"\$", "description": "an environment reference"}]}


@attrs.frozen(eq=False)
class Boolean(Kind):
    def read(self, r: Reader, node: Node, path: str) -> Any:
        if not _expected_scalar(r, node, path, "true or false"):
            return INVALID
        tag, text, plain = r.scalar_text(node, path)
        if (tag == BOOL_TAG and plain) or tag == STR_TAG and text in ("true", "false"):
            return text.lower() == "true"
        r.problem(path, f"expected true or false, got {describe_node(node)}", node)
        return INVALID

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        return {"type": "boolean"}


@attrs.frozen(eq=False)
class Choice(Kind):
    """One of fixed words (from ``Literal[...]``)."""

    values: tuple[str, ...]

    def read(self, r: Reader, node: Node, path: str) -> Any:
        words = self.values
        expected = words[0] if len(words) == 1 else (
            f"{words[0]} or {words[1]}" if len(words) == 2 else f"one of: {', '.join(words)}")
        if not _expected_scalar(r, node, path, expected):
            return INVALID
        tag, text, plain = r.scalar_text(node, path)
        if text in words and not (tag == NULL_TAG and plain):
            return text
        r.problem(path, f"expected {expected}, got {describe_node(node)}", node)
        return INVALID

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.values)}


@attrs.frozen(eq=False)
class NumberChoice(Kind):
    """One of fixed integers (from ``Literal[301, 302]``): a redirect status."""

    values: tuple[int, ...]

    def read(self, r: Reader, node: Node, path: str) -> Any:
        value = Integer().read(r, node, path)
        if value is INVALID or value in self.values:
            return value
        r.problem(path, f"expected one of: {', '.join(map(str, self.values))}, got {value}", node)
        return INVALID

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        return {"type": "integer", "enum": list(self.values)}


@attrs.frozen(eq=False)
class Scalar(Kind):
    """A string with a syntax: ``parse(text)`` returns the value or raises ``ValueError(message)``.

    ``expected`` completes "expected ..., got X" when ``parse`` raises without a message.
    """

    name: str
    parse: Callable[[str], Any]
    json: Mapping[str, Any]
    expected: str

    def read(self, r: Reader, node: Node, path: str) -> Any:
        if not _expected_scalar(r, node, path, self.expected):
            return INVALID
        tag, text, plain = r.scalar_text(node, path)
        if not (tag == NULL_TAG and plain):
            try:
                return self.parse(text)
            except ValueError as exc:
                if str(exc):
                    r.problem(path, str(exc), node)
                    return INVALID
        got = describe_node(node) if tag != STR_TAG or plain else repr(text)
        r.problem(path, f"expected {self.expected}, got {got}", node)
        return INVALID

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        out = dict(self.json)
        if s.openapi:
            out.pop("format", None)  # the API server knows only its own formats
        return out


@attrs.frozen(eq=False)
class NotSupported(Kind):
    """A field the contract names but this version does not build: any value is an error."""

    message: str = "policy is not supported by this version of trioproxy"
    shape = "any"

    def read(self, r: Reader, node: Node, path: str) -> Any:
        r.problem(path, self.message, node)
        return INVALID

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        return {"not": {}}


NOT_SUPPORTED = NotSupported()


@attrs.frozen(eq=False)
class Items(Kind):
    """A YAML list → tuple; null → ``()``; invalid items are left out (their problems kept).
    ``rules``: the list's own ``x-kubernetes-validations`` (schema only; ``manifest_validate``)."""

    item: Kind | None = None
    min_items: int = 0
    rules: tuple[tuple[str, str], ...] = ()
    shape = "list"

    def read(self, r: Reader, node: Node, path: str) -> Any:
        if isinstance(node, ScalarNode) and node.tag == NULL_TAG and not node.style:
            return self._check(r, node, path, ())
        if not isinstance(node, SequenceNode):
            r.problem(path, f"expected a list, got {describe_node(node)}", node)
            return INVALID
        return r.nested(self, node, path, lambda: self._items(r, node, path))

    def _items(self, r: Reader, node: SequenceNode, path: str) -> Any:
        assert self.item is not None
        values = []
        ok = True
        for i, child in enumerate(node.value):
            where = f"{path}[{i}]"
            value = self.item.read(r, child, where)
            if value is INVALID:
                ok = False
                continue
            if attrs.has(type(value)):
                known = r.origins.get(id(value))
                if known is None or known.index is None:  # else an alias of an item placed already
                    r.origins[id(value)] = Origin(where, child, i)
            values.append(value)
        if not ok and not values:
            return INVALID
        return self._check(r, node, path, tuple(values))

    def _check(self, r: Reader, node: Node, path: str, values: tuple[Any, ...]) -> Any:
        if len(values) < self.min_items:
            r.problem(path, "expected at least one entry", node)
            return INVALID
        return values

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        assert self.item is not None
        out: dict[str, Any] = {"type": "array", "items": s.kind(self.item)}
        if self.min_items:
            out["minItems"] = self.min_items
        if self.rules:
            out["x-kubernetes-validations"] = [{"rule": rule, "message": message} for rule, message in self.rules]
        return out


@attrs.frozen(eq=False)
class Entries(Kind):
    """A YAML mapping with free keys → ``dict`` (``{x-served-by: trioproxy}``)."""

    key: Kind
    value: Kind
    shape = "mapping"

    def read(self, r: Reader, node: Node, path: str) -> Any:
        if not isinstance(node, MappingNode):
            r.problem(path, f"expected a mapping, got {describe_node(node)}", node)
            return INVALID
        out = {}
        for key_node, value_node in node.value:
            where = _join(path, str(key_node.value))
            key = self.key.read(r, key_node, where)
            value = self.value.read(r, value_node, where)
            if key is not INVALID and value is not INVALID:
                out[key] = value
        return out

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object", "additionalProperties": s.kind(self.value)}
        key = s.kind(self.key)
        if not s.openapi and "pattern" in key:
            out["propertyNames"] = {"pattern": key["pattern"]}
        return out


@attrs.frozen(eq=False)
class Optional(Kind):
    """``X | None``: null (or absent) → ``None``."""

    inner: Kind

    @property
    def shape(self) -> str:  # type: ignore[override]
        return self.inner.shape

    def read(self, r: Reader, node: Node, path: str) -> Any:
        if isinstance(node, ScalarNode) and node.tag == NULL_TAG and not node.style and not isinstance(
                self.inner, (NotSupported, Items)):
            return None
        return self.inner.read(r, node, path)

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        inner = s.kind(self.inner)
        if s.openapi:
            return {**inner, "nullable": True} if "not" not in inner else inner
        if "not" in inner:
            return inner
        return {"anyOf": [inner, {"type": "null"}]}


@attrs.frozen(eq=False)
class Either(Kind):
    """A union whose alternatives YAML tells apart by shape (mapping, list or scalar)."""

    alternatives: tuple[Kind, ...]
    shape = "any"

    def read(self, r: Reader, node: Node, path: str) -> Any:
        shape = "mapping" if isinstance(node, MappingNode) else "list" if isinstance(node, SequenceNode) else "scalar"
        for kind in self.alternatives:
            if kind.shape == shape:
                return kind.read(r, node, path)
        names = {"mapping": "a mapping", "list": "a list", "scalar": "a value"}
        expected = " or ".join(names[k.shape] for k in self.alternatives)
        r.problem(path, f"expected {expected}, got {describe_node(node)}", node)
        return INVALID

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        if s.openapi:  # structural schemas cannot say "list or mapping"
            return {"x-kubernetes-preserve-unknown-fields": True}
        return {"anyOf": [s.kind(k) for k in self.alternatives]}


@attrs.frozen
class FieldPlan:
    attribute: str
    wire: str
    kind: Kind
    required: bool
    default: Any
    description: str
    missing: str


@attrs.frozen(eq=False)
class Described(Kind):
    """A described class: a mapping whose keys are its fields' wire names."""

    cls: type
    shape = "mapping"

    def read(self, r: Reader, node: Node, path: str) -> Any:
        plan = plan_of(self.cls)
        if not isinstance(node, MappingNode):
            r.problem(path, f"expected a mapping, got {describe_node(node)}", node)
            return INVALID
        return r.nested(self, node, path, lambda: self._read_fields(plan, r, node, path))

    def _read_fields(self, plan: ClassPlan, r: Reader, node: MappingNode, path: str) -> Any:
        by_wire = plan.by_wire
        present: dict[str, tuple[Node, Node]] = {}
        ok = True
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, ScalarNode) else None
            if not isinstance(key, str):
                r.problem(path, f"expected a field name, got {describe_node(key_node)}", key_node)
                ok = False
                continue
            if key in present:
                r.problem(_join(path, key), f"duplicate field (first at line {present[key][0].start_mark.line + 1})",
                          key_node)
                ok = False
                continue
            present[key] = (key_node, value_node)
            if key not in by_wire:
                r.problem(_join(path, key), unknown_field_message(self.cls, key, plan.wire_names), key_node)
                ok = False
        skip: set[str] = set()
        chosen = sum(name in present for name in plan.one_of)
        # none chosen but an unknown key: that key is the likely misspelling, one message is enough
        if plan.one_of and chosen != 1 and (chosen or ok):
            r.problem(path, f"expected exactly one of: {', '.join(plan.one_of)}", node)
            skip = set(plan.one_of)
            ok = False
        values: dict[str, Any] = {}
        for f in plan.fields:
            found = present.get(f.wire)
            if found is None:
                if f.required and f.wire not in skip:
                    r.problem(_join(path, f.wire), f.missing, node)
                    ok = False
                continue
            if f.wire in skip:
                continue
            value = f.kind.read(r, found[1], _join(path, f.wire))
            if value is INVALID:
                ok = False
            else:
                values[f.attribute] = value
        if not ok:
            return INVALID
        instance = self.cls(**values)
        r.origins.setdefault(id(instance), Origin(path, node, None))
        return instance

    def schema(self, s: _SchemaWriter) -> dict[str, Any]:
        return s.described(self.cls)


@attrs.frozen
class ClassPlan:
    cls: type
    fields: tuple[FieldPlan, ...]
    by_wire: dict[str, FieldPlan]
    wire_names: tuple[str, ...]
    one_of: tuple[str, ...]
    description: str
    rules: tuple[tuple[str, str], ...] = ()


_PLANS: dict[type, ClassPlan] = {}


def plan_of(cls: type) -> ClassPlan:
    """The fields of a described class with their kinds (computed once per class)."""
    plan = _PLANS.get(cls)
    if plan is not None:
        return plan
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = []
    for attribute in attrs.fields(cls):
        if "description" not in attribute.metadata:
            raise TypeError(f"{cls.__name__}.{attribute.name}: make it with describe.field(description, ...)")
        default = attribute.default
        if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
            default = default.factory()
        fields.append(FieldPlan(
            attribute=attribute.name,
            wire=wire_name(attribute),
            kind=kind_of(hints[attribute.name], f"{cls.__name__}.{attribute.name}"),
            required=attribute.default is attrs.NOTHING,
            default=default,
            description=attribute.metadata["description"],
            missing=attribute.metadata["missing"],
        ))
    doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
    if not doc:
        raise TypeError(f"{cls.__name__}: a described class needs a docstring (it is its schema description)")
    plan = ClassPlan(cls, tuple(fields), {f.wire: f for f in fields}, tuple(sorted(f.wire for f in fields)),
                     getattr(cls, "__describe_one_of__", ()), doc, getattr(cls, "__describe_rules__", ()))
    _PLANS[cls] = plan
    return plan


def kind_of(hint: Any, where: str) -> Kind:
    """The kind an annotation stands for."""
    origin = get_origin(hint)
    if origin is Annotated:
        base, *extras = get_args(hint)
        kinds = [e for e in extras if isinstance(e, Kind)]
        if not kinds:
            return kind_of(base, where)
        kind = kinds[0]
        if isinstance(kind, Items) and kind.item is None:
            return attrs.evolve(kind, item=kind_of(base, where).item)  # type: ignore[attr-defined]
        return kind
    if origin in (types.UnionType, typing.Union):
        args = [a for a in get_args(hint) if a is not type(None)]
        inner = kind_of(args[0], where) if len(args) == 1 else Either(tuple(kind_of(a, where) for a in args))
        return Optional(inner) if len(args) < len(get_args(hint)) else inner
    if origin is tuple:
        items = get_args(hint)
        if len(items) != 2 or items[1] is not Ellipsis:
            raise TypeError(f"{where}: use tuple[X, ...]")
        return Items(kind_of(items[0], where))
    if origin is dict:
        key, value = get_args(hint)
        return Entries(kind_of(key, where), kind_of(value, where))
    if origin is Literal:
        values = get_args(hint)
        if all(type(v) is int for v in values):
            return NumberChoice(values)
        return Choice(tuple(str(v) for v in values))
    if hint is str:
        return Text()
    if hint is bool:
        return Boolean()
    if hint is int:
        return Integer()
    if isinstance(hint, type) and attrs.has(hint) and hasattr(hint, "__describe_one_of__"):
        return Described(hint)
    raise TypeError(f"{where}: no kind for {hint!r}; use Annotated[T, <kind>]")


def unknown_field_message(cls: type, key: str, allowed: tuple[str, ...]) -> str:
    """``unknown field; did you mean 'routes'?``, or the agentgateway-only message."""
    from .agentgateway_fields import UNIMPLEMENTED

    if key in UNIMPLEMENTED.get(cls.__name__, ()):
        return f"'{key}' is an agentgateway feature that trioproxy does not implement"
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6) or [
        a for a in allowed if a.lower() == key.lower()][:1]
    if close:
        return f"unknown field; did you mean '{close[0]}'?"
    return f"unknown field (expected one of: {', '.join(allowed)})"


def read_document(cls: type, node: Node | None, reader: Reader) -> Any:
    """Read the root node as ``cls`` (an empty document reads as ``{}``)."""
    if node is None:
        node = MappingNode("tag:yaml.org,2002:map", [])
    value = Described(cls).read(reader, node, "")
    if value is not INVALID:
        reader.origins[id(value)] = Origin("", node, None)
    return value


# --- schemas ------------------------------------------------------------------------------------


class _SchemaWriter:
    def __init__(self, *, openapi: bool) -> None:
        self.openapi = openapi
        self.defs: dict[str, Any] = {}

    def kind(self, kind: Kind) -> dict[str, Any]:
        return kind.schema(self)

    def described(self, cls: type, *, inline: bool = False) -> dict[str, Any]:
        if self.openapi or inline:
            return self.object(cls)
        name = cls.__name__
        if name not in self.defs:
            self.defs[name] = {}  # placeholder against recursion
            self.defs[name] = self.object(cls)
        return {"$ref": f"#/$defs/{name}"}

    def object(self, cls: type) -> dict[str, Any]:
        plan = plan_of(cls)
        properties: dict[str, Any] = {}
        for f in plan.fields:
            schema = self.kind(f.kind)
            if self.openapi and "not" in schema:
                continue  # not built yet: a CRD simply does not have the field
            schema = {**schema, "description": f.description}
            if not f.required and _json_default(f.default) is not None:
                schema["default"] = _json_default(f.default)
            properties[f.wire] = schema
        out: dict[str, Any] = {"type": "object", "description": plan.description, "properties": properties}
        required = [f.wire for f in plan.fields if f.required]
        if required:
            out["required"] = required
        if not self.openapi:
            out["additionalProperties"] = False
        if plan.one_of:
            out["oneOf"] = [{"required": [name]} for name in plan.one_of]
        if plan.rules and self.openapi:
            out["x-kubernetes-validations"] = [{"rule": rule, "message": message} for rule, message in plan.rules]
        return out


def _json_default(value: Any) -> Any:
    """A default the schema can show (scalars); ``None`` for none or empty ones."""
    return value if isinstance(value, (str, bool, int, float)) else None


def json_schema(cls: type, *, schema_id: str | None = None, title: str | None = None) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a described class as the root document."""
    writer = _SchemaWriter(openapi=False)
    root = writer.described(cls, inline=True)
    out: dict[str, Any] = {"$schema": "https://json-schema.org/draft/2020-12/schema"}
    if schema_id:
        out["$id"] = schema_id
    if title:
        out["title"] = title
    out.update(root)
    out["$defs"] = dict(sorted(writer.defs.items()))
    return out


def openapi_schema(cls: type) -> dict[str, Any]:
    """The OpenAPI v3 schema of a described class, as a Kubernetes CRD's ``openAPIV3Schema``
    wants it: everything inline (no ``$ref``), no draft-2020-only keywords, no
    ``additionalProperties: false`` (the API server prunes unknown fields), fields not built yet left out."""
    return _SchemaWriter(openapi=True).described(cls)
