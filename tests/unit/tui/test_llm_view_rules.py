"""The text UI's body view, rule by rule, over the stream shapes the providers send (OpenAI chat chunks,
Responses events, Anthropic message events, Gemini ``alt=sse`` chunks): each whole reassembly and each
rendering is pinned, so a changed field, label or branch shows. Pure, in-process (issue 35's mutation run)."""

from __future__ import annotations

import gzip
import json
import zlib

from trioproxy.tui.llm_view import (
    Stream,
    ToolCall,
    body_lines,
    inflate,
    looks_like_sse,
    parse_events,
    reassemble,
    stream_lines,
)


def sse(*objs: object, done: bool = True, named: bool = False) -> bytes:
    out = b""
    for obj in objs:
        if named:
            out += f"event: {obj['type']}\n".encode()  # type: ignore[index]
        out += b"data: " + json.dumps(obj).encode() + b"\n\n"
    return out + (b"data: [DONE]\n\n" if done else b"")


CHAT = [
    {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "", "reasoning_content": "hmm "}, "finish_reason": None}]},
    {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
     "choices": [{"index": 0, "delta": {"content": "Hi", "reasoning": "then"}, "finish_reason": None}]},
    {"id": "c1", "object": "chat.completion.chunk", "model": "",
     "choices": [{"index": 0, "delta": {"refusal": " no"}, "finish_reason": None}]},
    {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 1, "id": "call_a", "type": "function", "function": {"name": "get_", "arguments": "{\"a\""}}]}}]},
    {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 1, "function": {"name": "weather", "arguments": ":1}"}}]}}]},
    {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o",
     "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4o", "choices": [],
     "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
               "prompt_tokens_details": {"cached_tokens": 2}, "completion_tokens_details": {"reasoning_tokens": 3}}},
]


def test_openai_chat_stream_whole():
    s = reassemble(sse(*CHAT))
    assert (s.dialect, s.events, s.text, s.thinking, s.finish, s.model, s.done, s.errors) == (
        "OpenAI chat", 7, {0: "Hi no"}, "hmm then", "tool_calls", "gpt-4o", True, [])
    assert s.tool_calls == [ToolCall("get_weather", '{"a":1}', "call_a")]
    assert s.usage == CHAT[-1]["usage"]
    assert (s.tokens.prompt_tokens, s.tokens.completion_tokens, s.tokens.cached_input_tokens,
            s.tokens.reasoning_tokens) == (5, 7, 2, 3)
    assert stream_lines(s) == [
        ("body.caption", "OpenAI chat stream reassembled from 7 events, model gpt-4o"),
        ("body.label", "thinking:"), ("body.thinking", "hmm then"),
        ("body.label", "text:"), ("body.text", "Hi no"),
        ("body.label", "tool call get_weather (call_a):"), ("body.text", "{"), ("body.text", '  "a": 1'), ("body.text", "}"),
        ("body.label", "finish: tool_calls"),
        ("body.label", "tokens: input 5, output 7, total 12, cached input 2, reasoning 3"),
        ("body.label", "usage:"), ("", "  {"), ("", '    "prompt_tokens": 5,'), ("", '    "completion_tokens": 7,'),
        ("", '    "total_tokens": 12,'), ("", '    "prompt_tokens_details": {'), ("", '      "cached_tokens": 2'),
        ("", "    },"), ("", '    "completion_tokens_details": {'), ("", '      "reasoning_tokens": 3'), ("", "    }"),
        ("", "  }"),
    ]


def test_openai_chat_choice_without_index_and_tool_piece_without_index_or_name():
    s = reassemble(sse(
        {"object": "chat.completion.chunk", "choices": [{"index": "x", "delta": {"content": "a", "tool_calls": [
            {"function": {"arguments": "[1"}}]}}]},
        {"choices": [{"delta": {"content": "b", "tool_calls": [{"index": 0, "function": {"name": "", "arguments": "]"}}]}}],
         "usage": None},
        done=False))
    assert s.dialect == "OpenAI chat" and s.text == {0: "ab"} and s.usage is None and not s.done
    assert s.tool_calls == [ToolCall("", "[1]", None)]
    assert s.finish is None
    assert ("body.warn", "the stream has no end event (cut short?)") in stream_lines(s)


