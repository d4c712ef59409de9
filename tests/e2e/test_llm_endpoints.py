"""LLM endpoints per provider (docs/llm-providers.md): the request path picks the endpoint kind, and
without hostOverride (a real deployment, whose hosts tests cannot reach) each kind goes to the
provider's path for it; what ``stream_options.include_usage`` adds is stripped; cached and
reasoning tokens are read; the gateway's errors on LLM routes are in the provider's dialect; an
``llm:`` port lists its models; spans carry the semantic conventions' names and values."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest
import trio

from fixtures.mock_openai import MockOpenAI
from tests.conftest import free_port, start_gateway
from tests.e2e.test_observability import OtlpReceiver, _attributes
from trioproxy.config.loader import parse_config
from trioproxy.errors import (
    ApiKeyAuthenticationFailed,
    AuthorizationDenied,
    BackendUnreachable,
    DirectResponse,
    LlmRequestError,
    RateLimited,
    UpstreamTimeout,
    error_response,
)
from trioproxy.llm.providers import endpoint_kind
from trioproxy.llm.usage import UsageStripper, prepare_request_body, usage_from_response


def ai_backend(provider: str, extra: str = ""):
    text = f"binds:\n- port: 8080\n  listeners:\n  - routes:\n    - backends:\n      - ai: {{name: llm, provider: {provider}{extra}}}\n"
    return parse_config(text, env={}).binds[0].listeners[0].routes[0].backends[0]


@pytest.mark.parametrize(("path", "kind"), [
    ("/v1/chat/completions", "completions"), ("/openai/v1/chat/completions", "completions"),
    ("/v1/responses", "responses"), ("/v1/embeddings", "embeddings"), ("/v1/messages", "messages"),
    ("/v1/messages/count_tokens", "count_tokens"), ("/v1/models", "models"), ("/v1beta/openai/models", "models"),
    ("/v1/files", "passthrough"), ("/v1/batches/batch_1/cancel", "passthrough"), ("/v1/responses/resp_1", "passthrough"),
    ("/chat", "completions"), ("/", "completions"),  # a gateway path of the operator's choosing: as before
])
def test_the_path_picks_the_endpoint_kind(path, kind):
    assert endpoint_kind(path) == kind


# Without hostOverride: (provider config, client path) → (upstream host:port, upstream path; None keeps the client's).
@pytest.mark.parametrize(("provider", "path", "target", "upstream"), [
    ("{openAI: {}}", "/v1/chat/completions", "api.openai.com:443", "/v1/chat/completions"),
    ("{openAI: {}}", "/v1/responses", "api.openai.com:443", "/v1/responses"),
    ("{openAI: {}}", "/v1/embeddings", "api.openai.com:443", "/v1/embeddings"),
    ("{openAI: {}}", "/v1/models", "api.openai.com:443", "/v1/models"),
    ("{openAI: {}}", "/v1/files", "api.openai.com:443", None),
    ("{openAI: {}}", "/v1/batches", "api.openai.com:443", None),
    ("{anthropic: {}}", "/v1/messages", "api.anthropic.com:443", "/v1/messages"),
    ("{anthropic: {}}", "/v1/messages/count_tokens", "api.anthropic.com:443", "/v1/messages/count_tokens"),
    ("{anthropic: {}}", "/v1/models", "api.anthropic.com:443", "/v1/models"),
    ("{anthropic: {}}", "/v1/messages/batches", "api.anthropic.com:443", None),
    ("{gemini: {}}", "/v1/chat/completions", "generativelanguage.googleapis.com:443", "/v1beta/openai/chat/completions"),
    ("{gemini: {}}", "/v1/embeddings", "generativelanguage.googleapis.com:443", "/v1beta/openai/embeddings"),
    ("{gemini: {}}", "/v1/models", "generativelanguage.googleapis.com:443", "/v1beta/openai/models"),
    ("{vertex: {projectId: p1, region: us-central1}}", "/v1/chat/completions", "us-central1-aiplatform.googleapis.com:443",
     "/v1/projects/p1/locations/us-central1/endpoints/openapi/chat/completions"),
    ("{vertex: {projectId: p1}}", "/v1/embeddings", "aiplatform.googleapis.com:443",
     "/v1/projects/p1/locations/global/endpoints/openapi/embeddings"),
    ("{azure: {resourceName: acme}}", "/v1/embeddings", "acme.openai.azure.com:443", "/openai/v1/embeddings"),
    ("{azure: {resourceName: acme}}", "/v1/responses", "acme.openai.azure.com:443", "/openai/v1/responses"),
    ("{azure: {resourceName: acme, apiVersion: 2024-10-21, model: emb}}", "/v1/embeddings", "acme.openai.azure.com:443",
     "/openai/deployments/emb/embeddings?api-version=2024-10-21"),
    ("{groq: {}}", "/v1/chat/completions", "api.groq.com:443", "/openai/v1/chat/completions"),
    ("{mistral: {}}", "/v1/embeddings", "api.mistral.ai:443", "/v1/embeddings"),
    ("{deepseek: {}}", "/v1/chat/completions", "api.deepseek.com:443", "/v1/chat/completions"),
    ("{openrouter: {}}", "/v1/chat/completions", "openrouter.ai:443", "/api/v1/chat/completions"),
    ("{together: {}}", "/v1/models", "api.together.xyz:443", "/v1/models"),
    ("{ollama: {}}", "/v1/chat/completions", "localhost:11434", "/v1/chat/completions"),
    ("{vllm: {}}", "/v1/responses", "localhost:8000", "/v1/responses"),
])
def test_without_host_override_each_endpoint_goes_to_the_provider_path_for_it(provider, path, target, upstream):
    backend = ai_backend(provider)
    assert str(backend.target) == target
    assert (backend.tls is None) == target.startswith("localhost:")  # local servers: plain HTTP
    assert backend.ai.upstream_path(endpoint_kind(path)) == upstream


def test_path_override_wins_and_host_override_keeps_the_client_path():
    assert ai_backend("{openAI: {}}", ", pathOverride: /x").ai.upstream_path("embeddings") == "/x"
    assert ai_backend("{openAI: {}}", ", hostOverride: '127.0.0.1:1'").ai.upstream_path("embeddings") is None


def test_stream_usage_is_asked_only_of_chat_completions_of_providers_that_take_it():
    for provider, asked in (("{openAI: {}}", True), ("{anthropic: {}}", False), ("{mistral: {}}", False)):
        assert ai_backend(provider).ai.stream_usage_option is asked
    body = json.dumps({"model": "m", "input": "x", "stream": True}).encode()
    assert prepare_request_body(body, stream_usage_option=False)[0] is body  # untouched: Responses API
    _, info = prepare_request_body(json.dumps({"stream": True, "stream_options": {"include_usage": True}}).encode())
    assert info is not None and not info.usage_added  # the client asked: nothing to strip


# --- what include_usage adds, stripped -------------------------------------------------------------

def chunk(choices, usage="absent") -> dict:
    out = {"id": "c1", "object": "chat.completion.chunk", "choices": choices}
    if usage != "absent":
        out["usage"] = usage
    return out


def sse(*events: dict, end: bytes = b"\n\n") -> bytes:
    return b"".join(b"data: " + json.dumps(e, separators=(",", ":")).encode() + end for e in events) + b"data: [DONE]" + end


CONTENT = [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]
USAGE = {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}


@pytest.mark.parametrize("end", [b"\n\n", b"\r\n\r\n"])
def test_stripped_stream_is_the_stream_without_include_usage_at_any_chunking(end):
    upstream = sse(chunk(CONTENT, None), chunk([], USAGE), end=end)
    expected = sse(chunk(CONTENT), end=end)
    for size in (1, 2, 7, 64, len(upstream)):
        stripper = UsageStripper()
        out = b"".join(stripper.feed(upstream[i:i + size]) for i in range(0, len(upstream), size)) + stripper.finish()
        assert out == expected, size


def test_usage_riding_on_a_content_chunk_is_removed_and_other_streams_are_untouched():
    stripper = UsageStripper()
    out = stripper.feed(sse(chunk(CONTENT, USAGE))) + stripper.finish()
    assert out == sse(chunk(CONTENT))
    plain = sse(chunk(CONTENT), chunk([{"index": 0, "delta": {"content": "usage"}}]))
    stripper = UsageStripper()
    assert stripper.feed(plain) + stripper.finish() == plain


def test_cached_and_reasoning_tokens_are_read_per_api():
    chat = usage_from_response({"usage": {**USAGE, "prompt_tokens_details": {"cached_tokens": 2},
                                          "completion_tokens_details": {"reasoning_tokens": 1}}})
    assert chat is not None and (chat.cached_input_tokens, chat.reasoning_tokens, chat.total_tokens) == (2, 1, 4)
    responses = usage_from_response({"type": "response.completed", "response": {"model": "m", "usage": {
        "input_tokens": 5, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 6}, "total_tokens": 14}}})
    assert responses is not None and (responses.cached_input_tokens, responses.reasoning_tokens) == (4, 6)
    claude = usage_from_response({"usage": {"input_tokens": 3, "output_tokens": 5, "cache_read_input_tokens": 100,
                                            "cache_creation_input_tokens": 20}})
    assert claude is not None and claude.total_tokens == 128  # Anthropic's input_tokens leave the cached out
    assert usage_from_response({"input_tokens": 12}) is None  # count_tokens: no usage, no charge


# --- the gateway's errors in the dialect of the endpoint ----------------------------------------------

@pytest.mark.parametrize(("error", "status", "openai_type", "code", "anthropic_type"), [
    (RateLimited(), 429, "rate_limit_error", "rate_limited", "rate_limit_error"),
    (ApiKeyAuthenticationFailed("no key"), 401, "authentication_error", "api_key_authentication_failed",
     "authentication_error"),
    (AuthorizationDenied(), 403, "permission_error", "authorization_denied", "permission_error"),
    (LlmRequestError(404, "Model not found", "model_not_found"), 404, "invalid_request_error", "model_not_found",
     "not_found_error"),
    (BackendUnreachable("no backend available for route r"), 503, "server_error", "backend_unreachable",
     "overloaded_error"),
    (UpstreamTimeout(), 504, "timeout_error", "upstream_timeout", "timeout_error"),
])
def test_error_json_per_dialect(error, status, openai_type, code, anthropic_type):
    got_status, headers, body = error_response(error, "openai")
    assert got_status == status and (b"content-type", b"application/json") in headers
    assert json.loads(body) == {"error": {"message": error.message, "type": openai_type, "param": None, "code": code}}
    _, _, body = error_response(error, "anthropic")
    assert json.loads(body) == {"type": "error", "error": {"type": anthropic_type, "message": error.message}}


def test_plain_routes_keep_text_and_direct_responses_keep_their_body():
    assert error_response(RateLimited()) [2] == b"rate limit exceeded"
    assert error_response(DirectResponse(418, "teapot"), "openai")[2] == b"teapot"


LLM = """
llm:
  port: {port}
  models:
  - name: gpt-4o-mini
    provider: openAI
    params: {{hostOverride: "127.0.0.1:{mock}"}}
  - name: "anthropic/*"
    provider: anthropic
    params: {{hostOverride: "127.0.0.1:{mock}", apiKey: sk-ant}}
    transformation: {{model: 'llmRequest.model.stripPrefix("anthropic/")'}}
