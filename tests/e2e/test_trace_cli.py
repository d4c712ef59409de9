"""The trace command against a fake gateway (real sockets, port 0): --raw watch and inject,
curl and the built-in sender, saved files, and the one-line errors."""

import argparse
import asyncio
import base64
import io
import json
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.fake_trace_gateway import FakeGateway, canned_events
from trioproxy.cli import trace_cli
from trioproxy.cli.trace_client import TRACE_HEADER, TraceSession, parse_curl_args, request_target
from trioproxy.frontend import registry

HAS_CURL = shutil.which("curl") is not None
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gw():
    with FakeGateway() as gateway:
        yield gateway


@pytest.fixture(params=["curl", "builtin", "no-curl-on-path"])
def sender(request, monkeypatch, tmp_path):
    if request.param == "curl":
        if not HAS_CURL:
            pytest.skip("curl not installed")
        monkeypatch.delenv("TRIOPROXY_NO_CURL", raising=False)
    elif request.param == "builtin":
        monkeypatch.setenv("TRIOPROXY_NO_CURL", "1")
    else:
        monkeypatch.delenv("TRIOPROXY_NO_CURL", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    return request.param


def local(gw):
    return ["--local", "--proxy-admin-port", str(gw.admin_port)]


def raw_events(out):
    return [json.loads(line) for line in out.splitlines()]


def send_when_watching(gw, count=1, **kw):
    """Act as 'any client' of watch mode: one request per registered watcher."""

    def client():
        for i in range(count):
            assert gw.watcher_ready.acquire(timeout=10)
            httpx.get(f"http://127.0.0.1:{gw.listener_port}/watched/{i}", headers={"host": "w.example"}, **kw)

    t = threading.Thread(target=client, daemon=True)
    t.start()
    return t


# -- inject mode ---------------------------------------------------------------------------------
def test_inject_raw_sends_our_request_and_traces_only_it(gw, sender, capsys):
    noise = send_when_watching(gw)  # another client hits the gateway as soon as tracing is on
    url = "http://api.example.com/v1/items?q=1"
    rc = trace_cli.main([*local(gw), "--raw", "--port", str(gw.listener_port), "--",
                         url, "-X", "POST", "-H", "x-a: b", "-d", "hello", "-k"])
    out, err = capsys.readouterr()
    noise.join(10)
    assert rc == 0, err
    assert len(gw.received) == 2 and len(gw.traced) == 1
    ours = gw.traced[0]
    assert ours["method"] == "POST" and ours["path"] == "/v1/items?q=1" and ours["body"] == b"hello"
    assert ours["headers"]["host"] == "api.example.com"
    assert ours["headers"]["x-a"] == "b"
    assert ours["headers"]["content-type"] == "application/x-www-form-urlencoded"
    trace_id = ours["headers"][TRACE_HEADER]
    header = f'request.headers["{TRACE_HEADER}"]'
    assert gw.expressions == [f'"{TRACE_HEADER}" in request.headers && {header} == "{trace_id}"']
    events = raw_events(out)
    assert [e["message"]["type"] for e in events] == [
        e["message"]["type"] for e in canned_events(body=b"hello")]
    assert events[1]["message"]["requestState"]["request"]["path"] == "/v1/items?q=1"
    assert all(line == json.dumps(json.loads(line), separators=(",", ":")) for line in out.splitlines())
    assert "hello from backend" not in out  # the response body does not pollute --raw


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--json", '{"a": 1}'], {"method": "POST", "body": b'{"a": 1}', "content-type": "application/json",
                                  "accept": "application/json"}),
        (["-u", "alice:s3cret"], {"method": "GET",
                                  "authorization": "Basic " + base64.b64encode(b"alice:s3cret").decode()}),
        (["-X", "PUT", "--data-raw", "@literal"], {"method": "PUT", "body": b"@literal"}),
        (["--data-binary", "@{file}"], {"method": "POST", "body": b"line1\nline2\n"}),
        (["-d", "@{file}", "-d", "b=2"], {"method": "POST", "body": b"line1line2&b=2"}),
        (["--request", "DELETE", "--header", "X-Multi: one"], {"method": "DELETE", "x-multi": "one"}),
    ],
)
def test_inject_curl_arguments(gw, sender, tmp_path, capsys, args, expect):
    data = tmp_path / "body.txt"
    data.write_bytes(b"line1\nline2\n")
    args = [a.replace("{file}", str(data)) for a in args]
    expect = dict(expect)
    rc = trace_cli.main([*local(gw), "--raw", "--port", str(gw.listener_port), "--",
                         "http://api.example.com:8443/p", *args])
    out, err = capsys.readouterr()
    assert rc == 0, err
    [got] = gw.traced
    assert got["headers"]["host"] == "api.example.com:8443"
    assert got["method"] == expect.pop("method")
    assert got["body"] == expect.pop("body", b"")
    for name, value in expect.items():
        assert got["headers"][name] == value


