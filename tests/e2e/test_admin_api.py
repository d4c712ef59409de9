"""The admin JSON API (``/api/``) and the admin bearer token, against real in-process gateways."""

from __future__ import annotations

import base64
import json
import os
import sys

import httpx
import pytest
import trio

from tests.conftest import LIMITED, LOOPBACK_SERVERS, ROOT, SIMPLE, free_port, run_cli, start_gateway
from trioproxy.admin.api import histogram_quantile, validate_expression
from trioproxy.admin.auth import is_loopback, presented_tokens
from trioproxy.admin.trace_stream import scrub, scrub_body
from trioproxy.config import Config, parse_config
from trioproxy.config.dump import config_dump
from trioproxy.frontend.server import StartupError, serve_gateway
from trioproxy.policies.ratelimit_local import LocalRateLimiter, LocalRateLimitSpec


async def test_api_config_limiters_metrics_statuses(nursery, backend):
    gw = await start_gateway(nursery, LIMITED, port=free_port(), backend=backend.port, max_tokens=3)
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin, gw.client() as client:
        config = (await admin.get("/api/config")).json()
        routes = config["binds"][0]["listeners"][0]["routes"]
        assert [r["name"] for r in routes] == ["limited", "echo"]

        first = (await admin.get("/api/limiters")).json()["limiters"]
        assert [(l["scope"], l["entries"][0]["remaining"]) for l in first] == [("route", 3)]
        # Reading the limiters many times must not charge or refill anything.
        for _ in range(5):
            await admin.get("/api/limiters")
        assert (await client.get("/limited")).headers["x-ratelimit-remaining"] == "2"
        await client.get("/limited")
        entry = (await admin.get("/api/limiters")).json()["limiters"][0]["entries"][0]
        assert (entry["limit"], entry["remaining"], entry["type"]) == (3, 1, "requests")
        assert 0 < entry["resetSeconds"] <= 60

        await client.get("/other")
        # A request is counted just after its response ends: wait for the third count.
        with trio.fail_after(5):
            while True:
                summary = (await admin.get("/api/metrics")).json()
                by_route = {(r["route"], r["status"]): r["count"] for r in summary["requests"]}
                if sum(by_route.values()) == 3:
                    break
                await trio.sleep(0.01)
        limited_key = routes[0]["key"]
        assert by_route[(limited_key, 200)] == 2
        assert by_route[(routes[1]["key"], 200)] == 1
        latency = {l["route"]: l for l in summary["latency"]}
        assert latency[limited_key]["count"] == 2
        assert latency[limited_key]["percentiles"]["p50"] > 0

        statuses = (await admin.get("/api/statuses")).json()
        assert statuses["statuses"] == []
        assert statuses["reload"] == {"ok": True, "errors": [], "applied": 0, "rejected": 0,
                                      "file": None}
        status = {"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
                  "metadata": {"name": "echo", "namespace": "default"},
                  "status": {"parents": [{"conditions": [{"type": "Accepted", "status": "True"}]}]}}
        gw.info.runtime.statuses = [status]
        assert (await admin.get("/api/statuses")).json()["statuses"] == [status]
        gw.info.runtime.reload_errors = ["binds[0].port: expected an integer"]
        statuses = (await admin.get("/api/statuses")).json()
        assert statuses["reload"]["ok"] is False
        assert statuses["reload"]["errors"] == ["binds[0].port: expected an integer"]


async def test_api_cel_validate(nursery, gateway):
    async with httpx.AsyncClient(base_url=gateway.admin_url) as admin:
        ok = (await admin.get("/api/cel/validate", params={"expression": 'request.path == "/x"'})).json()
        assert ok == {"valid": True}
        bad = (await admin.get("/api/cel/validate", params={"expression": "request.path =="})).json()
        assert bad["valid"] is False and bad["error"]
        unknown = (await admin.post("/api/cel/validate", json={"expression": "nope.x"})).json()
        assert unknown["valid"] is False and "nope" in unknown["error"]
        assert (await admin.get("/api/cel/validate")).json()["valid"] is True
        assert (await admin.get("/api/auth")).json() == {"required": False, "accepted": True}


