"""The official ``openai`` SDK as the client of a gateway in front of the strict mock provider
(docs/llm-providers.md): every endpoint it calls reaches the provider's endpoint of that kind, the
tokens it reports are what the token budget charged, the usage chunk the gateway asked for is
not seen by a client that did not ask, and the gateway's own errors are typed SDK errors with
their message."""

from __future__ import annotations

import openai
import pytest
import trio

from tests.llm_sdk_helpers import start_llm_gateway

HELLO = [{"role": "user", "content": "hello there gateway"}]


def sync_client(url: str, prefix: str = "/openai", key: str = "sk-client") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}{prefix}/v1", api_key=key, max_retries=0, timeout=10)


def async_client(url: str, prefix: str = "/openai", key: str = "sk-client") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{url}{prefix}/v1", api_key=key, max_retries=0, timeout=10)


async def test_chat_sync_and_async_report_the_tokens_charged(nursery):
    gw = await start_llm_gateway(nursery)
    client = sync_client(gw.url)
    completion = await trio.to_thread.run_sync(lambda: client.chat.completions.create(
        model="gpt-4o-mini", messages=HELLO, extra_headers={"x-mock-total-tokens": "30"}))
    assert completion.choices[0].message.content == "hello there gateway"
    assert completion.usage is not None and completion.usage.total_tokens == 30 == await gw.charged()
    completion = await async_client(gw.url).chat.completions.create(model="gpt-4o-mini", messages=HELLO)
    assert completion.usage is not None and completion.usage.total_tokens == await gw.charged() > 0
    assert gw.mock.chat_requests[0].header("authorization") == "Bearer sk-openai-test"
    tokens = await gw.metric("trioproxy_gen_ai_client_token_usage", "_sum")
    labels, value = next((labels, value) for labels, value in tokens if labels["gen_ai_token_type"] == "input")
    assert value == completion.usage.prompt_tokens + 15
    assert (labels["gen_ai_operation_name"], labels["gen_ai_system"], labels["gen_ai_request_model"],
            labels["gen_ai_response_model"]) == ("chat", "openai", "gpt-4o-mini", "gpt-4o-mini")
    assert labels["listener"].endswith("/listener0") and labels["gateway"] == "default/default"


async def test_the_tutorial_stream_loop_sees_no_usage_chunk_and_the_tokens_are_charged(nursery):
    gw = await start_llm_gateway(nursery)
    client = sync_client(gw.url)

    def tutorial_loop() -> str:
        stream = client.chat.completions.create(model="gpt-4o-mini", messages=HELLO, stream=True,
                                                extra_headers={"x-mock-total-tokens": "24"})
        text = ""
        for chunk in stream:  # IndexError on an added usage-only chunk (choices == [])
            text += chunk.choices[0].delta.content or ""
            assert chunk.usage is None and "usage" not in chunk.model_fields_set
        return text

    assert await trio.to_thread.run_sync(tutorial_loop) == "hello there gateway"
    assert gw.mock.chat_requests[0].json["stream_options"] == {"include_usage": True}  # asked upstream
    assert await gw.charged() == 24

    stream = await async_client(gw.url).chat.completions.create(model="m", messages=HELLO, stream=True)
    chunks = [chunk async for chunk in stream]
    assert all(chunk.choices for chunk in chunks) and await gw.charged() > 0


async def test_a_client_that_asks_for_stream_usage_gets_it_and_it_is_what_was_charged(nursery):
    gw = await start_llm_gateway(nursery)
    client = sync_client(gw.url)

    def stream_usage() -> int:
        stream = client.chat.completions.create(model="m", messages=HELLO, stream=True,
                                                stream_options={"include_usage": True},
                                                extra_headers={"x-mock-total-tokens": "18"})
        chunks = list(stream)
        assert chunks[-1].choices == [] and chunks[-1].usage is not None
        return chunks[-1].usage.total_tokens

    assert await trio.to_thread.run_sync(stream_usage) == 18 == await gw.charged()