ANTHROPIC = [
    {"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "model": "claude-x", "content": [],
                                          "usage": {"input_tokens": 10, "cache_read_input_tokens": 4, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "let me"}},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": "A"}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "B"}},
    {"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {}}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"q\":"}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "\"x\"}"}},
    {"type": "content_block_delta", "index": 5, "delta": {"type": "input_json_delta", "partial_json": "lost"}},
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}},
    {"type": "message_stop"},
]


def test_anthropic_stream_whole():
    s = reassemble(sse(*ANTHROPIC, done=False, named=True))
    assert (s.dialect, s.events, s.text, s.thinking, s.finish, s.model, s.done, s.errors) == (
        "Anthropic messages", 12, {0: "AB"}, "let me", "tool_use", "claude-x", True, [])
    assert s.tool_calls == [ToolCall("look", '{"q":"x"}', "toolu_1")]
    assert s.usage == {"input_tokens": 10, "cache_read_input_tokens": 4, "output_tokens": 9}  # merged, later wins
    assert stream_lines(s)[-8:-6] == [("body.label", "finish: tool_use"),
                                      ("body.label", "tokens: input 10, output 9, total 23, cached input 4")]


def test_anthropic_server_tool_block_without_index_and_a_cut_stream():
    s = reassemble(sse(
        {"type": "message_start", "message": {"model": "", "usage": "n/a"}},
        {"type": "content_block_start", "content_block": {"type": "server_tool_use", "id": "srv", "name": "web_search"}},
        {"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "other_delta", "text": "x"}},
        {"type": "message_delta", "delta": {"stop_reason": None}, "usage": {"output_tokens": 2}},
        done=False))
    assert s.tool_calls == [ToolCall("web_search", "{}", "srv")]
    assert (s.model, s.text, s.finish, s.done, s.usage) == (None, {}, None, False, {"output_tokens": 2})
    assert stream_lines(s)[:2] == [("body.caption", "Anthropic messages stream reassembled from 5 events"),
                                   ("body.label", "tool call web_search (srv):")]
    assert ("body.warn", "the stream has no end event (cut short?)") in stream_lines(s)


RESPONSES = [
    {"type": "response.created", "response": {"id": "r", "model": "gpt-5", "status": "in_progress", "usage": None}},
    {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "think"},
    {"type": "response.reasoning_text.delta", "output_index": 0, "delta": "ing"},
    {"type": "response.output_item.added", "output_index": 1,
     "item": {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "f", "arguments": ""}},
    {"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "fc_1", "delta": "{\"k\""},
    {"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "fc_1", "delta": ":2"},
    {"type": "response.function_call_arguments.done", "output_index": 1, "item_id": "fc_1", "arguments": "{\"k\":2}"},
    {"type": "response.function_call_arguments.delta", "output_index": 3, "item_id": "fc_x", "delta": "[1]"},
    {"type": "response.output_text.delta", "output_index": 2, "delta": "Yes"},
    {"type": "response.refusal.delta", "output_index": 2, "delta": "!"},
    {"type": "response.output_item.added", "output_index": 4, "item": {"type": "message", "id": "msg"}},
    {"type": "response.completed", "response": {"id": "r", "model": "gpt-5-2025", "status": "completed", "usage": {
        "input_tokens": 3, "output_tokens": 4, "total_tokens": 7, "output_tokens_details": {"reasoning_tokens": 2}}}},
]


def test_openai_responses_stream_whole():
    s = reassemble(sse(*RESPONSES, done=False, named=True))
    assert (s.dialect, s.events, s.text, s.thinking, s.finish, s.model, s.done, s.errors) == (
        "OpenAI responses", 12, {2: "Yes!"}, "thinking", "completed", "gpt-5-2025", True, [])
    assert s.tool_calls == [ToolCall("f", '{"k":2}', "call_9"), ToolCall("", "[1]", None)]
    assert s.usage == RESPONSES[-1]["response"]["usage"]
    assert stream_lines(s)[9:15] == [
        ("body.label", "tool call :"), ("body.text", "["), ("body.text", "  1"), ("body.text", "]"),
        ("body.label", "finish: completed"), ("body.label", "tokens: input 3, output 4, total 7, reasoning 2")]


def test_openai_responses_created_only_then_incomplete_and_failed():
    created = reassemble(sse(RESPONSES[0], {"type": "response.in_progress", "response": {"model": "gpt-5"}}, done=False))
    assert (created.done, created.finish, created.model, created.usage) == (False, None, "gpt-5", None)
    item = reassemble(sse({"type": "response.output_item.added", "output_index": "?",
                           "item": {"type": "function_call", "id": "fc_2", "name": "n"}},
                          {"type": "response.function_call_arguments.done", "item_id": "fc_2", "arguments": 5},
                          {"type": "response.function_call_arguments.done", "item_id": "nope", "arguments": "{}"},
                          {"type": "response.output_text.delta", "output_index": "?", "delta": "t"}, done=False))
    assert item.tool_calls == [ToolCall("n", "", "fc_2")] and item.text == {0: "t"}
    incomplete = reassemble(sse({"type": "response.incomplete", "response": {
        "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}}, done=False))
    assert (incomplete.done, incomplete.finish) == (True, "incomplete (max_output_tokens)")
    failed = reassemble(sse({"type": "response.failed", "response": {
        "error": {"code": "server_error", "message": "boom"}}}, done=False))
    assert (failed.finish, failed.errors) == ("failed", ["server_error: boom"])
    assert stream_lines(failed)[1:] == [("body.label", "finish: failed"), ("body.warn", "error: server_error: boom")]
    assert failed.tokens is None  # no usage in the stream: no tokens line


GEMINI = [
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "plan", "thought": True}, {"text": "Hel"}]}, "index": 0}],
     "modelVersion": "gemini-2.5"},
    {"candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}, {"functionCall": {"name": "g", "args": {"z": [1]}}}]}},
                    {"content": {"parts": [{"text": "other"}]}}],
     "usageMetadata": {"promptTokenCount": 6, "candidatesTokenCount": 2, "totalTokenCount": 8}},
    {"candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0}],
     "usageMetadata": {"promptTokenCount": 6, "candidatesTokenCount": 3, "totalTokenCount": 9,
                       "cachedContentTokenCount": 1, "thoughtsTokenCount": 2}},
]


