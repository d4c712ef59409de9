"""Reading LLM traffic in the web UI's trace view, in headless Chromium against a real gateway process in
front of the mock providers: the Bodies view puts the request and response bodies side by side (JSON
pretty-printed) and shows each streamed answer reassembled (llm_stream.js) — the generated text and
the final usage — for OpenAI chat completions, OpenAI Responses, Anthropic Messages and Gemini; search
finds a string that only a body holds."""

from __future__ import annotations

import json
import os

import pytest
from playwright.sync_api import expect

from tests.e2e.test_webui_browser import CHROMIUM, CHROMIUM_ARGS, Page, browser  # noqa: F401  (the module's Chromium, a fixture)
from tests.webui_llm_helpers import LlmGateway

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="chromium not installed")


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    gateway = LlmGateway(tmp_path_factory.mktemp("webui-llm"))
    yield gateway
    gateway.close()


@pytest.fixture
def page(browser, gw):  # noqa: F811
    p = Page(browser, gw, height=900)
    yield p
    p.close()


def follow(page: Page) -> None:
    page.open("trace")
    ui = page.page
    ui.locator("#trace-follow").check()
    ui.get_by_role("button", name="Start trace").click()
    ui.wait_for_selector("#trace-status[data-state='waiting']")


# (call, prompt, format, usage fields the final usage has)
STREAMS = [
    ("chat_stream", "a chat answer streamed in pieces", "openai-chat", {"prompt_tokens", "completion_tokens"}),
    ("responses_stream", "a responses answer streamed in pieces", "openai-responses", {"input_tokens", "output_tokens"}),
    ("messages_stream", "an anthropic answer streamed in pieces", "anthropic", {"input_tokens", "output_tokens"}),
    ("gemini_stream", "a gemini answer streamed in pieces", "gemini", {"promptTokenCount", "candidatesTokenCount"}),
]


def test_streamed_answers_are_shown_reassembled_beside_the_request(page, gw):
    follow(page)
    ui = page.page
    raw = {}
    for n, (call, prompt, _, _) in enumerate(STREAMS, 1):
        answer = getattr(gw, call)(prompt)
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
        raw[call] = answer.text
        expect(ui.locator(f"#request-rows tr:nth-child({n}) td:nth-child(4)")).to_have_text("200")
    ui.get_by_role("button", name="Stop").click()
    for n, (call, prompt, fmt, usage_fields) in enumerate(STREAMS, 1):
        ui.locator(f"#request-rows tr:nth-child({n})").click()
        ui.keyboard.press("b")
        expect(ui.locator("#details-title")).to_have_text("Bodies")
        response = ui.locator("#bodies [data-side='response']")
        stream = response.locator(f".stream[data-format='{fmt}']")
        expect(stream).to_be_visible()
        # the mocks echo the prompt, one word per event: the page joined the pieces again
        assert stream.locator("pre.generated").inner_text() == prompt, call
        assert raw[call].count("data:") >= len(prompt.split())  # one event per word at least
        usage = json.loads(stream.locator("pre.usage").inner_text())
        assert usage_fields <= set(usage) and all(usage[f] > 0 for f in usage_fields), (call, usage)
        # the request beside it, pretty-printed JSON holding the same prompt
        request = ui.locator("#bodies [data-side='request'] pre.json")
        text = request.inner_text()
        assert "\n  " in text and prompt in json.dumps(json.loads(text)), call
        expect(response.locator("details.raw")).not_to_have_attribute("open", "")
    page.shot("trace-bodies")


