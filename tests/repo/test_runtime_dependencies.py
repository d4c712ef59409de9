"""Every module the installed code imports comes from ``[project].dependencies``.

``pip install .`` installs only those; a module that arrives through the ``test`` extra (as
``jsonschema`` once did) or as some other package's dependency works in CI and breaks on a bare
install. The README's quick start runs ``fixtures/`` from a bare install too, so they count.
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import re
import sys
import tomllib
from functools import cache
from importlib import metadata
from pathlib import Path

from tests.conftest import ROOT

INSTALLED_CODE = ("trioproxy", "tui", "fixtures")
OWN = {"trioproxy", "tui", "fixtures"}
#: fixtures that validate requests with an SDK's own types, so need the ``test`` extra (google-genai,
#: and the pydantic it brings); the quick start does not run them
TEST_EXTRA_FIXTURES = {ROOT / "fixtures" / "mock_gemini.py"}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared(group: str | None = None) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] if group is None else project["optional-dependencies"][group]
    return {_normalize(re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0]) for r in requirements}


def imported_modules(root: Path) -> dict[str, str]:
    """Absolute imports of third-party modules under root -> one file that makes them."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        if path.is_relative_to(ROOT / "trioproxy" / "tui") or path in TEST_EXTRA_FIXTURES:
            continue  # the symlink to tui/, read there; a test-extra fixture
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                # `from opentelemetry import trace`: the submodule, when it is one, names the owner
                names = [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in OWN:
                    found.setdefault(name, str(path.relative_to(root)))
    return found


@cache
def _top_level_owners() -> dict[str, list[str]]:
    return metadata.packages_distributions()


def _spec(module: str) -> importlib.machinery.ModuleSpec | None:
    """module's spec, else (a name imported from a module, not a submodule) its parent's."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None and "." in module:
        return _spec(module.rsplit(".", 1)[0])
    return spec


def distribution_of(module: str) -> str | None:
    """The distribution that installed module's file (namespace packages such as
    ``opentelemetry`` are shared by several)."""
    candidates = _top_level_owners().get(module.split(".")[0], [])
    if len(set(candidates)) <= 1:
        return _normalize(candidates[0]) if candidates else None
    spec = _spec(module)
    if spec is None or not spec.has_location or spec.origin is None:
        return None
    origin = Path(spec.origin).resolve()
    for name in candidates:
        dist = metadata.distribution(name)
        if any(Path(str(dist.locate_file(f))).resolve() == origin for f in dist.files or () if f.suffix == ".py"):
            return _normalize(name)
    return None


def test_every_runtime_import_is_a_declared_dependency():
    allowed = declared()
    undeclared: dict[str, str] = {}
    for root in INSTALLED_CODE:
        for module, where in imported_modules(ROOT / root).items():
            dist = distribution_of(module)
            if dist not in allowed:
                undeclared.setdefault(dist or f"(no distribution has {module})", f"{root}/{where}: {module}")
    assert not undeclared, "not in [project].dependencies: " + "; ".join(f"{d} ({w})" for d, w in undeclared.items())


def test_the_check_sees_a_test_only_module(tmp_path):
    """The check itself: a module of the test extra (pytest) is reported for the installed code."""
    assert distribution_of("pytest") == "pytest"
    assert "pytest" not in declared() and "pytest" in declared("test")
    (tmp_path / "m.py").write_text("import os\nfrom . import x\n\ndef f():\n    from pytest import mark\n")
    assert imported_modules(tmp_path) == {"pytest.mark": "m.py"}
    assert distribution_of("pytest.mark") == "pytest"
