#!/usr/bin/env python3
"""Write constraints.txt: every distribution the project and its test extra pull in, at the
version installed now (run it after the suite passed: those are the tested versions)."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER = """\
# Versions the test suite last passed with (Python 3.11, Linux). For a reproducible install:
#   pip install -c constraints.txt -e '.[test]'
# Regenerate after a dependency change, once the suite passes: python scripts/update_constraints.py
"""


def _key(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def pinned() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [*project["dependencies"], *project["optional-dependencies"]["test"]]
    seen: dict[str, str] = {}
    while todo:
        requirement = todo.pop()
        name, _, marker = requirement.partition(";")
        extras = set(re.findall(r"\[([^\]]+)\]", name)[0].split(",")) if "[" in name else set()
        key = _key(name)
        if key in seen:
            continue
        try:
            dist = metadata.distribution(key)
        except metadata.PackageNotFoundError:
            continue
        seen[key] = dist.version
        for dependency in dist.requires or []:
            wanted_extra = re.search(r'extra\s*==\s*"([^"]+)"', dependency)
            if wanted_extra is None or wanted_extra.group(1) in extras:
                todo.append(dependency.split(";")[0])
        del marker
    return dict(sorted(seen.items()))


def main() -> None:
    body = "".join(f"{name}=={version}\n" for name, version in pinned().items())
    (ROOT / "constraints.txt").write_text(HEADER + body)


if __name__ == "__main__":
    main()
