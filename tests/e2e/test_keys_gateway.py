"""Runtime keys on the request path (docs/keys.md), through a real gateway with a real SQLite store,
keys made through the admin API, and the official ``openai`` SDK as the client: its typed errors
carry the gateway's reasons; budgets hold under concurrency; spend follows the answers' usage."""

from __future__ import annotations

import json
import os

import httpx
import openai
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from fixtures.mock_openai import MockOpenAI
from tests.conftest import Gateway, free_port, start_gateway

CONFIG = """
config:
  store: {store}
  keys: {{flushInterval: 20ms, refreshInterval: 100ms}}
  logging: {{fields: {{add: {{key_owner: 'key.metadata.owner', team_name: 'team.name', cost: 'llm.cost'}}}}}}
binds:
- port: {port}
  listeners:
  - routes:
    - name: llm
      matches: [{{path: {{pathPrefix: /v1}}}}]
      policies:
        apiKey: {{runtimeKeys: true, mode: strict}}
      backends:
      - ai: {{name: gpt, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
    - name: alice-only
      matches: [{{path: {{pathPrefix: /alice}}}}]
      policies:
        apiKey: {{runtimeKeys: true, mode: strict}}
        authorization: {{rules: ['key.metadata.owner == "alice"']}}
        urlRewrite: {{path: {{prefix: /}}}}
      backends:
      - ai: {{name: gpt2, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
    - name: plain
      matches: [{{path: {{pathPrefix: /plain}}}}]
      policies:
        apiKey: {{runtimeKeys: true, mode: strict}}
        urlRewrite: {{path: {{prefix: /}}}}
      backends:
      - host: "127.0.0.1:{mock}"
"""

HELLO = [{"role": "user", "content": "hello there gateway"}]


class KeyedGateway:
    def __init__(self, gateway: Gateway, mock: MockOpenAI) -> None:
        self.gateway = gateway
        self.mock = mock
        self.url = gateway.url
        self.admin = httpx.AsyncClient(base_url=gateway.admin_url, timeout=10)

    async def create_key(self, **fields: object) -> tuple[str, dict]:
        response = await self.admin.post("/api/keys", json=fields)
        assert response.status_code in (200, 201), response.text
        body = response.json()
        return body["key"], body

    def client(self, secret: str, prefix: str = "") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}{prefix}/v1", api_key=secret, max_retries=0, timeout=10)

    async def spend(self, group_by: str = "key") -> list[dict]:
        response = await self.admin.get("/api/spend", params={"group_by": group_by})
        assert response.status_code == 200, response.text
        rows = response.json()
        return rows["rows"] if isinstance(rows, dict) else rows

    async def settled(self, key_id: str, requests: int) -> dict:
        """The key's spend row once ``requests`` requests are settled (settlements are batched)."""
        with trio.fail_after(10):
            while True:
                row = next((r for r in await self.spend() if r.get("group") == key_id), None)
                if row is not None and row["requests"] >= requests:
                    return row
                await trio.sleep(0.02)


async def start_keyed(nursery: trio.Nursery, tmp_path: object, store: str | None = None) -> KeyedGateway:
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    store = store or os.path.join(str(tmp_path), "keys.db")
    gateway = await start_gateway(nursery, CONFIG, port=free_port(), mock=mock.port, store=json.dumps(store))
    return KeyedGateway(gateway, mock)


