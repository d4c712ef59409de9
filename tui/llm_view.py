"""Bodies as a person reads them: JSON pretty-printed, LLM event streams reassembled.

Pure functions over bytes (no prompt-toolkit, no network), used by the trace viewer's body view
(``b``) and its search. ``reassemble`` turns a ``text/event-stream`` answer into what the model said:
the generated text, any reasoning and tool calls, the finish reason, the model and the final usage.
It reads the four streaming dialects the gateway serves:

- OpenAI chat completions: ``chat.completion.chunk`` objects, ``choices[].delta.content`` (and
  ``tool_calls`` pieces by index), ``finish_reason``, usage in the last chunk;
- OpenAI Responses: ``response.output_text.delta``, ``response.function_call_arguments.delta`` (the
  call's name from ``response.output_item.added``), ``response.reasoning_summary_text.delta``, usage in
  ``response.completed`` (or ``incomplete``/``failed``);
- Anthropic messages: ``content_block_*`` with ``text_delta``, ``thinking_delta`` and ``input_json_delta``
  (tool input), ``stop_reason`` in ``message_delta``, usage merged from ``message_start`` and
  ``message_delta`` (each event's fields override the earlier ones), ``error`` events;
- Gemini ``streamGenerateContent?alt=sse``: ``candidates[0].content.parts`` (``text``, ``thought``
  parts, ``functionCall``), ``finishReason``, the last ``usageMetadata``.

Token counts are read by ``llm.usage.UsageReader``, the gateway's own reader, so the view shows what
the gateway counted. Anything else is shown as it came (events listed, bodies as text).
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

from ..llm.translate.sse import SseReader
from ..llm.usage import Usage, UsageReader

Line = tuple[str, str]  # (style class without "class:", text)

DIALECTS = ("OpenAI chat", "OpenAI responses", "Anthropic messages", "Gemini")
#: the most a compressed body is inflated to for reading (a trace holds at most 2 MiB of it)
MAX_INFLATED = 16 * 1024 * 1024
_SSE_START = re.compile(rb"^(?:data|event|id|retry):|^:", re.MULTILINE)


@dataclass
class ToolCall:
    name: str
    arguments: str = ""
    id: str | None = None


@dataclass
class Stream:
    """An event stream as the model's answer: what was generated and what it cost."""

    dialect: str | None  # one of DIALECTS, or None when the events are none of them
    events: int = 0
    text: dict[int, str] = field(default_factory=dict)  # per choice / candidate / output index
    thinking: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish: str | None = None
    model: str | None = None
    usage: dict[str, Any] | None = None  # the provider's own usage object, final (merged) values
    tokens: Usage | None = None  # as the gateway counts them
    errors: list[str] = field(default_factory=list)
    done: bool = False  # the stream's end marker arrived ([DONE], message_stop, response.completed...)

    @property
    def answer(self) -> str:
        """The generated text of the first choice (what a chat client prints)."""
        return self.text.get(min(self.text), "") if self.text else ""


def parse_events(raw: bytes) -> list[tuple[str, str]]:
    """``(event name, data)`` pairs of a text/event-stream body (a last event without its blank line too)."""
    reader = SseReader()
    return reader.feed(raw) + reader.finish()


def looks_like_sse(raw: bytes) -> bool:
    head = raw.lstrip()[:200]
    return bool(head) and _SSE_START.match(head) is not None


def _dialect(obj: dict[str, Any]) -> str | None:
    typ = obj.get("type")
    if isinstance(typ, str) and typ.startswith("response."):
        return "OpenAI responses"
    if typ in ("message_start", "content_block_start", "content_block_delta", "message_delta", "message_stop"):
        return "Anthropic messages"
    if obj.get("object") == "chat.completion.chunk" or isinstance(obj.get("choices"), list):
        return "OpenAI chat"
    if isinstance(obj.get("candidates"), list) or isinstance(obj.get("usageMetadata"), dict):
        return "Gemini"
    return None


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return ": ".join(str(error[k]) for k in ("type", "code", "status", "message") if error.get(k))
    return str(error)


