"""The viewer driven through prompt-toolkit's pipe input, as a terminal would drive it."""

import asyncio
import base64
import io
import json
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jsonschema
import pytest
from prompt_toolkit.data_structures import Size
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from prompt_toolkit.output.vt100 import Vt100_Output

from tests.fake_trace_gateway import FakeGateway, canned_events
from trioproxy.telemetry.export import curl, exchange_from_trace
from trioproxy.tui.app import TraceApp
from trioproxy.tui.state import TraceView

HAR_SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "fixtures" / "har" / "har-1.2.schema.json").read_text())
UP, DOWN, TAB, ESC = "\x1b[A", "\x1b[B", "\t", "\x1b"


async def _aiter(events, gate=None):
    """Yield ``events``; with ``gate=(i, reached, release)`` pause before event i."""
    for i, event in enumerate(events):
        if gate is not None and i == gate[0]:
            gate[1].set()
            await gate[2].wait()
        yield event


def drive(source, keys, *, view=None, output=None, before_keys=None):
    """Run the app, wait until the source is done (or ``before_keys`` is set), type ``keys``."""

    async def scenario():
        with create_pipe_input() as inp:
            app = TraceApp(source, view, input=inp, output=output or DummyOutput())
            task = asyncio.create_task(app.run())
            await asyncio.wait_for((before_keys or app.source_done).wait(), 10)
            for key in keys:
                inp.send_text(key)
            rc = await asyncio.wait_for(task, 10)
            return app, rc

    return asyncio.run(scenario())


def test_keys_switch_modes_focus_and_quit():
    events = canned_events("POST", "/v1/chat", body=b"hi")
    app, rc = drive(_aiter(events), ["s", "d", "e", TAB, DOWN, DOWN, TAB, UP, UP, "f", "q"])
    assert rc == 0
    assert [c for c, _ in app.history] == [
        "view.snapshot", "view.diff", "view.event", "pane.next", "cursor.down", "cursor.down",
        "pane.next", "cursor.up", "cursor.up", "view.format", "app.quit"]
    assert [t for _, t in app.history][:3] == ["Snapshot", "Snapshot Diff", "Raw Event"]
    view = app.view
    assert view.complete and view.status_line() == "stream complete, press q to exit"
    assert view.details_scroll == 0  # scrolled down twice in details, then reset by moving rows
    assert view.selected_row == len(events) - 3 and not view.follow_rows
    assert view.fmt == "json"


def test_escape_quits():
    app, rc = drive(_aiter(canned_events()), [ESC])
    assert rc == 0 and app.history[-1][0] == "app.quit"


def test_selection_follows_live_stream_and_waiting_status():
    events = canned_events()
    half = len(events) // 2

    async def scenario():
        reached, release = asyncio.Event(), asyncio.Event()
        with create_pipe_input() as inp:
            app = TraceApp(_aiter(events, (half, reached, release)), input=inp, output=DummyOutput())
            assert app.view.status_line() == "waiting for trace data"
            task = asyncio.create_task(app.run())
            await reached.wait()  # the pump has folded every event before the gate
            assert app.view.selected_row == half - 1
            assert app.view.status_line() == f"{half} events"
            release.set()
            await app.source_done.wait()
            assert app.view.selected_row == len(events) - 1
            inp.send_text("q")
            return await task

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) == 0


def test_source_error_is_shown_in_status_line():
    async def failing():
        yield canned_events()[0]
        raise RuntimeError("admin server went away")

    app, rc = drive(failing(), ["q"])
    assert app.view.error == "admin server went away"
    assert app.view.status_line() == "admin server went away"
    assert len(app.view.trace.rows) == 1


def test_screen_and_osc52_copy():
    buf = io.StringIO()
    out = Vt100_Output(buf, lambda: Size(rows=40, columns=160), term="xterm")
    app, rc = drive(_aiter(canned_events()), ["s", "c", "q"], output=out)
    screen = buf.getvalue()
    for text in ("Events", "Snapshot", "Request Done", "request finished status=200", "Help", "tab switch pane"):
        assert text in screen, text
    osc = screen.split("\x1b]52;c;", 1)[1].split("\x07", 1)[0]
    copied = base64.b64decode(osc).decode()
    assert copied == app.view.details_text() and "stage: final response" in copied


