"""Gemini's native API as the client sends it (``google-genai``): ``models/{model}:generateContent``,
``:streamGenerateContent?alt=sse`` and ``:countTokens``, passed to a ``gemini`` or ``vertex`` backend.

The body carries neither the model nor a stream flag: both are in the path, so the body is forwarded
unread and only the path and the credential change. The provider's path for the method
(``llm_providers``: ``/v1beta/models/{model}:{method}``, Vertex's ``publishers/google/models``) gets
the request's model, or the backend's ``model`` when it sets one; with ``hostOverride`` the client's
path is kept, its model replaced by the backend's. Usage is read from the answer's ``usageMetadata``
(llm.py), as for every passthrough. The gateway's own errors on these paths are Gemini's
``{"error": {"code", "message", "status"}}`` (errors.py) so that google-genai raises its typed errors.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from ..llm.providers import GEMINI_COUNT_TOKENS, fill_model, provider_headers

if TYPE_CHECKING:
    from ..config.model import AIBackend
    from .exchange import Exchange

__all__ = ["NATIVE_PROVIDERS", "prepare"]

#: the providers whose API is Gemini's own (Vertex AI's publisher models included)
NATIVE_PROVIDERS = ("gemini", "vertex")

_MODEL_METHOD = re.compile(r"/models/([^:]+):(\w+)$")  # a model may hold a slash (google/...)
_METHOD = re.compile(r":(?:generateContent|streamGenerateContent|countTokens)(?=$|\?)")


def model_and_method(path: str, kind: str | None) -> tuple[str | None, str]:
    """The model named in a native path and its method (``generateContent`` when the path has none)."""
    match = _MODEL_METHOD.search(path)
    if match is None:
        return None, "countTokens" if kind == GEMINI_COUNT_TOKENS else "generateContent"
    return unquote(match.group(1)), match.group(2)


def prepare(x: Exchange, ai: AIBackend, kind: str, model_override: str | None = None) -> None:
    """The upstream path, the credential header and ``x.llm`` of a native Gemini request;
    ``model_override``: the ``llm:`` format's ``transformation.model`` (else the backend's ``model``)."""
    path = x.scope["path"]
    model, method = model_and_method(path, kind)
    configured = model_override or ai.model
    configured = configured.removeprefix("models/") if configured else None
    model = configured or model
    x.llm = {"provider": ai.provider, "model": model, "streaming": method == "streamGenerateContent"}
    template = ai.upstream_path(kind)
    if template is not None:
        upstream = fill_model(template, model).replace("{method}", method)
        x.upstream_path = _METHOD.sub(":" + method, upstream)  # a pathOverride naming one method: the client's
    elif configured is not None:  # the client's path (as a urlRewrite left it) with the backend's model
        raw = x.scope.get("raw_path")
        current = x.upstream_path or (raw.decode("latin-1") if raw else path)
        match = _MODEL_METHOD.search(current)
        if match is not None:
            x.upstream_path = current[:match.start(1)] + quote(configured, safe="") + current[match.end(1):]
    if ai.provider == "gemini":  # API keys go in x-goog-api-key; Vertex takes an OAuth Bearer token
        x.headers = provider_headers(x.headers, ai.provider, b"x-goog-api-key")