def test_gemini_stream_whole():
    s = reassemble(sse(*GEMINI, done=False))
    assert (s.dialect, s.events, s.text, s.thinking, s.finish, s.model, s.done) == (
        "Gemini", 3, {0: "Hello", 1: "other"}, "plan", "STOP", "gemini-2.5", True)
    assert s.tool_calls == [ToolCall("g", '{"z": [1]}', None)]
    assert s.usage == GEMINI[-1]["usageMetadata"]  # the last one, not merged
    assert s.answer == "Hello"
    assert stream_lines(s)[:15] == [
        ("body.caption", "Gemini stream reassembled from 3 events, model gemini-2.5"),
        ("body.label", "thinking:"), ("body.thinking", "plan"),
        ("body.label", "text (choice 0):"), ("body.text", "Hello"), ("body.label", "text (choice 1):"), ("body.text", "other"),
        ("body.label", "tool call g:"), ("body.text", "{"), ("body.text", '  "z": ['), ("body.text", "    1"),
        ("body.text", "  ]"), ("body.text", "}"), ("body.label", "finish: STOP"),
        ("body.label", "tokens: input 6, output 5, total 9, cached input 1, reasoning 2")]


def test_gemini_usage_only_chunk_and_function_call_without_args():
    s = reassemble(sse({"usageMetadata": {"promptTokenCount": 1}},
                       {"candidates": [{"content": {"parts": [{"functionCall": {"name": "h", "id": "i1"}}, {"text": "x", "thought": 1}]}}]},
                       done=False))
    assert s.dialect == "Gemini" and s.tool_calls == [ToolCall("h", "{}", "i1")] and s.text == {0: "x"}
    assert not s.done and s.usage == {"promptTokenCount": 1}


def test_errors_events_and_what_is_not_a_dialect():
    s = reassemble(b"event: error\ndata: {\"error\": {\"type\": \"overloaded_error\", \"message\": \"busy\"}}\n\n"
                   b"data: {\"type\": \"error\", \"error\": {\"status\": 500, \"code\": 0}}\n\n"
                   b"data: {\"error\": \"plain\"}\n\n"
                   b"data: [1, 2]\n\ndata: not json\n\ndata: {\"other\": 1}\n\n"
                   b"event: error\ndata: {\"nothing\": 1}\n\ndata: [DONE]\n\n")
    assert s.errors == ["overloaded_error: busy", "500", "plain"]
    assert (s.dialect, s.events, s.done) == (None, 5, True)
    assert stream_lines(s) == [("body.caption", "event stream reassembled from 5 events"),
                               ("body.warn", "error: overloaded_error: busy"), ("body.warn", "error: 500"),
                               ("body.warn", "error: plain")]
    chat_error = reassemble(sse({"choices": [], "error": {"message": "m"}}, done=False))
    assert chat_error.errors == [] and chat_error.dialect == "OpenAI chat"


