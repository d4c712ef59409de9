"""Translation between LLM API dialects, pure: the gateway feeds bytes in and takes bytes out.

An OpenAI chat completions request to an ``anthropic``, ``gemini`` (native ``generateContent``) or
``bedrock`` (Converse) provider is translated, and so is an Anthropic Messages request (``/v1/messages``)
to an OpenAI-compatible provider; the answer comes back in the client's dialect, streamed or whole.
What has no equivalent is refused with a 400 that names the field (``TranslationError``), never
dropped into a 200 that means something else. docs/llm-providers.md, "Translation", has the table.
"""

from __future__ import annotations

from typing import Any

from .anthropic import OpenAIToAnthropic
from .base import ProviderRequest, StreamTranslator, Translation
from .bedrock import OpenAIToBedrock, sign_request
from .errors import TranslationError, client_error_body
from .gemini import OpenAIToGemini
from .openai_compat import AnthropicToOpenAI

__all__ = [
    "AnthropicToOpenAI", "OpenAIToAnthropic", "OpenAIToBedrock", "OpenAIToGemini", "ProviderRequest",
    "StreamTranslator", "Translation", "TranslationError", "client_dialect", "client_error_body",
    "sign_request", "translation_for",
]

#: providers whose API is OpenAI's chat completions (an Anthropic-Messages client is translated to it)
OPENAI_COMPATIBLE = frozenset({"openAI", "azure", "gemini"})


def client_dialect(client_path: str) -> str:
    """Which API the client speaks, by its request path: Anthropic's Messages or OpenAI's chat."""
    path = client_path.split("?", 1)[0].rstrip("/")
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/chat/completions"):
        return "openai"
    return "other"


def gemini_native(provider_path: str | None) -> bool:
    """A ``gemini`` backend speaks Google's OpenAI-compatible endpoint unless its path names the native
    ``generateContent`` (``pathOverride: /v1beta/models/{model}:generateContent``)."""
    return provider_path is not None and "generateContent" in provider_path


def translation_for(provider: str, client_path: str, provider_path: str | None = None,
                    **options: Any) -> Translation | None:
    """A fresh per-request ``Translation`` when the client's dialect (by ``client_path``) is not the
    ``provider``'s API (``provider_path``: the backend's configured path, if any), else None
    (passthrough). ``options``: Bedrock's ``credentials`` and ``region``."""
    dialect = client_dialect(client_path)
    native = provider == "gemini" and gemini_native(provider_path)
    if dialect == "openai":
        if provider == "anthropic":
            return OpenAIToAnthropic()
        if native:
            return OpenAIToGemini()
        if provider == "bedrock":
            return OpenAIToBedrock(options.get("credentials"), options.get("region") or "us-east-1")
    elif dialect == "anthropic" and provider in OPENAI_COMPATIBLE and not native:
        return AnthropicToOpenAI(provider)
    return None
