"""LLM provider defaults, pure: where each ``ai.provider`` lives, which endpoints it serves, and
what its requests need.

agentgateway's names and defaults (docs/llm-providers.md): ``openAI``, ``anthropic``, ``gemini``
(Google's OpenAI-compatible endpoint), ``vertex``, ``azure``, ``bedrock``, and OpenAI-compatible presets by name
(``groq``, ``mistral``...). A provider gives the backend its host (port 443, TLS with the system trust
store) and, per endpoint kind, its upstream path: the request's path picks the kind
(``endpoint_kind``), so an SDK's ``embeddings.create`` reaches the provider's embeddings endpoint
and not its chat one. ``hostOverride`` replaces the host (plain HTTP unless a backendTLS policy
applies) and keeps the client's path, ``pathOverride`` replaces the path whatever the kind.
``bedrock`` (Converse) is reached only through translation. Formats are not translated here:
llm/translate/ does it when the kind is chat completions or Messages and the client's dialect is
not the provider's.

The credential: ``backendAuth`` (or the client) puts it in ``Authorization: Bearer``;
``provider_headers`` moves it to ``x-api-key`` for Anthropic and ``api-key`` for Azure, and adds
``anthropic-version`` when the client sent none.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import quote

import attrs

from ..asgi import Header

__all__ = [
    "ANTHROPIC_VERSION", "COMPLETIONS", "COUNT_TOKENS", "EMBEDDINGS", "GEMINI_COUNT_TOKENS", "GEMINI_KINDS",
    "GENERATE_CONTENT", "MESSAGES", "MODELS", "PASSTHROUGH", "ROUTE_KINDS", "UNREAD_KINDS",
    "PRESETS", "PROVIDERS", "RESPONSES", "ProviderDefaults", "azure_defaults", "bedrock_defaults", "endpoint_kind", "error_dialect",
    "operation_name", "provider_headers", "semconv_provider", "vertex_defaults",
]

#: The Messages API version sent when the client names none (https://docs.anthropic.com/en/api/versioning).
ANTHROPIC_VERSION = b"2023-06-01"

# Endpoint kinds (agentgateway's route types): what a request asks for, chosen by its path.
COMPLETIONS = "completions"  # OpenAI chat completions
RESPONSES = "responses"  # OpenAI Responses API
EMBEDDINGS = "embeddings"
MESSAGES = "messages"  # Anthropic Messages
COUNT_TOKENS = "count_tokens"  # Anthropic messages/count_tokens
MODELS = "models"  # GET models list
PASSTHROUGH = "passthrough"  # anything else: the client's path, the body untouched
GENERATE_CONTENT = "generate_content"  # Gemini's native models/{model}:generateContent, :streamGenerateContent
GEMINI_COUNT_TOKENS = "gemini_count_tokens"  # Gemini's native models/{model}:countTokens
#: Gemini's native API: the model (and for generation, streaming) is in the path, the body has neither
GEMINI_KINDS = (GENERATE_CONTENT, GEMINI_COUNT_TOKENS)
#: the kinds whose request body is forwarded unread (only the path and the credential change)
UNREAD_KINDS = (MODELS, PASSTHROUGH, *GEMINI_KINDS)

#: path suffix → kind, longest first (``/messages/count_tokens`` before ``/messages``)
_SUFFIXES = (
    ("/chat/completions", COMPLETIONS), ("/messages/count_tokens", COUNT_TOKENS), ("/embeddings", EMBEDDINGS),
    ("/responses", RESPONSES), ("/messages", MESSAGES), ("/models", MODELS),
    (":generateContent", GENERATE_CONTENT), (":streamGenerateContent", GENERATE_CONTENT),
    (":countTokens", GEMINI_COUNT_TOKENS),
)


_VERSIONED = re.compile(r"/v\d[^/]*/")

#: agentgateway's route type names (an ai policy's ``routes`` values) → endpoint kinds
ROUTE_KINDS = {"completions": COMPLETIONS, "messages": MESSAGES, "models": MODELS, "passthrough": PASSTHROUGH,
               "responses": RESPONSES, "embeddings": EMBEDDINGS, "anthropicTokenCount": COUNT_TOKENS,
               "generateContent": GENERATE_CONTENT, "geminiCountTokens": GEMINI_COUNT_TOKENS}


def resolve_route(routes: Sequence[tuple[str, str]], path: str) -> str:
    """The endpoint kind of ``path`` by a configured routes map (``(suffix, kind)``, longest suffix
    first): the first suffix that ends the path, else the ``*`` entry's kind, else completions (as
    agentgateway resolves its ``routes``)."""
    wildcard = None
    for suffix, kind in routes:
        if suffix == "*":
            wildcard = kind
        elif path.endswith(suffix):
            return kind
    return wildcard or COMPLETIONS


def endpoint_kind(path: str) -> str:
    """The endpoint kind of a request path, by its last segments (``/v1/chat/completions``,
    ``/openai/v1/embeddings``, ``/v1/messages/count_tokens``...). Another path of a provider's API
    (a version segment: ``/v1/files``, ``/v1/batches/b1``) is ``passthrough``; a path of the
    gateway's own choosing (``/chat``, ``/``) is ``completions``, the provider's default endpoint,
    as it has always been."""
    path = path.rstrip("/")
    for suffix, kind in _SUFFIXES:
        if path.endswith(suffix):
            return kind
    return PASSTHROUGH if _VERSIONED.search(path + "/") else COMPLETIONS


def error_dialect(kind: str) -> str:
    """Whose error JSON a client of this endpoint kind parses: ``anthropic``, ``gemini`` or ``openai``."""
    if kind in GEMINI_KINDS:
        return "gemini"
    return "anthropic" if kind in (MESSAGES, COUNT_TOKENS) else "openai"


#: gen_ai.operation.name (OpenTelemetry semantic conventions) per kind
_OPERATIONS = {COMPLETIONS: "chat", RESPONSES: "chat", MESSAGES: "chat", EMBEDDINGS: "embeddings",
               COUNT_TOKENS: "count_tokens", MODELS: "list_models", PASSTHROUGH: "passthrough",
               GENERATE_CONTENT: "generate_content", GEMINI_COUNT_TOKENS: "count_tokens"}


def operation_name(kind: str) -> str:
    return _OPERATIONS.get(kind, kind)


#: gen_ai.provider.name values of the semantic conventions; a preset is named as itself
_SEMCONV = {"openAI": "openai", "anthropic": "anthropic", "gemini": "gcp.gemini", "vertex": "gcp.vertex_ai",
            "azure": "azure.ai.openai", "bedrock": "aws.bedrock", "mistral": "mistral_ai", "xai": "x_ai"}


def semconv_provider(provider: str) -> str:
    return _SEMCONV.get(provider, provider)


def _native_gemini_paths(path: str) -> tuple[tuple[str, str], ...]:
    """Gemini's native methods: ``{method}`` is the client's (generateContent, streamGenerateContent,
    countTokens), ``{model}`` the request's."""
    return ((GENERATE_CONTENT, path), (GEMINI_COUNT_TOKENS, path))