class _Assembler:
    def __init__(self) -> None:
        self.s = Stream(dialect=None)
        self.chat_calls: dict[tuple[int, int], ToolCall] = {}  # (choice, tool index) -> call
        self.blocks: dict[int, ToolCall] = {}  # Anthropic tool_use blocks by content index
        self.items: dict[str, ToolCall] = {}  # Responses function_call items by item id

    def add_text(self, index: int, piece: str) -> None:
        if piece:
            self.s.text[index] = self.s.text.get(index, "") + piece

    def usage(self, usage: Any, *, merge: bool = False) -> None:
        if isinstance(usage, dict):
            self.s.usage = {**(self.s.usage or {}), **usage} if merge else dict(usage)

    def model(self, value: Any) -> None:
        if isinstance(value, str) and value:
            self.s.model = value

    def feed(self, name: str, data: str) -> None:
        s = self.s
        if data.strip() == "[DONE]":
            s.done = True
            return
        try:
            obj = json.loads(data)
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        s.events += 1
        dialect = _dialect(obj)
        if s.dialect is None:
            s.dialect = dialect
        if obj.get("type") == "error" or (name == "error" and "error" in obj):
            s.errors.append(_error_text(obj.get("error", obj)))
            return
        if "error" in obj and dialect is None:
            s.errors.append(_error_text(obj["error"]))
            return
        {"OpenAI chat": self.chat, "OpenAI responses": self.responses, "Anthropic messages": self.anthropic,
         "Gemini": self.gemini}.get(dialect or "", lambda o: None)(obj)

    # -- dialects ---------------------------------------------------------------------------------
    def chat(self, obj: dict[str, Any]) -> None:
        self.model(obj.get("model"))
        if obj.get("usage") is not None:
            self.usage(obj.get("usage"))
        for choice in _list(obj.get("choices")):
            choice = _dict(choice)
            index = choice.get("index") if isinstance(choice.get("index"), int) else 0
            delta = _dict(choice.get("delta"))
            self.add_text(index, _str(delta.get("content")))
            self.add_text(index, _str(delta.get("refusal")))
            self.s.thinking += _str(delta.get("reasoning_content")) or _str(delta.get("reasoning"))
            for piece in _list(delta.get("tool_calls")):
                piece = _dict(piece)
                key = (index, piece.get("index") if isinstance(piece.get("index"), int) else 0)
                fn = _dict(piece.get("function"))
                call = self.chat_calls.get(key)
                if call is None:
                    call = self.chat_calls[key] = ToolCall(_str(fn.get("name")), id=piece.get("id"))
                    self.s.tool_calls.append(call)
                elif fn.get("name"):
                    call.name += _str(fn.get("name"))
                call.arguments += _str(fn.get("arguments"))
            if choice.get("finish_reason"):
                self.s.finish = str(choice["finish_reason"])

    def responses(self, obj: dict[str, Any]) -> None:
        typ = obj.get("type")
        index = obj.get("output_index") if isinstance(obj.get("output_index"), int) else 0
        if typ == "response.output_text.delta" or typ == "response.refusal.delta":
            self.add_text(index, _str(obj.get("delta")))
        elif typ in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self.s.thinking += _str(obj.get("delta"))
        elif typ == "response.output_item.added":
            item = _dict(obj.get("item"))
            if item.get("type") == "function_call":
                call = ToolCall(_str(item.get("name")), id=item.get("call_id") or item.get("id"))
                self.items[_str(item.get("id"))] = call
                self.s.tool_calls.append(call)
        elif typ == "response.function_call_arguments.delta":
            call = self.items.get(_str(obj.get("item_id")))
            if call is None:
                call = self.items[_str(obj.get("item_id"))] = ToolCall("")
                self.s.tool_calls.append(call)
            call.arguments += _str(obj.get("delta"))
        elif typ == "response.function_call_arguments.done":
            call = self.items.get(_str(obj.get("item_id")))
            if call is not None and isinstance(obj.get("arguments"), str):
                call.arguments = obj["arguments"]
        elif typ in ("response.created", "response.in_progress", "response.completed", "response.incomplete",
                     "response.failed"):
            response = _dict(obj.get("response"))
            self.model(response.get("model"))
            if response.get("usage") is not None:
                self.usage(response.get("usage"))
            if typ != "response.created" and typ != "response.in_progress":
                self.s.done = True
                reason = _dict(response.get("incomplete_details")).get("reason")
                self.s.finish = f"{response.get('status') or typ.split('.')[-1]}" + (f" ({reason})" if reason else "")
                if response.get("error"):
                    self.s.errors.append(_error_text(response["error"]))

    def anthropic(self, obj: dict[str, Any]) -> None:
        typ = obj.get("type")
        if typ == "message_start":
            message = _dict(obj.get("message"))
            self.model(message.get("model"))
            self.usage(message.get("usage"), merge=True)
        elif typ == "content_block_start":
            block = _dict(obj.get("content_block"))
            index = obj.get("index") if isinstance(obj.get("index"), int) else 0
            if block.get("type") in ("tool_use", "server_tool_use"):
                call = ToolCall(_str(block.get("name")), id=block.get("id"))
                self.blocks[index] = call
                self.s.tool_calls.append(call)
            self.add_text(0, _str(block.get("text")))
        elif typ == "content_block_delta":
            delta = _dict(obj.get("delta"))
            kind = delta.get("type")
            if kind == "text_delta":
                self.add_text(0, _str(delta.get("text")))
            elif kind == "thinking_delta":
                self.s.thinking += _str(delta.get("thinking"))
            elif kind == "input_json_delta":
                index = obj.get("index") if isinstance(obj.get("index"), int) else 0
                call = self.blocks.get(index)
                if call is not None:
                    call.arguments += _str(delta.get("partial_json"))
        elif typ == "message_delta":
            reason = _dict(obj.get("delta")).get("stop_reason")
            if reason:
                self.s.finish = str(reason)
            self.usage(obj.get("usage"), merge=True)
        elif typ == "message_stop":
            self.s.done = True

    def gemini(self, obj: dict[str, Any]) -> None:
        self.model(obj.get("modelVersion"))
        if isinstance(obj.get("usageMetadata"), dict):
            self.usage(obj["usageMetadata"])
        for position, candidate in enumerate(_list(obj.get("candidates"))):
            candidate = _dict(candidate)
            index = candidate.get("index") if isinstance(candidate.get("index"), int) else position
            for part in _list(_dict(candidate.get("content")).get("parts")):
                part = _dict(part)
                if part.get("thought") is True:
                    self.s.thinking += _str(part.get("text"))
                elif "functionCall" in part:
                    fn = _dict(part["functionCall"])
                    self.s.tool_calls.append(ToolCall(_str(fn.get("name")), json.dumps(fn.get("args", {})),
                                                      id=fn.get("id")))
                else:
                    self.add_text(index, _str(part.get("text")))
            if candidate.get("finishReason"):
                self.s.finish = str(candidate["finishReason"])
                self.s.done = True


