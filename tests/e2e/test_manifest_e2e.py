"""A gateway started from a Gateway/HTTPRoute/ProxyPolicy manifest, end to end (docs/manifests.md).

Windows move with pytest-trio's ``mock_clock``, as in test_ratelimit_e2e.py; the reload test
uses the real clock (the file watcher polls once a second).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import httpx
import trio
import yaml

from fixtures.mock_openai import MockOpenAI
from tests.conftest import ROOT, free_port, run_cli, start_gateway
from tests.e2e.test_ratelimit_e2e import CHAT, limits

GATEWAY = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: gateway-system}}
spec:
  gatewayClassName: trioproxy
  listeners: [{{name: main, port: {port}, protocol: HTTP}}]
"""


def route(name: str, prefix: str, backend: int) -> str:
    return f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{{{name: {name}, namespace: gateway-system}}}}
spec:
  parentRefs: [{{{{name: gw}}}}]
  rules:
  - matches: [{{{{path: {{{{type: PathPrefix, value: {prefix}}}}}}}}}]
    backendRefs: [{{{{name: 127.0.0.1, port: {backend}}}}}]
"""


def policy(kind: str, target: str, local: str, name: str = "limits") -> str:
    return f"""
apiVersion: trioproxy.dev/v1alpha1
kind: ProxyPolicy
metadata: {{{{name: {name}, namespace: gateway-system}}}}
spec:
  targetRefs: [{{{{group: gateway.networking.k8s.io, kind: {kind}, name: {target}}}}}]
  traffic: {{{{rateLimit: {{{{local: [{local}]}}}}}}}}
"""


def manifest(*docs: str) -> str:
    return "\n---\n".join(textwrap.dedent(d).strip("\n") for d in docs) + "\n"


async def test_token_limit_delivers_the_overshoot_then_429_not_forwarded(nursery, mock_clock):
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    gw = await start_gateway(nursery, manifest(GATEWAY, route("llm", "/v1", mock.port),
                                               policy("HTTPRoute", "llm", "{{tokens: 100, unit: Minutes}}")),
                             port=free_port())
    async with gw.client() as client:
        sent = [await client.post("/v1/chat/completions", json=CHAT, headers={"x-mock-total-tokens": "60"})
                for _ in range(3)]
        assert [r.status_code for r in sent] == [200, 200, 429]
        assert sent[1].json()["usage"]["total_tokens"] == 60  # the crossing response, unchanged
        assert limits(sent[1]) == ("100", "40", "60")
        assert sent[2].text == "rate limit exceeded"
        assert mock.count == 2  # the 429 never reached the provider
    mock_clock.jump(60)  # the window refills by itself: 100 - 20 overshoot
    async with gw.client() as client:  # a new connection: the old one reached http1IdleTimeout (60 s)
        after = await client.post("/v1/chat/completions", json=CHAT, headers={"x-mock-total-tokens": "10"})
    assert after.status_code == 200
    assert limits(after) == ("100", "80", "60")


async def test_requests_with_burst_and_a_window_that_resets_by_itself(nursery, backend, mock_clock):
    gw = await start_gateway(nursery, manifest(GATEWAY, route("api", "/", backend.port),
                                               policy("HTTPRoute", "api", "{{requests: 3, burst: 2, unit: Seconds}}")),
                             port=free_port())
    async with gw.client() as client:
        first = [await client.get("/") for _ in range(6)]
        assert [r.status_code for r in first] == [200] * 5 + [429]
        assert [limits(r)[:2] for r in first[:5]] == [("5", "4"), ("5", "3"), ("5", "2"), ("5", "1"), ("5", "0")]
        assert backend.requests == 5
        mock_clock.jump(1)
        again = [(await client.get("/")).status_code for _ in range(4)]
    assert again == [200] * 3 + [429]  # one fill adds n, not the burst


async def test_httproute_rewrite_mirror_and_redirect_filters(nursery, backend):
    """Gateway API's URLRewrite, RequestMirror and RequestRedirect filters, served: the backend
    sees the rewritten Host and path, the mirror a copy, and the redirect rule answers itself."""
    from fixtures.echo_backend import EchoBackend

    mirror = await nursery.start(EchoBackend().serve)
    filters = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{{{name: web, namespace: gateway-system}}}}
spec:
  parentRefs: [{{{{name: gw}}}}]
  rules:
  - matches: [{{{{path: {{{{type: PathPrefix, value: /api}}}}}}}}]
    filters:
    - type: URLRewrite
      urlRewrite: {{{{hostname: internal.example, path: {{{{type: ReplacePrefixMatch, replacePrefixMatch: /v2}}}}}}}}
    - type: RequestMirror
      requestMirror: {{{{backendRef: {{{{name: 127.0.0.1, port: {mirror.port}}}}}}}}}
    backendRefs: [{{{{name: 127.0.0.1, port: {backend.port}}}}}]
  - name: moved
    matches: [{{{{path: {{{{type: PathPrefix, value: /old}}}}}}}}]
    filters:
    - type: RequestRedirect
      requestRedirect: {{{{scheme: https, statusCode: 301, path: {{{{type: ReplacePrefixMatch, replacePrefixMatch: /new}}}}}}}}
"""
    gw = await start_gateway(nursery, manifest(GATEWAY, filters), port=free_port())
    async with gw.client() as client:
        with trio.fail_after(5):
            received = mirror.received
            echoed = (await client.get("/api/users?q=1")).json()
            await received.wait()
        moved = await client.get("/old/page?x=2", headers={"host": "shop.example:8080"})
    assert (echoed["path"], echoed["query"], dict(echoed["headers"])["host"]) == ("/v2/users", "q=1", "internal.example")
    assert mirror.seen == [("GET", "/v2/users?q=1", 0)]
    assert (moved.status_code, moved.headers["location"]) == (301, "https://shop.example/new/page?x=2")
    assert backend.requests == 1


