"""The text UI in a real terminal (tmux) on a real gateway process serving a streamed LLM answer from the
mock OpenAI provider (also a process): the body view shows the answer reassembled, search finds it."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.admin_helpers import GatewayProcess
from tests.conftest import ROOT
from tests.e2e.test_tui_app import Tmux

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
    - name: llm
      backends:
      - ai: {{name: gpt, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
"""

QUESTION = "the quick brown fox jumps over the lazy dog"


@pytest.fixture
def llm_gateway(tmp_path):
    mock = subprocess.Popen([sys.executable, "-m", "fixtures.mock_openai", "--port", "0"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        line = mock.stdout.readline()  # printed once it listens
        assert line.startswith("mock-openai listening on http://127.0.0.1:"), line
        port = line.rsplit(":", 1)[1].strip()
        gw = GatewayProcess(tmp_path, config_text=CONFIG, mock=port)
        gw.mock_url = f"http://127.0.0.1:{port}"
        try:
            yield gw
        finally:
            gw.close()
    finally:
        mock.terminate()
        mock.wait(timeout=10)
        mock.stdout.close()


def trace_in_tmux(gw: GatewayProcess, *curl_args: str, cwd: Path = ROOT) -> Tmux:
    cmd = [sys.executable, "-m", "trioproxy", "trace", "--local", "--proxy-admin-port", str(gw.admin_port),
           "--port", str(gw.port), "--", *curl_args]
    script = f"cd {shlex.quote(str(cwd))} && TERM=xterm-256color {shlex.join(cmd)}; echo TRACE-EXIT=$?; exec sleep 60"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in gw.env.items() if k in ("PYTHONPATH", "TRIOPROXY_RUNTIME_DIR"))
    return Tmux(f"env {env} sh -c {shlex.quote(script)}")


def test_body_view_reassembles_a_streamed_answer_and_search_finds_it(llm_gateway):
    chat = {"model": "gpt-4o-mini", "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": QUESTION}]}
    tmux = trace_in_tmux(llm_gateway, "http://llm.example/v1/chat/completions", "-H",
                         "content-type: application/json", "-d", json.dumps(chat))
    try:
        tmux.wait_for(lambda s: "stream complete, press q to exit" in s, "the trace")
        # Each step waits for the whole screen it checks: a capture can fall between two writes of a redraw.
        tmux.keys("b")
        tmux.wait_for(has("Request body", "Response body", "POST /v1/chat/completions", "status 200",
                          "OpenAI chat stream reassembled from", "model gpt-4o-mini", "finish: stop",
                          '"content": "the quick brown fox',  # the request, pretty-printed
                          "tokens: input 9, output 9, total 18"),  # the gateway's count (the mock: words)
                      "the body view")
        # the answer in one piece (the mock echoes the question, streamed in pieces of words)
        tmux.wait_for(lambda s: "text:" in right_column(s)
                      and right_column(s)[right_column(s).index("text:") + 1] == QUESTION, "the reassembled text")

        tmux.keys("/", "l", "a", "z", "y")
        tmux.wait_for(has("/lazy", "Enter search"), "the search prompt")
        tmux.keys("Enter")
        screen = tmux.wait_for(lambda s: re.search(r"/lazy: 1/\d+\s", s) is not None, "the first match")
        total = int(re.search(r"/lazy: 1/(\d+)\s", screen).group(1))
        assert total >= 2  # the request's content, the reassembled text (and a delta event holding all of it)
        tmux.keys("n")
        tmux.wait_for(has(f"/lazy: 2/{total}"), "the next match")

        def marked(screen: str, kind: str) -> bool:
            return any("▶" in line and "Body Snapshot" in line and kind in line for line in screen.splitlines())

        tmux.keys("e")  # in the events view the rows holding a match are marked
        tmux.wait_for(lambda s: "Raw Event" in s and marked(s, "final request") and marked(s, "response (")
                      and "LLM Usage       model=gpt-4o-mini in=9 out=9" in s, "the marked events")
        tmux.keys("n")  # the first match among the events: the request body, decoded under its raw event
        tmux.wait_for(has(f"/lazy: 1/{total}", '"content": "the quick brown fox jumps over the lazy dog"'),
                      "a match in the events")
        tmux.keys("q")
        screen = tmux.wait_for(lambda s: "TRACE-EXIT=" in s, "exit")
        assert "TRACE-EXIT=0" in screen and "Traceback" not in screen
    finally:
        tmux.close()


