"""Translation and the endpoint kinds together (the llm and translate work merged): the kind of the
request's path decides whether a request is translated; bedrock refuses every kind it cannot take,
the unread ones (models, passthrough) included, in the dialect of that kind; the gateway's dialect
errors leave a TranslationError's own JSON body alone; the Anthropic->OpenAI translation asks for
stream usage only where the provider takes the option."""

from __future__ import annotations

import json

import anthropic
import pytest
import trio

from fixtures.mock_bedrock import ACCESS_KEY, REGION, SECRET_KEY, MockBedrock
from fixtures.mock_openai import MockOpenAI
from tests.e2e.test_llm_translate_gateway import serve
from trioproxy.errors import error_response
from trioproxy.llm.translate import AnthropicToOpenAI, TranslationError, client_dialect, translation_for


@pytest.mark.parametrize(("path", "dialect"), [
    ("/v1/chat/completions", "openai"), ("/openai/v1/chat/completions/", "openai"), ("/v1/messages", "anthropic"),
    ("/v1/messages/count_tokens", "other"), ("/v1/embeddings", "other"), ("/v1/responses", "other"),
    ("/v1/models", "other"), ("/v1/files", "other"),
    ("/", "other"), ("/chat", "other"),  # a gateway path: the provider's main endpoint, in its own dialect
])
def test_the_endpoint_kind_of_the_path_is_the_clients_dialect(path, dialect):
    assert client_dialect(path) == dialect


@pytest.mark.parametrize("provider", ["openAI", "azure", "gemini", "vertex", "groq", "mistral", "vllm"])
def test_anthropic_clients_are_translated_to_every_openai_compatible_provider(provider):
    assert isinstance(translation_for(provider, "/v1/messages"), AnthropicToOpenAI)
    assert translation_for(provider, "/v1/chat/completions") is None
    assert translation_for(provider, "/v1/embeddings") is None


def test_stream_usage_is_asked_only_of_providers_that_take_the_option():
    body = json.dumps({"model": "m", "max_tokens": 5, "stream": True,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()
    asked = translation_for("openAI", "/v1/messages")
    unasked = translation_for("mistral", "/v1/messages", stream_usage_option=False)
    assert asked is not None and unasked is not None
    assert json.loads(asked.request(body).body)["stream_options"] == {"include_usage": True}
    assert "stream_options" not in json.loads(unasked.request(body).body)


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_a_translation_error_is_not_wrapped_again_in_the_routes_dialect(dialect):
    error = TranslationError("top_k", "the field 'top_k'", "openAI", dialect)
    status, headers, body = error_response(error, dialect)
    assert status == 400 and (b"content-type", b"application/json") in headers
    assert body == error.message.encode()
    parsed = json.loads(body)
    message = parsed["error"]["message"]
    assert message == "top_k: the field 'top_k' cannot be translated to openAI"
    if dialect == "openai":
        assert parsed["error"]["param"] == "top_k" and parsed["error"]["code"] == "untranslatable"


async def test_bedrock_refuses_every_kind_but_chat_in_that_kinds_dialect(nursery, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    mock = MockBedrock()
    gw = await serve(nursery, mock, f"{{bedrock: {{region: {REGION}}}}}")
    async with gw.client() as client:
        models = await client.get("/v1/models")  # the models kind: its body is never read
        files = await client.get("/v1/files")  # passthrough
        responses = await client.post("/v1/responses", json={"model": "m", "input": "hi"})
        count = await client.post("/v1/messages/count_tokens", json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}]})
    for response, path in ((models, "/v1/models"), (files, "/v1/files"), (responses, "/v1/responses")):
        assert response.status_code == 400, path
        assert response.json()["error"] == {
            "message": f"path: a request to {path} cannot be translated to bedrock",
            "type": "invalid_request_error", "param": "path", "code": "untranslatable"}
    assert count.status_code == 400 and count.json() == {"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "path: a request to /v1/messages/count_tokens cannot be translated to bedrock"}}
    assert mock.requests == []


async def test_anthropic_sdk_to_a_preset_keeps_its_chat_path_and_takes_no_stream_option(nursery):
    mock = MockOpenAI()
    gw = await serve(nursery, mock, "{mistral: {}}", "          pathOverride: /mistral/{model}/chat/completions")

    def run():
        client = anthropic.Anthropic(api_key="sk-client", base_url=gw.url, max_retries=0, timeout=10)
        with client.messages.stream(model="small", max_tokens=100,
                                    messages=[{"role": "user", "content": "one two"}]) as stream:
            return stream.get_final_message()

    message = await trio.to_thread.run_sync(run)
    assert message.content[0].text == "one two"
    (seen,) = mock.requests
    assert seen.path == "/mistral/small/chat/completions"  # pathOverride with the model filled in
    assert seen.json["stream"] is True and "stream_options" not in seen.json  # Mistral refuses the option
    assert "max_completion_tokens" not in seen.json and seen.json["max_tokens"] == 100