def test_stream_lines_of_an_empty_stream_and_a_finish_without_end():
    assert stream_lines(Stream(dialect=None)) == [("body.caption", "event stream reassembled from 0 events")]
    assert Stream(dialect=None).answer == ""
    cut = Stream(dialect="Gemini", text={3: "a\nb", 1: ""}, finish="STOP", tool_calls=[ToolCall("t", "not json")])
    assert cut.answer == ""
    assert stream_lines(cut) == [
        ("body.caption", "Gemini stream reassembled from 0 events"),
        ("body.label", "text (choice 1):"), ("body.text", ""), ("body.label", "text (choice 3):"),
        ("body.text", "a"), ("body.text", "b"), ("body.label", "tool call t:"), ("body.text", "not json"),
        ("body.label", "finish: STOP (no end event)")]
    assert stream_lines(Stream(dialect="Gemini", tool_calls=[ToolCall("t")], done=True))[1:] == [
        ("body.label", "tool call t:"), ("body.text", "")]


def test_parse_events_and_sniffing():
    assert parse_events(b"event: a\ndata: 1\n\ndata: 2") == [("a", "1"), ("message", "2")]
    assert looks_like_sse(b"  \n data: x") and looks_like_sse(b": comment\n") and looks_like_sse(b"id: 1\n")
    assert looks_like_sse(b"retry: 5\n") and looks_like_sse(b"event: e\n")
    assert not looks_like_sse(b"") and not looks_like_sse(b"   ") and not looks_like_sse(b'{"data": 1}')
    assert not looks_like_sse(b"x" * 200 + b"\ndata: 1")


def test_inflate():
    text = b'{"a": 1}'
    assert inflate(text, None) == (text, None) and inflate(text, " Identity ") == (text, None)
    assert inflate(text, "br") == (text, "(br-encoded: shown as it came)")
    gz = gzip.compress(text)
    assert inflate(gz, "GZIP") == (text, f"(gzip: {len(gz)} bytes decoded to 8)")
    assert inflate(gz, "x-gzip")[0] == text
    for packed in (zlib.compress(text), zlib.compress(text)[2:-4]):  # zlib-wrapped and raw deflate
        assert inflate(packed, "deflate") == (text, f"(deflate: {len(packed)} bytes decoded to 8)")
    assert inflate(gz, "deflate") == (gz, "(deflate-encoded but not decodable: shown as it came)")
    assert inflate(b"junk", "gzip") == (b"junk", "(gzip-encoded but not decodable: shown as it came)")
    big = gzip.compress(b"\0" * (16 * 1024 * 1024 + 1))
    data, note = inflate(big, "gzip")
    assert len(data) == 16 * 1024 * 1024 and note == f"(gzip: {len(big)} bytes decoded to {len(data)} (the first 16 MiB))"


def test_body_lines():
    stream = sse(GEMINI[-1], done=False)
    assert body_lines(stream, "text/event-stream; charset=utf-8", truncated=True)[:2] == [
        ("body.warn", f"(truncated: the trace holds the first {len(stream)} bytes)"),
        ("body.caption", "Gemini stream reassembled from 1 events")]
    lines = body_lines(b"event: ping\ndata: {}\n\ndata: 2\n\n")
    assert lines[-3:] == [("body.caption", "2 events:"), ("", "ping: {}"), ("", "2")]
    assert body_lines(b"data: 1", "application/json") == [("", "data: 1")]
    assert body_lines(b'{"a":[1]}', "Application/Problem+JSON") == [("", "{"), ("", '  "a": ['), ("", "    1"), ("", "  ]"), ("", "}")]
    assert body_lines(b'{"a":"\xc3\xa9"}') == [("", "{"), ("", '  "a": "\xe9"'), ("", "}")]
    assert body_lines(b'{"a":1}', "text/plain") == [("", '{"a":1}')]
    assert body_lines(b"{bad\nx", "application/json") == [("", "{bad"), ("", "x")]
    assert body_lines(b"\xff" * 70) == [("", "<70 bytes binary> " + "ff" * 64)]
    assert body_lines(gzip.compress(b'{"b":2}'), "application/json", encoding="gzip")[1:] == [("", "{"), ("", '  "b": 2'), ("", "}")]
    assert body_lines(gzip.compress(b"x"), "text/plain", encoding="gzip")[0][0] == "body.label"
    assert body_lines(b"x", "text/plain", encoding="br") == [("body.warn", "(br-encoded: shown as it came)"), ("", "x")]


