"""CEL expressions for trace filters, authorization rules and rate-limit descriptors.

Engine: ``common-expression-language`` (import name ``cel``; the Rust ``cel`` crate via
PyO3).  Measured against ``cel-python`` 0.5 (``celpy``) with ``bench/cel_engines.py`` on
eleven typical gateway expressions (CPython 3.11, activation = a request with 6 headers,
source, 3 JWT claims, 2 llm fields):

=================================== ================= ===================================
engine                              compile µs median evaluate µs per request, median
                                    (range)            (range)
=================================== ================= ===================================
common-expression-language 0.10     10 (5-28)         37 (36-51), whole activation
cel-python 0.5                      105 (51-267)      178 (114-350); 135 (60-289) with
                                                      the activation pre-converted
trioproxy.cel (this module, on cel) 16 (10-46)        13.5 (3.7-17)
=================================== ================= ===================================

Both engines gave the expected answer on every case (missing map keys are evaluation
errors in both; ``in`` on maps, ``has()``, ``startsWith/endsWith/contains/matches``
behave per spec).  The Rust engine is ~10x faster to compile and ~5x faster to evaluate
(~13x behind this wrapper), and its syntax errors name line, column and the expected
tokens, whereas cel-python's ``CELParseError`` only carries a caret.  So this module
wraps ``cel``.

Almost all evaluation time is the conversion of the Python activation into CEL values
(about 1 µs per string), so :meth:`Expression.evaluate` hands the engine only the root
variables the expression references and, when a root is only used as ``root.field``,
only those fields (``source.address == "..."`` never converts the request headers,
``request.method == "POST"`` converts one string).  :func:`build_activation` itself
only builds plain dicts (~2.4 µs for six headers).

Engine limits worth knowing: no ``cel.bind``, no two-variable comprehensions, no
optional syntax (``a.?b``), no cel-go string extensions (``lowerAscii``, ``split``...);
unknown functions are only detected when evaluated.  Very long expressions can overflow
the native parser's stack (a 60 000 character ``1+1+...`` chain crashes the process), so
sources longer than :data:`MAX_EXPRESSION_LENGTH` are refused at compile time.
"""

from __future__ import annotations

import ipaddress
import random
import re
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def _load_engine() -> Any:
    """The ``cel`` package, without its command-line tool: the package's ``__init__`` imports
    ``cel.cli``, which pulls typer, rich and prompt_toolkit into every gateway process (part of
    the ~11 MB measured in bench/README.md, llm_load section). A placeholder stands in for that
    one submodule while the package loads, then goes, so a later ``import cel.cli`` would load
    the real one."""
    if "cel" in sys.modules:
        return sys.modules["cel"]
    placeholder = types.ModuleType("cel.cli")
    sys.modules.setdefault("cel.cli", placeholder)
    try:
        import cel
    finally:
        if sys.modules.get("cel.cli") is placeholder:
            del sys.modules["cel.cli"]
    if getattr(cel, "cli", None) is placeholder:
        del cel.cli
    return cel


#: the CEL engine (the ``cel`` package's Rust extension); import it from here, not as ``cel``
engine: Any = _load_engine()

__all__ = [
    "ALLOWED_ROOTS",
    "MAX_EXPRESSION_LENGTH",
    "CelError",
    "CelEvaluationError",
    "Expression",
    "build_activation",
    "compile_expression",
]

#: Root variables an expression may reference (agentgateway's names).
ALLOWED_ROOTS: frozenset[str] = frozenset(
    {"request", "source", "jwt", "basicAuth", "apiKey", "llm", "response", "backend", "llmRequest", "key", "team",
     "mcp"}
)

#: Longest accepted expression source, in characters.  Gateway expressions are short;
#: the limit keeps hostile input (the admin trace endpoint takes expressions from a
#: query string) far away from the native parser's recursion limit.
MAX_EXPRESSION_LENGTH = 8192

# Identifiers the engine reports as "variables" although they are not activation roots:
# type values (``type(x) == string``) and the ``optional`` namespace.
_BUILTIN_IDENTIFIERS = frozenset(
    {
        "bool", "bytes", "double", "duration", "dyn", "int", "list", "map",
        "null_type", "string", "timestamp", "type", "uint", "optional",
    }
)

# Variables bound by the single-variable comprehension macros: ``x.all(v, ...)``.
_MACRO_BINDING = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_][A-Za-z0-9_]*)\s*,"
)

# A root variable used as ``root.field`` (``(?<![\w.])`` skips ``x.request``; a
# receiver call such as ``request.exists(k, ...)`` or ``jwt.size()`` is not a field).
_ROOT_FIELD = r"(?<![\w.])%s\s*\.\s*([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\()"
_ROOT_ANY = r"(?<![\w.])%s\b"

# First diagnostic of the engine's parse error:
#   "Failed to parse expression '1 +': ERROR: <input>:1:4: Syntax error: mismatched ..."
_PARSE_ERROR = re.compile(r"ERROR: <input>:(\d+):(\d+): (.*)")


def _cidr(text: str) -> str:
    """``cidr("10.0.0.0/8")``: the network as text (checked by ``containsIP``)."""
    return text