def test_search_finds_a_string_that_only_a_body_holds(page, gw):
    follow(page)
    ui = page.page
    gw.chat_stream("first prompt about kiwis")
    expect(ui.locator("#request-rows tr:nth-child(1) td:nth-child(4)")).to_have_text("200")
    answer = gw.messages_stream("second prompt about a zebra")
    expect(ui.locator("#request-rows tr:nth-child(2) td:nth-child(4)")).to_have_text("200")
    ui.get_by_role("button", name="Stop").click()
    # the mock streams seven characters an event: "about a", " zebra" — the phrase is in no one event
    assert "about a zebra" not in answer.text and "zebra" in answer.text

    ui.locator("#trace-search").fill("About A ZEBRA")  # case-insensitive; the events carry bodies as base64 only
    expect(ui.locator("#trace-search-state")).to_have_text("2 matching events in 1 request")
    assert ui.locator("#request-rows tr.match").count() == 1
    assert ui.locator("#request-rows tr:nth-child(2)").get_attribute("class").split().count("match") == 1
    ui.locator("#trace-search").press("Enter")  # jumps to the first match: a body of the second request
    expect(ui.locator("#request-rows tr:nth-child(2)")).to_have_class("selected match")
    selected = ui.locator("#event-rows tr.selected")
    assert selected.get_attribute("data-kind") == "Body Snapshot"
    assert "final request" in selected.inner_text() and "match" in selected.get_attribute("class")
    ui.locator("#trace-search-filter").check()
    rows = ui.locator("#event-rows tr").evaluate_all("rows => rows.map(r => [r.dataset.kind, r.cells[2].textContent])")
    assert [kind for kind, _ in rows] == ["Body Snapshot", "Body Snapshot"]
    assert rows[1][1].startswith("response")  # the streamed answer, found in its reassembled text
    ui.locator("#pane-events h2").click()  # the keys work outside the inputs
    ui.keyboard.press("n")
    expect(ui.locator("#event-rows tr.selected")).to_contain_text("response")
    ui.get_by_role("button", name="Bodies").click()
    marks = ui.locator("#bodies mark").all_text_contents()
    assert len(marks) == 2 and {m.lower() for m in marks} == {"about a zebra"}  # the request, the reassembled text
    ui.locator("#trace-search-filter").uncheck()
    assert ui.locator("#event-rows tr").count() > len(rows)
    ui.locator("#trace-search").fill("no such text anywhere")
    expect(ui.locator("#trace-search-state")).to_have_text("no match")
    assert ui.locator("#request-rows tr.match, #event-rows tr.match").count() == 0


def sse(*events: tuple[str | None, object], crlf: bool = False) -> str:
    text = "".join((f"event: {name}\n" if name else "") + f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
                   for name, data in events)
    return text.replace("\n", "\r\n") if crlf else text


def test_reassembly_of_tool_calls_and_edge_cases(page):
    """llm_stream.js in the page on streams the mocks do not send: tool calls, CRLF, no deltas."""
    page.open("trace")
    run = lambda body, kind="text/event-stream": page.page.evaluate(  # noqa: E731
        "([b, t]) => LlmStream.present(b, t)", [body, kind])
    chat = run(sse((None, {"model": "gpt-4o", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"name": "lookup", "arguments": '{"q": '}}]}}]}),
                   (None, {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"kiwi"}'}}]},
                                        "finish_reason": "tool_calls"}]}),
                   (None, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 7}}), (None, "[DONE]"), crlf=True))
    assert chat["kind"] == "sse" and chat["stream"]["format"] == "openai-chat" and chat["stream"]["done"]
    assert chat["stream"]["toolCalls"] == [{"name": "lookup", "arguments": '{"q": "kiwi"}'}]
    assert chat["stream"]["finishReason"] == "tool_calls" and chat["stream"]["usage"]["completion_tokens"] == 7
    done = {"model": "gpt-4.1", "status": "completed", "usage": {"input_tokens": 2, "output_tokens": 3},
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "whole answer"}]}]}
    responses = run(sse(("response.completed", {"type": "response.completed", "response": done})))["stream"]
    assert (responses["format"], responses["text"], responses["usage"]["output_tokens"]) == ("openai-responses", "whole answer", 3)
    claude = run(sse(("message_start", {"type": "message_start", "message": {"model": "claude", "usage": {"input_tokens": 4}}}),
                     ("content_block_start", {"type": "content_block_start", "index": 1,
                                              "content_block": {"type": "tool_use", "name": "search"}}),
                     ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                              "delta": {"type": "input_json_delta", "partial_json": '{"a":'}}),
                     ("content_block_delta", {"type": "content_block_delta", "index": 1,
                                              "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
                     ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
                                        "usage": {"output_tokens": 9}})))["stream"]
    assert claude["toolCalls"] == [{"name": "search", "arguments": '{"a":1}'}]
    assert claude["usage"] == {"input_tokens": 4, "output_tokens": 9} and claude["finishReason"] == "tool_use"
    gemini = run(sse((None, {"candidates": [{"content": {"parts": [{"text": "thinking", "thought": True},
                                                                   {"functionCall": {"name": "f", "args": {"x": 1}}}]},
                                             "finishReason": "STOP"}], "usageMetadata": {"totalTokenCount": 3}})))["stream"]
    assert gemini["text"] == "" and gemini["toolCalls"] == [{"name": "f", "arguments": '{"x":1}'}]
    assert run('{"a":[1,2]}', "application/json") == {"kind": "json", "text": '{\n  "a": [\n    1,\n    2\n  ]\n}'}
    assert run("plain words", "text/plain") == {"kind": "text", "text": "plain words"}
    assert run("", "application/json")["kind"] == "empty"
