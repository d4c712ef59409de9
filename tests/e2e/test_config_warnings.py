"""A config that is valid but serves nothing useful loads with a warning naming the place.

A route with neither backends nor ``directResponse`` (nor ``requestRedirect``) answers every
request 503, and a file without binds serves nothing; both loaded silently.
"""

from __future__ import annotations

from tests.conftest import ROOT, free_port, run_cli, start_routes

NO_BACKEND = """\
binds:
- port: {port}
  listeners:
  - routes:
    - name: api
      matches: [{{path: {{pathPrefix: /api}}}}]
    - name: fixed
      policies: {{directResponse: {{status: 200, body: hi}}}}
"""


def test_route_without_backends_warns_naming_the_route(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text(NO_BACKEND.format(port=free_port()))
    done = run_cli("--config", str(path), "--validate-only")
    assert done.returncode == 0
    assert done.stderr == (
        f"trioproxy: warning: {path}:5:7: binds[0].listeners[0].routes[0]: route api has no backends and no "
        "directResponse or requestRedirect: every request it matches is answered 503 no backend available "
        "for route api\n")


def test_file_without_binds_warns(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text("config:\n  adminAddr: localhost:0\n")
    done = run_cli("--config", str(path), "--validate-only")
    assert done.returncode == 0
    assert done.stderr == (f"trioproxy: warning: {path}:1:1: binds: no binds (and no llm): the gateway serves "
                           "no traffic, only its admin, stats and readiness servers\n")


def test_bundled_configs_load_without_warnings():
    for path in [*(ROOT / "fixtures" / "configs").glob("*.yaml"), *(ROOT / "examples").glob("*/config.yaml")]:
        done = run_cli("--config", str(path), "--validate-only")
        assert "warning" not in done.stderr, done.stderr


async def test_no_backend_body_is_what_status_codes_md_says(nursery):
    gw = await start_routes(nursery, "- name: api\n", port=free_port())
    async with gw.client() as client:
        response = await client.get("/x")
    assert (response.status_code, response.text) == (503, "no backend available for route api")
    assert "`no backend available for route NAME`" in (ROOT / "docs" / "status-codes.md").read_text()
