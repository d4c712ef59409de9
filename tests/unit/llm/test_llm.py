import gzip
import json
import zlib

import pytest

from trioproxy.llm.usage import LlmRequestInfo, Usage, UsageReader, prepare_request_body

USAGE = {"prompt_tokens": 12, "completion_tokens": 30, "total_tokens": 42}


def read(content_type, chunks, **kwargs):
    reader = UsageReader(content_type, **kwargs)
    for chunk in chunks:
        reader.feed(chunk)
    return reader.finish()


def completion(**extra):
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-x",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
        "usage": USAGE,
    }
    return json.dumps({**body, **extra}).encode()


def sse(*events, done=True, newline="\n"):
    out = "".join(f"data: {json.dumps(e)}{newline}{newline}" for e in events)
    if done:
        out += f"data: [DONE]{newline}{newline}"
    return out.encode()


def openai_stream(usage=USAGE, newline="\n"):
    """What OpenAI sends with include_usage: `usage: null` in every chunk but the last."""
    chunk = {"id": "c", "object": "chat.completion.chunk", "model": "gpt-x", "usage": None}
    events = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {**chunk, "choices": [{"index": 0, "delta": {"content": 'say "usage": {'}}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    if usage is not None:
        events.append({**chunk, "choices": [], "usage": usage})
    return sse(*events, newline=newline)


EXPECTED = Usage(prompt_tokens=12, completion_tokens=30, total_tokens=42, model="gpt-x")


# --- JSON ---------------------------------------------------------------------------------


def test_json_usage():
    body = completion()
    assert read("application/json", [body]) == EXPECTED
    assert read("application/json; charset=utf-8", [body[:7], body[7:50], body[50:]]) == EXPECTED
    assert read(None, [body]) == EXPECTED  # no content-type: try JSON
    assert read(b"application/vnd.api+json", [body]) == EXPECTED


def test_json_without_usage_or_invalid():
    assert read("application/json", [completion(usage=None)]) is None
    assert read("application/json", [b'{"error": {"message": "nope"}}']) is None
    assert read("application/json", [b"not json"]) is None
    assert read("application/json", [b"\xff\xfe garbage"]) is None
    assert read("application/json", []) is None
    assert read("text/html", [completion()]) is None


def test_json_usage_variants():
    total_only = completion(usage={"total_tokens": 7})
    assert read("application/json", [total_only]) == Usage(0, 0, 7, "gpt-x")
    no_total = completion(usage={"prompt_tokens": 3, "completion_tokens": 4})
    assert read("application/json", [no_total]).total_tokens == 7
    responses_api = json.dumps(
        {
            "object": "response",
            "model": "m",
            "usage": {"input_tokens": 5, "output_tokens": 6, "total_tokens": 11},
        }
    ).encode()
    assert read("application/json", [responses_api]) == Usage(5, 6, 11, "m")
    bogus = completion(usage={"total_tokens": "many", "prompt_tokens": True})
    assert read("application/json", [bogus]) is None


def test_json_over_the_cap_gives_no_usage():
    body = completion(padding="x" * 2000)
    assert read("application/json", [body], max_body=len(body)) == EXPECTED
    reader = UsageReader("application/json", max_body=len(body) - 1)
    for i in range(0, len(body), 100):
        reader.feed(body[i : i + 100])
    assert reader.finish() is None


def test_huge_json_body_is_not_buffered():
    reader = UsageReader("application/json")
    piece = b" " * (1024 * 1024)
    for _ in range(5):  # 5 MiB > the 4 MiB default cap
        reader.feed(piece)
    assert reader._parser._chunks is None  # dropped, not held
    reader.feed(completion())
    assert reader.finish() is None


def test_gzip_and_deflate_bodies():
    body = completion()
    gz = gzip.compress(body)
    assert read("application/json", [gz[:10], gz[10:]], content_encoding="gzip") == EXPECTED
    assert read("application/json", [zlib.compress(body)], content_encoding=b"deflate") == EXPECTED
    stream = gzip.compress(openai_stream())
    chunks = [stream[i : i + 7] for i in range(0, len(stream), 7)]
    assert read("text/event-stream", chunks, content_encoding="gzip") == EXPECTED
    assert read("application/json", [body], content_encoding="br") is None
    assert read("application/json", [b"not gzip"], content_encoding="gzip") is None


# --- SSE ----------------------------------------------------------------------------------


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_sse_usage_at_every_split_point(newline):
    stream = openai_stream(newline=newline)
    for i in range(len(stream) + 1):
        assert read("text/event-stream", [stream[:i], stream[i:]]) == EXPECTED, (newline, i)


def test_sse_usage_byte_by_byte_and_three_way_splits():
    stream = openai_stream(newline="\r\n")
    assert read("text/event-stream", [stream[i : i + 1] for i in range(len(stream))]) == EXPECTED
    usage_at = stream.index(b'"usage": {')
    for i in range(usage_at - 20, usage_at + 20):
        for j in range(i, usage_at + 40):
            assert read("text/event-stream", [stream[:i], stream[i:j], stream[j:]]) == EXPECTED


def test_sse_done_and_no_usage():
    assert read("text/event-stream", [openai_stream(usage=None)]) is None
    assert read("text/event-stream", [b"data: [DONE]\n\n"]) is None
    assert read("text/event-stream", [b": keepalive\n\nevent: ping\ndata: {}\n\n"]) is None
    assert read("text/event-stream", [b"data: {\"usage\": {broken\n\n"]) is None


def test_sse_last_usage_wins_and_model_is_taken_from_the_event():
    first = {"model": "a", "choices": [], "usage": {"total_tokens": 1}}
    last = {"model": "b", "choices": [], "usage": USAGE}
    assert read("text/event-stream", [sse(first, last)]) == Usage(12, 30, 42, "b")


def test_sse_multiline_data_and_fields():
    event = json.dumps({"model": "m", "usage": USAGE}, indent=1).splitlines()
    stream = ("id: 1\nevent: message\n" + "".join(f"data:{line}\n" for line in event) + "\n").encode()
    for i in range(len(stream) + 1):
        assert read("text/event-stream", [stream[:i], stream[i:]]) == Usage(12, 30, 42, "m")


def test_sse_stream_ending_without_blank_line():
    stream = sse({"usage": USAGE}, done=False).rstrip(b"\n")
    assert read("text/event-stream", [stream]).total_tokens == 42


def test_sse_usage_string_value_is_not_parsed(monkeypatch):
    from trioproxy.llm import usage

    calls = []
    real_loads = usage.loads_json
    monkeypatch.setattr(usage, "loads_json", lambda s: calls.append(s) or real_loads(s))
    stream = openai_stream()
    read("text/event-stream", [stream])
    assert len(calls) == 1  # only the final chunk; `"usage": null` and content are skipped


def test_sse_over_long_event_is_skipped_not_buffered():
    big = {"choices": [{"delta": {"content": "x" * 5000}}], "usage": {"total_tokens": 999}}
    stream = sse(big, {"usage": USAGE}, done=True)
    for size in (1, 100, 4096, len(stream)):
        reader = UsageReader("text/event-stream", max_body=1000)
        for i in range(0, len(stream), size):
            reader.feed(stream[i : i + size])
            sse_state = reader._parser
            assert len(sse_state._partial) <= 1000 + size
            assert sse_state._size <= 1000
        assert reader.finish() == Usage(12, 30, 42, None), size


def test_reader_never_changes_the_chunks():
    stream = openai_stream()
    chunks = [stream[i : i + 13] for i in range(0, len(stream), 13)]
    copies = [bytes(c) for c in chunks]
    read("text/event-stream", chunks)
    assert chunks == copies


def test_reader_activity():
    assert UsageReader("text/event-stream").active
    assert not UsageReader("image/png").active
    assert not UsageReader("application/json", content_encoding="zstd").active
    reader = UsageReader("text/event-stream")
    reader.feed(openai_stream())
    assert reader.finish() == EXPECTED
    assert reader.finish() is None  # finished once


# --- request rewriting --------------------------------------------------------------------


def chat(**extra):
    messages = [{"role": "user", "content": "hi"}]
    return json.dumps({"model": "client-model", "messages": messages, **extra}).encode()


def test_plain_request_is_passed_through_untouched():
    body = chat()
    out, info = prepare_request_body(body, model_override=None)
    assert out is body
    assert info == LlmRequestInfo(model="client-model", streaming=False)


def test_model_override():
    out, info = prepare_request_body(chat(), model_override="my-model")
    assert json.loads(out)["model"] == "my-model"
    assert info == LlmRequestInfo(model="my-model", streaming=False)
    body = chat(model="my-model")
    assert prepare_request_body(body, model_override="my-model")[0] is body
    out, info = prepare_request_body(b'{"messages": []}', model_override="m")
    assert json.loads(out) == {"messages": [], "model": "m"} and info.model == "m"


def test_stream_options_injected():
    out, info = prepare_request_body(chat(stream=True), model_override=None)
    sent = json.loads(out)
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["messages"] == [{"role": "user", "content": "hi"}]
    assert info == LlmRequestInfo(model="client-model", streaming=True, usage_added=True)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"include_usage": False, "x": 1}, {"include_usage": True, "x": 1}),
        ({"continuous_usage_stats": True}, {"continuous_usage_stats": True, "include_usage": True}),
        (None, {"include_usage": True}),
    ],
)
def test_stream_options_keep_user_keys(options, expected):
    out, _ = prepare_request_body(chat(stream=True, stream_options=options), model_override=None)
    assert json.loads(out)["stream_options"] == expected


