"""Translation between LLM API dialects, pure: the gateway feeds bytes in and takes bytes out.

An OpenAI chat completions request to an ``anthropic``, ``gemini`` (native ``generateContent``) or
``bedrock`` (Converse) provider is translated, and so is an Anthropic Messages request (``/v1/messages``)
to an OpenAI-compatible provider; the answer comes back in the client's dialect, streamed or whole.
What has no equivalent is refused with a 400 that names the field (``TranslationError``), never
dropped into a 200 that means something else. docs/llm-providers.md, "Translation", has the table.
"""

from __future__ import annotations

from typing import Any

from ..providers import COMPLETIONS, MESSAGES, endpoint_kind
from .anthropic import OpenAIToAnthropic
from .base import ProviderRequest, StreamTranslator, Translation
from .bedrock import OpenAIToBedrock, sign_request
from .errors import TranslationError, client_error_body
from .gemini import OpenAIToGemini
from .openai_compat import AnthropicToOpenAI

__all__ = [
    "AnthropicToOpenAI", "OpenAIToAnthropic", "OpenAIToBedrock", "OpenAIToGemini", "ProviderRequest",
    "StreamTranslator", "Translation", "TranslationError", "client_dialect", "client_error_body",
    "gemini_native", "openai_compatible", "sign_request", "speaks_neither", "translation_for",
]

def client_dialect(client_path: str) -> str:
    """Which API the client speaks, by the endpoint kind of its path (``llm_providers.endpoint_kind``,
    the gateway's choice of endpoint): Anthropic's Messages, or OpenAI's chat completions when the
    path names them (a path of the gateway's own choosing, ``/`` or ``/chat``, is the provider's main
    endpoint in the provider's own dialect: nothing to translate). Every other kind is ``other``."""
    path = client_path.split("?", 1)[0].rstrip("/")
    kind = endpoint_kind(path)
    if kind == MESSAGES:
        return "anthropic"
    if kind == COMPLETIONS and path.endswith("/chat/completions"):
        return "openai"
    return "other"


def gemini_native(provider_path: str | None) -> bool:
    """A ``gemini`` backend speaks Google's OpenAI-compatible endpoint unless its path names the native
    ``generateContent`` (``pathOverride: /v1beta/models/{model}:generateContent``)."""
    return provider_path is not None and "generateContent" in provider_path


def speaks_neither(provider: str, provider_path: str | None) -> bool:
    """``bedrock`` and native ``gemini`` speak neither client dialect: a request not translated to
    them is refused rather than passed through (it would only get the provider's own refusal)."""
    return provider == "bedrock" or (provider == "gemini" and gemini_native(provider_path))


def openai_compatible(provider: str, provider_path: str | None = None) -> bool:
    """Whether the provider's API is OpenAI's chat completions (``openAI``, ``azure``, ``gemini``'s
    default endpoint, ``vertex`` and the presets: ``groq``...)."""
    return provider != "anthropic" and not speaks_neither(provider, provider_path)


def translation_for(provider: str, client_path: str, provider_path: str | None = None, *,
                    dialect: str | None = None, **options: Any) -> Translation | None:
    """A fresh per-request ``Translation`` when the client's dialect (by ``client_path``) is not the
    ``provider``'s API (``provider_path``: the backend's ``pathOverride``, if any), else None
    (passthrough). ``options``: Bedrock's ``credentials`` and ``region``; ``stream_usage_option``
    (default True): whether an OpenAI-compatible provider takes ``stream_options`` (Mistral refuses
    it and always reports stream usage). ``dialect``: the client's, when a routes map says it (else by
    ``client_path``)."""
    dialect = dialect or client_dialect(client_path)
    native = provider == "gemini" and gemini_native(provider_path)
    if dialect == "openai":
        if provider == "anthropic":
            return OpenAIToAnthropic()
        if native:
            return OpenAIToGemini()
        if provider == "bedrock":
            return OpenAIToBedrock(options.get("credentials"), options.get("region") or "us-east-1")
    elif dialect == "anthropic" and openai_compatible(provider, provider_path):
        return AnthropicToOpenAI(provider, stream_usage_option=options.get("stream_usage_option", True))
    return None
