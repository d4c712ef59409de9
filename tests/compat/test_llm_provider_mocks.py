"""The strict provider mocks answer the official SDKs (so they speak the real APIs) and refuse what the
real APIs refuse (so a translator's mistake is a failure, not a lenient 200)."""

from __future__ import annotations

import anthropic
import httpx
import trio
from google import genai
from google.genai import types

from fixtures._mock_llm import running
from fixtures.mock_anthropic import MockAnthropic
from fixtures.mock_gemini import MockGemini


async def test_anthropic_mock_answers_the_anthropic_sdk():
    async with running(MockAnthropic()) as mock:
        def call():
            client = anthropic.Anthropic(api_key="k", base_url=f"http://127.0.0.1:{mock.port}", max_retries=0)
            whole = client.messages.create(model="claude-x", max_tokens=50,
                                           messages=[{"role": "user", "content": "hello there"}])
            tools = [{"name": "get", "input_schema": {"type": "object"}}]
            with client.messages.stream(model="claude-x", max_tokens=50, tools=tools,
                                        messages=[{"role": "user", "content": "weather"}]) as stream:
                streamed = stream.get_final_message()
            return whole, streamed
        whole, streamed = await trio.to_thread.run_sync(call)
    assert whole.content[0].text == "hello there" and whole.stop_reason == "end_turn"
    assert streamed.content[0].type == "tool_use" and streamed.content[0].input == {"q": "weather"}


async def test_anthropic_mock_is_strict():
    async with running(MockAnthropic()) as mock:
        url = f"http://127.0.0.1:{mock.port}/v1/messages"
        headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
        message = [{"role": "user", "content": "hi"}]
        async with httpx.AsyncClient() as client:
            missing = await client.post(url, headers=headers, json={"model": "m", "messages": message})
            unknown = await client.post(url, headers=headers, json={"model": "m", "max_tokens": 5, "messages": message,
                                                                    "stream_options": {}})
            nested = await client.post(url, headers=headers, json={"model": "m", "max_tokens": 5, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "x", "detail": "y"}]}]})
            unanswered = await client.post(url, headers=headers, json={"model": "m", "max_tokens": 5, "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
                {"role": "user", "content": "y"}]})
    assert missing.status_code == 400 and missing.json()["error"]["message"] == "max_tokens: Field required"
    assert unknown.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "stream_options: Extra inputs are not permitted"}}
    assert nested.json()["error"]["message"] == "messages.0.content.0.detail: Extra inputs are not permitted"
    assert unanswered.status_code == 400 and "without `tool_result`" in unanswered.json()["error"]["message"]


async def test_gemini_mock_answers_the_google_genai_sdk():
    async with running(MockGemini()) as mock:
        def call():
            client = genai.Client(api_key="k", http_options=types.HttpOptions(
                base_url=f"http://127.0.0.1:{mock.port}", api_version="v1beta"))
            config = types.GenerateContentConfig(system_instruction="be brief", max_output_tokens=20, temperature=0.2)
            whole = client.models.generate_content(model="gemini-x", contents="hello there", config=config)
            streamed = list(client.models.generate_content_stream(model="gemini-x", contents="one two"))
            tool = types.Tool(function_declarations=[types.FunctionDeclaration(
                name="get", parameters_json_schema={"type": "object"})])
            called = client.models.generate_content(model="gemini-x", contents="weather",
                                                    config=types.GenerateContentConfig(tools=[tool]))
            return whole, streamed, called
        whole, streamed, called = await trio.to_thread.run_sync(call)
    assert whole.text == "hello there" and whole.usage_metadata.total_token_count > 0
    assert "".join(r.text for r in streamed) == "one two"
    assert called.function_calls[0].name == "get" and called.function_calls[0].args == {"q": "weather"}


async def test_gemini_mock_is_strict():
    async with running(MockGemini()) as mock:
        url = f"http://127.0.0.1:{mock.port}/v1beta/models/g:generateContent"
        contents = [{"role": "user", "parts": [{"text": "hi"}]}]
        async with httpx.AsyncClient(headers={"x-goog-api-key": "k"}) as client:
            top = await client.post(url, json={"contents": contents, "max_tokens": 5})
            nested = await client.post(url, json={"contents": contents, "generationConfig": {"max_tokens": 5}})
            part = await client.post(url, json={"contents": [{"role": "user", "parts": [{"image_url": "x"}]}]})
            role = await client.post(url, json={"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]})
            nokey = await httpx.AsyncClient().post(url, json={"contents": contents})
    assert top.status_code == 400 and 'Unknown name "max_tokens"' in top.json()["error"]["message"]
    assert nested.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert 'Unknown name "max_tokens"' in nested.json()["error"]["message"]
    assert 'Unknown name "image_url"' in part.json()["error"]["message"]
    assert role.status_code == 400 and nokey.status_code == 403
