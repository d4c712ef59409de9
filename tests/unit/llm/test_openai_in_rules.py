"""``llm_translate/openai_in.read_chat`` in-process (issue 35): every field of a full OpenAI chat request
read into ``Chat``, and each refusal with the exact path and words the client sees (the translator
tests go through a provider and look at one field of the result; mutation testing found the rest)."""

from __future__ import annotations

import pytest

from trioproxy.llm.translate.errors import TranslationError
from trioproxy.llm.translate.openai_in import Chat, Image, Text, Tool, ToolCall, ToolResult, Turn, read_chat

USER = {"role": "user", "content": "hi"}


def test_a_full_request_is_read_field_by_field():
    chat = read_chat({
        "model": "m", "max_completion_tokens": 7, "max_tokens": 9, "stop": "END", "stream": True,
        "stream_options": {"include_usage": True}, "temperature": 0.5, "top_p": 1, "user": "u", "seed": 4,
        "tool_choice": {"type": "function", "function": {"name": "f"}}, "parallel_tool_calls": False,
        "n": 1, "logprobs": False, "frequency_penalty": 0, "presence_penalty": 0.0, "store": False,
        "response_format": {"type": "text"}, "modalities": ["text"], "metadata": {},
        "tools": [{"type": "function", "function": {"name": "f", "description": "d", "strict": True}},
                  {"type": "function", "function": {"name": "g", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "system", "content": "s1"},
            {"role": "developer", "content": [{"type": "text", "text": "s2"}, {"type": "text", "text": "s3"}]},
            {"role": "user", "name": "ann", "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x/i.png", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
            {"role": "assistant", "content": "calling", "refusal": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
                {"function": {"name": "g"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "r1"},
            {"role": "tool", "tool_call_id": "zz", "content": [{"type": "text", "text": "r2"}]},
            {"role": "user", "content": "and?"},
            {"role": "assistant", "content": None},
        ]}, "anthropic", frozenset({"seed", "top_k"}))
    assert chat == Chat(
        model="m", system=["s1", "s2s3"], max_tokens=7, temperature=0.5, top_p=1, stop=["END"], stream=True,
        include_usage=True, tool_choice="function:f", parallel_tool_calls=False, user="u", extra={"seed": 4},
        tools=[Tool("f", "d", {"type": "object", "properties": {}}), Tool("g", None, {"type": "object"})],
        turns=[
            Turn("user", [Text("look"), Image("messages[2].content[1].image_url.url", url="https://x/i.png"),
                          Image("messages[2].content[2].image_url.url", media_type="image/png", data="AAAA")]),
            Turn("assistant", [Text("calling"), ToolCall("c1", "f", {"a": 1}), ToolCall("call_3_1", "g", {})]),
            Turn("user", [ToolResult("messages[4]", "c1", "f", "r1"), ToolResult("messages[5]", "zz", None, "r2"),
                          Text("and?")]),
            Turn("assistant", [Text("")]),
        ])


def test_defaults_of_a_minimal_request():
    chat = read_chat({"messages": [USER], "max_tokens": 9, "stream_options": {"include_usage": "yes"},
                      "tool_choice": "none"}, "gemini")
    assert chat == Chat(model=None, system=[], turns=[Turn("user", [Text("hi")])], max_tokens=9, temperature=None,
                        top_p=None, stop=[], stream=False, include_usage=False, tools=[], tool_choice="none",
                        parallel_tool_calls=None, user=None, extra={})
    for choice in ("auto", "required"):
        assert read_chat({"messages": [USER], "tool_choice": choice}, "gemini").tool_choice == choice
    assert read_chat({"messages": [USER], "stop": ["a", "b"]}, "gemini").stop == ["a", "b"]
    assert read_chat({"messages": [USER], "stream": False}, "gemini").stream is False


@pytest.mark.parametrize(("request_", "text"), [
    ({"messages": []}, "messages: an empty or missing list"),
    ({"model": "m"}, "messages: an empty or missing list"),
    ({"messages": [USER], "model": 3}, "model: a int"),
    ({"messages": [USER], "stream": 1}, "stream: a int"),
    ({"messages": [USER], "max_tokens": True}, "max_tokens: a bool"),
    ({"messages": [USER], "stop": ["a", 1]}, "stop: a list that is not all strings"),
    ({"messages": [USER], "tool_choice": "maybe"}, 'tool_choice: "maybe"'),
    ({"messages": [USER], "tool_choice": {"type": "function", "function": {}}},
     'tool_choice: {"type": "function", "function": {}}'),
    ({"messages": [USER], "tool_choice": {"type": "other", "function": {"name": "f"}}},
     'tool_choice: {"type": "other", "function": {"name": "f"}}'),
    ({"messages": [USER], "tools": [{"type": "web", "function": {"name": "x"}}]}, "tools[0].type: tool type 'web'"),
    ({"messages": [USER], "tools": [{"type": "function", "function": {"description": "d"}}]},
     "tools[0].function.name: a missing name"),
    ({"messages": [USER], "tools": [{"type": "function", "function": {"name": "f", "x": 1}}]},
     "tools[0].function.x: 'x'"),
    ({"messages": [USER], "tools": [{"type": "function", "function": {"name": "f"}, "x": 1}]}, "tools[0].x: 'x'"),
    ({"messages": [USER], "seed": 3}, "seed: the field 'seed'"),
    ({"messages": [USER], "n": 2}, "n: the field 'n'"),
    ({"messages": ["hi"]}, "messages[0]: a message that is not an object"),
    ({"messages": [USER, {"role": "system", "content": "s"}]},
     "messages[1].role: a system message after the conversation started"),
    ({"messages": [USER, {"role": "developer", "content": "s"}]},
     "messages[1].role: a developer message after the conversation started"),
    ({"messages": [{"role": "system", "content": "s", "x": 1}]}, "messages[0].x: 'x'"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"type": "x", "function": {"name": "f"}}]}]},
     "messages[0].tool_calls[0].type: tool call type 'x'"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]},
     "messages[0].tool_calls[0].function.arguments: arguments that are not JSON"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}]},
     "messages[0].tool_calls[0].function.arguments: arguments that are not a JSON object"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "x": 1}}]}]},
     "messages[0].tool_calls[0].function.x: 'x'"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f"}, "x": 1}]}]},
     "messages[0].tool_calls[0].x: 'x'"),
    ({"messages": [{"role": "assistant", "content": "a", "x": 1}]}, "messages[0].x: 'x'"),
    ({"messages": [{"role": "tool", "content": "r"}]}, "messages[0].tool_call_id: a missing tool_call_id"),
    ({"messages": [{"role": "tool", "content": "r", "tool_call_id": "c", "x": 1}]}, "messages[0].x: 'x'"),
    ({"messages": [{"role": "robot", "content": "r"}]}, "messages[0].role: role 'robot'"),
    ({"messages": [{"role": "system", "content": [{"type": "image_url"}]}]},
     "messages[0].content[0].type: content type 'image_url' in this message"),
    ({"messages": [{"role": "system", "content": [{"type": "text", "text": "a", "y": 2}]}]},
     "messages[0].content[0].y: 'y'"),
    ({"messages": [{"role": "user"}]}, "messages[0].content: a missing content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}]},
     "messages[0].content[0].image_url.url: an image URL that is neither http(s) nor a base64 data: URL"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x", "z": 1}}]}]},
     "messages[0].content[0].image_url.z: 'z'"),
    ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0].type: content type 'audio'"),
    ({"messages": [{"role": "user", "content": "hi", "x": 1}]}, "messages[0].x: 'x'"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a", "y": 2}]}]},
     "messages[0].content[0].y: 'y'"),
])
def test_a_refusal_names_the_field_and_what_was_sent(request_, text):
    with pytest.raises(TranslationError) as raised:
        read_chat(request_, "gemini")
    assert raised.value.text == text + " cannot be translated to gemini"
    assert raised.value.field == text.partition(":")[0]


