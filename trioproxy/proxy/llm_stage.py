"""The gateway's hook into translation: four calls from gateway.py, everything else here.

``prepare`` (request body → provider body, path and headers, or None to pass through;
``refuse_untranslatable`` for the kinds whose body is not read), ``sign`` (the
final upstream headers), ``respond`` (the response headers and whole body, or a stream translator) and
``usage`` (the answer's tokens for accounting). The trace gets the client's and the provider's form
of both the request and the response as their own body snapshots.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import attrs

from ..asgi import Header
from ..errors import BadUpstreamResponse, ProxyError
from ..llm.providers import COMPLETIONS, GEMINI_KINDS, MESSAGES, error_dialect, fill_model, provider_headers
from ..llm.translate import client_dialect, speaks_neither, translation_for
from ..llm.translate.base import StreamTranslator, Translation
from ..llm.translate.errors import MalformedAnswer, TranslationError
from ..llm.usage import Usage
from ..telemetry.trace import BodyCapture

if TYPE_CHECKING:
    from ..config.model import AIBackend, Backend
    from ..upstream.pool import UpstreamResponse
    from .exchange import Exchange

__all__ = ["prepare", "refuse_untranslatable", "respond", "sign", "usage"]

_STREAM_TYPES = (b"text/event-stream", b"application/vnd.amazon.eventstream")
#: what a translator raises on an answer that is JSON but not the provider's shape (``{"content": [1]}``:
#: a value of the wrong type where it reads a field) or that it refuses outright (``MalformedAnswer``)
_SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)


def bad_answer(translation: Translation, error: Exception) -> BadUpstreamResponse:
    """The 502 for a provider answer its translator cannot read, naming the provider; the exception
    (the translator's own words) goes to operators only, in ``why``."""
    what = str(error) if isinstance(error, MalformedAnswer) else "JSON that is not its API's shape"
    failure = BadUpstreamResponse(f"invalid upstream response: {translation.provider} answered {what}")
    return failure.because({"provider": translation.provider, "detail": f"{type(error).__name__}: {error}"})


def prepare(x: Exchange, ai: AIBackend, body: bytes, model: str | None, kind: str) -> tuple[Translation, bytes] | None:
    """The translation of this request and the provider's body, or None when the client already speaks
    the provider's API. ``kind``: the request's endpoint kind (``llm_providers.endpoint_kind``): only
    chat completions and Messages are translated; any kind to a provider that speaks neither client
    dialect is refused. Sets the upstream path, the provider's headers and ``x.llm``; raises
    ``TranslationError`` (a 400 in the client's dialect) for what cannot be translated."""
    path = x.scope["path"]
    refuse_untranslatable(ai, path, kind)
    translation = translation_for(ai.provider, path, ai.path_override, dialect=_dialect(ai, path, kind),
                                  **_options(ai))
    if translation is None:
        return None
    request = translation.request(body, model)
    x.llm = {"provider": ai.provider, "model": translation.model or None, "streaming": request.streaming}
    # an OpenAI-compatible provider keeps its chat completions path (pathOverride, Azure's deployments,
    # a preset's prefix); the others are reached at the operation's own path (Gemini and Bedrock put
    # the model in it)
    path = request.path
    chat = ai.upstream_path(COMPLETIONS) if translation.dialect == "anthropic" else None
    if chat is not None:
        path = fill_model(chat, translation.model)
    x.upstream_path = path
    x.headers = translation.headers(x.headers)
    if ai.key_header != b"authorization" or ai.provider == "anthropic":
        x.headers = provider_headers(x.headers, ai.provider, ai.key_header)
    tr = x.tracer
    if tr.active:
        tr.event("policy", kind="llmTranslation", result="translated", client=translation.dialect,
                 provider=translation.provider, path=path)
        client = BodyCapture(tr.body_limit)
        client.feed(body)
        tr.body("client request", client)  # the provider's form is the "final request" body
        x.request_capture = BodyCapture(tr.body_limit)
        x.request_capture.feed(request.body)
    return translation, request.body


def refuse_untranslatable(ai: AIBackend, path: str, kind: str) -> None:
    """``bedrock`` and native ``gemini`` speak neither client dialect: any request but an OpenAI chat
    completion (the one they are translated from) is refused by its path, in the dialect the gateway
    answers that kind's clients in, rather than passed through (it would only get the provider's own
    refusal or, unsigned, a 403). Embeddings, Responses, models lists, files... included. Gemini's native
    API (google-genai's ``:generateContent``...) is native ``gemini``'s own: passed, not refused."""
    if kind in GEMINI_KINDS and ai.provider == "gemini":
        return
    if speaks_neither(ai.provider, ai.path_override) and not (
            kind == COMPLETIONS and _dialect(ai, path, kind) == "openai"):
        raise TranslationError("path", f"a request to {path}", ai.provider, error_dialect(kind))


def _dialect(ai: AIBackend, path: str, kind: str) -> str:
    """The client's format: with an ai policy's routes map, the kind it gives the path says it
    (completions: OpenAI's, messages: Anthropic's); else the path (``client_dialect``)."""
    if ai.routes:
        return {COMPLETIONS: "openai", MESSAGES: "anthropic"}.get(kind, "other")
    return client_dialect(path)


def _options(ai: AIBackend) -> dict[str, Any]:
    """Bedrock's region and credentials: the standard AWS environment variables, read per request so
    that rotated credentials apply (botocore's own reader; no instance-metadata lookups on this path)."""
    if ai.provider != "bedrock":
        return {"stream_usage_option": ai.stream_usage_option}
    from botocore.credentials import EnvProvider

    credentials = EnvProvider().load()
    if credentials is None:
        raise MissingCredentials()
    return {"region": ai.region, "credentials": credentials}


class MissingCredentials(ProxyError):
    """A bedrock backend without AWS credentials: the gateway's configuration, not the client, is at fault."""

    status = 500
    default_message = "bedrock backend: no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"


def sign(translation: Translation, backend: Backend, method: str, path: str, headers: list[Header],
         body: bytes) -> list[Header]:
    """The upstream headers signed over the final body (Bedrock's SigV4), else as they are."""
    host = next((v.decode("latin-1") for k, v in headers if k == b"host"), backend.target.host)
    url = f"{'https' if backend.tls is not None else 'http'}://{host}{path}"
    return translation.sign(method, url, headers, body)


async def respond(x: Exchange, translation: Translation, response: UpstreamResponse, headers: list[Header],
                  max_body: int) -> tuple[list[Header], bytes | None, StreamTranslator | None]:
    """The client's response headers, and either its whole translated body or the translator of its
    stream. An error status or a non-stream content type is read whole and translated as a body
    (the provider's error in the client's dialect)."""
    content_type = next((v for k, v in response.headers if k == b"content-type"), b"").split(b";")[0].strip()
    keep = [h for h in headers if h[0] not in (b"content-type", b"content-length", b"content-encoding",
                                                  b"transfer-encoding")]
    tr = x.tracer
    if response.status < 300 and translation.streaming and content_type.lower() in _STREAM_TYPES:
        return keep + [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")], None, \
            translation.stream()
    raw = bytearray()
    async with aclosing(_chunks(response)) as chunks:
        async for chunk in chunks:
            raw += chunk
            if len(raw) > max_body:
                break
    provider = BodyCapture(tr.body_limit) if tr.active else None
    if provider is not None:
        provider.feed(bytes(raw))
        tr.body("provider response", provider)
    try:
        body = translation.response(response.status, bytes(raw))
    except _SHAPE_ERRORS as error:
        raise bad_answer(translation, error) from None
    return keep + [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())], \
        body, None


async def _chunks(response: UpstreamResponse) -> AsyncGenerator[bytes, None]:
    """The response body's pieces: those that came with the head, then the rest as read."""
    ready, complete = response.ready()
    for chunk in ready:
        yield chunk
    if not complete:
        async with aclosing(response.body()) as chunks:
            async for chunk in chunks:
                yield chunk


async def translated_chunks(x: Exchange, response: UpstreamResponse,
                            stream: StreamTranslator) -> AsyncGenerator[bytes, None]:
    """The provider's stream as the client's, piece by piece (the provider's form traced apart). An
    event the translator cannot go on from ends the client's stream with its dialect's error event
    (``_feed``); the rest of the provider's stream is not read."""
    tr = x.tracer
    provider = BodyCapture(tr.body_limit) if tr.active else None
    try:
        async with aclosing(_chunks(response)) as chunks:
            async for chunk in chunks:
                if provider is not None:
                    provider.feed(chunk)
                out = _feed(x, stream, chunk)
                if out:
                    yield out
                if stream.broken:
                    return
        out = _feed(x, stream, None)
        if out:
            yield out
    finally:
        if provider is not None:
            tr.body("provider response", provider)


def _feed(x: Exchange, stream: StreamTranslator, chunk: bytes | None) -> bytes:
    """``stream.feed(chunk)`` (``finish`` for None); on an answer not in the provider's shape, the
    client's stream ends with its dialect's error event, and the request is marked failed (the 502
    it would have been) for the access log, the trace and the history."""
    try:
        return stream.feed(chunk) if chunk is not None else stream.finish()
    except _SHAPE_ERRORS as error:
        assert x.translation is not None
        failure = bad_answer(x.translation, error)
        x.error, x.error_kind, x.why = failure.message, type(failure).__name__, failure.why
        return stream.fail(failure.message)


def usage(translation: Translation) -> Usage | None:
    """The answer's tokens as the gateway accounts them: the provider's usage, read by the translation
    (a translated stream carries usage only when the client asked for it), cached, cache-write and
    reasoning tokens included."""
    counted = translation.counted()
    if counted is None:
        return None
    return attrs.evolve(counted, model=counted.model or translation.model or None)
