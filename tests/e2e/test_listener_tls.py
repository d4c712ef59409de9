"""Listener TLS (agentgateway's ``tls: {cert, key, root}``) and HTTP/2 through the gateway.

Certificates come from a CA each test makes (``tests/tls_helpers.py``); clients are httpx with
``http2=True`` (ALPN h2) or HTTP/1.1, and h2c with prior knowledge on a plain bind.
"""

from __future__ import annotations

import json
import ssl

import httpx
import pytest

from tests.conftest import free_port, start_gateway
from tests.tls_helpers import Pki
from trioproxy.config import ConfigError, parse_config

TLS_CONFIG = """
binds:
- port: {port}
  listeners:
  - protocol: HTTPS
    tls: {{cert: "{cert}", key: "{key}"{root}}}
    routes:
    - backends: [{{host: "127.0.0.1:{backend}"}}]
"""


@pytest.fixture
def pki(tmp_path) -> Pki:
    return Pki(tmp_path)


async def tls_gateway(nursery, pki: Pki, backend, *, root: str | None = None):
    cert, key = pki.issue("gateway", dns=["localhost"], ips=["127.0.0.1"])
    return await start_gateway(nursery, TLS_CONFIG, port=free_port(), cert=cert, key=key, backend=backend.port,
                               root=f', root: "{root}"' if root else "")


