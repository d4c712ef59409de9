"""backendTLS (docs/backend-tls.md): a local HTTPS backend whose certificate comes from a CA made
by the test (tests/tls_helpers.py), reached through a running gateway."""

from __future__ import annotations

import logging
import ssl
from functools import partial

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from fixtures.echo_backend import EchoBackend
from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway
from tests.tls_helpers import Pki
from trioproxy.config import ConfigError
from trioproxy.config.backend_tls import BackendTls, build_context, check_subject_alt_names
from trioproxy.config.loader import parse_config
from trioproxy.config.model import Address, TlsAddress

VERIFY_FAILED = "upstream connect error: certificate verify failed"


@pytest.fixture
def pki(tmp_path):
    return Pki(tmp_path)


@pytest.fixture
def server_cert(pki):
    return pki.issue("backend", dns=["localhost", "backend.test"], ips=["127.0.0.1"],
                     uris=["spiffe://test/ns/default/sa/backend"])


async def tls_backend(nursery, context: ssl.SSLContext) -> EchoBackend:
    return await nursery.start(EchoBackend(ssl_context=context).serve)


ONE_ROUTE = """
    binds:
    - port: {port}
      listeners:
      - routes:
        - name: tls
          backends:
          - host: "127.0.0.1:{backend}"
            policies:
              backendTLS: {tls}
"""


async def gateway(nursery, backend: EchoBackend, tls: str):
    return await start_gateway(nursery, ONE_ROUTE, port=free_port(), backend=backend.port, tls=tls)


# --- pure: contexts and checks -----------------------------------------------------------------------


def test_contexts_verify_by_default_and_relax_only_as_told(pki, server_cert):
    default = build_context(BackendTls())
    assert (default.verify_mode, default.check_hostname) == (ssl.CERT_REQUIRED, True)
    assert (build_context(BackendTls(root=str(pki.ca_file))).verify_mode) == ssl.CERT_REQUIRED
    host_only = build_context(BackendTls(insecure_host=True))
    assert (host_only.verify_mode, host_only.check_hostname) == (ssl.CERT_REQUIRED, False)
    insecure = build_context(BackendTls(insecure=True))
    assert (insecure.verify_mode, insecure.check_hostname) == (ssl.CERT_NONE, False)
    sans = build_context(BackendTls(subject_alt_names=("x",)))
    assert (sans.verify_mode, sans.check_hostname) == (ssl.CERT_REQUIRED, False)  # checked after the handshake


def test_subject_alt_names_match_dns_uri_and_ip():
    cert = {"subjectAltName": (("DNS", "*.svc.test"), ("URI", "spiffe://td/sa/a"), ("IP Address", "10.0.0.1"))}
    check = lambda *names: check_subject_alt_names(BackendTls(subject_alt_names=names), cert)  # noqa: E731
    assert check("api.svc.test") and check("spiffe://td/sa/a") and check("10.0.0.1") and check("nope", "a.svc.test")
    assert not check("svc.test") and not check("a.b.svc.test") and not check("spiffe://td/sa/b")
    assert not check_subject_alt_names(BackendTls(subject_alt_names=("x",)), None)
    assert check_subject_alt_names(BackendTls(), None)  # no list: the hostname check already ran


def test_tls_and_plain_addresses_never_share_a_pool_key():
    assert TlsAddress("h", 443) != Address("h", 443) and str(TlsAddress("h", 443)) == "h:443"
    assert TlsAddress("h", 443) == TlsAddress("h", 443)
    assert TlsAddress("h", 443, BackendTls(hostname="a")) != TlsAddress("h", 443, BackendTls(hostname="b"))


def load(tls: str):
    text = ONE_ROUTE.replace("{{", "{").replace("}}", "}").format(port=8080, backend=9000, tls=tls)
    return parse_config(text, env={}).binds[0].listeners[0].routes[0].backends[0]


def test_config_compiles_to_a_tls_target(pki, server_cert):
    backend = load(f"{{root: {pki.ca_file}, hostname: localhost}}")
    assert isinstance(backend.target, TlsAddress) and str(backend.target) == "127.0.0.1:9000"
    assert backend.tls == backend.target.tls and backend.tls.hostname == "localhost"
    assert len(backend.tls.fingerprint) == 64