def test_validate_expression_pure():
    assert validate_expression("") == {"valid": True, "empty": True}
    assert validate_expression(3)["valid"] is False


def test_histogram_quantile_interpolates_like_prometheus():
    points = [(0.1, 0.0), (0.2, 10.0), (0.5, 10.0), (float("inf"), 10.0)]
    assert histogram_quantile(0.5, points) == pytest.approx(0.15)
    assert histogram_quantile(0.5, [(0.1, 0.0), (float("inf"), 0.0)]) is None
    assert histogram_quantile(0.99, [(0.1, 0.0), (float("inf"), 5.0)]) == 0.1


def test_observe_reads_without_writing():
    limiter = LocalRateLimiter([LocalRateLimitSpec(2, 1, 1.0)], now=0.0)
    limiter.admit(0.0)
    limiter.admit(0.0)
    bucket = limiter.buckets[0]
    before = (bucket._tokens, bucket._fills)
    ((decision, balance),) = limiter.observe(1.5)
    assert (decision.remaining, decision.reset_seconds, balance) == (1, 1, 1)
    assert (bucket._tokens, bucket._fills) == before  # nothing credited
    assert limiter.admit(1.5).allowed and not limiter.admit(1.5).allowed


def test_loopback_addresses():
    assert all(is_loopback(h) for h in ("localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.1", "example.com"))


def test_tokens_presented_by_header_cookie_and_trace_query():
    headers = [(b"authorization", b"Bearer abc"), (b"cookie", b"x=1; trioproxy_admin_token=def")]
    assert presented_tokens({"path": "/api/config", "headers": headers, "query_string": b"token=ghi"}) == ["abc", "def"]
    assert presented_tokens({"path": "/debug/trace", "headers": [], "query_string": b"token=ghi"}) == ["ghi"]
    assert presented_tokens({"path": "/x", "headers": [(b"authorization", b"Basic abc")]}) == []


def test_scrub_body_hides_the_token_inside_base64_bodies():
    body = base64.b64encode(b'{"x-api-key": "s3cret"}').decode()
    event = {"eventEnd": 1, "message": {"type": "bodySnapshot", "stage": "response", "body": body}}
    cleaned = scrub_body(event, ("s3cret",))
    assert base64.b64decode(cleaned["message"]["body"]) == b'{"x-api-key": "<redacted>"}'
    assert scrub_body({"message": {"type": "requestStarted"}}, ("s3cret",)) == {"message": {"type": "requestStarted"}}


def test_scrub_hides_the_token_in_events():
    assert scrub(b'{"h":{"x-token":"s3cret"},"q":"?t=s3cret"}', ("s3cret",)) == \
        b'{"h":{"x-token":"<redacted>"},"q":"?t=<redacted>"}'


OFF_LOOPBACK = "config:\n  adminAddr: 0.0.0.0:0\n" + SIMPLE


def _off_loopback(backend_port: int, token: str | None = None) -> Config:
    """OFF_LOOPBACK on a free port, the stats and readiness servers on loopback, ``ADMIN_TOKEN`` = ``token``."""
    env = {name: value for name, value in LOOPBACK_SERVERS.items() if name != "ADMIN_ADDR"}
    if token is not None:
        env["ADMIN_TOKEN"] = token
    return parse_config(OFF_LOOPBACK.format(port=free_port(), backend=backend_port), env=env)


async def test_off_loopback_admin_refuses_to_start_without_token():
    config = _off_loopback(backend_port=1)
    with pytest.raises(StartupError, match=r"config.adminAddr: .*ADMIN_TOKEN"):
        await serve_gateway(config)


