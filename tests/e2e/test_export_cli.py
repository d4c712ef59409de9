"""The export commands against a real gateway process (docs/export.md): ``trace --har/--curl``
(live and from a saved trace), ``requests --har``, ``replay FILE|-`` with ``-H``, and their one-line
errors."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time

import httpx
import pytest

from tests.admin_helpers import GatewayProcess
from tests.conftest import ROOT
from tests.har_helpers import assert_har


class Gw(GatewayProcess):
    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "trioproxy", *args], cwd=ROOT, capture_output=True, text=True,
                              env=self.env, timeout=60, input=stdin)

    @property
    def local(self) -> list[str]:
        return ["--local", "--proxy-admin-port", str(self.admin_port)]

    def inject(self, *extra: str) -> list[str]:
        """``trace`` arguments that send (with curl, or the built-in client) a POST with a credential."""
        return [*self.local, "--port", str(self.port), "--", "http://api.example.com/echo/x?q=1", "-X", "POST",
                "-H", "authorization: Bearer secret-cli", "-H", "x-tenant: acme", "-d", "payload=1", *extra]


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = Gw(tmp_path_factory.mktemp("gw"))
    yield gateway
    gateway.close()


def saved_trace(gw: Gw, tmp_path) -> str:
    result = gw.cli("trace", "--raw", *gw.inject())
    assert result.returncode == 0, result.stderr
    path = tmp_path / "saved.jsonl"
    path.write_text(result.stdout)
    return str(path)


def test_trace_har_and_curl_live_and_from_a_saved_trace(gw, tmp_path):
    live = tmp_path / "live.har"
    result = gw.cli("trace", "--har", str(live), *gw.inject())
    assert result.returncode == 0, result.stderr
    assert f"wrote 1 request(s) to {live}" in result.stderr
    document = json.loads(live.read_text())
    assert_har(document)
    (entry,) = document["log"]["entries"]
    assert entry["request"]["method"] == "POST" and entry["request"]["url"] == "http://api.example.com/echo/x?q=1"
    headers = {h["name"]: h["value"] for h in entry["request"]["headers"]}
    assert headers["authorization"] == "<redacted>" and headers["x-tenant"] == "acme"
    assert entry["request"]["postData"]["text"] == "payload=1" and entry["response"]["status"] == 200

    saved = saved_trace(gw, tmp_path)
    from_file = gw.cli("trace", "--file", saved, "--har", "-")
    assert from_file.returncode == 0, from_file.stderr
    assert_har(json.loads(from_file.stdout))
    line = gw.cli("trace", "--file", saved, "--curl")
    assert line.returncode == 0, line.stderr
    assert line.stdout.startswith("curl ") and "'x-tenant: acme'" in line.stdout
    assert "authorization" not in line.stdout and line.stdout.count("\n") == 1


def test_requests_har(gw, tmp_path):
    httpx.get(f"{gw.url}/echo/hist/one?x=1")
    httpx.post(f"{gw.url}/echo/hist/two", content=b"x")
    expression = 'request.path.startsWith("/echo/hist/")'
    deadline = time.monotonic() + 10
    while len(httpx.get(f"{gw.admin}/api/requests", params={"expression": expression}).json()) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    out = tmp_path / "history.har"
    result = gw.cli("requests", *gw.local, "--har", str(out), expression)
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    assert_har(document)
    assert [(e["request"]["method"], e["request"]["url"].split("/", 3)[3]) for e in document["log"]["entries"]] == [
        ("GET", "echo/hist/one"), ("POST", "echo/hist/two")]  # oldest first; history paths have no query
    assert "wrote 2 request(s)" in result.stderr


def test_replay_a_saved_trace_with_and_without_the_credential(gw, tmp_path):
    saved = saved_trace(gw, tmp_path)
    plain = gw.cli("replay", saved, *gw.local)
    assert plain.returncode == 0, plain.stderr
    status, _, body = plain.stdout.partition("\n\n")
    assert status.startswith("HTTP 200\n")
    echoed = json.loads(body)
    assert echoed["method"] == "POST" and echoed["path"] == "/echo/x" and echoed["query"] == "q=1"
    sent = dict(echoed["headers"])
    assert "authorization" not in sent and sent["x-tenant"] == "acme" and "x-trioproxy-replay" not in sent

    with open(saved) as f:
        given = gw.cli("replay", "-", *gw.local, "-H", "authorization: Bearer again", "--raw", stdin=f.read())
    assert given.returncode == 0, given.stderr
    fresh = [json.loads(line) for line in given.stdout.splitlines()]
    assert fresh[0]["message"]["type"] == "requestStarted"
    assert fresh[-1]["message"] == {"type": "requestFinished", "status": 200, "error": None}
    response = next(e for e in fresh if e["message"]["type"] == "bodySnapshot" and e["message"]["stage"] == "response")
    assert dict(json.loads(base64.b64decode(response["message"]["body"]))["headers"])["authorization"] == \
        "Bearer again"


def test_errors_are_one_line_naming_the_flag_or_file(gw, tmp_path):
    saved = saved_trace(gw, tmp_path)
    two = tmp_path / "two.jsonl"
    two.write_text(open(saved).read() * 2)
    not_trace = tmp_path / "other.jsonl"
    not_trace.write_text('{"message": {"type": "requestFinished", "status": 200}}\n')
    cases = [
        (("replay", str(tmp_path / "missing.jsonl"), *gw.local), 1, "missing.jsonl: cannot read"),
        (("replay", str(two), *gw.local), 1, "holds 2 traced requests"),
        (("replay", str(not_trace), *gw.local), 1, "other.jsonl: not a traced request"),
        (("replay", saved, *gw.local, "-H", "no colon"), 2, "-H 'no colon': expected 'name: value'"),
        (("replay", saved, "--local", "--proxy-admin-port", "1"), 1, "cannot reach the admin server"),
        (("trace", "--file", saved, "--har", str(tmp_path / "no" / "dir.har")), 1, "--har"),
        (("trace", "--file", saved, "--har", "-", "--curl"), 2, "--har -"),
        (("requests", *gw.local, "--follow", "--har", "x.har"), 2, "--follow"),
        (("trace", "--file", str(not_trace), "--curl"), 1, "not a traced request"),
    ]
    for argv, code, text in cases:
        result = gw.cli(*argv)
        assert result.returncode == code, (argv, result.stderr)
        assert result.stderr.startswith("trioproxy: error: ") and text in result.stderr, (argv, result.stderr)
        assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