async def test_the_sdk_gets_typed_errors_with_the_gateways_reasons(nursery, tmp_path):
    gw = await start_keyed(nursery, tmp_path)
    secret, key = await gw.create_key(name="alice-laptop", models=["gpt-4o-mini", "openai/*"],
                                      limits={"requests": {"day": 2}})
    client = gw.client(secret)
    completion = await client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert completion.choices[0].message.content == "hello there gateway"
    # the key never reaches the provider
    assert secret not in json.dumps([r.headers for r in gw.mock.chat_requests], default=str)

    with pytest.raises(openai.PermissionDeniedError) as denied:
        await client.chat.completions.create(model="gpt-4o", messages=HELLO)
    assert "model 'gpt-4o' is not allowed for key alice-laptop" in str(denied.value)

    await client.chat.completions.create(model="openai/gpt-4o", messages=HELLO)  # a prefix pattern
    with pytest.raises(openai.RateLimitError) as limited:
        await client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert "budget exceeded: key alice-laptop's requests per day (2); resets at " in str(limited.value)
    assert limited.value.response.headers["retry-after"].isdigit()
    assert 0 < int(limited.value.response.headers["retry-after"]) <= 86400
    assert len(gw.mock.chat_requests) == 2  # the refused ones never reached the provider

    with pytest.raises(openai.AuthenticationError) as unknown:
        await gw.client("sk-tp-not-a-key").chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert "api key authentication failure: invalid credentials" in str(unknown.value)

    assert (await gw.admin.delete(f"/api/keys/{key['id']}")).status_code == 200
    with pytest.raises(openai.AuthenticationError) as revoked:
        await client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert "key revoked" in str(revoked.value)


async def test_an_expired_and_a_rotated_key_are_refused_by_name(nursery, tmp_path):
    gw = await start_keyed(nursery, tmp_path)
    expired, _ = await gw.create_key(name="old", expiresAt="2020-01-01T00:00:00Z")
    with pytest.raises(openai.AuthenticationError) as refused:
        await gw.client(expired).chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert "key expired" in str(refused.value)

    secret, key = await gw.create_key(name="rotating")
    response = await gw.admin.post(f"/api/keys/{key['id']}/rotate", json={"gracePeriod": "0s"})
    assert response.status_code == 200, response.text
    new_secret = response.json()["key"]
    assert new_secret != secret
    with pytest.raises(openai.AuthenticationError) as rotated:
        await gw.client(secret).chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert "key rotated" in str(rotated.value)
    await gw.client(new_secret).chat.completions.create(model="gpt-4o-mini", messages=HELLO)


async def test_a_rotated_key_keeps_working_during_its_grace_period(nursery, tmp_path):
    gw = await start_keyed(nursery, tmp_path)
    secret, key = await gw.create_key(name="graceful")
    response = await gw.admin.post(f"/api/keys/{key['id']}/rotate", json={"gracePeriod": "1h"})
    new_secret = response.json()["key"]
    for s in (secret, new_secret):
        await gw.client(s).chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    row = await gw.settled(key["id"], 2)  # both count against the one key
    assert row["requests"] == 2


async def test_concurrent_requests_against_a_nearly_spent_budget_overspend_by_at_most_one(nursery, tmp_path):
    """200 requests at once against a budget of 10 requests' worth of tokens: each reserves its
    estimate (prompt bytes / 3 + max_tokens) before its call, so at most 11 reach the provider
    and the spend ends within one request of the budget."""
    gw = await start_keyed(nursery, tmp_path)
    per_request = 100  # the mock's usage for each answer
    secret, key = await gw.create_key(name="tight", limits={"tokens": {"day": 10 * per_request}})
    client = gw.client(secret)
    outcomes: list[str] = []

    async def one() -> None:
        try:
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=HELLO, max_tokens=per_request - 40,
                extra_headers={"x-mock-total-tokens": str(per_request)})
            outcomes.append("ok")
        except openai.RateLimitError as error:
            assert "budget exceeded: key tight's tokens per day (1000)" in str(error)
            outcomes.append("limited")

    async with trio.open_nursery() as requests:
        for _ in range(200):
            requests.start_soon(one)
    admitted = outcomes.count("ok")
    assert outcomes.count("limited") == 200 - admitted
    assert 10 <= admitted <= 11, admitted
    assert len(gw.mock.chat_requests) == admitted
    row = await gw.settled(key["id"], admitted)
    assert row["totalTokens"] == admitted * per_request <= 11 * per_request
    # spent: the next request is refused at once
    with pytest.raises(openai.RateLimitError):
        await client.chat.completions.create(model="gpt-4o-mini", messages=HELLO)


