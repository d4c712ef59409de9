"""trioproxy's own import graph, read from the source (issue 28's "Must hold"): no import cycle and
no private name imported from another trioproxy module.

Every import statement counts, wherever it is: at module level, inside a function (a "late"
import only hides a cycle from the interpreter, not from a reader) and under ``TYPE_CHECKING``.
The layers themselves (which package may import which) are import-linter's contract in
pyproject.toml (``lint-imports`` in .ci/run); this test is the part that needs no layout.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for _up in Path(__file__).resolve().parents:  # wherever the test file sits under tests/
    if (_up / "pyproject.toml").is_file():
        ROOT = _up
        break
PACKAGE = ROOT / "trioproxy"


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (trioproxy/tui, the symlink, included)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The trioproxy module that ``name`` (a module or a module's attribute) lives in, if any."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> list[tuple[str, str | None, int]]:
    """``(imported module, imported name or None, line)`` for every import of a trioproxy module."""
    out: list[tuple[str, str | None, int]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _owner(alias.name)
                if target:
                    out.append((target, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                if path.name != "__init__.py":
                    base.pop()
                base = base[:len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in MODULES:  # a submodule, not a name
                    out.append((f"{source}.{alias.name}", None, node.lineno))
                else:
                    target = _owner(source)
                    if target:
                        out.append((target, alias.name, node.lineno))
    return out


def _graph() -> dict[str, set[str]]:
    return {m: {t for t, _, _ in _imports(m, p) if t != m} for m, p in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_the_graph_sees_the_package(tmp_path):
    """The walk finds the package and every kind of import (a broken walk would pass the tests below)."""
    assert "trioproxy.config" in _graph()["trioproxy"]
    probe = tmp_path / "probe.py"
    probe.write_text("from typing import TYPE_CHECKING\n"
                     "from .config import loader\n"
                     "if TYPE_CHECKING:\n    import trioproxy.config.model\n"
                     "def f():\n    from trioproxy.config.loader import _late\n")
    assert _imports("trioproxy.probe", probe) == [
        ("trioproxy.config.loader", None, 2), ("trioproxy.config.model", None, 4), ("trioproxy.config.loader", "_late", 6)]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle():
    """A cycle (even through a late import) means neither module can be read, tested or moved alone."""
    cycles = _cycles(_graph())
    assert not cycles, "import cycles in trioproxy/:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_private_name_imported_across_modules():
    """``_name`` is the module's own business: what another module needs gets a public name that says
    what it does (dunders such as ``__version__`` are public)."""
    found = []
    for module, path in MODULES.items():
        for target, name, line in _imports(module, path):
            if target != module and name and name.startswith("_") and not name.startswith("__"):
                found.append(f"{path.relative_to(ROOT)}:{line}: {name} from {target}")
    assert not found, "private names imported across modules:\n" + "\n".join(found)
