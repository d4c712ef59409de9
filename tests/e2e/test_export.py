"""Export and replay end to end (docs/export.md): traces of a real in-process gateway exported as
HAR 1.2 (checked against the HAR 1.2 JSON schema), as curl lines run by the real ``curl`` binary
against the echo backend (which records what it receives), and replayed through the gateway's
own listener with a fresh trace."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import httpx
import jsonschema
import pytest
import trio

from tests.conftest import ROOT, SIMPLE, free_port, start_gateway
from tests.e2e.test_trace import watch
from tests.har_helpers import assert_har


async def traced(nursery, gateway, send) -> tuple[httpx.Response, list[dict]]:
    """``send(client)``'s answer and the trace of that request."""
    reader = await watch(nursery, gateway)
    async with gateway.client() as client:
        response = await send(client)
    return response, await reader.events()


def _post(client: httpx.AsyncClient) -> object:
    return client.post("/echo/items?q=a%20b&n=1", content=b'{"name": "widget", "n": 3}',
                       headers={"content-type": "application/json", "x-custom": "one",
                                "authorization": "Bearer secret-one"})


async def test_har_of_a_trace_and_of_the_history(nursery, gateway):
    response, events = await traced(nursery, gateway, _post)
    async with httpx.AsyncClient(base_url=gateway.admin_url) as admin:
        exported = await admin.post("/api/export?format=har", json={"traces": [events, events]})
        history = await admin.get("/api/requests", params={"format": "har", "expression": 'request.method == "POST"'})
        refused = await admin.post("/api/export?format=har", json={"traces": [[{"message": {"type": "x"}}]]})
        bad_format = await admin.get("/api/requests", params={"format": "xml"})
    assert exported.status_code == 200, exported.text
    document = exported.json()
    assert_har(document)
    entries = document["log"]["entries"]
    assert len(entries) == 2 and document["log"]["creator"]["name"] == "trioproxy"
    request, answer = entries[0]["request"], entries[0]["response"]
    assert request["method"] == "POST"
    assert request["url"] == f"http://127.0.0.1:{gateway.info.ports[gateway.port]}/echo/items?q=a%20b&n=1"
    assert {"name": "q", "value": "a b"} in request["queryString"]
    headers = {h["name"]: h["value"] for h in request["headers"]}
    assert headers["x-custom"] == "one" and headers["authorization"] == "<redacted>"
    assert request["postData"] == {"mimeType": "application/json", "text": '{"name": "widget", "n": 3}'}
    assert answer["status"] == 200 and answer["statusText"] == "OK"
    assert json.loads(answer["content"]["text"]) == response.json()
    assert entries[0]["_trioproxy"]["redactedHeaders"] == ["authorization"]
    assert entries[0]["time"] >= entries[0]["timings"]["wait"] > 0
    assert "secret-one" not in json.dumps(request)  # (the echo backend's answer repeats it: its body)

    assert history.status_code == 200, history.text
    assert_har(history.json())
    (entry,) = history.json()["log"]["entries"]
    assert entry["request"]["method"] == "POST" and entry["request"]["url"].endswith("/echo/items")
    assert entry["response"]["status"] == 200 and entry["time"] > 0
    assert refused.status_code == 400 and "initial request" in refused.json()["error"]
    assert bad_format.status_code == 400 and "format" in bad_format.text


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl binary")
async def test_curl_line_reproduces_the_request(nursery, gateway, backend):
    response, events = await traced(nursery, gateway, _post)
    original = response.json()
    async with httpx.AsyncClient(base_url=gateway.admin_url) as admin:
        without = await admin.post("/api/export?format=curl", json={"traces": [events], "baseUrl": gateway.url})
        given = await admin.post("/api/export?format=curl", json={
            "traces": [events], "baseUrl": gateway.url, "headers": {"Authorization": "Bearer secret-two"}})
    assert without.status_code == 200, without.text
    line = without.text.strip()
    assert line.startswith("curl ") and "\n" not in line and "redacted" not in line and "authorization" not in line

    def run(command: str) -> dict:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=20)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    seen_before = len(backend.seen)
    echoed = await trio.to_thread.run_sync(run, line)
    assert backend.seen[seen_before:] == [("POST", "/echo/items?q=a%20b&n=1", 26)]
    # the backend saw the same method, path, query, body and headers (the credential aside)
    assert echoed["method"] == original["method"] and echoed["body_sha256"] == original["body_sha256"]
    assert echoed["path"] == original["path"] and echoed["query"] == original["query"]
    assert [h for h in echoed["headers"] if h[0] != "authorization"] == \
        [h for h in original["headers"] if h[0] != "authorization"]
    assert "authorization" not in dict(echoed["headers"])

    echoed = await trio.to_thread.run_sync(run, given.text.strip())
    assert dict(echoed["headers"])["authorization"] == "Bearer secret-two"


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl binary")
async def test_curl_line_sends_a_binary_body_and_put(nursery, gateway, backend):
    body = bytes(range(256)) + b"'\"$(x)`\\"

    async def put(client):
        return await client.put("/echo/bin", content=body, headers={"x-quote": "it's \"q\" $HOME"})

    response, events = await traced(nursery, gateway, put)
    async with httpx.AsyncClient(base_url=gateway.admin_url) as admin:
        line = (await admin.post("/api/export?format=curl", json={"traces": [events], "baseUrl": gateway.url})).text
    done = await trio.to_thread.run_sync(lambda: subprocess.run(["bash", "-c", line], capture_output=True, text=True,
                                                                timeout=20))
    assert done.returncode == 0, done.stderr
    echoed = json.loads(done.stdout)
    assert echoed["method"] == "PUT" and echoed["body_sha256"] == response.json()["body_sha256"]
    assert dict(echoed["headers"])["x-quote"] == "it's \"q\" $HOME"