def test_follow_view_shows_request_list():
    buf = io.StringIO()
    out = Vt100_Output(buf, lambda: Size(rows=40, columns=160), term="xterm")
    events = canned_events("GET", "/first") + canned_events("DELETE", "/second", status=404)
    app, rc = drive(_aiter(events), [TAB, TAB, UP, "q"], view=TraceView(show_requests=True), output=out)
    assert app.view.focus == "requests" and app.view.selected_request == 0
    screen = buf.getvalue()
    assert "Requests" in screen and "/second" in screen and "DELETE" in screen


def test_search_prompt_takes_the_keys_until_enter_then_n_and_b_work():
    events = canned_events("POST", "/v1/chat", body=b"ask quickly")
    # while typing, q and n are text (not quit, not next match); Enter searches; Esc leaves a second prompt
    app, rc = drive(_aiter(events), ["/", "q", "u", UP, "x", "\x7f", "i", "\r", "n", "/", "z", ESC, "b", "q"])
    assert rc == 0
    assert [c for c, _ in app.history] == [
        "search.start", "prompt.backspace", "prompt.accept", "search.next", "search.start", "prompt.cancel",
        "view.bodies", "app.quit"]
    assert app.view.search_term == "qui" and app.view.mode == "bodies"
    assert app.history[-2][1] == "Bodies"


def test_x_writes_a_valid_har_in_the_current_directory_and_c_copies_the_curl_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trioproxy-request-1.har").write_text("taken")
    events = canned_events("POST", "/v1/chat", body=b'{"q": "hi"}', headers={"host": "api.example.com",
                                                                          "authorization": "<redacted>"})
    buf = io.StringIO()
    out = Vt100_Output(buf, lambda: Size(rows=40, columns=160), term="xterm")
    app, rc = drive(_aiter(events), ["x", "c", "r", "q"], output=out)
    written = tmp_path / "trioproxy-request-1-2.har"  # the first name was taken
    document = json.loads(written.read_text())
    jsonschema.validate(document, HAR_SCHEMA, cls=jsonschema.Draft202012Validator)
    entry = document["log"]["entries"][0]
    assert entry["request"]["method"] == "POST" and entry["request"]["postData"]["text"] == '{"q": "hi"}'
    assert entry["response"]["content"]["text"] == "hello from backend\n"
    line = curl(exchange_from_trace(events))
    assert app.view.exported.curl == line and "authorization" not in line  # a hidden credential is left out
    assert app.view.details_title() == "Export"
    osc = buf.getvalue().split("\x1b]52;c;", 1)[1].split("\x07", 1)[0]
    assert base64.b64decode(osc).decode() == line
    # a trace read from a file has no gateway to replay on
    assert app.notices[:3] == ["wrote trioproxy-request-1-2.har; c copies the curl line",
                               "copied 1 lines to the clipboard (OSC 52)",
                               "replay needs a gateway: a trace read from a file has none (trioproxy replay FILE)"]


def test_x_before_the_request_finished_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    events = canned_events()[:-1]
    app, rc = drive(_aiter(events), ["x"] + ["q"])
    assert list(tmp_path.iterdir()) == []
    assert app.notices[0] == "no finished request selected: wait for requestFinished"


# -- end to end in a real terminal (tmux) ---------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


