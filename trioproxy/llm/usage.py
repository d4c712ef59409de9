"""LLM traffic helpers, pure: request rewriting, usage reading and usage stripping.

``prepare_request_body`` rewrites a request before it goes upstream (model override,
``stream_options.include_usage`` so that chat streams report usage). ``UsageReader`` watches a
response body as the gateway forwards it and yields the ``usage`` object at the end; it
only observes the chunks, so forwarding never waits for it. ``UsageStripper`` takes back out of a
chat stream what the added option made the provider send (the usage-only chunk, ``"usage": null``
members), so a client that did not ask sees the stream it would have had.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Callable
from typing import Any

import attrs

__all__ = [
    "DEFAULT_MAX_BODY",
    "LlmRequestInfo",
    "Usage",
    "UsageReader",
    "UsageStripper",
    "loads_json",
    "prepare_request_body",
    "provider_usage",
    "usage_fields",
    "usage_from_response",
]

#: Largest JSON response body (or single SSE event) buffered to find ``usage``.
DEFAULT_MAX_BODY = 4 * 1024 * 1024


def _compact_dumps() -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=False)`` with its encoder made once,
    not per call (a rewritten request body: every request whose model the provider overrides)."""
    encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator
        return encoder.encode
    # json.dumps's own C encoder with json.dumps's other defaults, but no circular check: the
    # values are parsed JSON (json.loads never builds a cycle) with a few keys set
    c_encode = make(None, encoder.default, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    return lambda value: "".join(c_encode(value, 0))


_dumps = _compact_dumps()
_DECODER = json.JSONDecoder()


def loads_json(data: bytes) -> Any:
    """``json.loads(data)``, without its encoding detection for the UTF-8 every JSON API sends:
    run on every request body the gateway rewrites and every response (or event) it reads usage
    from. What detection would read otherwise (a BOM, UTF-16 or UTF-32: a NUL or an invalid UTF-8
    byte up front) goes through ``json.loads`` itself, so the result is always the same."""
    if data[:1] not in (b"", b"\x00", b"\xef") and data[1:2] != b"\x00":
        try:
            text = data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            pass
        else:
            return _DECODER.decode(text)
    return json.loads(data)


@attrs.frozen
class LlmRequestInfo:
    """What the gateway learns from a chat request (for traces and accounting)."""

    model: str | None
    streaming: bool
    #: the gateway added ``stream_options.include_usage``: the client must not see its effects
    usage_added: bool = False


@attrs.frozen
class Usage:
    """Token counts of one response, from its ``usage`` object."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    model: str | None = None
    #: input tokens served from the provider's cache (OpenAI ``cached_tokens``, Anthropic
    #: ``cache_read_input_tokens``), written to it (Anthropic ``cache_creation_input_tokens``),
    #: and output tokens spent reasoning (``reasoning_tokens``)
    cached_input_tokens: int = 0
    cache_creation_input_tokens: int = 0
    reasoning_tokens: int = 0


def prepare_request_body(
    body: bytes, *, model_override: str | None = None, stream_usage_option: bool = True
) -> tuple[bytes, LlmRequestInfo | None]:
    """Apply the provider's model override and ask streams to report usage.

    For ``"stream": true`` the request gets ``stream_options.include_usage = true``, keeping
    any other ``stream_options`` keys the client sent, unless ``stream_usage_option`` is false
    (Anthropic's API always reports usage and rejects unknown fields). The body is re-serialised only when
    something changed, so ``result is body`` tells the caller that content-length still
    holds. A body that is not a JSON object is passed through with info ``None``.
    """
    try:
        obj = loads_json(body)
    except (ValueError, UnicodeDecodeError):
        return body, None
    if not isinstance(obj, dict):
        return body, None
    changed = False
    if model_override is not None and obj.get("model") != model_override:
        obj["model"] = model_override
        changed = True
    streaming = obj.get("stream") is True
    added = False
    if streaming and stream_usage_option:
        options = obj.get("stream_options")
        if not isinstance(options, dict):
            options = {}
        if options.get("include_usage") is not True:
            obj["stream_options"] = {**options, "include_usage": True}
            changed = added = True
    model = obj.get("model")
    info = LlmRequestInfo(model=model if isinstance(model, str) else None, streaming=streaming, usage_added=added)
    if not changed:
        return body, info
    return _dumps(obj).encode(), info


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


#: (prompt, completion, total, model, cached input, cache creation, reasoning) as one body or event
#: gave them; None where it did not
_Parts = tuple[int | None, int | None, int | None, str | None, int | None, int | None, int | None]


def _detail(usage: dict[str, Any], keys: tuple[str, str], field: str) -> int | None:
    for key in keys:
        details = usage.get(key)
        if isinstance(details, dict):
            return _count(details.get(field))
    return None


def _gemini_parts(obj: dict[str, Any], meta: dict[str, Any]) -> _Parts | None:
    """Gemini's ``usageMetadata``: ``promptTokenCount`` (cached ones included, as OpenAI's
    ``prompt_tokens``), ``candidatesTokenCount`` + ``thoughtsTokenCount`` (the thoughts are output
    billed as such: OpenAI's ``completion_tokens`` count its reasoning tokens too), ``totalTokenCount``."""
    prompt = _count(meta.get("promptTokenCount"))
    candidates = _count(meta.get("candidatesTokenCount"))
    thoughts = _count(meta.get("thoughtsTokenCount"))
    total = _count(meta.get("totalTokenCount"))
    if prompt is None and candidates is None and total is None:
        return None
    completion = None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    model = obj.get("modelVersion")
    return (prompt, completion, total, model if isinstance(model, str) else None,
            _count(meta.get("cachedContentTokenCount")), None, thoughts)


def _usage_parts(obj: Any) -> _Parts | None:
    if isinstance(obj, list):  # Gemini's streamGenerateContent without alt=sse: one JSON array
        return next((parts for parts in map(_usage_parts, reversed(obj)) if parts is not None), None)
    if not isinstance(obj, dict):
        return None
    meta = obj.get("usageMetadata")
    if isinstance(meta, dict):
        return _gemini_parts(obj, meta)
    usage = obj.get("usage")
    if not isinstance(usage, dict):
        # Responses API events carry it under ``response``; Anthropic's message_start under ``message``.
        for key in ("response", "message"):
            inner = obj.get(key)
            if isinstance(inner, dict) and isinstance(inner.get("usage"), dict):
                obj, usage = inner, inner["usage"]
                break
        else:
            return None
    prompt = _count(usage.get("prompt_tokens", usage.get("input_tokens")))
    completion = _count(usage.get("completion_tokens", usage.get("output_tokens")))
    total = _count(usage.get("total_tokens"))
    if prompt is None and completion is None and total is None:
        return None
    cached = _detail(usage, ("prompt_tokens_details", "input_tokens_details"), "cached_tokens")
    if cached is None:
        cached = _count(usage.get("cache_read_input_tokens"))
    creation = _count(usage.get("cache_creation_input_tokens"))
    reasoning = _detail(usage, ("completion_tokens_details", "output_tokens_details"), "reasoning_tokens")
    model = obj.get("model")
    return prompt, completion, total, model if isinstance(model, str) else None, cached, creation, reasoning


def _usage(parts: _Parts) -> Usage:
    prompt, completion, total, model, cached, creation, reasoning = parts
    if total is None:
        # Anthropic's input_tokens leave out the cached ones: the request consumed all three.
        total = (prompt or 0) + (completion or 0) + (cached or 0) + (creation or 0)
    return Usage(prompt_tokens=prompt or 0, completion_tokens=completion or 0, total_tokens=total, model=model,
                 cached_input_tokens=cached or 0, cache_creation_input_tokens=creation or 0,
                 reasoning_tokens=reasoning or 0)


def usage_from_response(obj: Any) -> Usage | None:
    """``Usage`` from a parsed chat completion (or chunk), or None if it carries none.

    Accepts ``prompt_tokens``/``completion_tokens`` and the ``input_tokens``/``output_tokens`` of
    the Responses API (also under ``response.usage``) and of Anthropic's Messages API (also under
    ``message.usage``, its ``message_start`` event); a missing ``total_tokens`` is their sum.
    """
    parts = _usage_parts(obj)
    return _usage(parts) if parts is not None else None


def provider_usage(raw: dict[str, Any], shape: str) -> Usage | None:
    """``Usage`` from a provider's own usage object: ``shape`` ``gemini`` (``usageMetadata``), ``bedrock``
    (Converse's camel-case ``inputTokens``..., cache reads and writes apart as Anthropic's), else OpenAI's
    or Anthropic's ``usage``. A translated answer is counted from it, as its passthrough would be."""
    if shape == "gemini":
        return usage_from_response({"usageMetadata": raw})
    if shape == "bedrock":
        raw = {"input_tokens": raw.get("inputTokens"), "output_tokens": raw.get("outputTokens"),
               "total_tokens": raw.get("totalTokens"), "cache_read_input_tokens": raw.get("cacheReadInputTokens"),
               "cache_creation_input_tokens": raw.get("cacheWriteInputTokens")}
    return usage_from_response({"usage": raw})


def usage_fields(usage: Usage) -> dict[str, Any]:
    """The ``llm.*`` values (CEL, metrics, access log) of one answer's usage; zero counts left out."""
    out: dict[str, Any] = {"inputTokens": usage.prompt_tokens, "outputTokens": usage.completion_tokens,
                           "totalTokens": usage.total_tokens}
    for key, value in (("responseModel", usage.model), ("cachedInputTokens", usage.cached_input_tokens),
                       ("cacheCreationInputTokens", usage.cache_creation_input_tokens),
                       ("reasoningTokens", usage.reasoning_tokens)):
        if value:
            out[key] = value
    return out


# A JSON text can only contain the bytes `"usage"` as a key or a string value (quotes inside
# strings are escaped), so this finds events with a usage *object* without parsing them;
# OpenAI streams carry `"usage":null` in every chunk but the last.
_USAGE_OBJECT = re.compile(rb'"usage"\s*:\s*\{')
#: what the usage reader looks for: OpenAI's and Anthropic's ``usage``, Gemini's ``usageMetadata``
_READ_USAGE = re.compile(rb'"usage(?:Metadata)?"\s*:\s*\{')
_NEWLINE = re.compile(rb"\r\n?|\n")
#: the ``event:`` lines of the events that end a stream's answer: Anthropic's, the Responses API's
#: (a tuple: a line may be a bytearray, which does not hash)
_END_EVENTS = tuple(b"event:" + space + name for space in (b" ", b"") for name in (
    b"message_stop", b"response.completed", b"response.incomplete", b"response.failed"))


class _SseUsage:
    """Incremental text/event-stream parser that keeps the ``usage`` seen, merged field by field.

    OpenAI sends usage once, in its last chunk. Anthropic splits it: ``message_start`` has
    ``input_tokens`` (and a first ``output_tokens``), each ``message_delta`` the running
    ``output_tokens``; a field an event leaves out keeps its earlier value.

    Holds at most the current partial line and the data lines of the current event, each
    event bounded by ``max_event``; an over-long event is skipped, not buffered.

    ``ended``: the event that ends the answer was read (OpenAI's ``[DONE]``, Anthropic's
    ``message_stop``, the Responses API's ``response.completed``, Gemini's chunk with a
    ``finishReason``): a client may close once it has it, with its whole answer.
    """

    __slots__ = ("parts", "ended", "_max", "_partial", "_data", "_size", "_skip_lf", "_drop_line", "_drop_event",
                 "_end_event")

    def __init__(self, max_event: int) -> None:
        self.parts: _Parts | None = None
        self.ended = False
        self._end_event = False  # the current event's ``event:`` line names an answer's end
        self._max = max_event
        self._partial = b""  # incomplete last line
        self._data: list[bytes] = []  # data lines of the current event
        self._size = 0
        self._skip_lf = False  # previous chunk ended in CR: a leading LF is the same line end
        self._drop_line = False  # skipping the rest of an over-long line
        self._drop_event = False  # skipping the rest of an over-long event

    def feed(self, chunk: bytes) -> None:
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                chunk = chunk[1:]
        if self._drop_line:
            end = _NEWLINE.search(chunk)
            if end is None:
                return
            self._drop_line = False
            self._skip_lf = end.group() == b"\r" and end.end() == len(chunk)
            chunk = chunk[end.end() :]
        if not chunk:
            return
        buf = self._partial + chunk if self._partial else chunk
        lines = buf.splitlines()  # bytes.splitlines breaks on \n, \r\n and \r only
        last = buf[-1]
        if last == 0x0D:
            self._skip_lf = True
            self._partial = b""
        elif last == 0x0A:
            self._partial = b""
        else:
            self._partial = lines.pop()
            if len(self._partial) > self._max:
                self._partial = b""
                self._drop_line = True
                self._drop_event = True
        for line in lines:
            self._line(line)

    def _line(self, line: bytes) -> None:
        if not line:
            self._dispatch()
        elif line.startswith(b"data:") and not self._drop_event:
            value = line[6:] if line[5:6] == b" " else line[5:]
            self._size += len(value) + 1
            if self._size > self._max:
                self._drop_event = True
                self._data.clear()
            else:
                self._data.append(value)
        elif line in _END_EVENTS:
            self._end_event = True
        # Other fields (id:, retry:) and comments do not matter here.

    def _dispatch(self) -> None:
        data = self._data
        self._data, self._size, self._drop_event = [], 0, False
        if self._end_event:
            self._end_event = False
            self.ended = True
        if not data:
            return
        text = data[0] if len(data) == 1 else b"\n".join(data)
        if _READ_USAGE.search(text) is None:
            if text == b"[DONE]":
                self.ended = True
            return
        try:
            obj = loads_json(text)
            parts = _usage_parts(obj)
        except ValueError:
            return
        if isinstance(obj, dict) and _gemini_finished(obj):
            self.ended = True
        if parts is None:
            return
        old = self.parts
        if old is not None:
            prompt, completion, total, model, cached, creation, reasoning = parts
            if total is None and prompt is None:
                prompt = old[0]
            if total is None and completion is None:
                completion = old[1]
            parts = (prompt, completion, total, model or old[3], old[4] if cached is None else cached,
                     old[5] if creation is None else creation, old[6] if reasoning is None else reasoning)
        self.parts = parts

    def finish(self) -> Usage | None:
        # Be lenient with a stream that ends without the final blank line.
        if self._partial and not self._drop_line:
            self._line(self._partial)
        self._partial = b""
        if not self._drop_event:
            self._dispatch()
        return _usage(self.parts) if self.parts is not None else None


def _gemini_finished(obj: dict[str, Any]) -> bool:
    """A Gemini stream's chunk with a candidate's ``finishReason``: its last (it carries the usage)."""
    candidates = obj.get("candidates")
    return isinstance(candidates, list) and any(isinstance(c, dict) and c.get("finishReason") for c in candidates)


class _JsonUsage:
    """Buffers a JSON body up to ``max_body`` bytes and parses it once at the end."""

    __slots__ = ("_max", "_chunks", "_size")
    ended = False  # a whole body has no logical end before its last byte

    def __init__(self, max_body: int) -> None:
        self._max = max_body
        self._chunks: list[bytes] | None = []  # None once over the cap
        self._size = 0

    def feed(self, chunk: bytes) -> None:
        if self._chunks is None:
            return
        self._size += len(chunk)
        if self._size > self._max:
            self._chunks = None
        else:
            self._chunks.append(chunk)

    def finish(self) -> Usage | None:
        if not self._chunks:
            return None
        try:
            return usage_from_response(loads_json(b"".join(self._chunks)))
        except (ValueError, UnicodeDecodeError):
            return None
        finally:
            self._chunks = None


class UsageReader:
    """Reads ``usage`` from a response body as it passes through the gateway.

    ``feed`` every chunk right after (or before) forwarding it, unchanged; call ``finish``
    once the body is complete. It never modifies the bytes. ``content_type`` selects the
    parser: ``text/event-stream`` → incremental SSE (only events whose text holds a
    ``"usage"`` object are JSON-parsed, the last one wins); JSON types or a missing type →
    buffered up to ``max_body`` bytes and parsed at ``finish``; anything else → no usage.
    ``gzip``/``deflate`` bodies are inflated for reading; other encodings give no usage.
    """

    __slots__ = ("_parser", "_inflate", "_max")

    def __init__(
        self,
        content_type: str | bytes | None,
        *,
        content_encoding: str | bytes | None = None,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        self._max = max_body
        media = _lower_str(content_type).partition(";")[0].strip()
        if media == "text/event-stream":
            self._parser: _SseUsage | _JsonUsage | None = _SseUsage(max_body)
        elif media in ("", "application/json") or media.endswith("+json"):
            self._parser = _JsonUsage(max_body)
        else:
            self._parser = None
        encoding = _lower_str(content_encoding).strip()
        self._inflate = None
        if encoding in ("gzip", "x-gzip", "deflate"):
            # 32 + MAX_WBITS: accept gzip or zlib framing (what "deflate" means on the wire).
            self._inflate = zlib.decompressobj(32 + zlib.MAX_WBITS)
        elif encoding not in ("", "identity"):
            self._parser = None

    @property
    def active(self) -> bool:
        """False when this response cannot carry readable usage (feeding is then a no-op)."""
        return self._parser is not None

    @property
    def ended(self) -> bool:
        """An event stream's answer is complete (its last event read): see ``_SseUsage``."""
        parser = self._parser
        return parser is not None and parser.ended

    def feed(self, chunk: bytes) -> None:
        parser = self._parser
        if parser is None or not chunk:
            return
        if self._inflate is None:
            parser.feed(chunk)
            return
        try:
            data = self._inflate.decompress(chunk, self._max)
            while True:
                parser.feed(data)
                tail = self._inflate.unconsumed_tail
                if not tail:
                    break
                data = self._inflate.decompress(tail, self._max)
        except zlib.error:
            self._parser = None

    def finish(self) -> Usage | None:
        """The usage of the whole response, or None if it carried none (or was too big)."""
        parser, self._parser = self._parser, None
        return parser.finish() if parser is not None else None


# What ``include_usage`` adds to an OpenAI chat stream: ``"usage":null`` in every chunk, and a last
# chunk with ``"choices":[]`` and the usage object.
_USAGE_NULL = re.compile(rb',\s*"usage"\s*:\s*null(?=\s*[,}])|"usage"\s*:\s*null\s*,')
_EMPTY_CHOICES = re.compile(rb'"choices"\s*:\s*\[\s*\]')
_EVENT_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")  # a blank line ends an event


class UsageStripper:
    """Takes out of a chat SSE stream what ``stream_options.include_usage`` (added by the gateway,
    not asked for by the client) made the provider send: the usage-only chunk is dropped, the
    ``"usage":null`` members removed, a usage object riding on a content chunk deleted.

    ``feed`` returns the bytes to forward now: whole events only (the rest waits for the next
    chunk, as a client waits for the blank line); ``finish`` returns what is left. Only chunks
    that mention ``"usage"`` are touched (one regex search each): other bytes pass unchanged.
    """

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._held + chunk if self._held else chunk
        end = 0
        for match in _EVENT_END.finditer(data):
            if match.end() < len(data) or data[-1] != 0x0D:  # a last CR may be the start of CR LF
                end = match.end()
        if end == 0:
            self._held = data
            return b""
        self._held = data[end:]
        return _strip_events(data[:end])

    def finish(self) -> bytes:
        held, self._held = self._held, b""
        return _strip_events(held) if held else b""


def _strip_events(text: bytes) -> bytes:
    if b'"usage"' not in text:
        return text
    text = _USAGE_NULL.sub(b"", text)
    if _USAGE_OBJECT.search(text) is None:
        return text
    out = []
    start = 0
    for match in _EVENT_END.finditer(text):
        out.append(_strip_event(text[start:match.start()], text[match.start():match.end()]))
        start = match.end()
    if start < len(text):
        out.append(_strip_event(text[start:], b""))
    return b"".join(out)


def _strip_event(event: bytes, end: bytes) -> bytes:
    """One event (and its terminating blank line): dropped when it is the usage-only chunk."""
    if _USAGE_OBJECT.search(event) is None:
        return event + end
    if _EMPTY_CHOICES.search(event) is not None:
        return b""
    lines = event.splitlines()
    data = [line[6:] if line[5:6] == b" " else line[5:] for line in lines if line.startswith(b"data:")]
    try:
        obj = loads_json(b"\n".join(data))
    except ValueError:
        return event + end
    if not isinstance(obj, dict) or "usage" not in obj:
        return event + end
    del obj["usage"]
    others = [line for line in lines if not line.startswith(b"data:")]
    payload = _dumps(obj).encode()
    return b"\n".join([*others, b"data: " + payload]) + (end or b"\n\n")


def _lower_str(value: str | bytes | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    return value.lower()