@pytest.mark.parametrize(("tls", "message"), [
    ("{root: /nonexistent/ca.pem}", "backendTLS.root: cannot read /nonexistent/ca.pem: no such file"),
    ("{root: NOTPEM}", "backendTLS.root: cannot load CA bundle"),
    ("{key: KEY}", "backendTLS.key: requires cert"),
    ("{insecure: true, insecureHost: true}", "backendTLS.insecure: insecure skips every check"),
    ("{spiffe: {}}", "'spiffe' is an agentgateway feature that trioproxy does not implement"),
    ("{hostnme: x}", "hostnme"),
])
def test_bad_backend_tls_is_a_one_line_positioned_error(tmp_path, pki, tls, message):
    (tmp_path / "NOTPEM").write_text("not a certificate")
    (tmp_path / "KEY").write_text("x")
    tls = tls.replace("NOTPEM", str(tmp_path / "NOTPEM")).replace("KEY", str(tmp_path / "KEY"))
    with pytest.raises(ConfigError) as info:
        load(tls)
    assert message in str(info.value)
    assert "Traceback" not in str(info.value)


def test_insecure_logs_a_warning_at_load(caplog):
    with caplog.at_level(logging.WARNING, logger="trioproxy.config"):
        load("{insecure: true}")
    assert any("backendTLS.insecure" in r.getMessage() for r in caplog.records)


# --- through the gateway --------------------------------------------------------------------------------


async def test_verified_tls_backend_and_the_pool_reuses_the_connection(nursery, pki, server_cert):
    backend = await tls_backend(nursery, pki.server_context(server_cert))
    gw = await gateway(nursery, backend, f"{{root: {pki.ca_file}, hostname: localhost}}")
    async with gw.client() as client:
        answers = [await client.get(f"/x/{i}") for i in range(5)]
    assert [a.status_code for a in answers] == [200] * 5
    assert answers[0].json()["path"] == "/x/0"
    # one TCP connection, one handshake, five requests: TLS connections are pooled like plain ones
    assert (backend.connections, backend.handshakes, backend.requests) == (1, 1, 5)


async def test_ip_backend_without_hostname_is_verified_against_its_ip(nursery, pki, server_cert):
    backend = await tls_backend(nursery, pki.server_context(server_cert))
    gw = await gateway(nursery, backend, f"{{root: {pki.ca_file}}}")
    async with gw.client() as client:
        assert (await client.get("/")).status_code == 200


@pytest.mark.parametrize("tls", [
    "{root: OTHER_CA}",                        # a CA the backend's certificate does not chain to
    "{}",                                      # the system trust store does not know the test CA
    "{root: CA, hostname: wrong.example}",     # trusted chain, wrong name (SNI and check)
    "{root: CA, subjectAltNames: ['spiffe://test/ns/default/sa/other']}",
])
async def test_unverified_backend_is_503_certificate_verify_failed(nursery, tmp_path, pki, server_cert, tls):
    other = Pki(tmp_path, "other-ca")
    backend = await tls_backend(nursery, pki.server_context(server_cert))
    gw = await gateway(nursery, backend, tls.replace("OTHER_CA", str(other.ca_file)).replace("CA", str(pki.ca_file)))
    async with gw.client() as client:
        response = await client.get("/x")
        metrics = await client.get(f"http://{gw.info.stats}/metrics")
    assert (response.status_code, response.text) == (503, VERIFY_FAILED)
    assert backend.requests == 0
    families = {f.name: f for f in text_string_to_metric_families(metrics.text)}
    reasons = {s.labels["reason"] for s in families["trioproxy_requests"].samples}
    assert reasons == {"BackendTlsFailed"}


@pytest.mark.parametrize("tls", [
    "{root: CA, hostname: wrong.example, insecureHost: true}",   # chain checked, name not
    "{root: CA, subjectAltNames: ['spiffe://test/ns/default/sa/backend']}",
    "{insecure: true}",                                            # nothing checked
])
async def test_relaxed_checks_accept_what_they_say(nursery, pki, server_cert, tls):
    backend = await tls_backend(nursery, pki.server_context(server_cert))
    gw = await gateway(nursery, backend, tls.replace("CA", str(pki.ca_file)))
    async with gw.client() as client:
        assert (await client.get("/x")).status_code == 200