def right_column(screen: str) -> list[str]:
    return [line.split("││", 1)[1].rstrip("│ ") for line in screen.splitlines() if "││" in line]


def has(*parts: str):
    """A screen predicate: every one of ``parts`` shows."""
    return lambda screen: all(part in screen for part in parts)


def test_x_exports_har_and_curl_and_r_replays_through_the_gateway(llm_gateway, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    chat = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "replay me please"}]}
    tmux = trace_in_tmux(llm_gateway, "http://llm.example/v1/chat/completions", "-H",
                         "content-type: application/json", "-d", json.dumps(chat), cwd=work)
    try:
        tmux.wait_for(lambda s: "stream complete, press q to exit" in s, "the trace")
        tmux.keys("x")
        tmux.wait_for(has("wrote trioproxy-request-1.har", " Export ", "curl (c copies it):",
                          f"http://127.0.0.1:{llm_gateway.port}/v1/chat/completions"),  # aimed at the listener
                      "the export")
        har = json.loads((work / "trioproxy-request-1.har").read_text())
        entry = har["log"]["entries"][0]
        assert entry["request"]["url"] == "http://llm.example/v1/chat/completions"
        # (the body as sent upstream: the gateway asked the stream for its usage, stream_options)
        assert json.loads(entry["request"]["postData"]["text"])["messages"] == chat["messages"]
        assert "data: [DONE]" in entry["response"]["content"]["text"]

        tmux.keys("r")
        tmux.wait_for(has("replayed request 1: status 200 (request 2)", "(replay of 1)", " Requests "), "the replay")
        recorded = httpx.get(f"{llm_gateway.mock_url}/mock/requests").json()
        assert [r["json"]["messages"] for r in recorded] == [chat["messages"]] * 2  # sent again, upstream
        tmux.keys("b")  # the replayed request's own trace: its answer, reassembled
        tmux.wait_for(lambda s: "Response body" in s and "text:" in right_column(s)
                      and right_column(s)[right_column(s).index("text:") + 1] == "replay me please",
                      "the replay's answer in the body view")
        tmux.keys("q")
        screen = tmux.wait_for(lambda s: "TRACE-EXIT=" in s, "exit")
        assert "TRACE-EXIT=0" in screen and "Traceback" not in screen
    finally:
        tmux.close()


def test_r_under_follow_adds_the_replay_once_and_following_goes_on(llm_gateway, tmp_path):
    cmd = [sys.executable, "-m", "trioproxy", "trace", "--local", "--proxy-admin-port", str(llm_gateway.admin_port),
           "--follow"]
    script = f"cd {shlex.quote(str(tmp_path))} && TERM=xterm-256color {shlex.join(cmd)}; exec sleep 60"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in llm_gateway.env.items()
                   if k in ("PYTHONPATH", "TRIOPROXY_RUNTIME_DIR"))
    tmux = Tmux(f"env {env} sh -c {shlex.quote(script)}")

    def rows(screen: str) -> list[str]:
        return [line for line in screen.splitlines() if "/v1/chat/completions" in line and "POST" in line]

    def ask(text: str) -> None:
        chat = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": text}]}
        answer = httpx.post(f"{llm_gateway.url}/v1/chat/completions", json=chat, timeout=10)
        assert answer.status_code == 200

    try:
        # drawn only once the stream said ": ready": the follower is armed
        tmux.wait_for(lambda s: "waiting for trace data" in s, "the follow stream")
        ask("first question")
        tmux.wait_for(lambda s: len(rows(s)) == 1 and "200" in rows(s)[0], "the first request")
        tmux.keys("r")
        tmux.wait_for(lambda s: "replayed request 1: status 200 (request 2)" in s and len(rows(s)) == 2
                      and "(replay of 1)" in rows(s)[1], "the replay")
        ask("second question")
        screen = tmux.wait_for(lambda s: len(rows(s)) == 3 and "200" in rows(s)[2], "the next live request")
        assert "(replay of 1)" in rows(screen)[1] and "replay" not in rows(screen)[2]
        assert len(rows(screen)) == 3  # the replay once: not also followed
        recorded = httpx.get(f"{llm_gateway.mock_url}/mock/requests").json()
        assert [r["json"]["messages"][0]["content"] for r in recorded] == [
            "first question", "first question", "second question"]
        tmux.keys("q")
    finally:
        tmux.close()