def message(**fields):
    return {"messages": [{"role": "user", "content": "hi", **fields}]}


def assistant(**fields):
    return {"messages": [{"role": "assistant", **fields}]}


def tool(**function):
    return {"messages": [USER], "tools": [{"type": "function", "function": {"name": "f", **function}}]}


@pytest.mark.parametrize(("request_", "text"), [
    ({"messages": "hi"}, "messages: a str"),
    ({"messages": [USER], "max_completion_tokens": "7"}, "max_completion_tokens: a str"),
    ({"messages": [USER], "stop": 5}, "stop: a int"),
    ({"messages": [USER], "stream_options": "x"}, "stream_options: a str"),
    ({"messages": [USER], "tool_choice": 5}, "tool_choice: a int"),
    ({"messages": [USER], "user": 5}, "user: a int"),
    ({"messages": [USER], "temperature": "hot"}, "temperature: a str"),
    ({"messages": [USER], "top_p": "x"}, "top_p: a str"),
    ({"messages": [USER], "tools": {}}, "tools: a dict"),
    ({"messages": [USER], "tools": [5]}, "tools: a int where an object is expected"),
    ({"messages": [USER], "parallel_tool_calls": "yes"}, "parallel_tool_calls: a str"),
    ({"messages": [USER], "tools": [{"type": 5}]}, "tools[0].type: a int"),
    ({"messages": [USER], "tools": [{"type": "function", "function": "f"}]}, "tools[0].function: a str"),
    (tool(name=5), "tools[0].function.name: a int"),
    (tool(description=5), "tools[0].function.description: a int"),
    (tool(parameters="x"), "tools[0].function.parameters: a str"),
    ({"messages": [{"role": 5}]}, "messages[0].role: a int"),
    (message(content=5), "messages[0].content: a int"),
    (message(content=[5]), "messages[0].content: a int where an object is expected"),
    (message(content=[{"type": 5}]), "messages[0].content[0].type: a int"),
    (message(content=[{"type": "text", "text": 5}]), "messages[0].content[0].text: a int"),
    (message(content=[{"type": "image_url", "image_url": "x"}]), "messages[0].content[0].image_url: a str"),
    (message(content=[{"type": "image_url", "image_url": {"url": 5}}]), "messages[0].content[0].image_url.url: a int"),
    ({"messages": [{"role": "system", "content": [5]}]}, "messages[0].content: a int where an object is expected"),
    ({"messages": [{"role": "system", "content": [{"type": 5}]}]}, "messages[0].content[0].type: a int"),
    ({"messages": [{"role": "system", "content": [{"type": "text", "text": 5}]}]}, "messages[0].content[0].text: a int"),
    (assistant(tool_calls={}), "messages[0].tool_calls: a dict"),
    (assistant(tool_calls=[5]), "messages[0].tool_calls: a int where an object is expected"),
    (assistant(tool_calls=[{"type": 5}]), "messages[0].tool_calls[0].type: a int"),
    (assistant(tool_calls=[{"function": "f"}]), "messages[0].tool_calls[0].function: a str"),
    (assistant(tool_calls=[{"function": {"name": 5}}]), "messages[0].tool_calls[0].function.name: a int"),
    (assistant(tool_calls=[{"function": {"arguments": {}}}]), "messages[0].tool_calls[0].function.arguments: a dict"),
    (assistant(tool_calls=[{"id": 5, "function": {}}]), "messages[0].tool_calls[0].id: a int"),
    ({"messages": [{"role": "tool", "tool_call_id": 5}]}, "messages[0].tool_call_id: a int"),
])
def test_a_field_of_the_wrong_type_is_refused_in_the_openai_dialect(request_, text):
    with pytest.raises(TranslationError) as raised:
        read_chat(request_, "bedrock")
    assert raised.value.text == text + " cannot be translated to bedrock"
    assert raised.value.dialect == "openai" and raised.value.provider == "bedrock"


def test_empty_texts_names_and_results_stay_empty():
    chat = read_chat({"messages": [
        {"role": "system", "content": ""},
        {"role": "user", "content": [{"type": "text"}, {"type": "image_url", "image_url": {"url": "http://x/i"}}]},
        {"role": "assistant", "refusal": "no", "content": [{"type": "text", "text": "a"}, {"type": "text"}],
         "tool_calls": [{"function": {}}]},
        {"role": "tool", "tool_call_id": "call_2_0"},
    ]}, "gemini")
    assert chat.system == [""] and chat.tool_choice is None
    assert chat.turns == [
        Turn("user", [Text(""), Image("messages[1].content[1].image_url.url", url="http://x/i")]),
        Turn("assistant", [Text("a"), ToolCall("call_2_0", "", {})]),
        Turn("user", [ToolResult("messages[3]", "call_2_0", "", "")]),
    ]