def test_cli_off_loopback_without_token_is_one_line_exit_1(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text(OFF_LOOPBACK.format(port=free_port(), backend=1))
    env = {"ADMIN_TOKEN": "", "STATS_ADDR": "127.0.0.1:0", "READINESS_ADDR": "127.0.0.1:0"}
    result = run_cli("--config", str(path), env=env)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "trioproxy: error: config.adminAddr: the admin server on 0.0.0.0:0 is not loopback-only and needs a bearer token:"
        " set ADMIN_TOKEN (or config.adminToken)"]


def test_admin_token_from_config_env_or_variable():
    text = OFF_LOOPBACK.format(port=1, backend=1).replace("  adminAddr: 0.0.0.0:0\n",
                                                          "  adminAddr: 0.0.0.0:0\n  adminToken: $ADMIN_SECRET\n")
    config = parse_config(text, env={"ADMIN_SECRET": "from-var"})
    assert config.servers.admin_token == "from-var"
    assert "from-var" not in repr(config)
    assert config_dump(config)["config"]["adminToken"] == "<redacted>"
    assert parse_config(text, env={"ADMIN_SECRET": "x", "ADMIN_TOKEN": "env"}).servers.admin_token == "env"
    plain = parse_config(OFF_LOOPBACK.format(port=1, backend=1), env={})
    assert plain.servers.admin_token is None and "adminToken" not in config_dump(plain)["config"]


async def test_off_loopback_admin_requires_the_token_everywhere(nursery, backend):
    config = _off_loopback(backend.port, token="s3cret-token")
    info = await nursery.start(serve_gateway, config)
    base = f"http://127.0.0.1:{info.admin.port}"
    async with httpx.AsyncClient(base_url=base) as admin:
        for path in ("/config_dump", "/api/config", "/api/statuses", "/api/limiters", "/api/metrics",
                     "/api/cel/validate", "/debug/trace", "/nope"):
            response = await admin.get(path)
            assert response.status_code == 401, path
            assert response.headers["www-authenticate"].startswith("Bearer")
            wrong = await admin.get(path, headers={"authorization": "Bearer wrong"})
            assert wrong.status_code == 401, path
        good = {"authorization": "Bearer s3cret-token"}
        assert (await admin.get("/api/config", headers=good)).status_code == 200
        assert (await admin.get("/api/config", headers={"cookie": "trioproxy_admin_token=s3cret-token"})).status_code == 200
        # The query token is for EventSource on /debug/trace only.
        assert (await admin.get("/api/config", params={"token": "s3cret-token"})).status_code == 401
        assert (await admin.get("/api/auth")).json() == {"required": True, "accepted": False}
        assert (await admin.get("/api/auth", headers=good)).json() == {"required": True, "accepted": True}
        # The UI shell loads without the token (it holds no data and asks for the token).
        assert (await admin.get("/ui")).status_code == 200
        assert (await admin.get("/ui/static/ui.js")).status_code == 200
        async with admin.stream("GET", "/debug/trace", params={"token": "s3cret-token"}) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            assert await lines.__anext__() == ": ready"


async def test_trace_command_sends_admin_token(nursery, backend):
    config = _off_loopback(backend.port, token="cli-token")
    info = await nursery.start(serve_gateway, config)
    port = info.ports[config.binds[0].port]
    argv = [sys.executable, "-m", "trioproxy", "trace", "--local", "--proxy-admin-port", str(info.admin.port),
            "--raw", "--port", str(port), "--", "http://example.test/cli"]
    base = {k: v for k, v in os.environ.items() if k != "ADMIN_TOKEN"}
    refused = await trio.run_process(argv, cwd=ROOT, env=base, capture_stdout=True, capture_stderr=True, check=False)
    assert refused.returncode == 1
    assert len(refused.stderr.decode().strip().splitlines()) == 1 and "401" in refused.stderr.decode()
    done = await trio.run_process(argv, cwd=ROOT, env={**base, "ADMIN_TOKEN": "cli-token"},
                                  capture_stdout=True, capture_stderr=True, check=False)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert events[-1]["message"]["type"] == "requestFinished" and events[-1]["message"]["status"] == 200


