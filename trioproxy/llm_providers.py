"""LLM provider defaults, pure: where each ``ai.provider`` lives and what its requests need.

agentgateway's names and defaults (docs/llm-providers.md): ``openAI``, ``anthropic``, ``gemini``
(Google's OpenAI-compatible endpoint) and ``azure``. A provider gives the backend its host
(port 443, TLS with the system trust store) and upstream path; ``hostOverride`` replaces the host
(plain HTTP unless a backendTLS policy applies) and keeps the client's path, ``pathOverride``
replaces the path. trioproxy does not translate between formats: a client of an ``anthropic``
backend speaks the Messages API.

The credential: ``backendAuth`` (or the client) puts it in ``Authorization: Bearer``;
``provider_headers`` moves it to ``x-api-key`` for Anthropic and ``api-key`` for Azure, and adds
``anthropic-version`` when the client sent none.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

import attrs

from .asgi import Header

__all__ = ["ANTHROPIC_VERSION", "PROVIDERS", "ProviderDefaults", "azure_defaults", "bedrock_defaults",
           "provider_headers"]

#: The Messages API version sent when the client names none (https://docs.anthropic.com/en/api/versioning).
ANTHROPIC_VERSION = b"2023-06-01"


@attrs.frozen
class ProviderDefaults:
    """Where a provider is reached when the config does not override it."""

    host: str
    path: str  # may hold ``{model}``: the request's model, filled in per request
    port: int = 443
    #: the API reports stream usage only when asked (``stream_options.include_usage``)
    stream_usage_option: bool = True
    #: the header the API key goes in (``authorization`` keeps ``Bearer <key>``)
    key_header: bytes = b"authorization"


PROVIDERS: dict[str, ProviderDefaults] = {
    "openAI": ProviderDefaults("api.openai.com", "/v1/chat/completions"),
    "anthropic": ProviderDefaults("api.anthropic.com", "/v1/messages", stream_usage_option=False,
                                  key_header=b"x-api-key"),
    "gemini": ProviderDefaults("generativelanguage.googleapis.com", "/v1beta/openai/chat/completions"),
}


def azure_defaults(resource_name: str, resource_type: str, api_version: str | None, model: str | None,
                   project_name: str | None) -> ProviderDefaults:
    """Azure's host and path from its options (as agentgateway builds them)."""
    version = api_version or "v1"
    if resource_type == "openAI":
        host = f"{resource_name}.openai.azure.com"
        if version == "v1":
            path = "/openai/v1/chat/completions"
        elif version == "preview":
            path = "/openai/v1/chat/completions?api-version=preview"
        else:
            deployment = quote(model, safe="") if model else "{model}"
            path = f"/openai/deployments/{deployment}/chat/completions?api-version={quote(version, safe='')}"
    else:  # foundry / aiServices
        host = f"{resource_name}.services.ai.azure.com"
        path = f"/api/projects/{quote(project_name or resource_name, safe='')}/openai/v1/chat/completions"
    return ProviderDefaults(host, path, key_header=b"api-key")


def bedrock_defaults(region: str) -> ProviderDefaults:
    """Bedrock's regional runtime host; requests are translated and signed (llm_translate/bedrock.py)."""
    return ProviderDefaults(f"bedrock-runtime.{region}.amazonaws.com", "/model/{model}/converse",
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