def _strip_prefix(text: str, prefix: str) -> str:
    """``llmRequest.model.stripPrefix("anthropic/")``: ``text`` without ``prefix`` when it starts with it."""
    return text[len(prefix):] if isinstance(text, str) and text.startswith(prefix) else text


def _contains_ip(network: str, address: str) -> bool:
    """``cidr(...).containsIP(source.address)``: false for an invalid network or address (the
    engine would print a Python error for every raising call); IPv4-mapped IPv6 counts as IPv4."""
    try:
        ip = ipaddress.ip_address(address)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return ip in ipaddress.ip_network(network, strict=False)
    except ValueError:
        return False


#: agentgateway's CEL extensions that this module provides. Only expressions that call one
#: pay for the engine's ``Context`` (~30 µs per evaluation); the others get a plain dict.
EXTENSION_FUNCTIONS: dict[str, Callable[..., Any]] = {"cidr": _cidr, "containsIP": _contains_ip,
                                                      "random": random.random, "stripPrefix": _strip_prefix}


class CelError(ValueError):
    """An expression that cannot be compiled (or, as a subclass, evaluated).

    ``str(err)`` is a one-line message fit for ``400 invalid expression: <message>`` and
    for config errors (``routes[0].policies.authorization.rules[1]: <message>``).
    """

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        line: int | None = None,
        column: int | None = None,
        detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.line = line
        self.column = column
        #: the engine's full text (multi-line, with a caret), when there is one
        self.detail = detail


class CelEvaluationError(CelError):
    """Raised by :meth:`Expression.evaluate_strict` when evaluation fails."""


def _is_engine_failure(exc: BaseException) -> bool:
    # The binding raises ValueError/TypeError/KeyError/RuntimeError/ZeroDivisionError...
    # and, for internal bugs, pyo3's PanicException, which derives from BaseException.
    return isinstance(exc, Exception) or type(exc).__name__ == "PanicException"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _parse_error(source: str, exc: BaseException) -> CelError:
    text = str(exc)
    match = _PARSE_ERROR.search(text)
    if match:
        line, column, reason = int(match[1]), int(match[2]), match[3].strip()
        reason = reason[0].lower() + reason[1:] if reason else "syntax error"
        if not reason.startswith("syntax error"):
            reason = f"syntax error: {reason}"
        return CelError(
            f"{reason} at line {line}, column {column}",
            source=source,
            line=line,
            column=column,
            detail=text,
        )
    return CelError(f"syntax error: {_one_line(text) or type(exc).__name__}", source=source, detail=text)


