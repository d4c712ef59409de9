"""The official ``openai`` SDK closes its connection as soon as it reads ``data: [DONE]``: when that is
before the gateway has the provider's end of message, the answer is still complete (200) and its
tokens charged (docs/llm-providers.md, "Token usage").

The provider here holds its end of message until the SDK has closed and the gateway has seen the
close (``wait_all_tasks_blocked``), the order that lost the charge before; the gateway need not wait
for that end.
"""

from __future__ import annotations

import json
from functools import partial

import openai
import trio
import trio.testing

from tests.conftest import free_port, start_gateway

BUDGET = 100_000
RUNS = 5

CONFIG = """
binds:
- port: {port}
  listeners:
  - routes:
    - policies:
        localRateLimit: [{{maxTokens: {budget}, tokensPerFill: {budget}, fillInterval: 1h, type: tokens}}]
      backends:
      - ai: {{name: gpt, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{upstream}"}}
"""

USAGE = {"prompt_tokens": 11, "completion_tokens": 19, "total_tokens": 30}
CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o-mini"}
EVENTS = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in (
    {**CHUNK, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
     "usage": None},
    {**CHUNK, "choices": [], "usage": USAGE})) + b"data: [DONE]\n\n"


class Provider:
    """An OpenAI-like upstream whose streamed answers wait for ``release`` before their last chunk."""

    def __init__(self) -> None:
        self.release = trio.Event()

    async def serve(self, stream: trio.SocketStream) -> None:
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = await stream.receive_some()
                if not data:
                    return
                buf += data
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(buf) < length:
                buf += await stream.receive_some()
            buf = buf[length:]
            if head.startswith(b"GET"):  # the budget probe
                await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                                      b"content-length: 12\r\n\r\n{\"data\": []}")
                continue
            release = self.release  # this answer's (the test makes a new one per request)
            await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                                  b"transfer-encoding: chunked\r\n\r\n%x\r\n%s\r\n" % (len(EVENTS), EVENTS))
            await release.wait()
            try:
                await stream.send_all(b"0\r\n\r\n")
            except trio.BrokenResourceError:  # the gateway did not wait for it: fine
                return


def _stream_with_sdk(url: str) -> dict[str, int] | None:
    client = openai.OpenAI(api_key="sk-client", base_url=f"{url}/v1", max_retries=0, timeout=10)
    with client:
        usage = None
        for chunk in client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}],
                                                    stream=True, stream_options={"include_usage": True}):
            if chunk.usage is not None:
                usage = chunk.usage.model_dump(include={"prompt_tokens", "completion_tokens", "total_tokens"})
        return usage


async def test_openai_sdk_closing_on_done_is_charged(nursery: trio.Nursery) -> None:
    provider = Provider()
    upstream = (await nursery.start(partial(trio.serve_tcp, provider.serve, 0, host="127.0.0.1")))[0]
    gateway = await start_gateway(nursery, CONFIG, port=free_port(), budget=BUDGET,
                                  upstream=upstream.socket.getsockname()[1])
    history = gateway.info.runtime.history
    for run in range(RUNS):
        provider.release = trio.Event()
        assert await trio.to_thread.run_sync(_stream_with_sdk, gateway.url) == USAGE
        await trio.testing.wait_all_tasks_blocked()  # the gateway has seen the SDK's close
        provider.release.set()
        await history.wait_new(run)
        summary = history.newest(1)[0]
        assert (summary.status, summary.input_tokens, summary.output_tokens) == (200, 11, 19)
    async with gateway.client() as client:
        response = await client.get("/v1/models")
    assert BUDGET - int(response.headers["x-ratelimit-remaining"]) == RUNS * USAGE["total_tokens"]
