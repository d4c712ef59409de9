"""jwtAuth and authorization through a running gateway, keys served by a JWKS server on port 0.

The matrix: every token case × every mode × RS256, ES256 and EdDSA keys, each with its status
and reason (docs/status-codes.md: 401 ``authentication failure: <reason>`` with ``WWW-Authenticate: Bearer``).
"""

from __future__ import annotations

import json

import pytest
import trio
import trio.testing

from tests.conftest import free_port, start_gateway
from tests.e2e.test_trace import TraceReader
from tests.jwks_server import JwksServer
from tests.jwt_helpers import AUDIENCE, ISSUER, jwks, make_key, token_cases

KINDS = ("RS256", "ES256", "EdDSA")
MODES = ("strict", "optional", "permissive")


@pytest.fixture(scope="module")
def keys():
    return {kind: (make_key(kind, f"{kind.lower()}-key"), make_key(kind, "impostor")) for kind in KINDS}


def route(name: str, policies: str, backend: int) -> str:
    return f"""
    - name: {name}
      matches: [{{path: {{pathPrefix: /{name}}}}}]
      policies:
{policies}
      backends: [{{host: "127.0.0.1:{backend}"}}]"""


def jwt_auth(mode: str, url: str, extra: str = "") -> str:
    return f"""        jwtAuth:
          mode: {mode}
          issuer: {ISSUER}
          audiences: [{AUDIENCE}]
          jwks: {{url: "{url}"}}
{extra}"""


async def start(nursery, backend, routes: str):
    config = "binds:\n- port: {port}\n  listeners:\n  - routes:" + routes + "\n"
    return await start_gateway(nursery, config.replace("{", "{{").replace("}", "}}").replace("{{port}}", "{port}"),
                               port=free_port())


def expected(mode: str, reason: str | None) -> tuple[int, str | None]:
    if reason is None:
        return 200, None
    if reason == "no bearer token found":
        return (401, reason) if mode == "strict" else (200, None)
    return (200, None) if mode == "permissive" else (401, reason)


@pytest.mark.parametrize("kind", KINDS)
async def test_mode_by_token_case_matrix(nursery, backend, keys, kind):
    key, impostor = keys[kind]
    server = await nursery.start(JwksServer(jwks(*(k for k, _ in keys.values()))).serve)
    gw = await start(nursery, backend, "".join(route(mode, jwt_auth(mode, server.url), backend.port) for mode in MODES))
    cases = token_cases(key, impostor)
    failures = []
    async with gw.client() as client:
        for mode in MODES:
            for case, (token, reason) in cases.items():
                headers = {"authorization": f"Bearer {token}"} if token is not None else {}
                response = await client.get(f"/{mode}/x", headers=headers)
                status, why = expected(mode, reason)
                got = (response.status_code, response.text if response.status_code == 401 else None)
                want_text = f"authentication failure: {why}" if why else None
                ok = got[0] == status and (want_text is None or (got[1] or "").startswith(want_text))
                if status == 401:
                    ok = ok and response.headers.get("www-authenticate") == "Bearer"
                if status == 200:
                    seen = json.loads(response.text)["headers"]
                    forwarded = any(name.lower() == "authorization" for name, _ in seen)
                    # a validated token is removed; one that failed (permissive) goes up untouched
                    ok = ok and forwarded == (token is not None and reason is not None)
                if not ok:
                    failures.append((mode, case, got, (status, want_text)))
    assert failures == []


async def test_claims_in_authorization_rules_and_trace_snapshots(nursery, backend, keys):
    key, _ = keys["RS256"]
    server = await nursery.start(JwksServer(jwks(key)).serve)
    rules = """        authorization:
          rules:
          - 'jwt.group == "eng"'
          - deny: 'jwt.sub == "mallory"'
          - require: 'request.method != "DELETE"'
"""
    gw = await start(nursery, backend, route("api", jwt_auth("strict", server.url, rules), backend.port))
    async with gw.client() as client:
        assert (await client.get("/api", headers={"authorization": f"Bearer {key.token()}"})).status_code == 200
        for token, method in ((key.token(group="ops"), "GET"), (key.token(sub="mallory"), "GET"),
                              (key.token(), "DELETE")):
            denied = await client.request(method, "/api", headers={"authorization": f"Bearer {token}"})
            assert (denied.status_code, denied.text) == (403, "authorization failed")
        assert backend.requests == 1

        reader = await nursery.start(TraceReader(gw).run)
        token = key.token(sub="mallory")
        assert (await client.get("/api", headers={"authorization": f"Bearer {token}"})).status_code == 403
        events = await reader.events()
    policies = [e["message"] for e in events if e["message"]["type"] == "policy"]
    assert {"kind": "jwt", "result": "authenticated", "issuer": ISSUER, "subject": "mallory"}.items() \
        <= policies[0].items()
    assert policies[1]["kind"] == "authorization" and policies[1]["result"] == "denied"
    assert policies[1]["reason"] == "deny rule matched" and policies[1]["rule"] == 'jwt.sub == "mallory"'
    snapshots = [e["message"] for e in events if e["message"]["type"] == "requestSnapshot"]
    after_jwt = [s for s in snapshots if s["requestState"].get("jwt")]
    assert after_jwt and after_jwt[0]["requestState"]["jwt"]["sub"] == "mallory"
    assert token not in json.dumps(events)  # the token never appears in a trace


