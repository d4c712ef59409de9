"""Stream reassembly against real traffic: each provider mock (fixtures/) answers the official SDK, the
bytes the SDK parsed are recorded, and ``reassemble`` must find in them what the SDK found."""

from __future__ import annotations

import json

import anthropic
import httpx
import httpx2
import openai
import trio
from google import genai
from google.genai import types

from fixtures._mock_llm import running
from fixtures.mock_anthropic import MockAnthropic
from fixtures.mock_gemini import MockGemini
from fixtures.mock_openai import open_mock_openai
from trioproxy.tui.llm_view import body_lines, looks_like_sse, parse_events, reassemble, stream_lines


def recording(http):
    """A real transport of the ``http`` module (httpx, or the httpx2 the anthropic SDK uses) that keeps each
    response body exactly as the client read it: ``.last()``."""

    class Tee(http.SyncByteStream):
        def __init__(self, inner, sink: list[bytes]) -> None:
            self.inner, self.sink = inner, sink

        def __iter__(self):
            for chunk in self.inner:
                self.sink.append(chunk)
                yield chunk

        def close(self) -> None:
            self.inner.close()

    class Recording(http.HTTPTransport):
        def __init__(self) -> None:
            super().__init__()
            self.bodies: list[list[bytes]] = []

        def handle_request(self, request):
            response = super().handle_request(request)
            self.bodies.append([])
            response.stream = Tee(response.stream, self.bodies[-1])
            return response

        def last(self) -> bytes:
            return b"".join(self.bodies[-1])

    return Recording()


HELLO = [{"role": "user", "content": "the quick brown fox"}]


async def test_openai_chat_stream_is_the_text_and_usage_the_sdk_reads():
    rec = recording(httpx)
    async with open_mock_openai() as mock:
        def call():
            client = openai.OpenAI(api_key="k", base_url=f"http://127.0.0.1:{mock.port}/v1", max_retries=0,
                                   http_client=httpx.Client(transport=rec))
            return list(client.chat.completions.create(model="gpt-4o-mini", messages=HELLO, stream=True,
                                                       stream_options={"include_usage": True}))
        chunks = await trio.to_thread.run_sync(call)
    raw = rec.last()
    assert raw.count(b"data: ") > 4  # really streamed in pieces
    stream = reassemble(raw)
    sdk_text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert stream.dialect == "OpenAI chat"
    assert stream.answer == sdk_text == "the quick brown fox"
    assert stream.usage == chunks[-1].usage.model_dump(exclude_none=True)
    assert stream.tokens.prompt_tokens == chunks[-1].usage.prompt_tokens
    assert stream.tokens.completion_tokens == chunks[-1].usage.completion_tokens
    assert stream.finish == "stop" and stream.done and stream.model == "gpt-4o-mini"
    assert stream.events == len(chunks)  # [DONE] is the end marker, not an event


async def test_openai_responses_stream_is_the_completed_responses_text():
    rec = recording(httpx)
    async with open_mock_openai() as mock:
        def call():
            client = openai.OpenAI(api_key="k", base_url=f"http://127.0.0.1:{mock.port}/v1", max_retries=0,
                                   http_client=httpx.Client(transport=rec))
            return list(client.responses.create(model="gpt-4o-mini", input="jumps over the lazy dog", stream=True))
        events = await trio.to_thread.run_sync(call)
    stream = reassemble(rec.last())
    completed = events[-1].response
    assert events[-1].type == "response.completed"
    assert stream.dialect == "OpenAI responses"
    assert stream.answer == completed.output_text == "jumps over the lazy dog"
    assert stream.usage == completed.usage.model_dump(exclude_none=True)
    assert stream.tokens.total_tokens == completed.usage.total_tokens
    assert stream.finish == "completed" and stream.done


