"""``llm/translate/openai_out.py`` in-process (issue 35): a whole completion's shape, and a stream's
chunks in order (the role once, text, tool calls indexed per provider block, one finish, the usage
chunk only when asked for, ``[DONE]``), as OpenAI's SDKs read them."""

from __future__ import annotations

import json

from trioproxy.llm.translate import openai_out
from trioproxy.llm.translate.openai_out import ChunkWriter, completion, openai_error, tool_call, usage
from trioproxy.llm.translate.sse import SseReader


def frames(data: bytes) -> list:
    return [json.loads(d) if d != "[DONE]" else d for _, d in SseReader().feed(data)]


def test_tool_call_usage_error_and_completion(monkeypatch):
    monkeypatch.setattr(openai_out, "now", lambda: 1234)
    assert tool_call("c", "f", {"a": [1, 2]}) == {"id": "c", "type": "function",
                                                  "function": {"name": "f", "arguments": '{"a":[1,2]}'}}
    assert tool_call("c", "f", '{"a": 1}')["function"]["arguments"] == '{"a": 1}'
    assert usage(3, 4) == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    assert openai_error("m", "k", 5) == {"error": {"message": "m", "type": "k", "param": None, "code": 5}}
    assert openai_error("m", "k") == {"error": {"message": "m", "type": "k", "param": None, "code": None}}
    call = tool_call("c", "f", {})
    assert completion("id", "mod", "hi", [], "stop", {"u": 1}) == {
        "id": "id", "object": "chat.completion", "created": 1234, "model": "mod", "usage": {"u": 1},
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi", "refusal": None},
                     "finish_reason": "stop", "logprobs": None}]}
    with_calls = completion("id", "mod", "", [call], "tool_calls", None)
    assert "usage" not in with_calls
    assert with_calls["choices"][0]["message"] == {"role": "assistant", "content": None, "refusal": None,
                                                   "tool_calls": [call]}
    assert completion("id", "mod", "", [], "stop", None)["choices"][0]["message"]["content"] == ""
    assert completion("id", "mod", "t", [call], "stop", None)["choices"][0]["message"]["content"] == "t"


def test_a_stream_of_text_and_tool_calls(monkeypatch):
    monkeypatch.setattr(openai_out, "now", lambda: 99)
    w = ChunkWriter("mod", include_usage=True)
    assert not w.called_tools
    out = w.text("") + w.text("hi") + w.start() + w.tool_start("b1", "c1", "f") + w.tool_args("b1", '{"a"')
    out += w.tool_args("b1", "") + w.tool_args("unknown", "x") + w.tool_start("b2", "c2", "g", "{}")
    out += w.tool_args("b1", ":1}") + w.finish("tool_calls") + w.finish("stop") + w.end({"total_tokens": 5})
    assert w.called_tools and w.finished and w.use == {"total_tokens": 5}
    base = {"id": "chatcmpl-translated", "object": "chat.completion.chunk", "created": 99, "model": "mod"}

    def chunk(delta, finish=None):
        return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                "usage": None}

    assert frames(out) == [
        chunk({"role": "assistant", "content": ""}), chunk({"content": "hi"}),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a"'}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
        chunk({}, "tool_calls"),
        {**base, "choices": [], "usage": {"total_tokens": 5}},
        "[DONE]"]


def test_without_include_usage_no_usage_key_and_no_usage_chunk():
    w = ChunkWriter("mod", include_usage=False)
    out = w.finish("stop") + w.end({"total_tokens": 5})
    got = frames(out)
    assert got[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""} and "usage" not in got[0]
    assert got[1]["choices"][0]["finish_reason"] == "stop" and "usage" not in got[1]
    assert got[2:] == ["[DONE]"] and out.endswith(b"\n\ndata: [DONE]\n\n")
    asked = ChunkWriter("mod", include_usage=True)
    assert asked.end(None) == b"data: [DONE]\n\n" and asked.use is None
    assert frames(asked.error({"error": {"message": "m"}})) == [{"error": {"message": "m"}}]