async def test_rejections_are_traced_with_their_reason(nursery, backend, keys):
    key, _ = keys["ES256"]
    server = await nursery.start(JwksServer(jwks(key)).serve)
    gw = await start(nursery, backend, route("api", jwt_auth("strict", server.url), backend.port))
    async with gw.client() as client:
        reader = await nursery.start(TraceReader(gw).run)
        token = key.token(exp=1)
        response = await client.get("/api", headers={"authorization": f"Bearer {token}"})
        assert (response.status_code, response.text) == (401, "authentication failure: token has expired")
        events = await reader.events()
    policy = next(e for e in events if e["message"]["type"] == "policy")
    assert policy["severity"] == "warn"
    assert {"kind": "jwt", "result": "rejected", "reason": "token has expired"}.items() <= policy["message"].items()
    assert token not in json.dumps(events)
    assert events[-1]["message"]["type"] == "requestFinished" and events[-1]["message"]["status"] == 401


async def test_gateway_phase_jwt_and_key_rotation_through_the_gateway(nursery, backend, keys):
    old, _ = keys["RS256"]
    new, _ = keys["EdDSA"]
    server = await nursery.start(JwksServer(jwks(old)).serve)
    config = f"""
binds:
- port: {{port}}
  listeners:
  - policies:
      jwtAuth:
        mode: strict
        providers:
        - issuer: {ISSUER}
          jwks: {{{{url: "{server.url}"}}}}
    routes:
    - backends: [{{{{host: "127.0.0.1:{backend.port}"}}}}]
"""
    gw = await start_gateway(nursery, config, port=free_port())
    assert server.fetches == 1
    async with gw.client() as client:
        assert (await client.get("/")).status_code == 401
        assert (await client.get("/", headers={"authorization": f"Bearer {old.token()}"})).status_code == 200
        server.document = jwks(old, new)
        response = await client.get("/", headers={"authorization": f"Bearer {new.token()}"})
        assert response.status_code == 200
        assert server.fetches == 2
        server.down = True  # the IdP goes away: cached keys keep serving
        for token in (old.token(), new.token()):
            assert (await client.get("/", headers={"authorization": f"Bearer {token}"})).status_code == 200
    metrics = await _metrics(gw)
    assert f'trioproxy_jwks_stale{{url="{server.url}"}} 0.0' in metrics


async def _metrics(gw) -> str:
    import httpx

    async with httpx.AsyncClient() as client:
        return (await client.get(f"http://{gw.info.stats}/metrics")).text


async def test_startup_fetches_jwks_before_ready(nursery, backend, keys):
    key, _ = keys["RS256"]
    server = await nursery.start(JwksServer(jwks(key)).serve)
    with trio.fail_after(10):
        gw = await start(nursery, backend, route("api", jwt_auth("strict", server.url), backend.port))
    assert server.fetches == 1
    async with gw.client() as client:
        response = await client.get("/api", headers={"authorization": f"Bearer {key.token()}"})
        assert response.status_code == 200
    assert server.fetches == 1  # no fetch on the request path


def test_validate_only_accepts_the_bundled_jwt_example():
    from tests.conftest import run_cli

    result = run_cli("--config", "fixtures/configs/jwt.yaml", "--validate-only")
    assert result.returncode == 0, result.stderr


async def test_a_reload_that_adds_a_jwks_url_fetches_it(nursery, backend, keys, tmp_path):
    first_key, _ = keys["RS256"]
    second_key, _ = keys["EdDSA"]
    first = await nursery.start(JwksServer(jwks(first_key)).serve)
    second = await nursery.start(JwksServer(jwks(second_key)).serve)
    path = tmp_path / "gw.yaml"

    def write(url: str) -> str:
        text = ("binds:\n- port: PORT\n  listeners:\n  - routes:" + route("api", jwt_auth("strict", url), backend.port)
                + "\n")
        return text

    port = free_port()
    path.write_text(write(first.url).replace("PORT", str(port)))
    escaped = write(first.url).replace("{", "{{").replace("}", "}}").replace("PORT", "{port}")
    gw = await start_gateway(nursery, escaped, config_path=str(path), port=port)
    async with gw.client() as client:
        ok = await client.get("/api", headers={"authorization": f"Bearer {first_key.token()}"})
        assert ok.status_code == 200
        path.write_text(write(second.url).replace("PORT", str(port)))
        with trio.fail_after(10):
            while gw.info.runtime.state.config.binds[0].listeners[0].routes[0].policies.jwt_auth.providers[0].jwks.url \
                    != second.url:
                await trio.sleep(0.05)
            while second.fetches == 0:
                await trio.sleep(0.01)
        response = await client.get("/api", headers={"authorization": f"Bearer {second_key.token()}"})
        assert response.status_code == 200
        rejected = await client.get("/api", headers={"authorization": f"Bearer {first_key.token()}"})
        assert rejected.status_code == 401  # the old issuer's key is no longer trusted


async def test_access_log_names_the_subject_never_the_token(nursery, backend, keys):
    import io
    import logging

    from trioproxy.telemetry.access_log import configure_logging

    key, _ = keys["RS256"]
    server = await nursery.start(JwksServer(jwks(key)).serve)
    gw = await start(nursery, backend, route("api", jwt_auth("strict", server.url), backend.port))
    root = logging.getLogger("trioproxy")
    saved = (list(root.handlers), root.level, root.propagate)
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream, env={})
    try:
        token = key.token(sub="carol")
        async with gw.client() as client:
            assert (await client.get("/api", headers={"authorization": f"Bearer {token}"})).status_code == 200
            assert (await client.get("/api", headers={"authorization": "Bearer nope"})).status_code == 401
        await trio.testing.wait_all_tasks_blocked()
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
        root.propagate = saved[2]
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    requests = [line for line in lines if line["message"] == "request"]
    assert requests[0]["jwt.sub"] == "carol" and requests[0]["http.status"] == 200
    assert requests[1]["http.status"] == 401 and "jwt.sub" not in requests[1]
    assert requests[1]["error"] == "authentication failure: token is malformed"
    assert token not in stream.getvalue()