async def test_a_stream_is_settled_at_its_end_with_its_usage_and_cost(nursery, tmp_path):
    gw = await start_keyed(nursery, tmp_path)
    secret, key = await gw.create_key(name="streamer", metadata={"owner": "alice"})
    stream = await gw.client(secret).chat.completions.create(
        model="gpt-4o-mini", messages=HELLO, stream=True, extra_headers={"x-mock-total-tokens": "40"})
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
    assert text == "hello there gateway"
    row = await gw.settled(key["id"], 1)
    assert row["totalTokens"] == 40
    assert row["cost"] > 0  # gpt-4o-mini is in the price catalog
    by_user = {r["group"]: r for r in await gw.spend("user")}
    assert by_user["alice"]["totalTokens"] == 40


async def test_cel_sees_the_key_and_team_in_authorization_and_the_access_log(nursery, tmp_path, log_lines):
    gw = await start_keyed(nursery, tmp_path)
    team = (await gw.admin.post("/api/teams", json={"name": "research"})).json()
    alice, _ = await gw.create_key(name="a", metadata={"owner": "alice"}, team=team["id"])
    bob, _ = await gw.create_key(name="b", metadata={"owner": "bob"})
    await gw.client(alice, "/alice").chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    with pytest.raises(openai.PermissionDeniedError) as denied:
        await gw.client(bob, "/alice").chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert "authorization failed" in str(denied.value)
    logged = [line for line in await log_lines() if line["message"] == "request"]
    assert [(line.get("key_owner"), line.get("team_name")) for line in logged] == [("alice", "research"), ("bob", None)]
    assert logged[0]["cost"] > 0


async def test_a_plain_route_counts_requests_of_a_runtime_key(nursery, tmp_path):
    gw = await start_keyed(nursery, tmp_path)
    secret, key = await gw.create_key(name="plain", limits={"requests": {"minute": 1}})
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as client:
        headers = {"authorization": f"Bearer {secret}"}
        first = await client.get("/plain/v1/models", headers=headers)
        assert first.status_code == 200, first.text
        second = await client.get("/plain/v1/models", headers=headers)
        assert second.status_code == 429
        assert second.text.startswith("budget exceeded: key plain's requests per minute (1); resets at ")
        assert second.headers["content-type"].startswith("text/plain")
        missing = await client.get("/plain/v1/models")
        assert missing.status_code == 401


async def test_spend_survives_a_restart(tmp_path):
    store = os.path.join(str(tmp_path), "keys.db")
    async with trio.open_nursery() as nursery:
        gw = await start_keyed(nursery, tmp_path, store)
        secret, key = await gw.create_key(name="durable", limits={"tokens": {"total": 1000}})
        for _ in range(3):
            await gw.client(secret).chat.completions.create(
                model="gpt-4o-mini", messages=HELLO, extra_headers={"x-mock-total-tokens": "30"})
        nursery.cancel_scope.cancel()  # the gateway's shutdown flushes what is pending
    async with trio.open_nursery() as nursery:
        gw = await start_keyed(nursery, tmp_path, store)
        row = await gw.settled(key["id"], 3)
        assert row["totalTokens"] == 90
        shown = (await gw.admin.get(f"/api/keys/{key['id']}")).json()
        assert shown["usage"]["tokens"]["total"]["used"] == 90
        nursery.cancel_scope.cancel()


