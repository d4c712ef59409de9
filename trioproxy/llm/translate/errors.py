"""What cannot be translated: one typed error that names the field, answered in the client's dialect.

A request that uses something the provider has no equivalent for is refused with 400 before it goes
upstream: a silent drop would answer 200 with a different meaning than the client asked for.
"""

from __future__ import annotations

import json

from ...errors import ProxyError

__all__ = ["MalformedAnswer", "TranslationError", "client_error_body"]


def client_error_body(dialect: str, message: str, *, kind: str = "invalid_request_error",
                      param: str | None = None, code: str | None = None) -> bytes:
    """An error body as the client's SDK parses it: OpenAI's ``{"error": {...}}``, Anthropic's
    ``{"type": "error", "error": {...}}`` or Gemini's ``{"error": {"code", "message", "status"}}``."""
    if dialect == "gemini":
        from ...errors import google_status

        status = 400 if kind == "invalid_request_error" else 500
        return json.dumps({"error": {"code": status, "message": message, "status": google_status(status)}}).encode()
    if dialect == "anthropic":
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}}).encode()


class TranslationError(ProxyError):
    """``field`` (a JSON path into the client's request, e.g. ``messages[2].content[0].type``) has no
    equivalent at ``provider``; a 400 in the client's ``dialect`` (``openai`` or ``anthropic``)."""

    status = 400
    content_type = b"application/json"

    def __init__(self, field: str, what: str, provider: str, dialect: str = "openai") -> None:
        self.field = field
        self.provider = provider
        self.dialect = dialect
        self.text = f"{field}: {what} cannot be translated to {provider}"
        super().__init__(client_error_body(dialect, self.text, param=field, code="untranslatable").decode())

    def for_dialect(self, dialect: str) -> TranslationError:
        """The same refusal, answered in ``dialect``."""
        error = TranslationError.__new__(TranslationError)
        error.field, error.provider, error.dialect, error.text = self.field, self.provider, dialect, self.text
        ProxyError.__init__(error, client_error_body(dialect, self.text, param=self.field,
                                                     code="untranslatable").decode())
        return error


class MalformedAnswer(ValueError):
    """The provider answered (200) something that is not its API's shape: a body that is not a JSON
    object, or stream framing its decoder refuses. Like the ``AttributeError``/``TypeError`` a
    translator meets on a nested value of the wrong type, the gateway's call site
    (``proxy/llm_stage.py``) turns it into a 502 ``BadUpstreamResponse``, or ends a stream cleanly."""
