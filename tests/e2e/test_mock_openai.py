"""The mock OpenAI backend over real sockets (port 0), spoken to with httpx."""

import json
import subprocess
import sys
from functools import partial

import httpx
import pytest
import trio

from fixtures.mock_openai import MockOpenAI, open_mock_openai, serve_mock_openai
from trioproxy.llm.usage import Usage, UsageReader

CHAT = {"model": "gpt-test", "messages": [{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "hello mock world"}]}


@pytest.fixture
async def mock():
    async with open_mock_openai() as mock:
        yield mock


@pytest.fixture
async def client(mock):
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{mock.port}", timeout=10) as client:
        yield client


def sse_events(text):
    return [line[len("data: "):] for line in text.split("\n\n") if line.startswith("data: ")]


async def test_serve_reports_the_bound_port():
    mock = MockOpenAI()
    async with trio.open_nursery() as nursery:
        anonymous = await nursery.start(serve_mock_openai, 0)
        port = await nursery.start(partial(serve_mock_openai, 0, mock=mock))
        assert port == mock.port and port > 0 and anonymous > 0 and anonymous != port
        async with httpx.AsyncClient() as client:
            r = await client.get(f"http://127.0.0.1:{port}/v1/models")
            assert r.json()["data"][0]["id"] == "mock-model"
            await client.get(f"http://127.0.0.1:{anonymous}/v1/models")
        assert mock.count == 1
        nursery.cancel_scope.cancel()


async def test_json_completion_echoes_and_reports_usage(mock, client):
    r = await client.post("/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer k"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "gpt-test"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hello mock world"}
    assert body["usage"] == {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert mock.count == 1
    seen = mock.requests[0]
    assert (seen.method, seen.path, seen.json) == ("POST", "/v1/chat/completions", CHAT)
    assert seen.header("Authorization") == "Bearer k"


async def test_forced_total_and_no_usage(client):
    r = await client.post("/v1/chat/completions", json=CHAT, headers={"x-mock-total-tokens": "101"})
    assert r.json()["usage"] == {"prompt_tokens": 50, "completion_tokens": 51, "total_tokens": 101}
    r = await client.post("/v1/chat/completions", json=CHAT, headers={"x-mock-no-usage": "1"})
    assert "usage" not in r.json()


async def test_content_parts_are_echoed(client):
    content = [{"type": "text", "text": "a b"}, {"type": "image_url"}]
    parts = {"messages": [{"role": "user", "content": content}]}
    r = await client.post("/v1/chat/completions", json=parts)
    assert r.json()["choices"][0]["message"]["content"] == "a b"
    assert r.json()["model"] == "mock-model"


async def test_sse_with_include_usage(client):
    request = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    headers = {"x-mock-chunks": "2", "x-mock-total-tokens": "40"}
    r = await client.post("/v1/chat/completions", json=request, headers=headers)
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert len(chunks) == 1 + 2 + 1 + 1  # role, 2 content pieces, finish, usage
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1]) == "hello mock world"
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert all(c["usage"] is None for c in chunks[:-1])  # as OpenAI does with include_usage
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 20, "completion_tokens": 20, "total_tokens": 40}


async def test_sse_without_include_usage_has_no_usage(client):
    r = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    chunks = [json.loads(e) for e in sse_events(r.text)[:-1]]
    assert len(chunks) == 1 + 3 + 1  # one content chunk per word by default
    assert all("usage" not in c for c in chunks)


async def test_usage_reader_reads_the_live_stream(client):
    request = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    headers = {"x-mock-chunks": "7", "x-mock-total-tokens": "33"}
    async with client.stream("POST", "/v1/chat/completions", json=request, headers=headers) as r:
        reader = UsageReader(r.headers["content-type"])
        async for chunk in r.aiter_raw():
            reader.feed(chunk)
    assert reader.finish() == Usage(16, 17, 33, "gpt-test")


