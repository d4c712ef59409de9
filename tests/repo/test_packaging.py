"""The wheel installs one top-level package, ``trioproxy`` (the text UI as ``trioproxy.tui``, no fixtures)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

from tests.conftest import ROOT


def test_wheel_holds_only_the_trioproxy_package(tmp_path):
    source = tmp_path / "src"  # a copy: setuptools writes build/ and *.egg-info next to the sources
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("trioproxy", "tui"):
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=ignore)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "-w", str(tmp_path), "--no-deps",
                    "--no-build-isolation", "-q"], check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("trioproxy-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"trioproxy", wheel.name.split("-py")[0] + ".dist-info"}
    assert {"trioproxy/tui/app.py", "trioproxy/tui/state.py", "trioproxy/admin/static/ui.js",
            "trioproxy/llm/prices.json"} <= set(names)  # the price catalog is data: package-data lists it
