"""``trioproxy keys``: keys, teams, spend and the request log of a real gateway process through its
admin API, as tables and as JSON; its one-line errors naming the flag; ``--store``."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time

import httpx
import pytest
import trio

from tests.admin_helpers import GatewayProcess
from tests.conftest import ROOT, free_port, run_cli
from trioproxy.config.model import KeysSettings
from trioproxy.keys import KeyService

CONFIG = """\
config:
  store: keys.db
  keys: {{flushInterval: 50ms, refreshInterval: 100ms, requestLog: {{enabled: true}}}}
binds:
- port: {port}
  listeners:
  - routes:
    - name: echo
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = GatewayProcess(tmp_path_factory.mktemp("keys-cli"), config_text=CONFIG)
    try:
        yield gateway
    finally:
        gateway.close()


def keys(gw: GatewayProcess, *args: str) -> subprocess.CompletedProcess:
    result = run_cli("keys", *args, "--proxy-admin-port", str(gw.admin_port))
    assert "Traceback" not in result.stderr, result.stderr
    return result


def ok_json(gw: GatewayProcess, *args: str):
    result = keys(gw, *args, "-o", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_lifecycle_as_tables_and_json(gw):
    team = ok_json(gw, "team", "create", "--name", "research", "--limit", "cost/month=500", "--metadata", "cc=42")
    assert team["name"] == "research" and team["limits"] == {"cost": {"month": 500}} and team["metadata"] == {"cc": "42"}

    created = keys(gw, "create", "--name", "alice-laptop", "--team", "research", "--model", "gpt-4o-mini",
                   "--model", "openai/*", "--limit", "tokens/day=100000", "--limit", "cost/month=50",
                   "--limit", "requests/minute=60", "--expires", "30d", "--metadata", "owner=alice")
    assert created.returncode == 0, created.stderr
    lines = dict(line.split(":", 1) for line in created.stdout.splitlines() if ":" in line and not line.startswith(" "))
    secret = lines["key"].strip()
    key_id = lines["id"].strip()
    assert secret.startswith("sk-tp-") and key_id.startswith("key_")
    assert lines["team"].strip() == team["id"] and lines["models"].strip() == "gpt-4o-mini, openai/*"
    assert lines["limits"].strip() == "requests/minute=60 tokens/day=100000 cost/month=$50"
    assert "not shown again" in created.stderr
    expires = time.mktime(time.strptime(lines["expiresAt"].strip()[:19], "%Y-%m-%dT%H:%M:%S"))
    assert abs(expires - time.mktime(time.gmtime()) - 30 * 86400) < 120

    listing = keys(gw, "list")
    assert listing.returncode == 0
    header, *rows = listing.stdout.splitlines()
    assert header.split() == ["ID", "NAME", "PREFIX", "TEAM", "STATUS", "MODELS", "LIMITS", "EXPIRES"]
    row = next(r for r in rows if r.startswith(key_id))
    assert "alice-laptop" in row and " active " in row and "gpt-4o-mini,openai/*" in row and secret not in listing.stdout
    assert [k["id"] for k in ok_json(gw, "list", "--team", "research")["keys"]] == [key_id]

    shown = keys(gw, "show", key_id)
    assert shown.returncode == 0 and "tokens/day: 0 of 100000" in shown.stdout and secret not in shown.stdout

    updated = ok_json(gw, "update", key_id, "--limit", "tokens/day=5", "--limit", "cost/month=none",
                      "--metadata", "owner=", "--metadata", "user=alice@example.com", "--team", "none", "--all-models")
    assert updated["limits"] == {"requests": {"minute": 60}, "tokens": {"day": 5}}
    assert updated["metadata"] == {"user": "alice@example.com"} and updated["team"] is None and updated["models"] == []

    rotated = ok_json(gw, "rotate", key_id, "--grace", "1h")
    assert rotated["key"].startswith("sk-tp-") and rotated["key"] != secret and rotated["previousValidUntil"]
    revoked = keys(gw, "revoke", key_id)
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    assert ok_json(gw, "show", key_id)["status"] == "revoked"

    teams = keys(gw, "team", "list")
    assert teams.stdout.splitlines()[0].split() == ["ID", "NAME", "LIMITS", "METADATA", "CREATED"]
    assert "research" in teams.stdout and "cost/month=$500" in teams.stdout
    renamed = ok_json(gw, "team", "update", "research", "--name", "research-2", "--limit", "tokens/week=1000")
    assert renamed["name"] == "research-2" and renamed["limits"] == {"tokens": {"week": 1000}, "cost": {"month": 500}}
    assert keys(gw, "team", "show", team["id"]).returncode == 0
    deleted = keys(gw, "team", "delete", "research-2")
    assert deleted.returncode == 0 and f"team {team['id']} deleted" in deleted.stdout
    assert ok_json(gw, "team", "list") == {"teams": []}


def test_spend_and_logs(gw, tmp_path):
    created = ok_json(gw, "create", "--name", "=cmd|' /C calc'!A0", "--metadata", "user=bob")
    # Spend without the request path: this process writes a settled request into the gateway's store.
    async def settle() -> None:
        service = KeyService.open(str(gw.config.parent / "keys.db"), KeysSettings(request_log_enabled=True))
        try:
            principal = await service.authenticate(created["key"])
            for model, cost, status in (("gpt-4o", 0.5, 200), ("claude-3-5-sonnet", 0.25, 429)):
                reservation = await service.reserve(principal, tokens=100, cost=1.0)
                service.settle(reservation, tokens=30, cost=cost, model=model, provider="openai", status=status,
                               input_tokens=20, output_tokens=10, log={"latency_ms": 5.0})
        finally:
            await service.aclose()

    day = time.strftime("%Y-%m-%d", time.gmtime())  # the settlements' day (the day before today, at midnight)
    trio.run(settle)
    table = keys(gw, "spend", "--group-by", "model")
    assert table.returncode == 0, table.stderr
    header, *rows = table.stdout.splitlines()
    assert header.split() == ["GROUP", "REQUESTS", "INPUT", "OUTPUT", "TOTAL", "COST"]
    assert rows[0].split() == ["gpt-4o", "1", "20", "10", "30", "$0.5000"]
    today = time.strftime("%Y-%m-%d", time.gmtime())
    by_day = ok_json(gw, "spend", "--group-by", "day", "--from", day, "--to", today)
    assert by_day["to"] == f"{today}T23:59:59Z" and {r["group"] for r in by_day["rows"]} <= {day, today}
    assert sum(r["requests"] for r in by_day["rows"]) == 2 and (day != today or len(by_day["rows"]) == 1)
    exported = keys(gw, "spend", "--group-by", "key", "--csv")
    cells = list(csv.reader(io.StringIO(exported.stdout)))
    mine = next(row for row in cells if row[0] == created["id"])
    assert mine[1] == "'=cmd|' /C calc'!A0"  # shown as text by a spreadsheet, never run
    assert "'=cmd" in exported.stdout

    logs = keys(gw, "logs", "--key", created["id"])
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines()[0].split() == ["TIME", "KEY", "TEAM", "MODEL", "STATUS", "IN", "OUT", "COST", "LATENCY"]
    assert len(logs.stdout.splitlines()) == 3 and "claude-3-5-sonnet" in logs.stdout
    assert [e["model"] for e in ok_json(gw, "logs", "--status", "4xx")["entries"]] == ["claude-3-5-sonnet"]
    assert len(ok_json(gw, "logs", "--since", "1h", "-n", "1")["entries"]) == 1


@pytest.mark.parametrize("args, exit_code, message", [
    (("create", "--name", "a", "--limit", "tokens/fortnight=5"), 2, "--limit tokens/fortnight=5: unknown window 'fortnight'"),
    (("create", "--name", "a", "--limit", "tokens=5"), 2, "--limit: expected METRIC/WINDOW=N"),
    (("create", "--name", "a", "--metadata", "owner"), 2, "--metadata: expected KEY=VALUE"),
    (("create", "--name", "a", "--expires", "someday"), 2, "--expires: expected an ISO date"),
    (("create", "--name", "a", "--team", "nobody"), 2, "--team: no team named 'nobody'"),
    (("create",), 2, "keys create: the following arguments are required: --name"),
    (("rotate", "key_000000000000", "--grace", "a while"), 2, "--grace: expected a duration"),
    (("show", "key_000000000000"), 1, "unknown key key_000000000000 (admin server localhost:"),
    (("revoke", "key_000000000000"), 1, "unknown key key_000000000000"),
    (("update", "key_000000000000"), 2, "keys update: nothing to change"),
    (("spend", "--group-by", "colour"), 2, "argument --group-by: invalid choice: 'colour'"),
    (("spend", "--from", "yesterday"), 2, "--from: expected an ISO date"),
    (("logs", "--status", "teapot"), 1, "status: expected a status such as 429"),
    (("logs", "-n", "0"), 2, "--limit: expected a whole number from 1 to 10000"),
])
def test_errors_are_one_line_naming_the_flag(gw, args, exit_code, message):
    result = keys(gw, *args)
    assert result.returncode == exit_code, (result.stdout, result.stderr)
    assert result.stderr.startswith("trioproxy: error: ") and message in result.stderr, result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("trioproxy: error:")]) == 1