def reassemble(raw: bytes) -> Stream:
    """The answer an event stream carries (see the module docstring for what each dialect gives)."""
    assembler = _Assembler()
    for name, data in parse_events(raw):
        assembler.feed(name, data)
    reader = UsageReader("text/event-stream")
    reader.feed(raw)
    assembler.s.tokens = reader.finish()
    return assembler.s


# -- rendering ------------------------------------------------------------------------------------

def _tokens_line(tokens: Usage) -> str:
    parts = [f"input {tokens.prompt_tokens}", f"output {tokens.completion_tokens}", f"total {tokens.total_tokens}"]
    for label, value in (("cached input", tokens.cached_input_tokens),
                         ("cache write", tokens.cache_creation_input_tokens),
                         ("reasoning", tokens.reasoning_tokens)):
        if value:
            parts.append(f"{label} {value}")
    return "tokens: " + ", ".join(parts)


def stream_lines(stream: Stream) -> list[Line]:
    """The reassembled answer as display lines: a caption, the text, tool calls, usage."""
    head = f"{stream.dialect or 'event'} stream reassembled from {stream.events} events"
    if stream.model:
        head += f", model {stream.model}"
    out: list[Line] = [("body.caption", head)]
    if stream.thinking:
        out.append(("body.label", "thinking:"))
        out += [("body.thinking", line) for line in stream.thinking.splitlines()]
    several = len(stream.text) > 1
    for index in sorted(stream.text):
        out.append(("body.label", f"text (choice {index}):" if several else "text:"))
        out += [("body.text", line) for line in stream.text[index].splitlines() or [""]]
    for call in stream.tool_calls:
        out.append(("body.label", f"tool call {call.name}" + (f" ({call.id})" if call.id else "") + ":"))
        out += [("body.text", line) for line in _pretty_json_text(call.arguments)]
    if stream.finish:
        out.append(("body.label", f"finish: {stream.finish}" + ("" if stream.done else " (no end event)")))
    elif not stream.done and stream.dialect:
        out.append(("body.warn", "the stream has no end event (cut short?)"))
    for error in stream.errors:
        out.append(("body.warn", f"error: {error}"))
    if stream.tokens is not None:
        out.append(("body.label", _tokens_line(stream.tokens)))
    if stream.usage is not None:
        out.append(("body.label", "usage:"))
        out += [("", "  " + line) for line in json.dumps(stream.usage, indent=2, ensure_ascii=False).splitlines()]
    return out