async def test_ui_files_are_served_from_the_package(nursery, gateway):
    async with httpx.AsyncClient(base_url=gateway.admin_url) as admin:
        page = await admin.get("/ui")
        assert page.headers["content-type"].startswith("text/html")
        # Only its own files and this server (the browser tests fail on any CSP violation).
        assert "script-src 'self';" in page.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        for link in ("Overview", "Trace", "Rate limits", "Traffic"):
            assert f">{link}</a>" in page.text
        for name, kind in (("ui.js", "text/javascript"), ("trace_model.js", "text/javascript"), ("ui.css", "text/css")):
            response = await admin.get(f"/ui/static/{name}")
            assert response.status_code == 200 and response.headers["content-type"].startswith(kind)
        for bad in ("/ui/static/nope.js", "/ui/static/..%2Fapp.py", "/ui/static/ui.html.bak"):
            assert (await admin.get(bad)).status_code == 404


async def test_a_configured_token_is_required_on_loopback_too(nursery, backend):
    gw = await start_gateway(nursery, "config:\n  adminToken: loop-token\n" + LIMITED, port=free_port(),
                             backend=backend.port, max_tokens=3)
    async with httpx.AsyncClient(base_url=gw.admin_url) as admin:
        assert (await admin.get("/api/config")).status_code == 401
        ok = await admin.get("/api/config", headers={"authorization": "Bearer loop-token"})
        assert ok.status_code == 200 and ok.json()["config"]["adminToken"] == "<redacted>"


def test_config_dump_shows_the_frontend_limits_and_backend_connection_settings():
    config = parse_config(
        "frontendPolicies:\n  http: {maxBufferSize: 4096, requestHeaderTimeout: 2s}\n"
        "config:\n  backend: {connectTimeout: 3s}\n"
        "binds:\n- port: 8080\n  listeners:\n  - routes:\n    - backends: [{host: '127.0.0.1:9'}]\n",
        env=LOOPBACK_SERVERS)
    dump = config_dump(config)
    assert dump["frontendPolicies"]["http"]["maxBufferSize"] == 4096
    assert dump["frontendPolicies"]["http"]["requestHeaderTimeout"] == 2.0
    assert dump["frontendPolicies"]["http"]["http1MaxHeaders"] == 100  # defaults shown too
    assert dump["config"]["backend"]["connectTimeout"] == 3.0
    assert dump["config"]["workers"] == 1



def test_metrics_summary_sums_a_routes_series_over_status_and_method():
    """One latency row per (bind, route): the histogram's other labels are summed, not overwritten."""
    from prometheus_client import CollectorRegistry, Histogram

    from trioproxy.admin.api import metrics_summary

    registry = CollectorRegistry()
    duration = Histogram("trioproxy_request_duration_seconds", "", ["bind", "route", "method", "status"],
                         buckets=(0.1, 1.0), registry=registry)
    for status, seconds in (("200", 0.05), ("200", 0.05), ("500", 0.5), ("200", 0.5)):
        duration.labels("8080", "r", "GET", status).observe(seconds)
    duration.labels("8080", "r", "POST", "201").observe(2.0)
    (row,) = metrics_summary(registry.collect())["latency"]
    assert row["count"] == 5 and row["meanSeconds"] == pytest.approx(3.1 / 5)
    assert row["percentiles"]["p50"] == pytest.approx(0.1 + 0.9 * (2.5 - 2) / 2)  # rank 2.5 of 5 in (0.1, 1]


def test_a_set_in_a_policy_spec_dumps_as_a_sorted_list():
    """Traces (policySelection) and /config_dump serialise specs as JSON: a set there once broke
    the trace stream of every request on its route."""
    from trioproxy.config.dump import _plain

    assert _plain(frozenset({"b", "a"})) == ["a", "b"]