async def test_responses_api_json_and_stream_without_stream_options(nursery):
    gw = await start_llm_gateway(nursery)
    client = async_client(gw.url)
    response = await client.responses.create(model="gpt-4.1", input="hello responses",
                                             extra_headers={"x-mock-total-tokens": "14"})
    assert response.output_text == "hello responses"
    assert response.usage is not None and response.usage.total_tokens == 14 == await gw.charged()
    stream = await client.responses.create(model="gpt-4.1", input="hello streamed responses", stream=True,
                                           extra_headers={"x-mock-total-tokens": "16"})
    events = [event async for event in stream]
    assert events[-1].type == "response.completed"
    assert events[-1].response.usage is not None and events[-1].response.usage.total_tokens == 16
    assert await gw.charged() == 16
    sent = [r.json for r in gw.mock.requests if r.path == "/v1/responses"]
    assert len(sent) == 2 and all("stream_options" not in body for body in sent)  # OpenAI would refuse it


async def test_embeddings_reach_the_embeddings_endpoint_and_charge_prompt_tokens(nursery):
    gw = await start_llm_gateway(nursery)
    client = sync_client(gw.url)
    result = await trio.to_thread.run_sync(lambda: client.embeddings.create(
        model="text-embedding-3-small", input=["one two three", "four"]))
    assert [d.embedding for d in result.data] == [[0.25, -0.5, 1.0]] * 2  # base64 float32, decoded by the SDK
    assert result.usage.prompt_tokens == 4 == await gw.charged()
    [seen] = [r for r in gw.mock.requests if r.path == "/v1/embeddings"]
    assert seen.json["encoding_format"] == "base64" and seen.json["model"] == "text-embedding-3-small"
    tokens = await gw.metric("trioproxy_gen_ai_client_token_usage", "_sum")
    assert [(labels["gen_ai_operation_name"], value) for labels, value in tokens
            if labels["gen_ai_token_type"] == "input"] == [("embeddings", 4.0)]


async def test_models_and_files_pass_through(nursery):
    gw = await start_llm_gateway(nursery)
    client = async_client(gw.url)
    assert [m.id async for m in client.models.list()] == ["mock-model"]
    assert [f async for f in client.files.list()] == []
    assert {r.path for r in gw.mock.requests} == {"/v1/models", "/v1/files"}
    durations = await gw.metric("trioproxy_gen_ai_server_request_duration")
    assert {labels["gen_ai_operation_name"] for labels, _ in durations} == {"list_models", "passthrough"}


async def test_a_file_upload_larger_than_the_llm_buffer_streams_through(nursery):
    gw = await start_llm_gateway(nursery)
    data = b'{"custom_id": "r1"}\n' * (3 * 1024 * 1024 // 20)  # above maxBufferSize (2 MiB): not buffered
    uploaded = await async_client(gw.url).files.create(file=("batch.jsonl", data), purpose="batch")
    [seen] = [r for r in gw.mock.requests if r.method == "POST"]
    assert seen.path == "/v1/files" and uploaded.bytes == len(seen.body) > len(data)  # multipart around it


async def test_token_budget_429_is_a_rate_limit_error_with_its_message(nursery):
    gw = await start_llm_gateway(nursery)
    client = sync_client(gw.url, "/small")
    await trio.to_thread.run_sync(lambda: client.chat.completions.create(
        model="m", messages=HELLO, extra_headers={"x-mock-total-tokens": "50"}))
    with pytest.raises(openai.RateLimitError) as info:
        await trio.to_thread.run_sync(lambda: client.chat.completions.create(model="m", messages=HELLO))
    assert info.value.status_code == 429
    assert "rate limit exceeded" in info.value.message
    assert info.value.body == {"message": "rate limit exceeded", "type": "rate_limit_error", "param": None,
                               "code": "rate_limited"}
    with pytest.raises(openai.RateLimitError):  # streaming too
        await async_client(gw.url, "/small").chat.completions.create(model="m", messages=HELLO, stream=True)


async def test_gateway_401_and_503_are_typed_errors(nursery):
    gw = await start_llm_gateway(nursery)
    with pytest.raises(openai.AuthenticationError) as auth:
        await async_client(gw.url, "/keyed", key="sk-bad").chat.completions.create(model="m", messages=HELLO)
    assert auth.value.status_code == 401 and auth.value.body["message"].startswith("api key authentication failure")
    ok = await async_client(gw.url, "/keyed", key="sk-good").chat.completions.create(model="m", messages=HELLO)
    assert ok.choices[0].message.content == "hello there gateway"
    with pytest.raises(openai.InternalServerError) as down:
        await async_client(gw.url, "/down").embeddings.create(model="e", input="x")
    assert down.value.status_code == 503 and down.value.body["message"].startswith("upstream connect error")
