"""The one error tree of the data plane, and the one place that turns an error into a response.

    ProxyError                      (any answer the gateway makes instead of the backend's)
    ├── BadRequest                  400
    ├── RequestBodyTimeout          408 request body timeout (a gap longer than requestBodyIdleTimeout)
    ├── PayloadTooLarge             413 a body larger than maxBufferSize that must be buffered
    ├── HeaderTooLarge              431 too many or too large request headers
    ├── RouteNotFound               404 route not found
    ├── AuthenticationFailed        401 authentication failure: <reason>
    ├── BasicAuthenticationFailed   401 basic authentication failure: <reason>
    ├── BasicAuthenticationBusy     503 basic authentication busy (too many password checks waiting)
    ├── ApiKeyAuthenticationFailed  401 api key authentication failure: <reason>
    │   └── KeyRefused              401 a runtime key refused (invalid api key, key revoked, key expired, key rotated)
    ├── ModelNotAllowed             403 model 'x' is not allowed for key K
    ├── BudgetExceeded              429 budget exceeded: key K's tokens per day (N); resets at ... (retry-after)
    ├── KeyStoreUnavailable         503 key store unavailable
    ├── AuthorizationDenied         403 authorization failed
    ├── CsrfValidationFailed        403 CSRF validation failed
    ├── RateLimited                 429 rate limit exceeded
    ├── RateLimitFailed             500 rate limit failed
    ├── DirectResponse              any status chosen by a directResponse or requestRedirect policy
    │   └── ModelList               200 ``GET /v1/models`` on an ``llm:`` port (JSON)
    ├── LlmRequestError             404 model_not_found, 400 missing_model / invalid_request_body (JSON)
    ├── llm_translate.TranslationError 400 a field the provider has no equivalent for (JSON, the client's dialect)
    ├── TimeoutError_
    │   ├── RequestTimeout          504 request timeout
    │   └── UpstreamTimeout         504 upstream call timeout
    └── UpstreamError
        ├── BackendUnreachable      503 (connect refused, DNS, reset before the request was sent)
        │   └── BackendTlsFailed    503 upstream connect error: certificate verify failed (or TLS handshake failed)
        └── BadUpstreamResponse     502 (the backend answered something that is not HTTP/1.1, or an LLM
                                        provider JSON a translation cannot read: proxy/llm_stage.py)

Stages raise these; ``gateway.py`` catches ``ProxyError`` once and calls ``error_response``. On a
route to LLM providers the body is the provider's error JSON instead (``dialect_error_body``),
except for an error whose body is JSON already (``TranslationError``).
Config errors are a different tree (``trioproxy.config.ConfigError``): they never reach a client.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Self

from .asgi import Header


class ProxyError(Exception):
    """An answer made by the gateway itself. ``message`` is the text/plain body."""

    status: int = 500
    default_message: str = "internal error"
    content_type: bytes = b"text/plain"
    #: the error JSON it is always answered with (``openai``), whatever the route; None: text/plain
    #: unless the route goes to an LLM provider
    dialect: str | None = None
    code: str | None = None  # OpenAI's ``error.code`` (else the class name in snake_case)
    #: why the gateway answered so, for operators only (trace ``requestFinished``, history, access
    #: log; docs/history.md, "Why"): JSON-able, never in the client's body
    why: dict[str, Any] | None = None

    def __init__(self, message: str | None = None, *, headers: Sequence[Header] = (),
                 why: dict[str, Any] | None = None) -> None:
        self.message = message if message is not None else self.default_message
        self.headers = list(headers)
        if why is not None:
            self.why = why
        super().__init__(self.message)

    def because(self, why: dict[str, Any]) -> Self:
        """This error with ``why`` set (for a raise site whose class takes no ``why`` argument)."""
        self.why = why
        return self


class BadRequest(ProxyError):
    status = 400
    default_message = "bad request"


class HeaderTooLarge(ProxyError):
    status = 431
    default_message = "request header fields too large"


class RouteNotFound(ProxyError):
    status = 404
    default_message = "route not found"


class AuthenticationFailed(ProxyError):
    status = 401
    default_message = "authentication failure"

    def __init__(self, reason: str, *, headers: Sequence[Header] = (), why: dict[str, Any] | None = None) -> None:
        super().__init__(f"authentication failure: {reason}", headers=headers, why=why)


class BasicAuthenticationFailed(ProxyError):
    """A ``basicAuth`` policy found no credentials (strict mode) or wrong ones (agentgateway's wording)."""

    status = 401
    default_message = "basic authentication failure"

    def __init__(self, reason: str, *, headers: Sequence[Header] = (), why: dict[str, Any] | None = None) -> None:
        super().__init__(f"basic authentication failure: {reason}", headers=headers, why=why)


class BasicAuthenticationBusy(ProxyError):
    """A ``basicAuth`` policy has as many bcrypt checks running and waiting as it allows: the
    request is refused at once instead of queueing (each check holds a core for ~90 ms)."""

    status = 503
    default_message = "basic authentication busy"


class ApiKeyAuthenticationFailed(ProxyError):
    """An ``apiKey`` policy found no key (strict mode) or an unknown one (agentgateway's wording)."""

    status = 401
    default_message = "api key authentication failure"

    def __init__(self, reason: str, *, why: dict[str, Any] | None = None) -> None:
        super().__init__(f"api key authentication failure: {reason}", why=why)


class KeyRefused(ApiKeyAuthenticationFailed):
    """A runtime key (``trioproxy/keys``) refused: ``reason`` is ``invalid api key``, ``key revoked``,
    ``key expired`` or ``key rotated`` (an old secret past its rotation grace period)."""

    def __init__(self, reason: str, *, key: tuple[str, str] | None = None, detail: str | None = None) -> None:
        self.reason = reason
        why: dict[str, Any] = {"policy": "apiKey", "check": reason.removeprefix("key ").replace("invalid api key", "unknown"),
                               "detail": detail or reason}
        if key is not None:  # (id, name) of the runtime key
            why["key"] = {"id": key[0], "name": key[1]}
        super().__init__(reason, why=why)


class ModelNotAllowed(ProxyError):
    """A runtime key asked for a model outside its ``models`` list."""

    status = 403
    default_message = "model is not allowed"

    def __init__(self, model: str, key: str) -> None:
        self.model = model
        self.key = key
        super().__init__(f"model {model!r} is not allowed for key {key}", why={
            "policy": "apiKey", "check": "model", "detail": f"model {model!r} is not in key {key}'s models"})


def duration_text(seconds: float) -> str:
    """``192`` → ``3m12s``, ``3725`` → ``1h2m5s``, ``0.4`` → ``0s`` (whole seconds, for a ``why`` detail)."""
    total = int(abs(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    days, hours = divmod(hours, 24)
    parts = [f"{days}d" if days else "", f"{hours}h" if hours else "", f"{minutes}m" if minutes else "",
             f"{secs}s" if secs or not (days or hours or minutes) else ""]
    return "".join(parts)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _utc(when: float) -> str:
    import datetime

    moment = datetime.datetime.fromtimestamp(when, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{moment.microsecond // 1000:03d}" if moment.microsecond else "") + "Z"


class BudgetExceeded(ProxyError):
    """A runtime key's or its team's limit is reached in one window (``trioproxy/keys/limits.py``).

    ``subject`` is what owns the limit as a client reads it (``key alice-laptop``, ``team research``);
    ``resets_at`` (epoch seconds) is None for the ``total`` window, which never resets. The answer
    carries ``retry-after`` (whole seconds until the window resets)."""

    status = 429
    default_message = "budget exceeded"

    def __init__(self, subject: str, metric: str, window: str, limit: float, resets_at: float | None,
                 *, now: float | None = None) -> None:
        import math
        import time

        self.subject, self.metric, self.window, self.limit, self.resets_at = subject, metric, window, limit, resets_at
        what = f"{metric} in total" if window == "total" else f"{metric} per {window}"
        message = f"budget exceeded: {subject}'s {what} ({_number(limit)})"
        headers: list[Header] = []
        if resets_at is None:
            message += "; it does not reset"
        else:
            message += f"; resets at {_utc(resets_at)}"
            wait = max(1, math.ceil(resets_at - (time.time() if now is None else now)))
            headers.append((b"retry-after", str(wait).encode()))
        super().__init__(message, headers=headers, why={
            "policy": "budget", "subject": subject, "metric": metric, "window": window, "limit": limit,
            "resetsAt": None if resets_at is None else _utc(resets_at)})


class KeyStoreUnavailable(ProxyError):
    """The key store (SQLite file or PostgreSQL) cannot be read or written; with ``failureMode:
    closed`` (the default) the request is refused with this."""

    status = 503
    default_message = "key store unavailable"


class AuthorizationDenied(ProxyError):
    status = 403
    default_message = "authorization failed"


class CsrfValidationFailed(ProxyError):
    """A ``csrf`` policy refused a cross-site state-changing request (agentgateway's wording)."""

    status = 403
    default_message = "CSRF validation failed"


class RateLimited(ProxyError):
    status = 429
    default_message = "rate limit exceeded"


class RateLimitFailed(ProxyError):
    status = 500
    default_message = "rate limit failed"


class DirectResponse(ProxyError):
    """Not a failure: a ``directResponse`` policy answering in the backend's place."""

    def __init__(self, status: int, body: str, *, headers: Sequence[Header] = ()) -> None:
        self.status = status
        super().__init__(body, headers=headers)


class TimeoutError_(ProxyError):
    status = 504


class RequestTimeout(TimeoutError_):
    default_message = "request timeout"


class UpstreamTimeout(TimeoutError_):
    default_message = "upstream call timeout"


class UpstreamError(ProxyError):
    status = 502
    default_message = "upstream error"


class BackendUnreachable(UpstreamError):
    status = 503
    default_message = "upstream connect error"


class BadUpstreamResponse(UpstreamError):
    status = 502
    default_message = "invalid upstream response"

    def __init__(self, message: str | None = None, *, headers: Sequence[Header] = ()) -> None:
        # h11's messages quote the bytes as Python reprs (``bytearray(b'...')``): a client reads text.
        super().__init__(plain_text(message) if message is not None else None, headers=headers)


_BYTES_REPR = re.compile(r"""bytearray\(b(['"])(.*?)\1\)|\bb(['"])(.*?)\3""")


def plain_text(message: str) -> str:
    """``illegal status line: bytearray(b'x y')`` → ``illegal status line: 'x y'``."""
    return _BYTES_REPR.sub(lambda m: f"'{m.group(2) if m.group(2) is not None else m.group(4)}'", message)


def error_response(error: ProxyError, dialect: str | None = None) -> tuple[int, list[Header], bytes]:
    """The (status, headers, body) a client receives for ``error``: text/plain, or on a route to an
    LLM provider (``dialect`` ``openai``, ``anthropic`` or ``gemini``) the error JSON that provider's SDK parses,
    so it raises its typed error (``RateLimitError``...) with the message."""
    dialect = dialect or error.dialect
    # An error whose message is its JSON body already (llm_translate's TranslationError, written in
    # the client's dialect with the field it names) is not wrapped a second time.
    if (dialect is not None and error.status >= 400 and not isinstance(error, DirectResponse)
            and error.content_type != b"application/json"):
        body = dialect_error_body(error, dialect)
        content_type = b"application/json"
    else:
        body = error.message.encode()
        content_type = error.content_type
    headers: list[Header] = [
        (b"content-type", content_type),
        (b"content-length", str(len(body)).encode()),
        *error.headers,
    ]
    return error.status, headers, body


#: status → (OpenAI ``error.type``, Anthropic ``error.type``)
_DIALECT_TYPES = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("authentication_error", "authentication_error"),
    403: ("permission_error", "permission_error"),
    404: ("invalid_request_error", "not_found_error"),
    408: ("timeout_error", "timeout_error"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("rate_limit_error", "rate_limit_error"),
    503: ("server_error", "overloaded_error"),
    504: ("timeout_error", "timeout_error"),
}
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
#: status → Gemini's ``error.status`` (google.rpc.Code names)
_GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                  408: "DEADLINE_EXCEEDED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
                  503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


def google_status(status: int) -> str:
    return _GOOGLE_STATUS.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")


def dialect_error_body(error: ProxyError, dialect: str) -> bytes:
    """OpenAI's ``{"error": {"message", "type", "code"}}``, Anthropic's
    ``{"type": "error", "error": {"type", "message"}}`` or Gemini's ``{"error": {"code", "message",
    "status"}}``; the message is the text/plain one."""
    import json

    if dialect == "gemini":
        return json.dumps({"error": {"code": error.status, "message": error.message,
                                     "status": google_status(error.status)}}, ensure_ascii=False).encode()

    openai_type, anthropic_type = _DIALECT_TYPES.get(
        error.status, ("server_error", "api_error") if error.status >= 500 else ("invalid_request_error",) * 2)
    if dialect == "anthropic":
        obj: dict[str, object] = {"type": "error", "error": {"type": anthropic_type, "message": error.message}}
    else:
        code = error.code or _CAMEL.sub("_", type(error).__name__.rstrip("_")).lower()
        obj = {"error": {"message": error.message, "type": openai_type, "param": None, "code": code}}
    return json.dumps(obj, ensure_ascii=False).encode()


class PayloadTooLarge(ProxyError):
    """A body larger than the gateway buffers (``frontendPolicies.http.maxBufferSize``)."""

    status = 413
    default_message = "request body too large"


class RequestBodyTimeout(ProxyError):
    """The request body stopped arriving (``frontendPolicies.http.requestBodyIdleTimeout``)."""

    status = 408
    default_message = "request body timeout"


class BackendTlsFailed(BackendUnreachable):
    """503: the TLS handshake with a backend failed (``upstream connect error: certificate verify
    failed`` when its certificate is not trusted or does not name it)."""

    default_message = "upstream connect error: TLS handshake failed"


class LlmRequestError(ProxyError):
    """An LLM request the ``llm:`` models cannot take: agentgateway's JSON error body
    (404 ``model_not_found``, 400 ``missing_model`` / ``invalid_request_body``)."""

    dialect = "openai"

    def __init__(self, status: int, message: str, code: str, *, detail: str | None = None) -> None:
        self.status = status
        self.code = code
        super().__init__(message, why={"policy": "llm", "check": code, "detail": detail or message})


class ModelList(DirectResponse):
    """``GET /v1/models`` on an ``llm:`` port: the gateway answers with the models it serves."""

    content_type = b"application/json"
