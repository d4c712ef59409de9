"""A streamed LLM answer whose client leaves early (tests/memory_harness.py, no sockets).

The official OpenAI SDK closes its connection as soon as it reads ``data: [DONE]``, often before the
gateway has read the provider's end of message: that answer is complete (200, its tokens charged and
counted). A client that leaves before the answer's end gets 499, and the tokens the provider reported
so far are charged all the same (docs/llm-providers.md, "Token usage").
"""

from __future__ import annotations

import json

import h11
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from tests.memory_harness import BackendConnection, MemoryClient, MemoryGateway, memory_gateway

BUDGET = 1000

CONFIG = f"""
binds:
- port: 3000
  listeners:
  - routes:
    - name: llm
      policies:
        localRateLimit: [{{maxTokens: {BUDGET}, tokensPerFill: {BUDGET}, fillInterval: 1h, type: tokens}}]
      backends:
      - ai:
          name: up
          provider: {{PROVIDER}}
          hostOverride: "b.test:80"
"""
OPENAI = CONFIG.replace("{PROVIDER}", "{openAI: {}}")
ANTHROPIC = CONFIG.replace("{PROVIDER}", "{anthropic: {}}")

REQUEST = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                      "stream_options": {"include_usage": True}}).encode()


def _event(obj: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


CONTENT = _event({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o-mini", "usage": None,
                  "choices": [{"index": 0, "delta": {"content": "hello"}, "finish_reason": "stop"}]})
USAGE = _event({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o-mini", "choices": [],
                "usage": {"prompt_tokens": 11, "completion_tokens": 19, "total_tokens": 30}})
DONE = b"data: [DONE]\n\n"
# An Anthropic stream as fixtures/mock_anthropic.py sends one
MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-3-5-haiku", "content": [],
           "stop_reason": None, "stop_sequence": None}
ANTHROPIC_EVENTS = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in [
    {"type": "message_start", "message": {**MESSAGE, "usage": {"input_tokens": 11, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hello"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
     "usage": {"output_tokens": 19}},
    {"type": "message_stop"}])


class Stream:
    """A backend that streams ``events`` (chunked), then holds the end of the message until ``end``."""

    def __init__(self, *events: bytes) -> None:
        self.events = events
        self.end = trio.Event()

    async def __call__(self, conn: BackendConnection) -> None:
        while (request := await conn.request()) is not None:
            if request.target.endswith("/models"):  # the budget probe
                await conn.respond(200, b'{"data": []}', [(b"content-type", b"application/json")])
                continue
            head = conn.h11.send(h11.Response(status_code=200, headers=[
                (b"content-type", b"text/event-stream"), (b"transfer-encoding", b"chunked")])) or b""
            await conn.send_raw(head + b"".join(conn.h11.send(h11.Data(data=e)) or b"" for e in self.events))
            await self.end.wait()
            await conn.send_raw(conn.h11.send(h11.EndOfMessage()) or b"")


async def _read_until(client: MemoryClient, marker: bytes) -> bytes:
    data = b""
    while marker not in data:
        piece = await client.stream.receive_some()
        assert piece, data
        data += piece
    return data


async def _leave_after(gw: MemoryGateway, backend: Stream, path: str, marker: bytes) -> tuple[int, int | None]:
    """A client that reads the stream up to ``marker`` and closes; then the backend ends its message.
    The request's (status, input tokens) as recorded."""
    client = gw.connect()
    await client.send_head("POST", path, [(b"content-type", b"application/json"),
                                          (b"content-length", str(len(REQUEST)).encode())])
    await client.send_body(REQUEST, end=True)
    await _read_until(client, marker)
    await client.aclose()
    await trio.testing.wait_all_tasks_blocked()  # the gateway has seen the close
    backend.end.set()
    history = gw.runtime.history
    await history.wait_new(0)
    summary = history.newest(1)[0]
    return summary.status, summary.input_tokens


async def _charged(gw: MemoryGateway) -> int:
    """The budget spent: what the next request's ``x-ratelimit-remaining`` no longer has."""
    response = await gw.request("GET", "/v1/models")
    assert response.status == 200, response.text
    return BUDGET - int(response.header("x-ratelimit-remaining") or BUDGET)


def _token_metric(gw: MemoryGateway) -> float:
    text = gw.runtime.metrics.exposition()[0].decode()
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples if s.name == "trioproxy_gen_ai_client_token_usage_sum")


async def test_client_closing_after_done_is_served_and_charged(autojump_clock: trio.abc.Clock) -> None:
    backend = Stream(CONTENT, USAGE, DONE)
    async with memory_gateway(OPENAI, {"b.test:80": backend}) as gw:
        status, prompt = await _leave_after(gw, backend, "/v1/chat/completions", DONE)
        assert (status, prompt) == (200, 11)
        assert _token_metric(gw) == 30
        assert await _charged(gw) == 30


async def test_client_leaving_mid_stream_is_499_and_charged(autojump_clock: trio.abc.Clock) -> None:
    backend = Stream(CONTENT, USAGE)  # the usage came, [DONE] has not
    async with memory_gateway(OPENAI, {"b.test:80": backend}) as gw:
        status, prompt = await _leave_after(gw, backend, "/v1/chat/completions", b'"total_tokens"')
        assert (status, prompt) == (499, 11)
        assert await _charged(gw) == 30


async def test_translated_stream_closed_after_done_is_served_and_charged(autojump_clock: trio.abc.Clock) -> None:
    """An OpenAI client of an Anthropic backend: the gateway's ``[DONE]`` (for ``message_stop``) went out."""
    backend = Stream(ANTHROPIC_EVENTS)
    async with memory_gateway(ANTHROPIC, {"b.test:80": backend}) as gw:
        status, prompt = await _leave_after(gw, backend, "/v1/chat/completions", DONE)
        assert (status, prompt) == (200, 11)
        assert await _charged(gw) == 30


async def test_translated_stream_left_mid_way_is_499_and_charged(autojump_clock: trio.abc.Clock) -> None:
    """The Anthropic stream's ``message_start`` counted 11 input and 1 output tokens: charged, though
    the client left before the end."""
    backend = Stream(ANTHROPIC_EVENTS.split(b"event: content_block_stop")[0])
    async with memory_gateway(ANTHROPIC, {"b.test:80": backend}) as gw:
        status, prompt = await _leave_after(gw, backend, "/v1/chat/completions", b"hello")
        assert (status, prompt) == (499, 11)
        assert await _charged(gw) == 12
