"""Load and validate a generated 1,000-route config: the old hand-written loader next to the new one.

Run from the repository root::

    python -m bench.config_load [--routes 1000] [--repeat 5] [--json PATH]

Rows (best of ``--repeat`` runs each, same text, same process; CPU time of this process, which
moves less than wall-clock time on a machine shared with other work):

* ``before``: the hand-written walker of commit 51298de (PyYAML ``safe_load`` + typed accessors),
  read with ``git show`` and imported as a module of this package (it builds today's model); as
  it ran (GC on), and with the cyclic GC paused as the new loader pauses it (a fair comparison);
* ``after``: ``trioproxy.config.parse_config`` (ruamel.yaml node tree with positions, read
  against ``document.py``, compiled by ``compile.py``), with its two parts timed apart;
* ``cattrs``: for the design note, what the suggested alternative costs on the same text:
  ruamel.yaml load to plain data, then ``cattrs`` structuring into the same document classes
  (``forbid_extra_keys``, ``detailed_validation``; types only: no positions, no ranges, no syntaxes,
  so a lower bound of what it would cost to do the whole job that way).

It checks that ``before`` and ``after`` build equal ``Config`` values, and that ``after`` meets
the issue's target (≤ 0.5 s). Timings on a shared machine move; quote ratios from one run.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import subprocess
import sys
import time
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

ROOT = Path(__file__).resolve().parent.parent

OLD_COMMIT = "51298de"


def generate(routes: int) -> str:
    """A config of ``routes`` routes on one listener, shaped like real ones (matches, policies)."""
    lines = ["config:", "  adminAddr: localhost:15000", "binds:", "- port: 3000", "  listeners:",
             "  - name: main", "    policies:", "      localRateLimit:",
             "      - {maxTokens: 1000, tokensPerFill: 1000, fillInterval: 1s}", "    routes:"]
    for i in range(routes):
        lines += [
            f"    - name: route-{i}",
            f"      hostnames: [svc{i % 50}.example.com]",
            "      matches:",
            f"      - path: {{pathPrefix: /api/v{i % 3}/r{i}}}",
            "        method: GET" if i % 2 else "        method: POST",
        ]
        if i % 10 == 0:
            lines += ["        headers: [{name: x-tenant, value: {regex: 'acme-[0-9]+'}}]"]
        lines += ["      policies:"]
        if i % 4 == 0:
            lines += ["        localRateLimit:", "        - {maxTokens: 10, tokensPerFill: 10, fillInterval: 1s}"]
        lines += ["        timeout: {requestTimeout: 30s}",
                  f"        requestHeaderModifier: {{set: [{{name: x-route, value: r{i}}}]}}",
                  "      backends:",
                  f"      - host: 10.0.{i // 250}.{i % 250}:8080"]
        if i % 5 == 0:
            lines += ["        weight: 3", f"      - host: 10.1.{i // 250}.{i % 250}:8080", "        weight: 1"]
    return "\n".join(lines) + "\n"


def old_loader() -> Any:
    """The loader module as of ``OLD_COMMIT``, importable next to today's model."""
    source = subprocess.run(["git", "show", f"{OLD_COMMIT}:trioproxy/config/loader.py"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    name = f"trioproxy.config._loader_{OLD_COMMIT}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "trioproxy.config"
    sys.modules[name] = module
    exec(compile(source, f"{OLD_COMMIT}:trioproxy/config/loader.py", "exec"), module.__dict__)  # noqa: S102 - our own file from git
    return module


def best(fn: Callable[[], Any], repeat: int, *, gc_paused: bool = True) -> tuple[float, Any]:
    """Best CPU time of ``repeat`` runs; the cyclic GC paused as ``parse_config`` pauses it."""
    times, result = [], None
    for _ in range(repeat):
        if gc_paused:
            gc.disable()
        try:
            start = time.process_time()
            result = fn()
            times.append(time.process_time() - start)
        finally:
            gc.enable()
    return min(times), result


def cattrs_structure(text: str) -> Callable[[], Any]:
    """ruamel load + cattrs structure into the document classes (types only)."""
    import attrs
    import cattrs
    from cattrs.gen import make_dict_structure_fn, override
    from ruamel.yaml import YAML

    from trioproxy.config import document as d
    from trioproxy.config.describe import wire_name
    from trioproxy.config.model import Address
    from trioproxy.config.scalars import parse_address, parse_duration

    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    converter.register_structure_hook(Address, lambda v, _: parse_address(v, allow_port_zero=True))
    converter.register_structure_hook(float, lambda v, _: parse_duration(v))
    converter.register_structure_hook(typing.Any, lambda v, _: v)
    converter.register_structure_hook(
        d.Headers, lambda v, _: converter.structure(v, dict[str, str] if isinstance(v, dict) else tuple[d.HeaderPair, ...]))
    # wire names are camelCase: rename every field once
    for cls in [c for c in vars(d).values() if isinstance(c, type) and hasattr(c, "__describe_one_of__")]:
        overrides = {a.name: override(rename=wire_name(a)) for a in attrs.fields(cls)}
        converter.register_structure_hook(cls, make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True,
                                                                      **overrides))

    def run() -> Any:
        data = YAML(typ="safe").load(text)
        return converter.structure(data, d.Document)

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = parser.parse_args(argv)

    from trioproxy.config import parse_config
    from trioproxy.config.compile import compile_document
    from trioproxy.config.describe import Reader, read_document
    from trioproxy.config.document import Document
    from trioproxy.config.loader import compose

    text = generate(args.routes)
    env: dict[str, str] = {}
    rows: dict[str, float] = {}
    notes = []
    try:
        old = old_loader()
        rows["before (51298de: PyYAML + hand-written walker)"], old_config = best(
            lambda: old.parse_config(text, env=env), args.repeat, gc_paused=False)
        rows["  before, with the GC paused as after pauses it"], _ = best(
            lambda: old.parse_config(text, env=env), args.repeat)
    except (subprocess.CalledProcessError, FileNotFoundError, ImportError, AttributeError, TypeError) as exc:
        old_config = None
        notes.append(f"before: skipped ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    rows["after: parse_config (total)"], new_config = best(lambda: parse_config(text, env=env), args.repeat)
    rows["  after: YAML compose (ruamel.yaml, C parser)"], nodes = best(lambda: compose(text, "<bench>"), args.repeat)

    def read_and_compile() -> Any:
        reader = Reader(env)
        return compile_document(read_document(Document, nodes[0], reader), env, reader)

    rows["  after: read + compile"], _ = best(read_and_compile, args.repeat)
    try:
        rows["cattrs: ruamel load + structure (types only)"], _ = best(cattrs_structure(text), args.repeat)
    except Exception as exc:  # noqa: BLE001 - the comparison row is informative only
        notes.append(f"cattrs: skipped ({type(exc).__name__}: {exc})")

    print(f"config: {args.routes} routes, {len(text.splitlines())} lines, {len(text)} bytes; "
          f"CPU time, best of {args.repeat}")
    width = max(map(len, rows))
    for name, seconds in rows.items():
        print(f"{name:<{width}}  {seconds * 1000:8.1f} ms")
    before = rows.get("before (51298de: PyYAML + hand-written walker)")
    after = rows["after: parse_config (total)"]
    if before:
        print(f"after / before: {after / before:.2f}")
    if old_config is not None:
        # config.store (issue 30) is resolved to a path even when absent; the old loader has no such field
        same = old_config == attrs.evolve(new_config, store=old_config.store)
        print(f"same Config from both loaders: {'yes' if same else 'NO'}")
        if not same:
            notes.append("the two loaders built different configs")
    for note in notes:
        print(f"note: {note}")
    if args.json:
        Path(args.json).write_text(json.dumps({"routes": args.routes, "seconds": rows, "notes": notes}, indent=2))
    return 0 if not any("different" in n for n in notes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