async def test_gateway_targeted_budget_is_shared_by_two_routes(nursery, backend, mock_clock):
    gw = await start_gateway(nursery, manifest(GATEWAY, route("a", "/a", backend.port), route("b", "/b", backend.port),
                                               policy("Gateway", "gw", "{{requests: 2, unit: Hours}}")),
                             port=free_port())
    async with gw.client() as client:
        statuses = [(await client.get(path)).status_code for path in ("/a", "/b", "/a", "/b")]
        assert statuses == [200, 200, 429, 429]
    mock_clock.jump(3600)
    async with gw.client() as client:  # a new connection: the old one idled past http1IdleTimeout
        assert (await client.get("/b")).status_code == 200


async def test_status_command_prints_every_resource(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(manifest(GATEWAY, route("api", "/", 9), policy("HTTPRoute", "missing", "{{requests: 1, unit: Hours}}"),
                             policy("HTTPRoute", "api", "{{tokens: 1, unit: Fortnights}}", name="bad")
                             ).format(port=3000))
    done = run_cli("status", "--config", str(path), "-o", "json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [(r["kind"], r["metadata"]) for r in out] == [
        ("Gateway", {"name": "gw", "namespace": "gateway-system"}),
        ("HTTPRoute", {"name": "api", "namespace": "gateway-system"}),
        ("ProxyPolicy", {"name": "limits", "namespace": "gateway-system"}),
        ("ProxyPolicy", {"name": "bad", "namespace": "gateway-system"})]
    pending = out[2]["status"]["ancestors"][0]["conditions"][1]
    assert (pending["status"], pending["reason"], pending["message"]) == (
        "False", "Pending", "HTTPRoute gateway-system/missing not found")
    invalid = out[3]["status"]["ancestors"][0]["conditions"][0]
    assert invalid["message"] == ('spec.traffic.rateLimit.local[0].unit: Unsupported value: "Fortnights": '
                                  'supported values: "Seconds", "Minutes", "Hours"')
    assert done.stderr.startswith("trioproxy: warning: ProxyPolicy gateway-system/bad rejected: ")
    as_yaml = run_cli("status", "--config", str(path))
    assert as_yaml.returncode == 0
    assert _timeless(yaml.safe_load(as_yaml.stdout)) == _timeless(out)  # two runs: two stamps
    for bad, message in (("does-not-exist.yaml", "cannot read config file"), ("broken", "invalid YAML")):
        target = tmp_path / bad
        if bad == "broken":
            target.write_text("kind: [\n")
        failed = run_cli("status", "--config", str(target))
        assert failed.returncode == 1 and message in failed.stderr
        assert len(failed.stderr.strip().splitlines()) == 1 and "Traceback" not in failed.stderr


def test_bundled_manifest_validates_and_its_status_is_all_green():
    example = ROOT / "fixtures" / "configs" / "manifests" / "local-llm.yaml"
    done = run_cli("status", "--config", str(example), "-o", "json")
    assert done.returncode == 0 and done.stderr == ""
    conditions = [c for r in json.loads(done.stdout) for c in _conditions(r["status"])]
    assert len(conditions) == 8 and all(c["status"] == "True" for c in conditions)
    valid = run_cli("--config", str(example), "--validate-only")
    assert valid.returncode == 0 and "(1 binds, 2 routes)" in valid.stdout


def test_validate_only_fails_on_a_resource_the_gateway_would_leave_out(tmp_path):
    example = ROOT / "fixtures" / "configs" / "manifests" / "local-llm.yaml"
    broken = tmp_path / "m.yaml"
    broken.write_text(example.read_text().replace("{tokens: 5000, unit: Hours}", "{tokens: 5000, unit: Weeks}"))
    done = run_cli("--config", str(broken), "--validate-only")
    assert done.returncode == 1
    assert done.stderr == ('trioproxy: error: ProxyPolicy gateway-system/llm-limits rejected: spec.traffic.rateLimit.local[0].unit: '
                           'Unsupported value: "Weeks": supported values: "Seconds", "Minutes", "Hours"\n')


def _timeless(statuses: list) -> str:
    import re

    return re.sub(r'"lastTransitionTime": "[^"]+"', "", json.dumps(statuses))


def _conditions(status: dict) -> list[dict]:
    out = list(status.get("conditions", []))
    for entry in status.get("parents", []) + status.get("ancestors", []):
        out += entry["conditions"]
    return out


async def test_reload_keeps_budgets_and_an_invalid_edit_is_reported(tmp_path, nursery, backend, caplog):
    port = free_port()
    docs = [GATEWAY, route("api", "/", backend.port), policy("HTTPRoute", "api", "{{requests: 2, unit: Hours}}")]
    path = Path(tmp_path / "m.yaml")
    path.write_text(manifest(*docs).format(port=port))
    gw = await start_gateway(nursery, manifest(*docs), config_path=str(path), port=port)
    runtime = gw.info.runtime

    async def wait_for(predicate) -> None:
        """Until the watcher (polling each second) has applied or rejected the edit."""
        with trio.fail_after(10):
            while not predicate():
                await trio.sleep(0.05)

    def policy_message() -> str:
        return runtime.state.config.statuses[2]["status"]["ancestors"][0]["conditions"][0]["message"]

    async with gw.client() as client, httpx.AsyncClient(base_url=gw.admin_url) as admin:
        assert (await client.get("/")).status_code == 200
        # an unrelated edit: the route's budget (1 left) is kept
        path.write_text(manifest(*docs, route("other", "/other", backend.port)).format(port=port))
        await wait_for(lambda: len(runtime.state.config.statuses) == 4)
        assert limits(await client.get("/"))[:2] == ("2", "0")
        assert (await client.get("/")).status_code == 429
        # an invalid policy edit: its last valid version (and budget) keeps applying, the status says why
        path.write_text(manifest(GATEWAY, route("api", "/", backend.port),
                                 policy("HTTPRoute", "api", "{{requests: 2, unit: Weeks}}")).format(port=port))
        await wait_for(lambda: "Weeks" in policy_message())
        dump = (await admin.get("/config_dump")).json()
        accepted = dump["statuses"][2]["status"]["ancestors"][0]["conditions"][0]
        assert (accepted["status"], accepted["reason"]) == ("False", "Invalid")
        assert 'Unsupported value: "Weeks"' in accepted["message"]
        assert accepted["message"].endswith("the last valid version keeps applying")
        assert (await admin.get("/api/statuses")).json()["statuses"] == dump["statuses"]  # the web UI's source
        logged = [r.getMessage() for r in caplog.records if "resource not applied" in r.getMessage()]
        assert logged == [f"resource not applied: ProxyPolicy gateway-system/limits rejected: {accepted['message']}"]
        assert (await client.get("/")).status_code == 429
        # the edit fixed: the new limit applies (a new bucket: its spec changed)
        path.write_text(manifest(GATEWAY, route("api", "/", backend.port),
                                 policy("HTTPRoute", "api", "{{requests: 3, unit: Hours}}")).format(port=port))
        await wait_for(lambda: policy_message() == "Policy is valid")
        assert limits(await client.get("/"))[:2] == ("3", "2")
        # a file that cannot be parsed: the previous config keeps serving, the reload error says why
        path.write_text("apiVersion: [\n")
        await wait_for(lambda: bool(runtime.reload_errors))
        assert runtime.state.config.statuses[2]["status"]["ancestors"][0]["conditions"][0]["reason"] == "Valid"  # the last applied config
        assert runtime.reload_errors and "invalid YAML" in runtime.reload_errors[0]
        assert (await client.get("/")).status_code == 200
