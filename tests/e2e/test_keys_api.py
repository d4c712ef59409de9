"""The keys admin API (``/api/keys``, ``/api/teams``, ``/api/spend``, ``/api/logs``) against real
in-process gateways on a real SQLite file and a real PostgreSQL server; ``runtime.keys`` opened when
first needed, flushed at shutdown, replaced when a reload changes the store."""

from __future__ import annotations

import csv
import io
import os
import sqlite3
import textwrap
import time
from functools import partial
from pathlib import Path

import httpx
import pytest
import trio

from tests.conftest import LOOPBACK_SERVERS, free_port
from tests.postgres_helpers import postgres_cluster, postgres_url  # noqa: F401 - fixtures
from trioproxy.config import parse_config
from trioproxy.frontend.server import serve_gateway
from trioproxy.keys import KeyService

CONFIG = """\
config:
  store: {store!r}
  keys: {{flushInterval: {flush}, refreshInterval: 100ms, requestLog: {{enabled: true}}}}
binds:
- port: {port}
  listeners:
  - routes:
    - name: echo
      backends: [{{host: "127.0.0.1:1"}}]
"""


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path) -> str:
    """A SQLite file, or a fresh database on the session's real PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "keys.db")
    return str(request.getfixturevalue("postgres_url"))


def config_text(store: str, *, flush: str = "50ms") -> str:
    return CONFIG.format(store=store, flush=flush, port=free_port())


async def start(nursery: trio.Nursery, text: str, config_path: str | None = None):
    config = parse_config(text, env={**os.environ, **LOOPBACK_SERVERS})
    return await nursery.start(partial(serve_gateway, config, bind_host="127.0.0.1", config_path=config_path))


async def test_key_lifecycle(nursery, store):
    info = await start(nursery, config_text(store))
    assert info.runtime.keys_host.service is None  # no runtimeKeys route: nothing opened yet
    async with httpx.AsyncClient(base_url=f"http://{info.admin}") as admin:
        team = await admin.post("/api/teams", json={"name": "research", "limits": {"cost": {"month": 500}},
                                                    "metadata": {"costCenter": "42"}})
        assert team.status_code == 201, team.text
        team_id = team.json()["id"]
        assert team_id.startswith("team_") and team.json()["limits"] == {"cost": {"month": 500}}

        created = await admin.post("/api/keys", json={
            "name": "alice-laptop", "team": team_id, "models": ["gpt-4o-mini", "openai/*"],
            "limits": {"tokens": {"day": 100000}, "requests": {"minute": 60}, "cost": {"month": 50}},
            "metadata": {"owner": "alice"}, "expiresAt": "2099-01-01T00:00:00Z"})
        assert created.status_code == 201, created.text
        key = created.json()
        secret = key["key"]
        assert secret.startswith("sk-tp-") and len(secret) == 6 + 43 and key["prefix"] == secret[:10]
        assert key["status"] == "active" and key["team"] == team_id and key["expiresAt"] == "2099-01-01T00:00:00Z"
        assert created.headers["cache-control"] == "no-store"
        assert info.runtime.keys_host.service is not None  # opened by the first admin call

        listing = (await admin.get("/api/keys")).json()["keys"]
        assert [k["id"] for k in listing] == [key["id"]]
        assert "key" not in listing[0] and secret not in str(listing)
        shown = (await admin.get(f"/api/keys/{key['id']}")).json()
        assert "key" not in shown and shown["models"] == ["gpt-4o-mini", "openai/*"]
        assert shown["usage"]["tokens"]["day"] == {"used": 0, "reserved": 0, "limit": 100000,
                                                   "resetsAt": shown["usage"]["tokens"]["day"]["resetsAt"]}
        assert shown["usage"]["tokens"]["day"]["resetsAt"].endswith("T00:00:00Z")
        assert (await admin.get("/api/keys", params={"team": "team_000000000000"})).json() == {"keys": []}

        # The request path's view: the secret authenticates, a reservation shows as reserved usage.
        service = info.runtime.keys
        principal = await service.authenticate(secret)
        assert principal.key.id == key["id"] and principal.team is not None and principal.team.name == "research"
        reservation = await service.reserve(principal, tokens=300, cost=0.01)
        usage = (await admin.get(f"/api/keys/{key['id']}")).json()["usage"]
        assert usage["tokens"]["day"]["reserved"] == 300 and usage["requests"]["minute"]["reserved"] == 1
        team_usage = (await admin.get(f"/api/teams/{team_id}")).json()["usage"]
        assert team_usage["cost"]["month"]["reserved"] == pytest.approx(0.01)
        service.settle(reservation, tokens=120, cost=0.002, model="gpt-4o-mini", provider="openai", status=200,
                       input_tokens=100, output_tokens=20)
        with trio.fail_after(10):
            while (await admin.get(f"/api/keys/{key['id']}")).json()["usage"]["tokens"]["day"]["used"] != 120:
                await trio.sleep(0.05)

        updated = await admin.patch(f"/api/keys/{key['id']}", json={"name": "alice-desktop", "models": [],
                                                                    "limits": {"tokens": {"day": 5}}, "team": None})
        assert updated.status_code == 200, updated.text
        body = updated.json()
        assert (body["name"], body["models"], body["limits"], body["team"]) == ("alice-desktop", [], {"tokens": {"day": 5}}, None)
        assert "key" not in body

        rotated = await admin.post(f"/api/keys/{key['id']}/rotate", json={"gracePeriod": "1h"})
        assert rotated.status_code == 200, rotated.text
        new_secret = rotated.json()["key"]
        assert new_secret.startswith("sk-tp-") and new_secret != secret
        assert rotated.json()["rotatedAt"] and rotated.json()["previousValidUntil"]
        remaining = time.mktime(time.strptime(rotated.json()["previousValidUntil"][:19], "%Y-%m-%dT%H:%M:%S")) - time.mktime(time.gmtime())
        assert 3500 < remaining <= 3600
        assert (await service.authenticate(new_secret)).key.id == key["id"]

        revoked = await admin.delete(f"/api/keys/{key['id']}")
        assert revoked.status_code == 200 and revoked.json()["status"] == "revoked" and revoked.json()["revokedAt"]
        assert (await admin.get(f"/api/keys/{key['id']}")).json()["status"] == "revoked"
        again = await admin.post(f"/api/keys/{key['id']}/rotate", json={})
        assert again.status_code == 400 and "revoked" in again.json()["error"]

        renamed = await admin.patch(f"/api/teams/{team_id}", json={"name": "research-2"})
        assert renamed.status_code == 200 and renamed.json()["name"] == "research-2"
        assert [t["name"] for t in (await admin.get("/api/teams")).json()["teams"]] == ["research-2"]
        assert (await admin.delete(f"/api/teams/{team_id}")).json() == {"deleted": team_id}
        assert (await admin.get("/api/teams")).json() == {"teams": []}
        assert (await admin.get(f"/api/teams/{team_id}")).status_code == 404

    if not store.startswith("postgresql"):  # the store keeps digests, never a secret
        await trio.sleep(0)
        data = Path(store).read_bytes() + (Path(store + "-wal").read_bytes() if Path(store + "-wal").exists() else b"")
        assert secret.encode() not in data and new_secret.encode() not in data


async def test_bad_input_unknown_ids_and_cross_site_writes(nursery, tmp_path):
    info = await start(nursery, config_text(str(tmp_path / "keys.db")))
    async with httpx.AsyncClient(base_url=f"http://{info.admin}") as admin:
        for body, message in [
            ({"name": "a", "limits": {"tokens": {"fortnight": 5}}}, "limits.tokens.fortnight: unknown window"),
            ({"name": "a", "limits": {"money": {"day": 5}}}, "limits.money: unknown metric"),
            ({"limits": {}}, "name: expected a non-empty string"),
            ({"name": "a", "colour": "red"}, "colour: unknown field"),
            ({"name": "a", "expiresAt": "soon"}, "expiresAt: expected a time"),
            ({"name": "a", "team": "team_000000000000"}, "team: unknown team team_000000000000"),
        ]:
            answer = await admin.post("/api/keys", json=body)
            assert answer.status_code == 400 and answer.json()["error"].startswith(message), (body, answer.text)
        answer = await admin.post("/api/keys", content=b"not json", headers={"content-type": "application/json"})
        assert (answer.status_code, answer.json()) == (400, {"error": "body: expected a JSON object"})
        assert (await admin.get("/api/keys")).json() == {"keys": []}  # nothing was created

        for method, path in [("GET", "/api/keys/key_000000000000"), ("DELETE", "/api/keys/key_000000000000"),
                             ("PATCH", "/api/keys/key_000000000000"), ("POST", "/api/keys/key_000000000000/rotate"),
                             ("GET", "/api/teams/team_000000000000"), ("DELETE", "/api/teams/team_000000000000")]:
            answer = await admin.request(method, path, json={"name": "x"} if method == "PATCH" else None)
            assert answer.status_code == 404, (method, path, answer.text)
            assert answer.json()["error"].startswith("unknown "), answer.text
        key = (await admin.post("/api/keys", json={"name": "a"})).json()
        bad_grace = await admin.post(f"/api/keys/{key['id']}/rotate", json={"gracePeriod": "a while"})
        assert bad_grace.status_code == 400 and bad_grace.json()["error"].startswith("gracePeriod: ")
        assert (await admin.patch(f"/api/keys/{key['id']}", json={})).json() == {"error": "body: nothing to change"}
        team = (await admin.post("/api/teams", json={"name": "busy"})).json()
        member = (await admin.post("/api/keys", json={"name": "member", "team": team["id"]})).json()
        busy = await admin.delete(f"/api/teams/{team['id']}")
        assert busy.status_code == 400 and "still has 1 key" in busy.json()["error"]
        await admin.delete(f"/api/keys/{member['id']}")
        assert (await admin.delete(f"/api/teams/{team['id']}")).status_code == 200

        for query, message in [({"group_by": "colour"}, "group_by: expected one of"),
                               ({"group_by": "key", "from": "yesterday"}, "from: expected an ISO date"),
                               ({"group_by": "key", "from": "2026-11-02", "to": "2026-11-01"}, "to: before from"),
                               ({"group_by": "key", "format": "xml"}, "format: expected json or csv")]:
            answer = await admin.get("/api/spend", params=query)
            assert answer.status_code == 400 and answer.json()["error"].startswith(message), (query, answer.text)
        for query, message in [({"limit": "0"}, "limit: expected a whole number"),
                               ({"status": "teapot"}, "status: expected a status")]:
            answer = await admin.get("/api/logs", params=query)
            assert answer.status_code == 400 and answer.json()["error"].startswith(message), (query, answer.text)

        # A page on another site cannot create or revoke keys through the admin's browser.
        evil = {"origin": "http://evil.example", "sec-fetch-site": "cross-site"}
        answer = await admin.post("/api/keys", json={"name": "planted"}, headers=evil)
        assert answer.status_code == 403
        assert (await admin.delete(f"/api/keys/{key['id']}", headers=evil)).status_code == 403
        assert [k["name"] for k in (await admin.get("/api/keys")).json()["keys"]] == ["a", "member"]
        assert (await admin.get(f"/api/keys/{key['id']}")).json()["status"] == "active"


async def test_token_guards_the_keys_api(nursery, tmp_path, monkeypatch):
    monkeypatch.setenv("ADMIN_TOKEN", "s3cret-admin")
    info = await start(nursery, config_text(str(tmp_path / "keys.db")))
    async with httpx.AsyncClient(base_url=f"http://{info.admin}") as admin:
        assert (await admin.get("/api/keys")).status_code == 401
        assert (await admin.post("/api/keys", json={"name": "x"})).status_code == 401
        assert (await admin.get("/api/spend")).status_code == 401
        good = {"authorization": "Bearer s3cret-admin"}
        assert (await admin.post("/api/keys", json={"name": "x"}, headers=good)).status_code == 201
    assert info.runtime.keys_host.service is not None


async def test_spend_by_model_day_and_csv_safe_against_formulas(nursery, store):
    info = await start(nursery, config_text(store))
    async with httpx.AsyncClient(base_url=f"http://{info.admin}") as admin:
        evil = (await admin.post("/api/keys", json={"name": "=HYPERLINK(\"http://evil.example\",\"x\")",
                                                    "metadata": {"user": "@bob"}})).json()
        plain = (await admin.post("/api/keys", json={"name": "alice"})).json()
        service = info.runtime.keys
        day = time.strftime("%Y-%m-%d", time.gmtime())  # the settlements' day (or the day before today, at midnight)
        for secret, model, tokens, cost, status in [(evil["key"], "gpt-4o", (100, 50), 0.75, 200),
                                                    (evil["key"], "claude-3-5-sonnet", (10, 5), 0.25, 200),
                                                    (plain["key"], "gpt-4o", (200, 100), 1.5, 429)]:
            principal = await service.authenticate(secret)
            reservation = await service.reserve(principal, tokens=1000, cost=1.0)
            service.settle(reservation, tokens=sum(tokens), cost=cost, model=model, provider="openai", status=status,
                           input_tokens=tokens[0], output_tokens=tokens[1], log={"latency_ms": 12.5})
        with trio.fail_after(10):
            while len((await admin.get("/api/spend", params={"group_by": "model"})).json()["rows"]) < 2:
                await trio.sleep(0.05)
        by_model = (await admin.get("/api/spend", params={"group_by": "model"})).json()
        rows = {r["group"]: r for r in by_model["rows"]}
        assert rows["gpt-4o"]["requests"] == 2 and rows["gpt-4o"]["cost"] == pytest.approx(2.25)
        assert rows["gpt-4o"]["inputTokens"] == 300 and rows["gpt-4o"]["outputTokens"] == 150
        assert rows["claude-3-5-sonnet"]["totalTokens"] == 15

        today = time.strftime("%Y-%m-%d", time.gmtime())
        stacked = (await admin.get("/api/spend", params={"group_by": "day,model", "from": day, "to": today})).json()
        assert {r["day"] for r in stacked["rows"]} <= {day, today}
        if day == today:
            assert len(stacked["rows"]) == 2  # one per model
        costs: dict[str, float] = {}
        for r in stacked["rows"]:  # one row per day and model (two days only if the test ran across midnight)
            costs[r["model"]] = costs.get(r["model"], 0.0) + r["cost"]
        assert {model: round(cost, 6) for model, cost in costs.items()} == {"claude-3-5-sonnet": 0.25, "gpt-4o": 2.25}
        assert stacked["from"] == f"{day}T00:00:00Z" and stacked["to"] == f"{today}T23:59:59Z"
        tomorrow = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 86400))
        assert (await admin.get("/api/spend", params={"group_by": "model", "from": tomorrow})).json()["rows"] == []
        by_user = {r["group"]: r["requests"] for r in (await admin.get("/api/spend", params={"group_by": "user"})).json()["rows"]}
        assert by_user.get("@bob") == 2

        answer = await admin.get("/api/spend", params={"group_by": "key", "format": "csv"})
        assert answer.headers["content-type"].startswith("text/csv")
        assert 'filename="spend-by-key.csv"' in answer.headers["content-disposition"]
        table = list(csv.reader(io.StringIO(answer.text)))
        assert table[0] == ["key", "name", "requests", "inputTokens", "outputTokens", "totalTokens", "cost"]
        names = {row[0]: row[1] for row in table[1:]}
        assert names[evil["id"]] == "'=HYPERLINK(\"http://evil.example\",\"x\")"  # text, never a formula
        assert names[plain["id"]] == "alice"
        users = list(csv.reader(io.StringIO((await admin.get("/api/spend", params={"group_by": "user", "format": "csv"})).text)))
        assert ["'@bob", "2"] == users[[r[0] for r in users].index("'@bob")][:2]
        assert all(not cell.startswith(("=", "+", "-", "@")) for row in table + users for cell in row)

        logs = (await admin.get("/api/logs")).json()["entries"]
        assert len(logs) == 3 and {e["status"] for e in logs} == {200, 429}
        only = (await admin.get("/api/logs", params={"key": plain["id"]})).json()["entries"]
        assert [e["model"] for e in only] == ["gpt-4o"]
        assert [e["status"] for e in (await admin.get("/api/logs", params={"status": "4xx"})).json()["entries"]] == [429]
        assert len((await admin.get("/api/logs", params={"model": "gpt-4o", "limit": "1"})).json()["entries"]) == 1


async def test_store_down_answers_503(nursery, tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the store's directory should be")
    info = await start(nursery, config_text(str(blocker / "keys.db")))
    async with httpx.AsyncClient(base_url=f"http://{info.admin}") as admin:
        for method, path in [("GET", "/api/keys"), ("POST", "/api/keys"), ("GET", "/api/spend"), ("GET", "/api/logs")]:
            answer = await admin.request(method, path, json={"name": "x"} if method == "POST" else None)
            assert (answer.status_code, answer.json()) == (503, {"error": "key store unavailable"}), (path, answer.text)
            assert str(tmp_path) not in answer.text


async def test_shutdown_flushes_settlements(tmp_path):
    path = str(tmp_path / "keys.db")
    async with trio.open_nursery() as nursery:
        info = await start(nursery, config_text(path, flush="1h"))  # only the final flush writes
        async with httpx.AsyncClient(base_url=f"http://{info.admin}") as admin:
            secret = (await admin.post("/api/keys", json={"name": "a"})).json()["key"]
        service = info.runtime.keys
        reservation = await service.reserve(await service.authenticate(secret), tokens=10, cost=None)
        service.settle(reservation, tokens=42, cost=0.5, model="gpt-4o", provider="openai", status=200,
                       input_tokens=40, output_tokens=2)
        info.shutdown.set()
    assert info.runtime.keys_host.service is None
    reader = KeyService.open(path, info.runtime.state.config.keys)
    try:
        rows = await reader.spend("model")
    finally:
        await reader.aclose()
    assert [(r["group"], r["totalTokens"], r["cost"]) for r in rows] == [("gpt-4o", 42, 0.5)]


async def test_a_reload_that_changes_the_store_closes_the_old_one(nursery, tmp_path):
    first, second = tmp_path / "one.db", tmp_path / "two.db"
    path = tmp_path / "gw.yaml"
    text = config_text(str(first))
    path.write_text(text)
    info = await start(nursery, text, config_path=str(path))
    async with httpx.AsyncClient(base_url=f"http://{info.admin}") as admin:
        assert (await admin.post("/api/keys", json={"name": "on-one"})).status_code == 201
        old = info.runtime.keys_host.service
        path.write_text(text.replace(str(first), str(second)) + "\n# flush 1h\n")
        with trio.fail_after(15):
            while info.runtime.state.config.store != str(second):
                await trio.sleep(0.05)
        assert info.runtime.keys_host.service is not old  # the old one was closed in the background
        assert (await admin.get("/api/keys")).json() == {"keys": []}
        assert (await admin.post("/api/keys", json={"name": "on-two"})).status_code == 201
        unchanged_store = info.runtime.keys_host.service
        path.write_text(text.replace(str(first), str(second)).replace("refreshInterval: 100ms", "refreshInterval: 200ms"))
        with trio.fail_after(15):
            while info.runtime.state.config.keys.refresh_interval != 0.2:
                await trio.sleep(0.05)
        assert info.runtime.keys_host.service is unchanged_store and unchanged_store.settings.refresh_interval == 0.2
    names = [row[0] for row in sqlite3.connect(first).execute("SELECT name FROM keys")]
    assert names == ["on-one"]


def test_the_runtime_keys_policy_opens_the_store_at_start(tmp_path):
    text = textwrap.dedent(f"""\
        config: {{store: {str(tmp_path / 'keys.db')!r}}}
        binds:
        - port: {free_port()}
          listeners:
          - routes:
            - policies: {{apiKey: {{runtimeKeys: true, mode: strict}}}}
              backends: [{{host: "127.0.0.1:1"}}]
        """)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            info = await start(nursery, text)
            assert info.runtime.keys_host.service is not None
            info.shutdown.set()

    trio.run(main)
