"""``localRateLimit`` with ``perClientAddress: true`` runs before authentication (issue 27): wrong
basicAuth passwords from one address stop costing bcrypt checks once its budget is spent, while
another address keeps its own budget and the other entries still count only authenticated requests."""

from __future__ import annotations

import base64

import bcrypt
import httpx

from tests.conftest import LOOPBACK_SERVERS, free_port, start_routes
from trioproxy.config import ConfigError, parse_config
from trioproxy.policies import basic_auth

ALICE = bcrypt.hashpw(b"wonderland", bcrypt.gensalt(4)).decode()
ROUTES = """
- policies:
    basicAuth: {{mode: strict, htpasswd: "alice:{alice}"}}
    localRateLimit:
    - {{maxTokens: 3, tokensPerFill: 3, fillInterval: 60s, perClientAddress: true}}
    - {{maxTokens: 100, tokensPerFill: 100, fillInterval: 60s}}
  backends: [{{host: "127.0.0.1:{backend}"}}]
"""


def basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


async def test_a_client_past_its_budget_gets_429_before_any_password_check(nursery, backend, monkeypatch):
    checked: list[str] = []
    real = basic_auth.verify_password
    monkeypatch.setattr(basic_auth, "verify_password", lambda h, p: checked.append(h) or real(h, p))
    gw = await start_routes(nursery, ROUTES, port=free_port(), alice=ALICE, backend=backend.port)
    async with gw.client() as client:
        statuses = [(await client.get("/", headers=basic("alice", f"guess{i}"))).status_code for i in range(10)]
        over = await client.get("/", headers=basic("alice", "wonderland"))
    assert statuses == [401] * 3 + [429] * 7
    assert len(checked) == 3  # the 429s cost no bcrypt check
    assert over.status_code == 429 and over.headers["retry-after"]
    other = httpx.AsyncHTTPTransport(local_address="127.0.0.2")
    async with httpx.AsyncClient(base_url=gw.url, transport=other, timeout=10) as client:
        assert (await client.get("/", headers=basic("alice", "wonderland"))).status_code == 200
    assert backend.requests == 1


def test_per_client_address_is_for_requests_only():
    text = ("binds:\n- port: 1\n  listeners:\n  - routes:\n    - policies:\n        localRateLimit: [{maxTokens: 3, "
            "tokensPerFill: 3, fillInterval: 1s, type: tokens, perClientAddress: true}]\n"
            "      backends: [{host: \"127.0.0.1:2\"}]\n")
    try:
        parse_config(text, env=LOOPBACK_SERVERS)
    except ConfigError as error:
        assert "perClientAddress: only for type requests" in str(error)
    else:
        raise AssertionError("accepted")