async def test_mutual_tls(nursery, pki, server_cert):
    client_cert = pki.issue("gateway-client", client=True)
    backend = await tls_backend(nursery, pki.server_context(server_cert, client_ca=pki.ca_file))
    with_cert = await gateway(nursery, backend,
                              f"{{root: {pki.ca_file}, hostname: localhost, cert: {client_cert[0]}, key: {client_cert[1]}}}")
    async with with_cert.client() as client:
        assert (await client.get("/x")).status_code == 200
    assert backend.client_certs[-1]["subject"] == ((("commonName", "gateway-client"),),)
    without = await gateway(nursery, backend, f"{{root: {pki.ca_file}, hostname: localhost}}")
    async with without.client() as client:
        refused = await client.get("/x")
    assert refused.status_code in (502, 503)  # TLS 1.3: the server refuses after the client's handshake
    assert backend.tls_failures == 1 and backend.requests == 1


ROUTE_TLS = """
    binds:
    - port: {port}
      listeners:
      - routes:
        - policies:
            backendTLS: {{root: {ca}, hostname: localhost}}
          backends:
          - host: "127.0.0.1:{backend}"
          - host: "127.0.0.1:{plain}"
            weight: 0
            policies: {{backendTLS: {{insecure: true}}}}
"""


async def test_route_backend_tls_applies_to_backends_without_their_own(nursery, pki, server_cert):
    backend = await tls_backend(nursery, pki.server_context(server_cert))
    gw = await start_gateway(nursery, ROUTE_TLS, port=free_port(), backend=backend.port, plain=1, ca=pki.ca_file)
    route = gw.info.runtime.state.config.binds[0].listeners[0].routes[0]
    assert route.backends[0].tls.hostname == "localhost" and route.backends[1].tls.insecure
    async with gw.client() as client:
        assert (await client.get("/x")).status_code == 200
    assert backend.handshakes == 1


LLM_TLS = """
    binds:
    - port: {port}
      listeners:
      - routes:
        - backends:
          - ai: {{name: llm, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
            policies:
              backendTLS: {{root: {ca}, hostname: localhost}}
              backendAuth: {{key: sk-test}}
"""


async def test_llm_provider_over_tls(nursery, pki, server_cert):
    mock = MockOpenAI()
    await nursery.start(partial(mock.serve, 0, certfile=server_cert[0], keyfile=server_cert[1]))
    gw = await start_gateway(nursery, LLM_TLS, port=free_port(), mock=mock.port, ca=pki.ca_file)
    chat = {"model": "m", "messages": [{"role": "user", "content": "over tls"}]}
    async with gw.client() as client:
        answers = [await client.post("/v1/chat/completions", json=chat) for _ in range(3)]
    assert [a.status_code for a in answers] == [200] * 3
    assert answers[0].json()["choices"][0]["message"]["content"] == "over tls"
    assert mock.chat_requests[0].header("authorization") == "Bearer sk-test"
    assert mock.chat_requests[0].header("host") == f"127.0.0.1:{mock.port}"
    pool = gw.info.runtime.pool
    assert pool.connections_created == 1  # three requests, one TLS connection


async def test_handshake_timeout_is_a_connect_timeout(nursery, pki):
    """A server that accepts TCP but never speaks TLS: the connect timeout covers the handshake."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    silent = trio.Event()

    async def never_speak(stream):
        await silent.wait()

    nursery.start_soon(partial(trio.serve_listeners, never_speak, listeners))
    port = listeners[0].socket.getsockname()[1]
    gw = await start_gateway(nursery, ONE_ROUTE, port=free_port(), backend=port, tls=f"{{root: {pki.ca_file}}}")
    gw.info.runtime.pool.connect_timeout = 0.2
    async with gw.client() as client:
        response = await client.get("/x")
    assert (response.status_code, response.text) == (503, f"upstream connect timeout (127.0.0.1:{port})")
    silent.set()
