import json
import os
import subprocess
import sys

import pytest

from trioproxy.frontend import registry


@pytest.fixture(autouse=True)
def runtime(tmp_path, monkeypatch):
    monkeypatch.setenv("TRIOPROXY_RUNTIME_DIR", str(tmp_path / "rt"))
    return tmp_path / "rt"


def test_register_writes_entry_and_close_removes_it(runtime):
    reg = registry.register(["default"], "127.0.0.1:15000", [3000, 15000, 3000])
    entry = json.loads((runtime / f"{os.getpid()}.json").read_text())
    assert entry == {"pid": os.getpid(), "gateways": ["default"], "admin": "127.0.0.1:15000", "ports": [3000, 15000]}
    assert registry.lookup("default") == "127.0.0.1:15000"
    reg.close()
    reg.close()  # idempotent
    assert not list(runtime.glob("*.json"))
    with pytest.raises(LookupError, match="gateway/default"):
        registry.lookup("default")


def test_context_manager_and_namespaced_names():
    with registry.register(["gateway-system/agw", "other"], "localhost:16000"):
        assert registry.lookup("agw") == "localhost:16000"
        assert registry.lookup("gateway-system/agw") == "localhost:16000"
        assert registry.lookup("other") == "localhost:16000"
        with pytest.raises(LookupError):
            registry.lookup("gw")
    with pytest.raises(LookupError):
        registry.lookup("agw")


def test_dead_pid_is_ignored_and_cleaned(runtime):
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead = int(proc.stdout)
    runtime.mkdir(parents=True)
    stale = runtime / f"{dead}.json"
    stale.write_text(json.dumps({"pid": dead, "gateways": ["default"], "admin": "x:1"}))
    (runtime / "garbage.json").write_text("{not json")
    with pytest.raises(LookupError, match="no running trioproxy"):
        registry.lookup("default")
    assert not stale.exists()


def test_default_dirs(monkeypatch, tmp_path):
    monkeypatch.delenv("TRIOPROXY_RUNTIME_DIR")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert registry.runtime_dir() == tmp_path / "trioproxy"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert registry.runtime_dir().name == f"trioproxy-{os.getuid()}"