async def test_chunk_delay_spaces_the_events(client):
    request = {**CHAT, "stream": True}
    arrivals = []
    start = trio.current_time()
    headers = {"x-mock-chunks": "3", "x-mock-chunk-delay-ms": "30"}
    async with client.stream("POST", "/v1/chat/completions", json=request, headers=headers) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                arrivals.append(trio.current_time() - start)
    assert len(arrivals) == 6  # role, 3 pieces, finish, [DONE]
    assert arrivals[-1] - arrivals[0] >= 5 * 0.03 * 0.9
    assert arrivals[1] - arrivals[0] >= 0.03 * 0.9


async def test_delay_before_answering(client):
    start = trio.current_time()
    r = await client.get("/v1/models", headers={"x-mock-delay-ms": "100"})
    assert r.status_code == 200
    assert trio.current_time() - start >= 0.09


async def test_abandoned_stream_is_noticed(mock):
    """A client that leaves mid-stream cancels the mock's generation (raw socket, so the
    disconnect is exactly a close after the first event)."""
    body = json.dumps({**CHAT, "stream": True}).encode()
    head = (
        "POST /v1/chat/completions HTTP/1.1\r\nhost: mock\r\ncontent-type: application/json\r\n"
        f"x-mock-chunks: 1000\r\nx-mock-chunk-delay-ms: 50\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    with trio.fail_after(5):
        stream = await trio.open_tcp_stream("127.0.0.1", mock.port)
        await stream.send_all(head + body)
        received = b""
        while b"data: " not in received:
            received += await stream.receive_some()
        await stream.aclose()
        await mock.wait_until(lambda m: m.disconnects == 1)
    assert received.startswith(b"HTTP/1.1 200")
    assert mock.count == 1


async def test_echo(client):
    r = await client.put("/echo/some/where?a=1&b=&a=2", content=b"payload", headers={"x-thing": "v"})
    body = r.json()
    assert body["method"] == "PUT"
    assert body["path"] == "/echo/some/where"
    assert body["query"] == "a=1&b=&a=2"
    assert body["headers"]["x-thing"] == "v"
    assert ["x-thing", "v"] in body["raw_headers"]
    assert body["body"] == "payload"


async def test_recorded_requests_endpoint_and_reset(mock, client):
    await client.get("/echo")
    await client.post("/v1/chat/completions", json=CHAT)
    recorded = (await client.get("/mock/requests")).json()
    seen = [(r["method"], r["path"]) for r in recorded]
    assert seen == [("GET", "/echo"), ("POST", "/v1/chat/completions")]
    assert recorded[1]["json"] == CHAT
    assert (await client.post("/mock/reset")).json() == {"ok": True}
    assert mock.count == 0
    assert (await client.get("/mock/requests")).json() == []


async def test_errors(client):
    r = await client.post("/v1/chat/completions", json=CHAT, headers={"x-mock-status": "503"})
    assert r.status_code == 503 and r.json()["error"]["code"] == 503
    r = await client.post("/v1/chat/completions", content=b"not json")
    assert r.status_code == 400
    r = await client.get("/nowhere")
    assert r.status_code == 404 and "error" in r.json()


async def test_keep_alive_serves_many_requests_on_one_connection(mock, client):
    for _ in range(20):
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    assert mock.count == 20


async def test_standalone_command():
    command = [sys.executable, "-m", "fixtures.mock_openai", "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        with trio.fail_after(20):
            line = await trio.to_thread.run_sync(process.stdout.readline)
        assert line.startswith("mock-openai listening on http://127.0.0.1:")
        url = line.rsplit(" ", 1)[1].strip()
        async with httpx.AsyncClient(base_url=url) as client:
            await client.post("/v1/chat/completions", json=CHAT)
            recorded = (await client.get("/mock/requests")).json()
        assert recorded[0]["json"] == CHAT
    finally:
        process.terminate()
        process.wait(timeout=10)
        process.stdout.close()