async def test_replay_through_the_gateway_with_a_fresh_trace(nursery, gateway, backend):
    _, events = await traced(nursery, gateway, _post)
    async with httpx.AsyncClient(base_url=gateway.admin_url, timeout=30) as admin:
        seen_before = len(backend.seen)
        replayed = await admin.post("/api/replay", json={"trace": events})
        assert replayed.status_code == 200, replayed.text
        result = replayed.json()
        assert backend.seen[seen_before:] == [("POST", "/echo/items?q=a%20b&n=1", 26)]
        received = dict(backend.last_headers)
        assert "authorization" not in received  # redacted in the trace, not supplied: dropped
        assert "x-trioproxy-replay" not in received  # the marker never reaches the backend
        assert received["x-custom"] == "one"

        with_credential = await admin.post("/api/replay", json={"trace": events,
                                                                 "headers": {"authorization": "Bearer fresh"}})
        assert with_credential.status_code == 200, with_credential.text
        assert dict(backend.last_headers)["authorization"] == "Bearer fresh"
        fresh = next(e for e in with_credential.json()["trace"] if e["message"].get("stage") == "initial request")
        assert fresh["message"]["requestState"]["request"]["headers"]["authorization"] == "<redacted>"

        truncated = [dict(e) for e in events]
        for i, event in enumerate(truncated):
            if event["message"]["type"] == "bodySnapshot" and event["message"]["stage"] == "final request":
                truncated[i] = {**event, "message": {**event["message"], "truncated": True}}
        refused = await admin.post("/api/replay", json={"trace": truncated})
        not_events = await admin.post("/api/replay", json={"trace": "nope"})

    assert result["status"] == 200
    assert json.loads(result["body"])["path"] == "/echo/items"
    assert ["content-type", "application/json"] in result["headers"]
    trace = result["trace"]
    assert trace[0]["message"]["type"] == "requestStarted"
    assert trace[-1]["message"] == {"type": "requestFinished", "status": 200, "error": None}
    initial = next(e for e in trace if e["message"].get("stage") == "initial request")
    request = initial["message"]["requestState"]["request"]
    assert request["uri"] == "/echo/items?q=a%20b&n=1" and request["method"] == "POST"
    assert "x-trioproxy-replay" not in request["headers"] and "authorization" not in request["headers"]
    assert trace != events  # a fresh trace, not the one sent
    assert refused.status_code == 400 and "TRIOPROXY_TRACE_BODY_LIMIT" in refused.json()["error"]
    assert not_events.status_code == 400 and "trace" in not_events.json()["error"]