def _pretty_json_text(text: str) -> list[str]:
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False).splitlines()
    except ValueError:
        return text.splitlines() or [""]


def inflate(raw: bytes, encoding: str | None) -> tuple[bytes, str | None]:
    """``raw`` decoded from its ``content-encoding`` (gzip, deflate) for reading, and a note saying so
    (or why it was not: another coding, a broken stream); bytes of no coding come back as they are."""
    coding = (encoding or "").strip().lower()
    if coding in ("", "identity"):
        return raw, None
    if coding not in ("gzip", "x-gzip", "deflate"):
        return raw, f"({coding}-encoded: shown as it came)"
    for wbits in ((32 + zlib.MAX_WBITS,) if coding != "deflate" else (zlib.MAX_WBITS, -zlib.MAX_WBITS)):
        inflater = zlib.decompressobj(wbits)
        try:
            data = inflater.decompress(raw, MAX_INFLATED)
        except zlib.error:
            continue
        more = " (the first 16 MiB)" if inflater.unconsumed_tail else ""
        return data, f"({coding}: {len(raw)} bytes decoded to {len(data)}{more})"
    return raw, f"({coding}-encoded but not decodable: shown as it came)"


def body_lines(raw: bytes, content_type: str | None = None, *, truncated: bool = False,
               encoding: str | None = None) -> list[Line]:
    """A body for reading: decoded from its ``encoding`` (gzip, deflate), then an event stream
    reassembled (then its events, each JSON on one line), JSON pretty-printed, text as is, anything
    else as a hex preview. An event stream is a ``text/event-stream`` body, or one that starts like
    one (a trace may not show the header)."""
    media = (content_type or "").partition(";")[0].strip().lower()
    out: list[Line] = []
    if truncated:
        out.append(("body.warn", f"(truncated: the trace holds the first {len(raw)} bytes)"))
    raw, note = inflate(raw, encoding)
    if note:
        out.append(("body.warn" if "shown as it came" in note else "body.label", note))
    json_media = media == "application/json" or media.endswith("+json")
    if media == "text/event-stream" or (not json_media and looks_like_sse(raw)):
        events = parse_events(raw)
        out += stream_lines(reassemble(raw))
        out.append(("body.caption", f"{len(events)} events:"))
        for name, data in events:
            out.append(("", f"{name}: {data}" if name != "message" else data))
        return out
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return out + [("", f"<{len(raw)} bytes binary> {raw[:64].hex()}")]
    if json_media or not media:
        try:
            return out + [("", line) for line in json.dumps(json.loads(text), indent=2, ensure_ascii=False)
                          .splitlines()]
        except ValueError:
            pass
    return out + [("", line) for line in text.splitlines()]