"""


async def test_llm_port_lists_its_models_and_answers_unknown_models_in_each_dialect(nursery):
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    gw = await start_gateway(nursery, LLM, port=free_port(), mock=mock.port)
    client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0, timeout=10)
    models = [m async for m in client.models.list()]
    assert [(m.id, m.owned_by) for m in models] == [("gpt-4o-mini", "openAI"), ("anthropic/*", "anthropic")]
    with pytest.raises(openai.NotFoundError) as missing:
        await client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "x"}])
    assert missing.value.body["message"] == "Model not found" and missing.value.body["code"] == "model_not_found"
    claude = anthropic.AsyncAnthropic(base_url=gw.url, api_key="k", max_retries=0, timeout=10)
    message = await claude.messages.create(model="anthropic/claude-x", max_tokens=8,
                                           messages=[{"role": "user", "content": "hello"}])
    assert message.model == "claude-x"
    with pytest.raises(anthropic.NotFoundError) as unknown:
        await claude.messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert unknown.value.body == {"type": "error", "error": {"type": "not_found_error", "message": "Model not found"}}
    assert mock.count == 1  # the list and the refusals were the gateway's own answers


async def test_span_name_and_gen_ai_values_follow_the_semantic_conventions(nursery):
    from trioproxy.config.model import Address
    from trioproxy.frontend.server import listen_socket, serve_app

    receiver = OtlpReceiver()
    sock = listen_socket(Address("127.0.0.1", 0), "receiver")
    await nursery.start(serve_app, receiver.app, sock, 1.0, trio.Event())
    mock = MockOpenAI()
    await nursery.start(mock.serve, 0)
    gw = await start_gateway(nursery, """
        config:
          tracing: {{otlpEndpoint: "http://127.0.0.1:{otlp}", otlpProtocol: http, randomSampling: true}}
        binds:
        - port: {port}
          listeners:
          - routes:
            - backends:
              - ai: {{name: mock, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{mock}"}}
        """, port=free_port(), mock=mock.port, otlp=sock.getsockname()[1])
    client = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="k", max_retries=0, timeout=10)
    await client.embeddings.create(model="text-embedding-3-small", input="a b c")
    assert await trio.to_thread.run_sync(gw.info.runtime.otel.processor.force_flush, 10000)
    with trio.fail_after(10):
        while not any(s.kind == s.SPAN_KIND_SERVER for s in receiver.spans):
            await receiver.got.wait()
            receiver.got = trio.Event()
    server = next(s for s in receiver.spans if s.kind == s.SPAN_KIND_SERVER)
    attributes = _attributes(server)
    assert server.name == "embeddings text-embedding-3-small"
    assert attributes["gen_ai.operation.name"] == "embeddings" and attributes["gen_ai.provider.name"] == "openai"
    assert attributes["gen_ai.usage.input_tokens"] == 3