def test_inject_with_user_expression_and_gateway_before_options(gw, sender, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TRIOPROXY_RUNTIME_DIR", str(tmp_path / "rt"))
    with registry.register(["default"], f"127.0.0.1:{gw.admin_port}"):
        rc = trace_cli.main(["gateway/default", "--raw", "--expression", 'request.method == "PUT"',
                             "--port", str(gw.listener_port), "--", "svc.local/x", "-X", "PUT"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    [expr] = gw.expressions
    assert expr.startswith('(request.method == "PUT") && ("x-trioproxy-trace-id" in request.headers')
    assert gw.traced[0]["headers"]["host"] == "svc.local" and gw.traced[0]["method"] == "PUT"


def test_inject_to_closed_listener_is_one_line_error(gw, sender, capsys):
    port = _closed_port()
    rc = trace_cli.main([*local(gw), "--raw", "--port", str(port), "--", "http://a.example/"])
    out, err = capsys.readouterr()
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    assert ("curl failed (exit 7)" in err) if sender == "curl" else (f"request to 127.0.0.1:{port} failed" in err)


def test_builtin_rejects_unknown_curl_options(gw, monkeypatch, capsys):
    monkeypatch.setenv("TRIOPROXY_NO_CURL", "1")
    rc = trace_cli.main([*local(gw), "--raw", "--port", str(gw.listener_port), "--", "http://a/", "--proto", "x"])
    err = capsys.readouterr().err
    assert rc == 1 and "--proto is not supported without curl" in err


def test_parse_curl_args_and_target():
    req = parse_curl_args(["-H", "Content-Type: text/plain", "--json", "[1]", "x.example/a"])
    assert req.url == "x.example/a" and req.method == "POST" and req.data == b"[1]"
    assert ("accept", "application/json") in req.headers
    assert ("content-type", "application/json") not in req.headers  # the user's own wins
    assert request_target("x.example/a?b=1") == ("x.example", "/a?b=1")
    assert request_target("http://u:p@h.example:81") == ("h.example:81", "/")


# -- watch mode ----------------------------------------------------------------------------------
def test_watch_raw_local(gw, capsys):
    client = send_when_watching(gw)
    rc = trace_cli.main([*local(gw), "--raw"])
    client.join(10)
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert gw.expressions == [None]
    events = raw_events(out)
    assert events[0]["message"]["type"] == "requestStarted" and events[-1]["message"]["type"] == "requestFinished"
    assert events[1]["message"]["requestState"]["request"]["path"] == "/watched/0"


def test_watch_gateway_name_via_registry(gw, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TRIOPROXY_RUNTIME_DIR", str(tmp_path))
    client = send_when_watching(gw)
    with registry.register(["default"], f"127.0.0.1:{gw.admin_port}"):
        rc = trace_cli.main(["gateway/default", "--raw"])
    client.join(10)
    assert rc == 0 and len(raw_events(capsys.readouterr().out)) == len(canned_events())


def test_follow_reopens_the_stream_after_each_request(gw):
    client = send_when_watching(gw, count=2)

    async def collect():
        finished, paths = 0, []
        async with TraceSession(f"127.0.0.1:{gw.admin_port}", follow=True) as session:
            async for event in session.events():
                msg = event["message"]
                if msg["type"] == "requestSnapshot" and msg["stage"] == "initial request":
                    paths.append(msg["requestState"]["request"]["path"])
                if msg["type"] == "requestFinished":
                    finished += 1
                    if finished == 2:
                        break
        return paths

    assert asyncio.run(asyncio.wait_for(collect(), 20)) == ["/watched/0", "/watched/1"]
    client.join(10)


# -- files ---------------------------------------------------------------------------------------
def test_file_json_lines_and_sse_reemitted_raw(tmp_path, capsys, monkeypatch):
    events = canned_events()
    jl = tmp_path / "t.jsonl"
    jl.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    sse = tmp_path / "t.sse"
    sse.write_text(": ready\n\n" + "".join(f"data: {json.dumps(e)}\n\n: keepalive\n\n" for e in events))
    for path in (jl, sse):
        assert trace_cli.main(["--file", str(path), "--raw"]) == 0
        assert raw_events(capsys.readouterr().out) == events
    monkeypatch.setattr(sys, "stdin", io.StringIO(jl.read_text()))
    assert trace_cli.main(["--raw", "--file", "-"]) == 0
    assert raw_events(capsys.readouterr().out) == events


def test_bad_file(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"message": {}}\n\nnot json\n')
    assert trace_cli.main(["--file", str(bad), "--raw"]) == 1
    assert f"{bad}:3: not a JSON event" in capsys.readouterr().err
    assert trace_cli.main(["--file", str(tmp_path / "missing"), "--raw"]) == 1
    assert "cannot read" in capsys.readouterr().err


# -- errors --------------------------------------------------------------------------------------
def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_line_error(capsys):
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_admin_unreachable(capsys):
    port = _closed_port()
    assert trace_cli.main(["--local", "--proxy-admin-port", str(port), "--raw"]) == 1
    assert f"cannot reach the admin server at localhost:{port}" in _one_line_error(capsys)


def test_invalid_expression_shows_server_message(gw, capsys):
    assert trace_cli.main([*local(gw), "--raw", "--expression", "bad(1"]) == 1
    err = _one_line_error(capsys)
    assert "answered 400: invalid expression: undeclared reference to 'bad'" in err


def test_unknown_gateway(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("TRIOPROXY_RUNTIME_DIR", str(tmp_path))
    assert trace_cli.main(["gateway/nope", "--raw"]) == 1
    assert "no running trioproxy serves gateway/nope" in _one_line_error(capsys)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--local", "--port", "3000"], "--port needs the request to send"),
        (["--local", "--", "http://a/"], "needs --port N"),
        (["pod/x", "--raw"], "expected gateway/NAME"),
        (["gateway/a", "gateway/b"], "unexpected arguments: gateway/b"),
        (["gateway/a", "--bogus"], "unrecognized arguments: --bogus"),
        (["--port", "abc"], "invalid int value"),
        (["--file", "x", "--port", "1", "--", "http://a/"], "cannot be combined with --port"),
        (["-f", "x", "--expression", "true"], "cannot be combined with --expression"),
        (["--file", "x", "--follow"], "cannot be combined with --follow"),
        (["--file", "x", "gateway/a"], "cannot be combined with gateway/NAME"),
        (["--local", "gateway/a"], "--local and gateway/a name two different gateways"),
        (["gateway/a", "--local", "--raw"], "--local and gateway/a name two different gateways"),
    ],
)
def test_bad_flags(argv, message, capsys):
    assert trace_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert err.count("\n") == 1 or "usage:" in err  # argparse's own errors come with the usage line
    assert err.rstrip("\n").splitlines()[-1].startswith(("trioproxy: error: ", "trioproxy trace: error: "))


# -- no terminal ---------------------------------------------------------------------------------
def test_piped_stdout_prints_raw_lines_without_raw_flag(gw, capsys):
    """capsys makes stdout a pipe: the text UI must not be drawn; JSON lines come instead."""
    client = send_when_watching(gw)
    assert trace_cli.main(local(gw)) == 0
    client.join(10)
    events = raw_events(capsys.readouterr().out)
    assert events[0]["message"]["type"] == "requestStarted" and events[-1]["message"]["type"] == "requestFinished"


def test_short_f_reads_a_file_and_closed_stdin_is_no_traceback(tmp_path, capsys, monkeypatch):
    jl = tmp_path / "t.jsonl"
    jl.write_text("\n".join(json.dumps(e) for e in canned_events()) + "\n")
    closed = io.StringIO("")
    closed.close()
    monkeypatch.setattr(sys, "stdin", closed)
    assert trace_cli.main(["-f", str(jl)]) == 0
    out, err = capsys.readouterr()
    assert raw_events(out) == canned_events() and "Traceback" not in err


def test_real_process_with_closed_stdin_and_piped_stdout(tmp_path):
    jl = tmp_path / "t.jsonl"
    jl.write_text("\n".join(json.dumps(e) for e in canned_events()) + "\n")
    proc = subprocess.run([sys.executable, "-m", "trioproxy", "trace", "-f", str(jl)], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert raw_events(proc.stdout) == canned_events() and proc.stderr == ""


# -- as a subcommand of the main CLI -------------------------------------------------------------
def test_configure_parser_as_nested_subcommand(gw, capsys, monkeypatch):
    monkeypatch.setenv("TRIOPROXY_NO_CURL", "1")
    parser = argparse.ArgumentParser(prog="trioproxy")
    sub = parser.add_subparsers(dest="command")
    trace_cli.configure_parser(sub.add_parser("trace"))
    proxy = sub.add_parser("proxy").add_subparsers(dest="proxy_command")
    trace_cli.configure_parser(proxy.add_parser("trace"))
    for argv in (["trace"], ["proxy", "trace"]):
        args = parser.parse_args([*argv, "--local", "--proxy-admin-port", str(gw.admin_port), "--raw",
                                  "--port", str(gw.listener_port), "--", "http://h.example/z", "-H", "x-q: 1"])
        assert trace_cli.run(args) == 0
    assert [r["headers"]["x-q"] for r in gw.traced] == ["1", "1"]
    assert len(raw_events(capsys.readouterr().out)) == 2 * len(canned_events())