async def test_anthropic_stream_is_the_final_message_of_the_sdk():
    rec = recording(httpx2)
    async with running(MockAnthropic()) as mock:
        def call():
            client = anthropic.Anthropic(api_key="k", base_url=f"http://127.0.0.1:{mock.port}", max_retries=0,
                                         http_client=httpx2.Client(transport=rec))
            with client.messages.stream(model="claude-cached-1", max_tokens=50, messages=HELLO) as s:
                text = s.get_final_message()
            raw_text = rec.last()
            tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
            with client.messages.stream(model="claude-x", max_tokens=50, tools=tools,
                                        messages=[{"role": "user", "content": "weather in Oslo"}]) as s:
                tool = s.get_final_message()
            return text, raw_text, tool, rec.last()
        text, raw_text, tool, raw_tool = await trio.to_thread.run_sync(call)

    stream = reassemble(raw_text)
    assert stream.dialect == "Anthropic messages"
    assert stream.answer == text.content[0].text == "the quick brown fox"
    # usage merged across message_start (input, cache) and message_delta (output), as the SDK does
    assert stream.usage == text.usage.model_dump(exclude_none=True)
    assert stream.tokens.cached_input_tokens == text.usage.cache_read_input_tokens > 0
    assert stream.tokens.completion_tokens == text.usage.output_tokens
    assert stream.finish == text.stop_reason == "end_turn" and stream.done

    calls = reassemble(raw_tool)
    assert [c.name for c in calls.tool_calls] == [tool.content[0].name] == ["lookup"]
    assert json.loads(calls.tool_calls[0].arguments) == tool.content[0].input == {"q": "weather in Oslo"}
    assert calls.tool_calls[0].id == tool.content[0].id
    assert calls.finish == "tool_use" and calls.answer == ""
    shown = [text for _, text in stream_lines(calls)]
    assert "tool call lookup (toolu_mock1):" in shown and '  "q": "weather in Oslo"' in shown


async def test_gemini_stream_is_the_text_and_usage_of_the_sdk():
    rec = recording(httpx)
    async with running(MockGemini()) as mock:
        def call():
            client = genai.Client(api_key="k", http_options=types.HttpOptions(
                base_url=f"http://127.0.0.1:{mock.port}", api_version="v1beta",
                httpx_client=httpx.Client(transport=rec)))
            chunks = list(client.models.generate_content_stream(model="gemini-thinking", contents="one two three"))
            raw_text = rec.last()
            tool = types.Tool(function_declarations=[types.FunctionDeclaration(
                name="get", parameters_json_schema={"type": "object"})])
            called = list(client.models.generate_content_stream(
                model="gemini-x", contents="weather", config=types.GenerateContentConfig(tools=[tool])))
            return chunks, raw_text, called, rec.last()
        chunks, raw_text, called, raw_tool = await trio.to_thread.run_sync(call)

    stream = reassemble(raw_text)
    assert stream.dialect == "Gemini"
    assert stream.answer == "".join(c.text for c in chunks) == "one two three"
    final = chunks[-1].usage_metadata
    assert stream.usage == final.model_dump(by_alias=True, exclude_none=True)
    assert stream.tokens.reasoning_tokens == final.thoughts_token_count > 0
    assert stream.finish == "STOP" and stream.done and stream.model == "gemini-thinking"

    calls = reassemble(raw_tool)
    fc = called[-1].function_calls[0]
    assert [(c.name, json.loads(c.arguments)) for c in calls.tool_calls] == [(fc.name, fc.args)] == [
        ("get", {"q": "weather"})]


# -- shapes the mocks do not send, from the providers' API references ----------------------------

def sse(*events: tuple[str | None, object]) -> bytes:
    out = b""
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out += (f"event: {name}\n" if name else "").encode() + f"data: {text}\n\n".encode()
    return out


