"""Run mutmut over one module with only that module's in-process tests, in a scratch copy.

``python scripts/mutmut_module.py policies/jwks.py`` copies the tracked files of this checkout
(with uncommitted edits) to ``/tmp/mutmut-<module>``, narrows ``[tool.mutmut]`` there to the
module and the test files ``[tool.trioproxy-mutation.modules]`` in pyproject.toml lists for it,
runs ``mutmut run --max-children N`` (2 by default: the machine is shared) and prints the score
and the survivors. Re-running reuses the scratch copy's cached results for unchanged mutants.
Why a copy: mutmut 3 takes its test selection only from the config file, and a run over the
whole selection (``mutmut run`` here) takes hours.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", help="path under trioproxy/, e.g. policies/jwks.py")
    parser.add_argument("--max-children", type=int, default=2)
    parser.add_argument("--scratch", type=Path, help="scratch directory (default /tmp/mutmut-<module>)")
    args = parser.parse_args()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    modules = config["tool"]["trioproxy-mutation"]["modules"]
    if args.module not in modules:
        print(f"{args.module}: not in [tool.trioproxy-mutation.modules] of pyproject.toml "
              f"(known: {', '.join(sorted(modules))})", file=sys.stderr)
        return 2
    tests = modules[args.module]
    scratch = args.scratch or Path("/tmp") / ("mutmut-" + re.sub(r"[^A-Za-z0-9]+", "_", args.module))
    scratch.mkdir(parents=True, exist_ok=True)
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, check=True, capture_output=True).stdout
    # A symlinked directory (trioproxy/tui -> ../tui) is copied as a real one: mutmut walks its
    # source paths without following links, so trioproxy/tui/llm_view.py is only seen this way.
    names = []
    for name in files.decode().split("\0"):
        if name and (ROOT / name).is_symlink() and (ROOT / name).is_dir():
            real = (ROOT / name).resolve()
            names += [(str(Path(name) / f.relative_to(real)), f.relative_to(ROOT)) for f in sorted(real.rglob("*"))
                      if f.is_file() and "__pycache__" not in f.parts]
        elif name:
            names.append((name, Path(name)))
    for name, source in names:
        if (ROOT / source).is_file():
            target = scratch / name
            if target.is_symlink():
                target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists() or target.read_bytes() != (ROOT / source).read_bytes():
                shutil.copyfile(ROOT / source, target)
    text = (scratch / "pyproject.toml").read_text()
    text = re.sub(r"(?ms)^only_mutate = \[.*?^\]", "only_mutate = " + json.dumps([f"trioproxy/{args.module}"]), text)
    text = re.sub(r"(?ms)^pytest_add_cli_args_test_selection = \[.*?^\]",
                  "pytest_add_cli_args_test_selection = " + json.dumps(tests), text)
    (scratch / "pyproject.toml").write_text(text)
    glob = "trioproxy." + args.module.removesuffix(".py").replace("/", ".") + ".*"
    run = subprocess.run(["mutmut", "run", "--max-children", str(args.max_children), glob], cwd=scratch)
    results = subprocess.run(["mutmut", "results", "--all", "true"], cwd=scratch, capture_output=True, text=True)
    counts: dict[str, int] = {}
    survivors = []
    for line in results.stdout.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if not name.startswith(glob[:-1]):
            continue
        counts[status] = counts.get(status, 0) + 1
        if status == "survived":
            survivors.append(name)
    detected = counts.get("killed", 0) + counts.get("timeout", 0)
    checked = sum(n for s, n in counts.items() if s not in ("skipped", "not checked"))
    print("\n".join(survivors))
    print(f"{args.module}: {detected}/{checked} detected ({100 * detected / max(checked, 1):.0f}%) {counts}")
    return run.returncode


if __name__ == "__main__":
    raise SystemExit(main())
