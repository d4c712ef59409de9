"""Credentials the config itself puts on a request never show in traces or ``/config_dump``
(issue 27): an Azure backend's ``api-key`` was unredacted in the ``final request`` snapshot and
three response snapshots; a ``requestHeaderModifier`` value read from ``$VAR`` showed in both; an
inline JWKS's private members (``d``, ``k``, ...) showed in ``/config_dump``; and ``?%74k=`` or
``?access%5Ftoken=`` escaped the parameter-name redaction because names were compared encoded."""

from __future__ import annotations

import json

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from jwt.algorithms import ECAlgorithm

from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway
from tests.e2e.test_trace import watch

AZURE_KEY = "az-key-5ecret-0123456789"
INTERNAL = "internal-5ecret-token"

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: llm
      matches: [{{path: {{pathPrefix: /v1}}}}]
      backends:
      - ai: {{name: az, provider: {{azure: {{resourceName: acme}}}}, hostOverride: "127.0.0.1:{mock}"}}
        policies: {{backendAuth: {{key: $TEST_AZURE_KEY}}}}
    - name: echo
      policies:
        requestHeaderModifier:
          set: {{x-internal-token: "Bearer $TEST_INTERNAL_TOKEN", x-plain: "visible-$$HOME"}}
          add: [{{name: x-also, value: "${{TEST_INTERNAL_TOKEN}}"}}]
        apiKey: {{keys: [{{key: k1}}], location: {{queryParameter: {{name: tk}}}}, mode: optional}}
        jwtAuth: {{issuer: "https://idp.test", audiences: [a], mode: optional, jwks: '{jwks}'}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


@pytest.fixture
def secrets(monkeypatch):
    monkeypatch.setenv("TEST_AZURE_KEY", AZURE_KEY)
    monkeypatch.setenv("TEST_INTERNAL_TOKEN", INTERNAL)


def _private_jwks() -> tuple[str, list[str]]:
    """A JWKS whose EC key carries its private ``d`` and an ``oct`` key its ``k`` (a mistake an
    operator can make: the JWKS should be public); the secrets it holds."""
    ec_jwk = json.loads(ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1())))
    ec_jwk.update(kid="ec1", alg="ES256", use="sig")
    oct_jwk = {"kty": "oct", "kid": "sym", "k": "c3ltbWV0cmljLXNlY3JldC1rZXk"}
    return json.dumps({"keys": [ec_jwk, oct_jwk]}), [ec_jwk["d"], oct_jwk["k"]]


async def test_backend_auth_and_env_header_values_never_show_in_traces(nursery, backend, secrets):
    mock = MockOpenAI()
    await nursery.start(mock.serve)
    jwks, _ = _private_jwks()
    gw = await start_gateway(nursery, CONFIG, port=free_port(), mock=mock.port, backend=backend.port, jwks=jwks)
    llm = await watch(nursery, gw)
    async with gw.client() as client:
        answer = await client.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user",
                                                                                             "content": "hi"}]})
        assert answer.status_code == 200
        echo = await watch(nursery, gw)
        seen = (await client.get("/e")).json()
    assert mock.requests[-1].header("api-key") == AZURE_KEY  # the backend still gets it
    headers = dict(seen["headers"])
    assert headers["x-internal-token"] == f"Bearer {INTERNAL}" and headers["x-also"] == INTERNAL
    llm_text, echo_text = json.dumps(await llm.events()), json.dumps(await echo.events())
    assert AZURE_KEY not in llm_text and "final request" in llm_text
    assert INTERNAL not in echo_text
    assert "visible-$HOME" in echo_text  # a literal ($$), not from the environment: shown


async def test_decoded_parameter_names_are_redacted(nursery, backend, secrets):
    jwks, _ = _private_jwks()
    gw = await start_gateway(nursery, CONFIG, port=free_port(), mock=1, backend=backend.port, jwks=jwks)
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        await client.get("/e?%74k=wrong-tk-value&access%5Ftoken=bearer-in-uri&Api%5FKey=k-in-uri&a=1")
    text = json.dumps(await reader.events())
    for secret in ("wrong-tk-value", "bearer-in-uri", "k-in-uri"):
        assert secret not in text, secret
    assert "a=1" in text


async def test_config_dump_hides_jwks_private_members_and_env_header_values(nursery, backend, secrets):
    jwks, private = _private_jwks()
    gw = await start_gateway(nursery, CONFIG, port=free_port(), mock=1, backend=backend.port, jwks=jwks)
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin:
        dump = (await admin.get("/config_dump")).text
    for secret in (*private, INTERNAL, AZURE_KEY):
        assert secret not in dump, secret
    assert '\\"kid\\": \\"ec1\\"' in dump and "visible-$HOME" in dump  # the public parts stay