def test_openai_chat_tool_call_pieces_are_joined_by_index():
    base = {"object": "chat.completion.chunk", "model": "gpt-4o"}
    raw = sse(
        (None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}]}}]}),
        (None, {**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": '{"loc'}}]}}]}),
        (None, {**base, "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 0, "function": {"arguments": 'ation": "Paris"}'}}]}}]}),
        (None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
        (None, "[DONE]"))
    stream = reassemble(raw)
    assert [(c.id, c.name, c.arguments) for c in stream.tool_calls] == [
        ("call_1", "get_weather", '{"location": "Paris"}')]
    assert stream.finish == "tool_calls" and stream.done and stream.tokens is None


def test_openai_chat_several_choices_are_shown_apart():
    base = {"object": "chat.completion.chunk"}
    raw = sse((None, {**base, "choices": [{"index": 0, "delta": {"content": "a"}},
                                           {"index": 1, "delta": {"content": "b"}}]}),
              (None, {**base, "choices": [{"index": 1, "delta": {"content": "B"}}]}))
    stream = reassemble(raw)
    assert stream.text == {0: "a", 1: "bB"} and not stream.done
    lines = [text for _, text in stream_lines(stream)]
    assert lines[1:5] == ["text (choice 0):", "a", "text (choice 1):", "bB"]
    assert ("body.warn", "the stream has no end event (cut short?)") in stream_lines(stream)


def test_anthropic_thinking_and_error_event():
    raw = sse(("message_start", {"type": "message_start", "message": {"model": "claude-x", "usage": {
        "input_tokens": 10, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "thinking", "thinking": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "thinking_delta", "thinking": "Let me think."}}),
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}))
    stream = reassemble(raw)
    assert stream.thinking == "Let me think." and stream.errors == ["overloaded_error: Overloaded"]
    lines = stream_lines(stream)
    assert ("body.thinking", "Let me think.") in lines
    assert ("body.warn", "error: overloaded_error: Overloaded") in lines


def test_responses_function_call_and_incomplete():
    raw = sse(
        ("response.output_item.added", {"type": "response.output_item.added", "output_index": 0, "item": {
            "type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "lookup", "arguments": ""}}),
        ("response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta",
                                                    "item_id": "fc_1", "delta": '{"q":'}),
        ("response.function_call_arguments.delta", {"type": "response.function_call_arguments.delta",
                                                    "item_id": "fc_1", "delta": '"x"}'}),
        ("response.incomplete", {"type": "response.incomplete", "response": {
            "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
            "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}}}))
    stream = reassemble(raw)
    assert [(c.id, c.name, c.arguments) for c in stream.tool_calls] == [("call_9", "lookup", '{"q":"x"}')]
    assert stream.finish == "incomplete (max_output_tokens)" and stream.done
    assert stream.tokens.total_tokens == 5


def test_unknown_event_stream_lists_its_events():
    raw = b": comment\nevent: tick\ndata: 1\n\ndata: {\"x\": 2}\n\ndata: last-without-blank-line"
    assert parse_events(raw) == [("tick", "1"), ("message", '{"x": 2}'), ("message", "last-without-blank-line")]
    lines = body_lines(raw, "text/event-stream")
    assert lines[0] == ("body.caption", "event stream reassembled from 1 events")
    assert [t for _, t in lines[-4:]] == ["3 events:", "tick: 1", '{"x": 2}', "last-without-blank-line"]


def test_body_lines_pretty_print_json_sniff_sse_and_show_binary():
    assert body_lines(b'{"a":[1,{"b":"\xc3\xa9"}]}', "application/json; charset=utf-8") == [
        ("", "{"), ("", '  "a": ['), ("", "    1,"), ("", "    {"), ("", '      "b": "é"'), ("", "    }"),
        ("", "  ]"), ("", "}")]
    assert body_lines(b'{"a":1}', None)[1] == ("", '  "a": 1')  # no content type: JSON sniffed
    assert body_lines(b'{"a":1}', "text/plain") == [("", '{"a":1}')]  # text is shown as it came
    assert body_lines(b"not json", "application/json") == [("", "not json")]
    sniffed = body_lines(sse((None, {"choices": [{"index": 0, "delta": {"content": "hi"}}]})), None)
    assert sniffed[0][1].startswith("OpenAI chat stream reassembled") and ("body.text", "hi") in sniffed
    assert looks_like_sse(b"\n: keepalive\n") and not looks_like_sse(b"hello data: x") and not looks_like_sse(b"")
    assert body_lines(b"\xff\x00", "application/octet-stream") == [("", "<2 bytes binary> ff00")]
    cut = body_lines(b'{"a": ', "application/json", truncated=True)
    assert cut == [("body.warn", "(truncated: the trace holds the first 6 bytes)"), ("", '{"a": ')]


def test_compressed_bodies_are_decoded_for_reading():
    import gzip
    import zlib

    doc = b'{"answer": "compressed"}'
    packed = gzip.compress(doc)
    lines = body_lines(packed, "application/json", encoding="gzip")
    assert lines[0] == ("body.label", f"(gzip: {len(packed)} bytes decoded to {len(doc)})")
    assert lines[1:] == [("", "{"), ("", '  "answer": "compressed"'), ("", "}")]
    for deflated in (zlib.compress(doc), zlib.compress(doc)[2:-4]):  # zlib-wrapped, and raw as some servers send
        assert body_lines(deflated, "application/json", encoding="deflate")[2] == ("", '  "answer": "compressed"')
    stream = gzip.compress(sse((None, {"choices": [{"index": 0, "delta": {"content": "zipped"}}]}), (None, "[DONE]")))
    assert ("body.text", "zipped") in body_lines(stream, "text/event-stream", encoding="gzip")
    cut = packed[: len(packed) // 2 + 4]  # a body the trace cut: what can be inflated is shown
    assert body_lines(cut, "application/json", truncated=True, encoding="gzip")[1][1].startswith("(gzip: ")
    assert body_lines(b"\x8b\x00", None, encoding="br")[0] == ("body.warn", "(br-encoded: shown as it came)")
    assert body_lines(b"not gzip", None, encoding="gzip") == [
        ("body.warn", "(gzip-encoded but not decodable: shown as it came)"), ("", "not gzip")]
    assert body_lines(doc, "application/json", encoding="identity")[0] == ("", "{")