def _evaluation_message(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        key = exc.args[0] if exc.args else "?"
        return f"no such key: {key}"
    text = _one_line(str(exc))
    # "Undefined variable or function: 'foo'. Check that ..." -> keep the first sentence.
    if text.startswith("Undefined variable or function:"):
        text = text.split(". Check", 1)[0]
    return text or type(exc).__name__


class Expression:
    """A compiled CEL expression.  Immutable; safe to share between requests."""

    __slots__ = ("source", "roots", "_program", "_fields", "_functions")

    def __init__(self, source: str, program: Any, roots: tuple[str, ...]) -> None:
        self.source = source
        #: the allowed root variables the expression references, sorted
        self.roots = roots
        self._program = program
        self._fields = tuple((root, _referenced_fields(source, root)) for root in roots)
        try:
            called = set(program.functions())
        except Exception:  # engines without the introspection: never needed
            called = set()
        self._functions = {name: f for name, f in EXTENSION_FUNCTIONS.items() if name in called} or None

    def __repr__(self) -> str:
        return f"Expression({self.source!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expression) and other.source == self.source

    def __hash__(self) -> int:
        return hash(self.source)

    def _bindings(self, activation: Mapping[str, Any]) -> dict[str, Any]:
        # Only the referenced roots cross into the engine: conversion dominates the cost.
        # An absent root is an empty map, so ``has(jwt.sub)`` is false without a JWT.
        # When a root only appears as ``root.field``, only those fields are handed over.
        bindings: dict[str, Any] = {}
        for name, fields in self._fields:
            value = activation.get(name)
            if value is None:
                value = {}
            elif fields is not None and isinstance(value, Mapping):
                value = {f: value[f] for f in fields if f in value}
            bindings[name] = value
        if self._functions is not None:
            return engine.Context(variables=bindings, functions=self._functions)  # type: ignore[no-any-return]
        return bindings

    def evaluate_strict(self, activation: Mapping[str, Any]) -> Any:
        """Evaluate; raise :class:`CelEvaluationError` when evaluation fails."""
        try:
            return self._program.execute(self._bindings(activation))
        except BaseException as exc:
            if not _is_engine_failure(exc):
                raise
            raise CelEvaluationError(
                _evaluation_message(exc), source=self.source, detail=str(exc)
            ) from None

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        """Evaluate; ``None`` when evaluation fails (missing key, no such overload...)."""
        try:
            return self._program.execute(self._bindings(activation))
        except BaseException as exc:
            if not _is_engine_failure(exc):
                raise
            return None

    def matches(self, activation: Mapping[str, Any]) -> bool:
        """True only when the expression evaluates to the boolean ``true``."""
        return self.evaluate(activation) is True


def _referenced_fields(source: str, root: str) -> tuple[str, ...] | None:
    """The fields of ``root`` the source uses, or None when ``root`` is used otherwise.

    Purely textual and conservative: any occurrence of the name that is not followed by
    ``.field`` (``size(request)``, ``request["path"]``, ``"request"`` in a string
    literal...) means "hand over the whole value"; a ``root.field`` inside a string
    literal only adds a field.  So trimming never hides a field the expression reads.
    """
    fields = re.findall(_ROOT_FIELD % root, source)
    if len(fields) != len(re.findall(_ROOT_ANY % root, source)):
        return None
    return tuple(sorted(set(fields)))


def compile_expression(source: str) -> Expression:
    """Compile ``source`` once; raise :class:`CelError` when it is not a usable expression.

    Refused: non-strings, empty or over-long sources, syntax errors, and references to
    root variables other than :data:`ALLOWED_ROOTS` (comprehension variables such as the
    ``k`` in ``request.headers.exists(k, k.startsWith("x-"))`` are fine).
    """
    if not isinstance(source, str):
        raise CelError(f"expected a CEL expression string, got {type(source).__name__}")
    if not source.strip():
        raise CelError("empty expression", source=source)
    if len(source) > MAX_EXPRESSION_LENGTH:
        raise CelError(
            f"expression too long ({len(source)} characters, at most {MAX_EXPRESSION_LENGTH})",
            source=source,
        )
    try:
        program = engine.compile(source)
        names = program.variables()
    except BaseException as exc:
        if not _is_engine_failure(exc):
            raise
        raise _parse_error(source, exc) from None

    bound = set(_MACRO_BINDING.findall(source))
    unknown = sorted(
        n for n in names if n not in ALLOWED_ROOTS and n not in _BUILTIN_IDENTIFIERS and n not in bound
    )
    if unknown:
        allowed = ", ".join(sorted(ALLOWED_ROOTS))
        what = "variable" if len(unknown) == 1 else "variables"
        listed = ", ".join(repr(n) for n in unknown)
        raise CelError(f"unknown {what} {listed} (known: {allowed})", source=source)
    roots = tuple(sorted(n for n in names if n in ALLOWED_ROOTS))
    return Expression(source, program, roots)


def _decode(value: bytes | str) -> str:
    if isinstance(value, str):
        return value
    return value.decode("latin-1")


def build_activation(
    *,
    method: str,
    path: str,
    host: str,
    headers: Iterable[tuple[bytes, bytes]],
    scheme: str = "http",
    version: str = "HTTP/1.1",
    source_address: str = "",
    source_port: int = 0,
    jwt: Mapping[str, Any] | None = None,
    llm: Mapping[str, Any] | None = None,
    response: Mapping[str, Any] | None = None,
    backend: Mapping[str, Any] | None = None,
    api_key: Mapping[str, Any] | None = None,
    basic_auth: Mapping[str, Any] | None = None,
    key: Mapping[str, Any] | None = None,
    team: Mapping[str, Any] | None = None,
    mcp: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The CEL variables of one request, with agentgateway's names.

    ``path`` is the request target as received (``/v1/x?a=b``): ``request.path`` is the
    part before ``?``, ``request.pathAndQuery`` the whole, ``request.uri`` the complete
    URI.  Header names are lowercased (they normally are already) and repeated headers
    are joined with ``","``; bytes are decoded as latin-1 (HTTP's octet semantics).
    ``jwt``/``basicAuth``/``apiKey``/``key``/``team``/``llm`` are empty maps when absent (``key`` and
    ``team``: the runtime key that authenticated the request and its team, docs/keys.md), so ``has(jwt.sub)`` is false; ``response``
    and ``backend`` are present only when given.

    Cheap on purpose (plain dicts, no copies of the claim maps); the engine converts only
    the roots an expression uses.
    """
    header_map: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name = _decode(raw_name).lower()
        value = _decode(raw_value)
        previous = header_map.get(name)
        header_map[name] = value if previous is None else f"{previous},{value}"
    path_only = path.split("?", 1)[0] if "?" in path else path
    activation: dict[str, Any] = {
        "request": {
            "method": method,
            "path": path_only,
            "pathAndQuery": path,
            "host": host,
            "scheme": scheme,
            "version": version,
            "uri": f"{scheme}://{host}{path}",
            "headers": header_map,
        },
        "source": {"address": source_address, "port": source_port},
        "jwt": jwt if jwt is not None else {},
        "basicAuth": basic_auth if basic_auth is not None else {},
        "apiKey": api_key if api_key is not None else {},
        "key": key if key is not None else {},
        "team": team if team is not None else {},
        "llm": llm if llm is not None else {},
    }
    if response is not None:
        activation["response"] = response
    if backend is not None:
        activation["backend"] = backend
    if mcp is not None:  # a JSON-RPC call to an mcp backend: mcp.method, mcp.tool.name... (docs/mcp.md)
        activation["mcp"] = mcp
    return activation