def _openai_paths(base: str, *kinds: str) -> tuple[tuple[str, str], ...]:
    names = {COMPLETIONS: "chat/completions", RESPONSES: "responses", EMBEDDINGS: "embeddings", MODELS: "models"}
    return tuple((kind, f"{base}/{names[kind]}") for kind in kinds)


@attrs.frozen
class ProviderDefaults:
    """Where a provider is reached when the config does not override it."""

    host: str
    #: (kind, path) of each endpoint the provider serves; a path may hold ``{model}`` (filled in per request)
    paths: tuple[tuple[str, str], ...]
    port: int = 443
    tls: bool = True
    #: the API reports chat stream usage only when asked (``stream_options.include_usage``) and takes the option
    stream_usage_option: bool = True
    #: the header the API key goes in (``authorization`` keeps ``Bearer <key>``)
    key_header: bytes = b"authorization"

    def path(self, kind: str) -> str | None:
        return next((path for k, path in self.paths if k == kind), None)


_OPENAI_KINDS = (COMPLETIONS, RESPONSES, EMBEDDINGS, MODELS)

PROVIDERS: dict[str, ProviderDefaults] = {
    "openAI": ProviderDefaults("api.openai.com", _openai_paths("/v1", *_OPENAI_KINDS)),
    "anthropic": ProviderDefaults("api.anthropic.com", (
        (MESSAGES, "/v1/messages"), (COUNT_TOKENS, "/v1/messages/count_tokens"), (MODELS, "/v1/models")),
        stream_usage_option=False, key_header=b"x-api-key"),
    "gemini": ProviderDefaults("generativelanguage.googleapis.com", (
        *_openai_paths("/v1beta/openai", COMPLETIONS, EMBEDDINGS, MODELS),
        *_native_gemini_paths("/v1beta/models/{model}:{method}"))),
}