def test_parallel_tool_calls_thinking_pieces_and_candidate_indexes_are_kept_apart():
    chat = reassemble(sse({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "a", "function": {"name": "one", "arguments": "{}"}},
        {"index": 1, "id": "b", "function": {"name": "two", "arguments": "["}}]}}]},
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": 1, "function": {"arguments": "]"}}]}}]}))
    assert chat.tool_calls == [ToolCall("one", "{}", "a"), ToolCall("two", "[]", "b")]
    gemini = reassemble(sse({"candidates": [{"index": 1, "content": {"parts": [{"text": "a", "thought": True}, {"text": "x"}]}}]},
                            {"candidates": [{"index": 1, "content": {"parts": [{"text": "b", "thought": True}]}}]}, done=False))
    assert (gemini.text, gemini.thinking) == ({1: "x"}, "ab")
    anthropic = reassemble(sse(*[{"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": t}}
                                 for t in ("c", "d")], done=False))
    assert anthropic.thinking == "cd"


def test_usage_replaces_in_chat_responses_and_gemini_and_merges_in_anthropic():
    gemini = reassemble(sse({"usageMetadata": {"promptTokenCount": 1, "trafficType": "ON_DEMAND"}},
                            {"usageMetadata": {"promptTokenCount": 2}}, done=False))
    assert gemini.usage == {"promptTokenCount": 2}
    chat = reassemble(sse({"choices": [], "usage": {"prompt_tokens": 1, "extra": 1}}, {"choices": [], "usage": {"prompt_tokens": 2}}))
    assert chat.usage == {"prompt_tokens": 2}
    responses = reassemble(sse({"type": "response.in_progress", "response": {"usage": {"input_tokens": 1, "x": 1}}},
                               {"type": "response.completed", "response": {"usage": {"input_tokens": 2}}}, done=False))
    assert responses.usage == {"input_tokens": 2}
    cache = reassemble(sse({"type": "message_start", "message": {"usage": {"input_tokens": 3, "cache_creation_input_tokens": 5}}},
                           {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 1}}, done=False))
    assert ("body.label", "tokens: input 3, output 1, total 9, cache write 5") in stream_lines(cache)


def test_chat_chunk_without_choices_and_responses_lifecycle_events():
    chunk = reassemble(sse({"object": "chat.completion.chunk", "model": "m", "usage": {"prompt_tokens": 1}}))
    assert (chunk.dialect, chunk.model, chunk.usage) == ("OpenAI chat", "m", {"prompt_tokens": 1})
    created = reassemble(sse({"type": "response.created", "response": {"model": "c"}}, done=False))
    progress = reassemble(sse({"type": "response.in_progress", "response": {"model": "p"}}, done=False))
    assert (created.model, created.done, progress.model, progress.done) == ("c", False, "p", False)
    cancelled = reassemble(sse({"type": "response.completed", "response": {"status": "cancelled"}}, done=False))
    assert cancelled.finish == "cancelled"  # the response's own status, over the event's name
    orphan = reassemble(sse(*[{"type": "response.function_call_arguments.delta", "item_id": "fc", "delta": d} for d in "ab"],
                            done=False))
    assert orphan.tool_calls == [ToolCall("", "ab", None)]


def test_error_events_by_type_or_by_event_name():
    s = reassemble(b'data: {"type": "error", "code": "rate_limit_exceeded", "message": "slow down"}\n\n'
                   b'event: error\ndata: {"object": "chat.completion.chunk", "choices": [], "error": {"message": "cut"}}\n\n')
    assert s.errors == ["error: rate_limit_exceeded: slow down", "cut"]


def test_non_ascii_is_shown_as_it_is():
    s = Stream(dialect="Gemini", tool_calls=[ToolCall("t", '{"city": "Z\\u00fcrich"}')], usage={"n\u00e9": 1}, done=True)
    assert stream_lines(s)[2:] == [("body.text", "{"), ("body.text", '  "city": "Z\u00fcrich"'), ("body.text", "}"),
                                   ("body.label", "usage:"), ("", "  {"), ("", '    "n\u00e9": 1'), ("", "  }")]


def test_a_declared_event_stream_is_reassembled_even_when_it_does_not_look_like_one():
    assert body_lines(b"", "text/event-stream") == [("body.caption", "event stream reassembled from 0 events"),
                                                    ("body.caption", "0 events:")]
