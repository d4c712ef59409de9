"""The shape every translation has: one object per request, pure (no I/O), fed by the gateway."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import attrs

from ...asgi import Header
from ..usage import Usage, provider_usage
from .errors import MalformedAnswer, client_error_body
from .openai_out import openai_error
from .sse import sse

__all__ = ["ProviderRequest", "StreamTranslator", "Translation"]


@attrs.frozen
class ProviderRequest:
    """What goes upstream instead of the client's request: ``path`` (with its query) and JSON ``body``."""

    path: str
    body: bytes
    streaming: bool


class StreamTranslator:
    """Provider stream bytes in, client SSE bytes out; ``finish`` when the provider's stream ended.
    ``use``: the usage seen so far, in the client's dialect's shape (None until the provider gave one);
    ``raw``: the provider's own usage object as its stream gave it, what the gateway counts;
    ``done``: ``feed`` gave the client's stream its end (``[DONE]``, ``message_stop``): a client may
    close once it has that, with its whole answer; ``broken``: ``fail`` ended it (nothing more to feed)."""

    use: dict[str, Any] | None = None
    raw: dict[str, Any] | None = None
    done = False
    broken = False
    #: what the events before the one that raised in ``feed``/``finish`` gave (``fail`` sends it first)
    partial = b""

    def _joined(self, parts: Iterable[bytes]) -> bytes:
        """The client's bytes of a chunk's events; if one raises, those before it are kept in ``partial``
        (the client still gets the text that arrived in the same chunk as an event that broke)."""
        done: list[bytes] = []
        try:
            for part in parts:
                done.append(part)
        except Exception:
            self.partial = b"".join(done)
            raise
        return b"".join(done)

    def feed(self, chunk: bytes) -> bytes:
        raise NotImplementedError

    def finish(self) -> bytes:
        raise NotImplementedError

    def fail(self, message: str) -> bytes:
        """The end of the client's stream when the provider's cannot be translated any further: the
        dialect's error event and terminator (OpenAI's: a data event holding ``{"error": ...}``, then
        ``[DONE]``)."""
        self.done = self.broken = True
        return self.partial + sse(openai_error(message, "server_error", "bad_upstream_response")) + b"data: [DONE]\n\n"


class Translation:
    """One request's translation between the client's ``dialect`` and the ``provider``'s API.

    ``request`` first (raises ``TranslationError`` for what cannot be translated); then ``headers`` and
    ``sign`` for the upstream request; then ``response`` for a whole body or ``stream()`` for SSE.
    """

    dialect = "openai"
    provider = ""
    #: the content type of the translated response when it streams
    stream_content_type = b"text/event-stream"

    def __init__(self) -> None:
        self.streaming = False
        self.model = ""
        self.use: dict[str, Any] | None = None  # the usage of a whole response, client-shaped
        self.raw: dict[str, Any] | None = None  # the usage of a whole response, as the provider gave it
        self._stream: StreamTranslator | None = None

    def counted(self) -> Usage | None:
        """The answer's usage as the gateway counts it, once translated (whole or streamed): read from
        the provider's own usage object, as its passthrough would be (cached, cache-write and reasoning
        tokens included), since a translated stream may carry no usage the client did not ask for, and
        the client's dialect may have no place for some counts (Anthropic's for reasoning tokens)."""
        raw = self._stream.raw if self._stream is not None else self.raw
        if not isinstance(raw, dict):
            return None
        return provider_usage(raw, self.provider if self.provider in ("anthropic", "gemini", "bedrock") else "openai")

    def tokens(self) -> tuple[int, int] | None:
        """``(prompt, completion)`` tokens of the answer as counted."""
        counted = self.counted()
        return None if counted is None else (counted.prompt_tokens, counted.completion_tokens)

    def request(self, body: bytes, model: str | None = None) -> ProviderRequest:
        raise NotImplementedError

    def headers(self, headers: list[Header]) -> list[Header]:
        """The client's headers made right for the provider (credential header, API version);
        identity encoding, since the answer is read to be translated."""
        return [h for h in headers if h[0] != b"accept-encoding"] + [(b"accept-encoding", b"identity")]

    def sign(self, method: str, url: str, headers: list[Header], body: bytes) -> list[Header]:
        """The final headers (Bedrock adds its SigV4 signature here, over the final body)."""
        return headers

    def response(self, status: int, body: bytes) -> bytes:
        """A whole provider response body as the client's; an error body in the client's dialect.
        Raises ``MalformedAnswer`` for a success that is not a JSON object (and ``response_json`` may
        raise ``AttributeError``/``TypeError``... on a nested value of the wrong type: the call site
        answers both with a 502)."""
        parsed = True
        try:
            obj = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            obj, parsed = None, False
        if status < 400 and not isinstance(obj, dict):
            raise MalformedAnswer(f"a JSON {_JSON_KINDS.get(type(obj), 'value')} where an object is expected"
                                  if parsed else "a body that is not JSON")
        if status >= 400 or not isinstance(obj, dict):
            message, kind = self.error_of(obj, body, status)
            return client_error_body(self.dialect, message, kind=kind)
        return self.response_json(obj)

    def response_json(self, obj: dict[str, Any]) -> bytes:
        raise NotImplementedError

    def error_of(self, obj: Any, body: bytes, status: int) -> tuple[str, str]:
        """``(message, type)`` of a provider error body, whichever of the known shapes it has."""
        error = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(error, dict):
            kind = error.get("type") or error.get("status") or _kind(status)
            return str(error.get("message") or json.dumps(error)), str(kind)
        if isinstance(obj, dict) and isinstance(obj.get("message"), str):  # Bedrock: {"message": ...}
            return obj["message"], _kind(status)
        text = body[:2000].decode("utf-8", "replace").strip()
        return text or f"upstream answered {status}", _kind(status)

    def stream(self) -> StreamTranslator:
        """The translator of this request's streamed answer (one per request)."""
        self._stream = self.new_stream()
        return self._stream

    def new_stream(self) -> StreamTranslator:
        raise NotImplementedError


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _kind(status: int) -> str:
    return {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
            404: "not_found_error", 429: "rate_limit_error", 529: "overloaded_error"}.get(
                status, "api_error" if status >= 500 or status < 400 else "invalid_request_error")
