"""CPU per request of LLM translation beside passthrough, at the level of the pure functions the gateway
calls (trioproxy/llm/translate/): what a translated request adds to the gateway's own per-request cost.

For each case, one "request" is what the gateway does with the bodies of one exchange:

- passthrough: ``prepare_request_body`` on the client's body and a ``UsageReader`` over the provider's
  answer (JSON, or the SSE stream fed in network-sized pieces);
- translated: ``Translation.request`` (parse, check, render the provider's body), then
  ``Translation.response`` on the whole answer or the stream translator over the same pieces, and
  ``tokens()`` for accounting.

The conversation is a realistic agent turn: a system prompt, six messages with a tool call and its
result, two tool definitions; the answer ~60 words (40 SSE events when streamed).

    python -m bench.llm_translate                 # ~10 s
    python -m bench.llm_translate --iterations 200 --json /tmp/translate.json
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

from bench.harness import run_main, write_report
from fixtures.mock_bedrock import event as bedrock_event
from trioproxy.llm.translate import AnthropicToOpenAI, OpenAIToAnthropic, OpenAIToBedrock, OpenAIToGemini
from trioproxy.llm.usage import UsageReader, prepare_request_body

WORDS = [f"word{i} " for i in range(60)]
TOOLS = [{"type": "function", "function": {"name": n, "description": "look something up", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}, "n": {"type": "integer"}}, "required": ["q"]}}}
    for n in ("search", "fetch")]
OPENAI_REQUEST = {
    "model": "m", "max_tokens": 512, "temperature": 0.2, "tools": TOOLS,
    "messages": [
        {"role": "system", "content": "You are a careful assistant. " * 20},
        {"role": "user", "content": "Find the population of the three largest cities. " * 5},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"q": "cities"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Tokyo 37M, Delhi 32M, Shanghai 29M. " * 10},
        {"role": "assistant", "content": "Tokyo, Delhi and Shanghai."},
        {"role": "user", "content": "And their areas?"},
    ]}
ANTHROPIC_REQUEST = {
    "model": "m", "max_tokens": 512, "system": "You are a careful assistant. " * 20,
    "tools": [{"name": t["function"]["name"], "description": "look something up",
               "input_schema": t["function"]["parameters"]} for t in TOOLS],
    "messages": [
        {"role": "user", "content": "Find the population of the three largest cities. " * 5},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "search", "input": {"q": "c"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "Tokyo 37M, Delhi 32M, Shanghai 29M. " * 10}]},
        {"role": "assistant", "content": "Tokyo, Delhi and Shanghai."},
        {"role": "user", "content": "And their areas?"},
    ]}
TEXT = "".join(WORDS)


def sse(events: list[tuple[str | None, dict]]) -> bytes:
    return b"".join((f"event: {n}\n" if n else "").encode() + f"data: {json.dumps(d)}\n\n".encode() for n, d in events)


def openai_answer() -> tuple[bytes, bytes]:
    whole = {"id": "c", "object": "chat.completion", "created": 1, "model": "m", "choices": [{
        "index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 60, "total_tokens": 960}}
    base = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    chunks = [{**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in WORDS]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    chunks.append({**base, "choices": [], "usage": whole["usage"]})
    return json.dumps(whole).encode(), sse([(None, c) for c in chunks]) + b"data: [DONE]\n\n"


def anthropic_answer() -> tuple[bytes, bytes]:
    whole = {"id": "msg", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn",
             "content": [{"type": "text", "text": TEXT}], "usage": {"input_tokens": 900, "output_tokens": 60}}
    events: list[tuple[str | None, dict]] = [
        ("message_start", {"type": "message_start", "message": {**whole, "content": [], "stop_reason": None,
                                                                "usage": {"input_tokens": 900, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        *(("content_block_delta", {"type": "content_block_delta", "index": 0,
                                   "delta": {"type": "text_delta", "text": w}}) for w in WORDS),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 60}}),
        ("message_stop", {"type": "message_stop"})]
    return json.dumps(whole).encode(), sse(events)


def gemini_answer() -> tuple[bytes, bytes]:
    def piece(text: str, last: bool) -> dict:
        out: dict = {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}]}
        if last:
            out["candidates"][0]["finishReason"] = "STOP"
            out["usageMetadata"] = {"promptTokenCount": 900, "candidatesTokenCount": 60, "totalTokenCount": 960}
        return out
    return json.dumps(piece(TEXT, True)).encode(), sse([(None, piece(w, i == len(WORDS) - 1))
                                                        for i, w in enumerate(WORDS)])


def bedrock_answer() -> tuple[bytes, bytes]:
    whole = {"output": {"message": {"role": "assistant", "content": [{"text": TEXT}]}}, "stopReason": "end_turn",
             "usage": {"inputTokens": 900, "outputTokens": 60, "totalTokens": 960}, "metrics": {"latencyMs": 1}}
    frames = [bedrock_event("messageStart", {"role": "assistant"}),
              *(bedrock_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": w}}) for w in WORDS),
              bedrock_event("contentBlockStop", {"contentBlockIndex": 0}),
              bedrock_event("messageStop", {"stopReason": "end_turn"}),
              bedrock_event("metadata", {"usage": whole["usage"], "metrics": {"latencyMs": 1}})]
    return json.dumps(whole).encode(), b"".join(frames)


def pieces(data: bytes, size: int = 1400) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def passthrough(request: dict, answer: bytes, streamed: bool) -> Callable[[], None]:
    body = json.dumps({**request, "stream": streamed}).encode()
    chunks = pieces(answer)
    content_type = b"text/event-stream" if streamed else b"application/json"

    def run() -> None:
        prepare_request_body(body)
        reader = UsageReader(content_type)
        for chunk in chunks:
            reader.feed(chunk)
        reader.finish()
    return run


def translated(factory: Callable[[], object], request: dict, answer: bytes, streamed: bool) -> Callable[[], None]:
    body = json.dumps({**request, "stream": streamed}).encode()
    chunks = pieces(answer)

    def run() -> None:
        t = factory()
        t.request(body)  # type: ignore[attr-defined]
        if streamed:
            stream = t.stream()  # type: ignore[attr-defined]
            for chunk in chunks:
                stream.feed(chunk)
            stream.finish()
        else:
            t.response(200, answer)  # type: ignore[attr-defined]
        t.tokens()  # type: ignore[attr-defined]
    return run


def cpu_us(run: Callable[[], None], iterations: int) -> float:
    for _ in range(max(5, iterations // 10)):  # warm up
        run()
    best = float("inf")
    for _ in range(3):  # the best of three: the machine is shared
        start = time.process_time()
        for _ in range(iterations):
            run()
        best = min(best, (time.process_time() - start) / iterations * 1e6)
    return best


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.llm_translate", description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=300, help="requests per measurement (best of 3)")
    parser.add_argument("--json", type=Path, default=Path("/tmp/trioproxy-bench-llm-translate.json"))
    return parser.parse_args(argv)


def body(args: argparse.Namespace) -> int:
    answers = {"openai": openai_answer(), "anthropic": anthropic_answer(), "gemini": gemini_answer(),
               "bedrock": bedrock_answer()}
    cases = [
        ("openai -> anthropic", OPENAI_REQUEST, OpenAIToAnthropic, "anthropic", "openai"),
        ("openai -> gemini", OPENAI_REQUEST, OpenAIToGemini, "gemini", "openai"),
        ("openai -> bedrock", OPENAI_REQUEST, OpenAIToBedrock, "bedrock", "openai"),
        ("anthropic -> openai", ANTHROPIC_REQUEST, AnthropicToOpenAI, "openai", "anthropic"),
    ]
    rows = []
    for name, request, factory, provider, native in cases:
        for streamed in (False, True):
            answer = answers[provider][1 if streamed else 0]
            native_answer = answers[native][1 if streamed else 0]
            base = cpu_us(passthrough(request, native_answer, streamed), args.iterations)
            cost = cpu_us(translated(factory, request, answer, streamed), args.iterations)
            rows.append({"case": name, "streamed": streamed, "passthrough_us": round(base, 1),
                         "translated_us": round(cost, 1), "added_us": round(cost - base, 1)})
    head = "| case | streamed | passthrough µs/req | translated µs/req | added µs/req |"
    lines = [head, "|---|---|---:|---:|---:|"] + [
        f"| {r['case']} | {'yes' if r['streamed'] else 'no'} | {r['passthrough_us']} | {r['translated_us']} | "
        f"{r['added_us']} |" for r in rows]
    print("\n".join(lines))
    write_report(args.json, [], ["passthrough: the client's own dialect to its provider (same bodies' sizes)",
                                 "CPU measured with time.process_time, best of 3"],
                 {"iterations": args.iterations, "rows": rows})
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_main(parse, body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
