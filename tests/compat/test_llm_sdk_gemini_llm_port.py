"""google-genai against an ``llm:`` port: the model named in a Gemini-native path (the body has none)
chooses the ``llm.models`` entry, whose ``params.model`` replaces it upstream; an unknown model is the
gateway's 404 in Gemini's error JSON, a typed ``errors.ClientError`` (docs/llm-providers.md)."""

from __future__ import annotations

import pytest
import trio
from google import genai
from google.genai import errors, types

from fixtures.mock_gemini import MockGemini
from tests.conftest import free_port, start_gateway

LLM = """
llm:
  port: {port}
  models:
  - name: gemini-fast
    provider: gemini
    params: {{hostOverride: "127.0.0.1:{mock}", model: gemini-2.5-flash, apiKey: sk-gemini}}
  - name: "google/*"
    provider: gemini
    params: {{hostOverride: "127.0.0.1:{mock}", apiKey: sk-gemini}}
    transformation: {{model: 'llmRequest.model.stripPrefix("google/")'}}
"""


async def test_the_model_in_the_path_chooses_the_entry_and_an_unknown_one_is_a_gemini_404(nursery):
    mock = MockGemini()
    await nursery.start(mock.serve, 0)
    gw = await start_gateway(nursery, LLM, port=free_port(), mock=mock.port)
    client = genai.Client(api_key="client-key", http_options=types.HttpOptions(
        base_url=gw.url, timeout=10_000, retry_options=types.HttpRetryOptions(attempts=1)))

    def run():
        fast = client.models.generate_content(model="gemini-fast", contents="hello there")
        streamed = list(client.models.generate_content_stream(model="google/gemini-2.5-pro", contents="one two"))
        with pytest.raises(errors.ClientError) as unknown:
            client.models.generate_content(model="gpt-4o", contents="x")
        return fast, streamed, unknown.value

    fast, streamed, unknown = await trio.to_thread.run_sync(run)
    assert fast.text == "hello there" and "".join(c.text or "" for c in streamed) == "one two"
    first, second = mock.requests
    assert first.path == "/v1/models/gemini-2.5-flash:generateContent" and first.header("x-goog-api-key") == "sk-gemini"
    assert first.json == {"contents": [{"parts": [{"text": "hello there"}], "role": "user"}]}  # no model added
    assert second.path == "/v1/models/gemini-2.5-pro:streamGenerateContent"
    assert (unknown.code, unknown.status, unknown.message) == (404, "NOT_FOUND", "Model not found")