def client_context(pki: Pki, cert: tuple[str, str] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    if cert is not None:
        context.load_cert_chain(*cert)
    return context


async def test_http2_client_over_a_tls_bind(nursery, pki, backend):
    gw = await tls_gateway(nursery, pki, backend)
    url = f"https://localhost:{gw.info.ports[gw.port]}"
    async with httpx.AsyncClient(http2=True, verify=client_context(pki), timeout=10) as client:
        response = await client.get(f"{url}/hello?x=1")
        assert response.http_version == "HTTP/2"
        assert response.status_code == 200
        echoed = response.json()
        assert (echoed["method"], echoed["path"], echoed["query"]) == ("GET", "/hello", "x=1")
        headers = dict(echoed["headers"])
        assert headers["host"] == f"localhost:{gw.info.ports[gw.port]}"  # from :authority
        assert headers["x-forwarded-proto"] == "https"
        # A body of known length, and a streamed one (HTTP/2 sends no framing header for it).
        posted = await client.post(f"{url}/upload", content=b"a" * 70_000)
        assert posted.json()["body_length"] == 70_000

        async def chunks():
            yield b"abc"
            yield b"defg"

        streamed = await client.post(f"{url}/stream", content=chunks())
        assert streamed.http_version == "HTTP/2"
        assert streamed.json()["body_length"] == 7
        missing = await client.get(f"{url}/status/404")
        assert missing.status_code == 404


async def test_http11_client_over_the_same_tls_bind(nursery, pki, backend):
    gw = await tls_gateway(nursery, pki, backend)
    async with httpx.AsyncClient(verify=client_context(pki), timeout=10) as client:
        response = await client.get(f"https://127.0.0.1:{gw.info.ports[gw.port]}/x")
    assert response.http_version == "HTTP/1.1"
    assert response.status_code == 200


async def test_h2c_prior_knowledge_on_a_plain_bind(nursery, gateway):
    async with httpx.AsyncClient(http1=False, http2=True, timeout=10) as client:
        response = await client.get(f"{gateway.url}/plain")
        assert response.http_version == "HTTP/2"
        assert response.json()["path"] == "/plain"
        posted = await client.post(f"{gateway.url}/p", content=b"xyz")
        assert posted.json()["body_length"] == 3


async def test_root_requires_a_client_certificate_from_that_ca(nursery, pki, backend, tmp_path):
    gw = await tls_gateway(nursery, pki, backend, root=str(pki.ca_file))
    url = f"https://localhost:{gw.info.ports[gw.port]}/mtls"
    async with httpx.AsyncClient(http2=True, verify=client_context(pki), timeout=10) as client:
        with pytest.raises(httpx.TransportError):  # the handshake fails: no certificate
            await client.get(url)
    (tmp_path / "other").mkdir()
    other = Pki(tmp_path / "other")
    stranger = other.issue("stranger", dns=["client"], client=True)
    async with httpx.AsyncClient(http2=True, verify=client_context(pki, stranger), timeout=10) as client:
        with pytest.raises(httpx.TransportError):  # a certificate from another CA
            await client.get(url)
    good = pki.issue("client", dns=["client"], client=True)
    async with httpx.AsyncClient(http2=True, verify=client_context(pki, good), timeout=10) as client:
        response = await client.get(url)
    assert (response.status_code, response.http_version) == (200, "HTTP/2")
    assert json.loads(response.content)["path"] == "/mtls"


def config_problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        parse_config(text, env={})
    return error.value.problems


def test_an_unreadable_cert_or_key_is_a_config_error_naming_the_place(pki, tmp_path):
    cert, key = pki.issue("gateway", dns=["localhost"])
    base = "binds:\n- port: 8443\n  listeners:\n  - protocol: HTTPS\n    tls: {{cert: {cert}, key: {key}{root}}}\n"
    missing = str(tmp_path / "missing.pem")
    [problem] = config_problems(base.format(cert=missing, key=key, root=""))
    assert "binds[0].listeners[0].tls.cert: " in problem and "cannot read" in problem and missing in problem
    [problem] = config_problems(base.format(cert=cert, key=missing, root=""))
    assert "binds[0].listeners[0].tls.key: " in problem and "cannot read" in problem
    [problem] = config_problems(base.format(cert=cert, key=str(pki.ca_file), root=""))
    assert "binds[0].listeners[0].tls.key: " in problem and "private key" in problem
    [problem] = config_problems(base.format(cert=cert, key=key, root=", root: " + key))
    assert "binds[0].listeners[0].tls.root: " in problem and "CA bundle" in problem


def test_https_and_tls_go_together(pki):
    cert, key = pki.issue("gateway", dns=["localhost"])
    [problem] = config_problems("binds:\n- port: 8443\n  listeners:\n  - protocol: HTTPS\n")
    assert "binds[0].listeners[0].protocol: " in problem and "needs tls" in problem
    [problem] = config_problems(f"binds:\n- port: 8443\n  listeners:\n  - tls: {{cert: {cert}, key: {key}}}\n")
    assert "binds[0].listeners[0].tls: " in problem and "protocol: HTTPS" in problem
    [problem] = config_problems(f"binds:\n- port: 8443\n  listeners:\n  - protocol: HTTPS\n    tls: {{cert: {cert}, key: {key}}}"
                                "\n  - hostname: b.example\n")
    assert "binds[0].listeners[1].tls: " in problem and "same tls" in problem


async def test_an_http2_body_sent_after_the_answer_does_not_stop_the_server(nursery, backend):
    gw = await start_gateway(nursery, """
binds:
- port: {port}
  listeners:
  - routes:
    - name: denied
      matches: [{{path: {{pathPrefix: /denied}}}}]
      policies:
        directResponse: {{status: 401, body: "no"}}
    - backends: [{{host: "127.0.0.1:{backend}"}}]
""", port=free_port(), backend=backend.port)

    async def slow_body():
        for _ in range(20):
            yield b"x" * 16384

    async with httpx.AsyncClient(http1=False, http2=True, timeout=10) as client:
        try:
            refused = await client.post(f"{gw.url}/denied", content=slow_body())
            assert refused.status_code == 401
        except httpx.TransportError:
            pass  # httpx reports the stream the gateway reset (NO_ERROR: stop sending) as an error
    async with httpx.AsyncClient(http1=False, http2=True, timeout=10) as client:
        assert (await client.get(f"{gw.url}/after")).status_code == 200  # the bind still serves
