"""WebSocket upgrades to a backend with a ``backendTLS`` policy: the backend hop is wss, verified
as any backendTLS connection (docs/backend-tls.md), with a real trio-websocket server whose
certificate comes from the test's CA (tests/tls_helpers.py)."""

from __future__ import annotations

import pytest
from trio_websocket import open_websocket_url

from fixtures.ws_echo_backend import WebSocketEchoBackend
from tests.conftest import free_port, start_gateway
from tests.e2e.test_websocket import rejected
from tests.tls_helpers import Pki

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: wss
      backends:
      - host: "127.0.0.1:{backend}"
        policies:
          backendTLS: {tls}
"""


@pytest.fixture
def pki(tmp_path):
    return Pki(tmp_path)


async def wss_gateway(nursery, pki: Pki, tls: str):
    cert = pki.issue("backend", dns=["localhost"], ips=["127.0.0.1"])
    backend = await nursery.start(WebSocketEchoBackend(ssl_context=pki.server_context(cert)).serve)
    gw = await start_gateway(nursery, CONFIG, port=free_port(), backend=backend.port,
                             tls=tls.replace("CA", str(pki.ca_file)))
    return gw, backend


async def test_upgrade_to_a_wss_backend_relays_over_tls(nursery, pki):
    gw, backend = await wss_gateway(nursery, pki, "{root: CA, hostname: localhost}")
    async with open_websocket_url(f"ws://127.0.0.1:{gw.info.ports[gw.port]}/chat", subprotocols=["v1"]) as ws:
        assert ws.subprotocol == "v1"
        await ws.send_message("over tls")
        assert await ws.get_message() == "over tls"
    assert backend.requests[0][0] == "/chat"


async def test_untrusted_wss_backend_is_503_certificate_verify_failed(nursery, tmp_path, pki):
    other = Pki(tmp_path, "other-ca")
    gw, backend = await wss_gateway(nursery, pki, f"{{root: {other.ca_file}}}")
    refusal = await rejected(gw, "/chat")
    assert (refusal.status_code, refusal.body) == (503, b"upstream connect error: certificate verify failed")
    assert backend.requests == []