def test_unreachable_admin_and_token(tmp_path):
    result = run_cli("keys", "list", "--proxy-admin-port", str(free_port()))
    assert result.returncode == 1 and result.stderr.startswith("trioproxy: error: cannot reach the admin server at localhost:")
    assert "Traceback" not in result.stderr
    clash = run_cli("keys", "list", "--local", "--gateway", "gateway/x")
    assert clash.returncode == 2 and "name two different gateways" in clash.stderr
    unknown = run_cli("keys", "list", "--gateway", "gateway/nowhere")
    assert unknown.returncode == 1 and unknown.stderr.startswith("trioproxy: error: ") and "Traceback" not in unknown.stderr

    gateway = GatewayProcess(tmp_path, admin_host="0.0.0.0", token="adm1n-t0ken", config_text=CONFIG)
    try:
        port = ["--proxy-admin-port", str(gateway.admin_port)]
        refused = run_cli("keys", "list", *port, env={"ADMIN_TOKEN": ""})
        assert refused.returncode == 1 and "answered 401" in refused.stderr
        accepted = run_cli("keys", "create", "--name", "t", "-o", "json", *port, env={"ADMIN_TOKEN": "adm1n-t0ken"})
        assert accepted.returncode == 0, accepted.stderr
        assert json.loads(accepted.stdout)["key"].startswith("sk-tp-")
    finally:
        gateway.close()