async def test_replay_goes_before_a_reader_of_any_request(nursery, gateway, backend):
    """A ``/debug/trace`` reader of every request, waiting already (the web UI following), does not
    take the replayed request: the replay's watcher is offered it first."""
    _, events = await traced(nursery, gateway, _post)
    bystander = await watch(nursery, gateway)
    async with httpx.AsyncClient(base_url=gateway.admin_url, timeout=60) as admin:
        replayed = await admin.post("/api/replay", json={"trace": events})
    assert replayed.status_code == 200, replayed.text
    assert replayed.json()["trace"][-1]["message"]["type"] == "requestFinished"
    async with gateway.client() as client:
        await client.get("/other")
    seen = await bystander.events()  # still waiting after the replay: it took the next request
    first = next(e for e in seen if e["message"].get("stage") == "initial request")
    assert first["message"]["requestState"]["request"]["path"] == "/other"


async def test_replay_traces_only_its_own_request(nursery, gateway, backend):
    """Requests arriving while a replay waits are not taken for it (its watcher waits for its token)."""
    _, events = await traced(nursery, gateway, _post)
    async with httpx.AsyncClient(base_url=gateway.admin_url, timeout=30) as admin, gateway.client() as client:
        async with trio.open_nursery() as inner:
            async def other_traffic() -> None:
                for _ in range(20):
                    await client.get("/other")
            inner.start_soon(other_traffic)
            replayed = await admin.post("/api/replay", json={"trace": events})
    assert replayed.status_code == 200, replayed.text
    trace = replayed.json()["trace"]
    initial = next(e for e in trace if e["message"].get("stage") == "initial request")
    assert initial["message"]["requestState"]["request"]["path"] == "/echo/items"


async def test_replay_refuses_a_websocket_upgrade(nursery, gateway):
    _, events = await traced(nursery, gateway, _post)
    for event in events:  # the same trace, as an upgrade request's would read
        if event["message"].get("stage") == "initial request":
            event["message"]["requestState"]["request"]["headers"]["upgrade"] = "websocket"
    async with httpx.AsyncClient(base_url=gateway.admin_url) as admin:
        refused = await admin.post("/api/replay", json={"trace": events})
    assert refused.status_code == 400 and "WebSocket" in refused.json()["error"]


def test_schema_fixture_refuses_a_broken_har():
    """The schema is strict enough to matter: entries missing required fields are refused."""
    with pytest.raises(jsonschema.ValidationError):
        assert_har({"log": {"version": "1.2", "creator": {"name": "x", "version": "1"},
                            "entries": [{"startedDateTime": "2026-01-01T00:00:00Z", "time": 1}]}})
    with pytest.raises(jsonschema.ValidationError):
        assert_har({"log": {"version": "1.1", "creator": {"name": "x", "version": "1"}, "entries": []}})
    assert Path(ROOT / "fixtures" / "har" / "har-1.2.schema.json").exists()


async def test_replay_trace_hides_the_admin_token(nursery, backend):
    """As ``/debug/trace`` does, the replay's fresh trace never shows the admin token (here sent as
    an ordinary header, which the trace would otherwise show)."""
    gw = await start_gateway(nursery, "config:\n  adminToken: tok-123456\n" + SIMPLE, port=free_port(),
                             backend=backend.port)
    async with httpx.AsyncClient(base_url=gw.admin_url, headers={"authorization": "Bearer tok-123456"},
                                 timeout=30) as admin:
        events: list[dict] = []
        ready = trio.Event()

        async def read_trace() -> None:
            async with admin.stream("POST", "/debug/trace") as stream:
                async for line in stream.aiter_lines():
                    if line == ": ready":
                        ready.set()
                    elif line.startswith("data: "):
                        events.append(json.loads(line[6:]))

        async with trio.open_nursery() as inner:
            inner.start_soon(read_trace)
            await ready.wait()
            async with gw.client() as client:
                await client.get("/echo/token", headers={"x-note": "plain"})
        replayed = await admin.post("/api/replay", json={"trace": events, "headers": {"x-note": "tok-123456"}})
    assert replayed.status_code == 200, replayed.text
    assert dict(backend.last_headers)["x-note"] == "tok-123456"  # sent as supplied
    fresh = replayed.json()["trace"]
    initial = next(e for e in fresh if e["message"].get("stage") == "initial request")
    assert initial["message"]["requestState"]["request"]["headers"]["x-note"] == "<redacted>"
    assert "tok-123456" not in json.dumps(fresh)  # nor in the echoed body (base64 inside the event)