#: OpenAI-compatible services by name: ``provider: {groq: {model}}`` is ``openAI`` at their host.
PRESETS: dict[str, ProviderDefaults] = {
    "groq": ProviderDefaults("api.groq.com", _openai_paths("/openai/v1", COMPLETIONS, RESPONSES, EMBEDDINGS, MODELS)),
    # Mistral always reports stream usage and refuses fields it does not know.
    "mistral": ProviderDefaults("api.mistral.ai", _openai_paths("/v1", COMPLETIONS, EMBEDDINGS, MODELS),
                                stream_usage_option=False),
    "deepseek": ProviderDefaults("api.deepseek.com", _openai_paths("/v1", COMPLETIONS, MODELS)),
    "openrouter": ProviderDefaults("openrouter.ai", _openai_paths("/api/v1", COMPLETIONS, RESPONSES, EMBEDDINGS,
                                                                  MODELS)),
    "together": ProviderDefaults("api.together.xyz", _openai_paths("/v1", COMPLETIONS, EMBEDDINGS, MODELS)),
    "fireworks": ProviderDefaults("api.fireworks.ai", _openai_paths("/inference/v1", COMPLETIONS, EMBEDDINGS,
                                                                    MODELS)),
    "xai": ProviderDefaults("api.x.ai", _openai_paths("/v1", COMPLETIONS, RESPONSES, MODELS)),
    "cerebras": ProviderDefaults("api.cerebras.ai", _openai_paths("/v1", COMPLETIONS, MODELS)),
    # Local servers: plain HTTP on their usual ports.
    "ollama": ProviderDefaults("localhost", _openai_paths("/v1", COMPLETIONS, EMBEDDINGS, MODELS), port=11434,
                               tls=False),
    "vllm": ProviderDefaults("localhost", _openai_paths("/v1", COMPLETIONS, RESPONSES, EMBEDDINGS, MODELS),
                             port=8000, tls=False),
}


def azure_defaults(resource_name: str, resource_type: str, api_version: str | None, model: str | None,
                   project_name: str | None) -> ProviderDefaults:
    """Azure's host and paths from its options (as agentgateway builds them)."""
    version = api_version or "v1"
    if resource_type == "openAI":
        host = f"{resource_name}.openai.azure.com"
        if version in ("v1", "preview"):
            query = "?api-version=preview" if version == "preview" else ""
            paths = tuple((kind, path + query) for kind, path in _openai_paths("/openai/v1", *_OPENAI_KINDS))
        else:
            deployment = quote(model, safe="") if model else "{model}"
            query = f"?api-version={quote(version, safe='')}"
            paths = ((COMPLETIONS, f"/openai/deployments/{deployment}/chat/completions{query}"),
                     (EMBEDDINGS, f"/openai/deployments/{deployment}/embeddings{query}"),
                     (MODELS, f"/openai/models{query}"))
    else:  # foundry / aiServices
        host = f"{resource_name}.services.ai.azure.com"
        paths = _openai_paths(f"/api/projects/{quote(project_name or resource_name, safe='')}/openai/v1",
                              *_OPENAI_KINDS)
    return ProviderDefaults(host, paths, key_header=b"api-key")


def vertex_defaults(project_id: str, region: str | None) -> ProviderDefaults:
    """Vertex AI's OpenAI-compatible endpoint of a project and region (``global`` when none), and its
    native Gemini methods under ``publishers/google/models`` (the key stays an OAuth Bearer token)."""
    region = region or "global"
    host = "aiplatform.googleapis.com" if region == "global" else f"{quote(region, safe='')}-aiplatform.googleapis.com"
    location = f"/v1/projects/{quote(project_id, safe='')}/locations/{quote(region, safe='')}"
    return ProviderDefaults(host, (*_openai_paths(f"{location}/endpoints/openapi", COMPLETIONS, EMBEDDINGS),
                                   *_native_gemini_paths(f"{location}/publishers/google/models/{{model}}:{{method}}")))


def bedrock_defaults(region: str) -> ProviderDefaults:
    """Bedrock's regional runtime host; requests are translated and signed (llm/translate/bedrock.py)."""
    return ProviderDefaults(f"bedrock-runtime.{region}.amazonaws.com", ((COMPLETIONS, "/model/{model}/converse"),),
                            stream_usage_option=False)


def fill_model(path: str, model: str | None) -> str:
    """``path`` with ``{model}`` replaced by the request's model (an Azure deployment name)."""
    if "{model}" not in path:
        return path
    return path.replace("{model}", quote(model or "", safe=""))


def provider_headers(headers: Sequence[Header], provider: str, key_header: bytes) -> list[Header]:
    """The request headers the provider wants: the Bearer credential moved to ``key_header``,
    ``anthropic-version`` added for Anthropic when absent. Other headers are kept in order."""
    out = list(headers)
    if key_header != b"authorization":
        for i, (name, value) in enumerate(out):
            if name == b"authorization" and value[:7].lower() == b"bearer ":
                out = [h for h in out if h[0] not in (b"authorization", key_header)]
                out.insert(min(i, len(out)), (key_header, value[7:].strip()))
                break
    if provider == "anthropic" and not any(name == b"anthropic-version" for name, _ in out):
        out.append((b"anthropic-version", ANTHROPIC_VERSION))
    return out