async def test_metrics_show_spend_per_key_and_the_budget_left(nursery, tmp_path):
    gw = await start_keyed(nursery, tmp_path)
    team = (await gw.admin.post("/api/teams", json={"name": "lab", "limits": {"cost": {"month": 10}}})).json()
    secret, key = await gw.create_key(name="metered", team=team["id"], limits={"tokens": {"day": 1000}})
    for _ in range(2):
        await gw.client(secret).chat.completions.create(
            model="gpt-4o-mini", messages=HELLO, extra_headers={"x-mock-total-tokens": "100"})
    await gw.settled(key["id"], 2)

    async def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        async with httpx.AsyncClient(timeout=10) as client:
            text = (await client.get(f"http://{gw.gateway.info.stats}/metrics")).text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    with trio.fail_after(15):  # the budget snapshot is taken every couple of seconds
        while True:
            found = await samples()
            remaining = found.get(("trioproxy_budget_remaining", (
                ("id", key["id"]), ("metric", "tokens"), ("name", "metered"), ("subject", "key"), ("window", "day"))))
            if remaining == 800:
                break
            await trio.sleep(0.2)
    assert found[("trioproxy_key_requests_total", (("key", "metered"), ("team", "lab")))] == 2
    assert found[("trioproxy_key_tokens_total", (("key", "metered"), ("team", "lab")))] == 200
    spend = found[("trioproxy_key_spend_usd_total", (("key", "metered"), ("model", "gpt-4o-mini"), ("team", "lab")))]
    assert spend > 0
    team_left = found[("trioproxy_budget_remaining", (
        ("id", team["id"]), ("metric", "cost"), ("name", "lab"), ("subject", "team"), ("window", "month")))]
    assert team_left == pytest.approx(10 - spend)


LOGGED = """
config:
  store: {store}
  keys: {{flushInterval: 20ms, requestLog: {{enabled: true}}}}
llm:
  port: {port}
  policies:
    apiKey: {{runtimeKeys: true, mode: strict, logPayloads: {payloads}}}
  models:
  - name: gpt-4o-mini
    provider: openAI
    params: {{hostOverride: "127.0.0.1:{mock}"}}
"""


@pytest.mark.parametrize("payloads", [True, False])
async def test_the_request_log_keeps_redacted_bodies_only_where_enabled(nursery, tmp_path, payloads):
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    gateway = await start_gateway(nursery, LOGGED, port=free_port(), mock=mock.port, payloads=str(payloads).lower(),
                                  store=json.dumps(str(tmp_path / "keys.db")))
    gw = KeyedGateway(gateway, mock)
    secret, key = await gw.create_key(name="logged")
    await gw.client(secret).chat.completions.create(
        model="gpt-4o-mini", messages=HELLO, metadata={"api_key": "sk-leaked-123", "purpose": "demo"},
        extra_headers={"x-mock-total-tokens": "12"})
    with trio.fail_after(10):
        while not (entries := (await gw.admin.get("/api/logs", params={"key": key["id"]})).json()["entries"]):
            await trio.sleep(0.02)
    [entry] = entries
    assert (entry["model"], entry["status"], entry["inputTokens"] + entry["outputTokens"]) == ("gpt-4o-mini", 200, 12)
    assert entry["latencyMs"] > 0
    if payloads:
        request = json.loads(entry["request"])
        assert request["metadata"] == {"api_key": "<redacted>", "purpose": "demo"}
        assert "hello there gateway" in entry["response"]
        assert "sk-leaked-123" not in json.dumps(entry)
    else:
        assert entry.get("request") is None and entry.get("response") is None


def test_payload_text_redacts_credential_members_and_cuts_long_bodies():
    from trioproxy.proxy.keys_stage import PAYLOAD_LIMIT, payload_text

    assert json.loads(payload_text(b'{"max_tokens": 5, "x": {"Authorization": "Bearer a", "refresh_token": "b"}}')) \
        == {"max_tokens": 5, "x": {"Authorization": "<redacted>", "refresh_token": "<redacted>"}}
    stream = b'data: {"password": "hunter2", "text": "hi"}\n\ndata: [DONE]\n\n'
    assert payload_text(stream) == 'data: {"password": "<redacted>", "text": "hi"}\n\ndata: [DONE]\n\n'
    long = payload_text(json.dumps({"text": "x" * (2 * PAYLOAD_LIMIT)}).encode())
    assert len(long) == PAYLOAD_LIMIT + len("...[truncated]") and long.endswith("...[truncated]")
    assert payload_text(b"cut", truncated=True) == "cut...[truncated]"
