"""The official ``anthropic`` SDK as the client of a gateway in front of the strict mock provider
(docs/llm-providers.md): Messages (sync, async, streamed) charge what the SDK reports, cached input
tokens included; ``count_tokens`` reaches its own endpoint and is not a billed generation; the
gateway's own errors are Anthropic's error JSON, so the SDK raises its typed errors."""

from __future__ import annotations

import anthropic
import pytest
import trio

from tests.llm_sdk_helpers import start_llm_gateway

HELLO = [{"role": "user", "content": "hello there claude"}]


def sync_client(url: str, prefix: str = "/anthropic", key: str = "sk-client") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=f"{url}{prefix}", api_key=key, max_retries=0, timeout=10)


def async_client(url: str, prefix: str = "/anthropic", key: str = "sk-client") -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=f"{url}{prefix}", api_key=key, max_retries=0, timeout=10)


async def test_messages_sync_and_async_charge_what_the_sdk_reports_cache_reads_included(nursery):
    gw = await start_llm_gateway(nursery)
    client = sync_client(gw.url)
    message = await trio.to_thread.run_sync(lambda: client.messages.create(
        model="claude-mock-1", max_tokens=64, messages=HELLO, extra_headers={"x-mock-cached-tokens": "7"}))
    assert message.content[0].text == "hello there claude"
    usage = message.usage
    assert usage.cache_read_input_tokens == 7
    assert usage.input_tokens + usage.output_tokens + 7 == await gw.charged("anthropic")
    message = await async_client(gw.url).messages.create(model="claude-mock-1", max_tokens=64, messages=HELLO)
    assert message.usage.input_tokens + message.usage.output_tokens == await gw.charged("anthropic")
    seen = gw.mock.messages_requests[0]
    assert seen.header("x-api-key") == "sk-ant-test" and seen.header("authorization") is None
    tokens = await gw.metric("trioproxy_gen_ai_client_token_usage", "_sum")
    assert {(labels["gen_ai_token_type"], labels["gen_ai_system"], labels["gen_ai_operation_name"]): value
            for labels, value in tokens if labels["gen_ai_token_type"] == "cached_input"} == {
        ("cached_input", "anthropic", "chat"): 7.0}


async def test_streams_charge_what_the_final_message_reports(nursery):
    gw = await start_llm_gateway(nursery)
    client = sync_client(gw.url)

    def stream() -> anthropic.types.Message:
        with client.messages.stream(model="claude-mock-1", max_tokens=64, messages=HELLO,
                                    extra_headers={"x-mock-total-tokens": "22"}) as events:
            assert "".join(events.text_stream) == "hello there claude"
            return events.get_final_message()

    final = await trio.to_thread.run_sync(stream)
    assert final.usage.input_tokens + final.usage.output_tokens == 22 == await gw.charged("anthropic")
    events = await async_client(gw.url).messages.create(model="claude-mock-1", max_tokens=64, messages=HELLO,
                                                        stream=True, extra_headers={"x-mock-total-tokens": "10"})
    kinds = [event.type async for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert await gw.charged("anthropic") == 10
    assert all("stream_options" not in r.json for r in gw.mock.messages_requests)
    first_token = await gw.metric("trioproxy_gen_ai_server_time_to_first_token")
    assert [(labels["gen_ai_system"], value) for labels, value in first_token] == [("anthropic", 2.0)]
    per_token = await gw.metric("trioproxy_gen_ai_server_time_per_output_token")
    assert [value for _, value in per_token] == [2.0]


async def test_count_tokens_reaches_its_endpoint_and_is_not_charged(nursery):
    gw = await start_llm_gateway(nursery)
    count = await async_client(gw.url).messages.count_tokens(model="claude-mock-1", messages=HELLO)
    assert count.input_tokens == 3
    assert await gw.charged("anthropic") == 0
    assert [r.path for r in gw.mock.requests if r.method == "POST"] == ["/v1/messages/count_tokens"]
    assert gw.mock.messages_requests == []  # no billed generation
    durations = await gw.metric("trioproxy_gen_ai_server_request_duration")
    assert [labels["gen_ai_operation_name"] for labels, _ in durations] == ["count_tokens", "list_models"]
    client = sync_client(gw.url)
    assert await trio.to_thread.run_sync(lambda: [m.id for m in client.models.list()]) == ["mock-model"]


async def test_gateway_errors_are_anthropic_errors_with_their_message(nursery):
    gw = await start_llm_gateway(nursery)
    small = async_client(gw.url, "/claude-small")
    await small.messages.create(model="m", max_tokens=8, messages=HELLO, extra_headers={"x-mock-total-tokens": "50"})
    with pytest.raises(anthropic.RateLimitError) as limited:
        await small.messages.create(model="m", max_tokens=8, messages=HELLO)
    assert limited.value.status_code == 429 and limited.value.message.endswith("rate limit exceeded'}}")
    assert limited.value.body == {"type": "error", "error": {"type": "rate_limit_error",
                                                             "message": "rate limit exceeded"}}
    with pytest.raises(anthropic.RateLimitError):  # count_tokens speaks the same dialect
        await small.messages.count_tokens(model="m", messages=HELLO)
    with pytest.raises(anthropic.AuthenticationError) as auth:
        await async_client(gw.url, "/claude-keyed", key="sk-bad").messages.create(
            model="m", max_tokens=8, messages=HELLO)
    assert auth.value.body["error"]["message"].startswith("api key authentication failure")
    with pytest.raises(anthropic.InternalServerError) as down:
        sync = sync_client(gw.url, "/claude-down")
        await trio.to_thread.run_sync(lambda: sync.messages.create(model="m", max_tokens=8, messages=HELLO))
    assert down.value.status_code == 503 and down.value.body["error"]["type"] == "overloaded_error"