def test_gateway_by_name_from_the_registry(gw):
    result = run_cli("keys", "list", "--gateway", "gateway/default", "-o", "json",
                     env={"TRIOPROXY_RUNTIME_DIR": gw.env["TRIOPROXY_RUNTIME_DIR"]})
    assert result.returncode == 0, result.stderr
    assert "keys" in json.loads(result.stdout)


def test_store_flag_overrides_config_store(tmp_path):
    backend, port, admin = free_port(), free_port(), free_port()
    config = tmp_path / "gw.yaml"
    config.write_text(CONFIG.format(port=port, backend=backend))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRIOPROXY_RUNTIME_DIR": str(tmp_path / "runtime"),
           "ADMIN_ADDR": f"127.0.0.1:{admin}", "STATS_ADDR": "127.0.0.1:0", "READINESS_ADDR": "127.0.0.1:0"}
    env.pop("ADMIN_TOKEN", None)
    env.pop("TRIOPROXY_STORE", None)
    other = tmp_path / "elsewhere" / "other.db"
    other.parent.mkdir()
    with open(tmp_path / "gateway.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "--config", str(config), "--store", "elsewhere/other.db"],
                                cwd=tmp_path, env=env, stderr=log)
        try:
            deadline = time.monotonic() + 20
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{admin}/api/auth", timeout=1).raise_for_status()
                    break
                except httpx.HTTPError:
                    assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "gateway.log").read_text()
                    time.sleep(0.05)
            created = run_cli("keys", "create", "--name", "elsewhere", "--proxy-admin-port", str(admin))
            assert created.returncode == 0, created.stderr
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    assert other.exists() and not (tmp_path / "keys.db").exists()
    assert b"elsewhere" in other.read_bytes() + (other.with_name("other.db-wal").read_bytes()
                                                if other.with_name("other.db-wal").exists() else b"")
    empty = run_cli("--config", str(config), "--store", " ")
    assert empty.returncode == 2 and "--store: expected a SQLite file" in empty.stderr
