"""Browser attacks on the gateway's own servers (admin, stats, readiness), against a real gateway.

- DNS rebinding: a page whose name now points at 127.0.0.1 reads ``/metrics`` with
  ``Host: evil.example``. The stats and readiness servers, like the admin server, answer only
  loopback Host names while they are bound to loopback (421); off loopback any Host.
- Cross-site writes: a page on another origin ``POST``s to the loopback admin
  (``/logging?level=debug``). Refused with 403 when the browser marks it as coming from elsewhere;
  the web UI (same origin) and the CLIs (no ``Origin``) keep working.
"""

from __future__ import annotations

import logging
import os
from functools import partial

import httpx
import pytest

from tests.conftest import LOOPBACK_SERVERS, SIMPLE, free_port
from trioproxy.config import parse_config
from trioproxy.frontend.server import serve_gateway


@pytest.fixture(autouse=True)
def restore_log_level():
    logger = logging.getLogger("trioproxy")
    level = logger.level
    yield
    logger.setLevel(level)


async def test_loopback_stats_and_readiness_answer_only_loopback_host_names(gateway):
    info = gateway.info
    async with httpx.AsyncClient(timeout=5) as client:
        for url in (f"http://{info.stats}/metrics", f"http://{info.readiness}/healthz/ready"):
            rebound = await client.get(url, headers={"host": "evil.example"})
            rebound_port = await client.get(url, headers={"host": f"evil.example:{url.split(':')[2].split('/')[0]}"})
            local = await client.get(url, headers={"host": "localhost"})
            ip = await client.get(url)
            assert (rebound.status_code, rebound_port.status_code, local.status_code, ip.status_code) == \
                (421, 421, 200, 200), url
            assert "misdirected request" in rebound.text and "trioproxy_" not in rebound.text


async def test_stats_off_loopback_answers_any_host(nursery, backend):
    """Scrapers name an off-loopback stats server however they like (pod IP, service name)."""
    text = SIMPLE.format(port=free_port(), backend=backend.port)
    config = parse_config(text, env={**os.environ, **LOOPBACK_SERVERS, "STATS_ADDR": "0.0.0.0:0"})
    info = await nursery.start(partial(serve_gateway, config, bind_host="127.0.0.1", drain_timeout=1.0))
    async with httpx.AsyncClient(timeout=5) as client:
        scraped = await client.get(f"http://127.0.0.1:{info.stats.port}/metrics",
                                   headers={"host": "gateway.prod.svc:15020"})
    assert scraped.status_code == 200 and "trioproxy_" in scraped.text


@pytest.mark.parametrize("headers", [
    {"origin": "http://evil.example"},
    {"origin": "null"},
    {"origin": "http://localhost:8080"},  # another local port is another origin
    {"sec-fetch-site": "cross-site"},
    {"sec-fetch-site": "same-site"},
])
async def test_loopback_admin_refuses_cross_site_writes(gateway, headers):
    logger = logging.getLogger("trioproxy")
    before = logger.level
    async with httpx.AsyncClient(base_url=gateway.admin_url, timeout=5) as client:
        forged = await client.post("/logging", params={"level": "debug"}, headers=headers)
        async with client.stream("POST", "/debug/trace", headers=headers) as trace:
            pass  # before the fix: 200 and a stream that waits for the next request
        read = await client.get("/logging", headers=headers)  # reading stays open: no CORS, the page sees nothing
    assert (forged.status_code, trace.status_code, read.status_code) == (403, 403, 200)
    assert "another site" in forged.text
    assert logger.level == before


async def test_the_web_ui_and_clis_can_still_write(gateway):
    admin = gateway.admin_url
    own_origin = {"origin": admin, "sec-fetch-site": "same-origin"}
    async with httpx.AsyncClient(base_url=admin, timeout=5) as client:
        ui = await client.post("/logging", params={"level": "debug"}, headers=own_origin)
        cli = await client.post("/logging", params={"level": "info"})
        typed = await client.post("/logging", params={"level": "warning"}, headers={"sec-fetch-site": "none"})
    assert (ui.status_code, cli.status_code, typed.status_code) == (200, 200, 200)
    assert typed.json() == {"level": "warn"}