class Tmux:
    """One private tmux server (own socket), so the test never touches the user's sessions."""

    def __init__(self, command: str) -> None:
        self.socket = f"trioproxy-test-{uuid.uuid4().hex[:8]}"
        self._tmux("new-session", "-d", "-x", "160", "-y", "40", "-s", "t", command)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], check=True, capture_output=True,
                              text=True).stdout

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "t", *keys)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "t")

    def wait_for(self, predicate, what: str, timeout: float = 10.0) -> str:
        """Poll the screen (bounded) until ``predicate(screen)``; fail with the last screen."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.screen()
            if predicate(screen):
                return screen
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; screen:\n{screen}")
            time.sleep(0.05)

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True)


def _details(screen: str) -> list[str]:
    """Right-hand pane text: what follows the border between the two frames of the top line."""
    lines = screen.splitlines()
    split = lines[0].index("┐┌") + 2
    return [line[split:] for line in lines]


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")
def test_tmux_end_to_end_inject(tmp_path):
    with FakeGateway() as gw:
        cmd = [sys.executable, "-m", "trioproxy.cli.trace_cli", "--local", "--proxy-admin-port", str(gw.admin_port),
               "--port", str(gw.listener_port), "--", "http://api.example.com/v1/chat", "-d", "hi there"]
        script = (f"cd {shlex.quote(str(ROOT))} && PYTHONPATH=. TERM=xterm-256color {shlex.join(cmd)}; "
                  "echo TRACE-EXIT=$?; exec sleep 60")
        tmux = Tmux(f"sh -c {shlex.quote(script)}")
        try:
            screen = tmux.wait_for(lambda s: "stream complete, press q to exit" in s, "the trace")
            assert "Raw Event" in screen and "Request Done" in screen and "request finished status=200" in screen
            assert 'Route           selected "default/default/bind/3000/listener0/' in screen
            assert "type: requestFinished" in screen  # follows the newest row
            assert gw.traced[0]["headers"]["host"] == "api.example.com" and gw.traced[0]["body"] == b"hi there"

            tmux.keys("s")
            screen = tmux.wait_for(lambda s: " Snapshot " in s and "stage: final response" in s, "snapshot")
            assert "hello from backend" in screen  # decoded response body
            tmux.keys("d")
            tmux.wait_for(lambda s: "Snapshot Diff" in s and "final response → response body" in s, "diff")
            tmux.keys("e")
            tmux.wait_for(lambda s: "type: requestFinished" in s, "raw event again")

            tmux.keys("Up", "Up")  # two rows up: the response snapshot 'final response'
            tmux.wait_for(lambda s: "stage: final response" in "\n".join(_details(s)), "row selection")

            before = _details(tmux.screen())
            tmux.keys("Tab", "Down", "Down", "Down")  # arrows now scroll the details pane
            tmux.wait_for(lambda s: _details(s)[1:5] != before[1:5], "details scroll")
            tmux.keys("Tab", "Up")
            tmux.wait_for(lambda s: "stage: backend response ready" in "\n".join(_details(s)), "row up")

            tmux.keys("q")
            screen = tmux.wait_for(lambda s: "TRACE-EXIT=" in s, "exit")
            assert "TRACE-EXIT=0" in screen and "Traceback" not in screen
        finally:
            tmux.close()


def test_credentials_given_to_trace_go_into_the_curl_line_and_the_replay(tmp_path, monkeypatch):
    """``trioproxy trace --credential 'authorization: …'``: the header the trace hides is written into
    x's curl line and sent with r's replay; the notice names only what is still hidden."""
    monkeypatch.chdir(tmp_path)
    events = canned_events("POST", "/v1/chat", body=b'{"q": "hi"}', headers={
        "host": "api.example.com", "authorization": "<redacted>", "x-api-key": "<redacted>"})
    sent = []

    async def fake_replay(admin, replayed, headers=None):
        sent.append((admin, replayed, headers))
        return {"status": 200, "headers": [], "body": "", "trace": canned_events("POST", "/v1/chat")}

    monkeypatch.setattr("trioproxy.tui.app.replay_request", fake_replay)

    async def scenario():
        with create_pipe_input() as inp:
            app = TraceApp(_aiter(events), None, input=inp, output=DummyOutput(), admin="127.0.0.1:1",
                           credentials={"Authorization": "Bearer s3cret"})
            task = asyncio.create_task(app.run())
            await asyncio.wait_for(app.source_done.wait(), 10)
            inp.send_text("x")
            inp.send_text("r")
            for _ in range(500):  # the replay runs as a task: wait for its notice
                if (app.view.notice or "").startswith("replayed"):
                    break
                await asyncio.sleep(0.01)
            notice = app.view.notice
            inp.send_text("q")
            await asyncio.wait_for(task, 10)
            return app, notice

    app, notice = asyncio.run(scenario())
    line = app.view.exported.curl
    assert "authorization: Bearer s3cret" in line and "x-api-key" not in line
    assert sent == [("127.0.0.1:1", events, {"Authorization": "Bearer s3cret"})]
    assert notice == "replayed request 1: status 200 (request 2); not sent (hidden by the trace): x-api-key"