def test_stream_options_already_set_is_untouched():
    body = chat(stream=True, stream_options={"include_usage": True})
    assert prepare_request_body(body, model_override=None)[0] is body


def test_non_streaming_requests_get_no_stream_options():
    for body in (chat(stream=False), chat(stream="yes")):
        out, info = prepare_request_body(body, model_override=None)
        assert out is body and not info.streaming


def test_unicode_survives_rewrite():
    request = {"model": "m", "stream": True, "messages": [{"content": "héllo ✓"}]}
    body = json.dumps(request, ensure_ascii=False).encode()
    out, _ = prepare_request_body(body, model_override=None)
    assert json.loads(out)["messages"][0]["content"] == "héllo ✓"


@pytest.mark.parametrize("request_body", [
    {"model": "m", "messages": [{"content": "h\u00e9llo \u2713 \"q\" \\ \u2028 \x01"}], "temperature": 0.1,
     "n": 1, "stop": None, "logit_bias": {"50256": -100}, "top_p": 1e-07, "stream": True},
    {"model": "m", "x": [1.5, -0.0, 1e300, True, False, [], {}], "y": float("nan"), "z": float("inf")},
])
def test_a_rewritten_body_is_json_dumps_compact_text(request_body):
    """(the rewrite's cached encoder writes what json.dumps(separators=(",", ":"), ensure_ascii=False) writes)"""
    out, _ = prepare_request_body(json.dumps(request_body).encode(), model_override="other")
    expected = dict(request_body, model="other")
    if request_body.get("stream"):
        expected["stream_options"] = {"include_usage": True}
    assert out == json.dumps(expected, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b'"text"', b"\xff\xfe\x00", b"{"])
def test_non_json_body_is_passed_through(body):
    out, info = prepare_request_body(body, model_override="m")
    assert out is body and info is None
