"""An OpenAI chat completions request read into a provider-neutral form, refusing by field path.

Each provider's translator renders ``Chat``; what the provider has no place for it refuses through
``Chat.refuse`` with the path of the client's field, so the error names what the client sent.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from .common import Fields, data_url
from .errors import TranslationError

__all__ = ["Chat", "Image", "Text", "Tool", "ToolCall", "ToolResult", "Turn", "read_chat"]


@attrs.define
class Text:
    text: str


@attrs.define
class Image:
    path: str  # the client's field, for a provider that refuses this form
    url: str | None = None  # an http(s) URL
    media_type: str | None = None  # with ``data``: base64 bytes from a data: URL
    data: str | None = None


@attrs.define
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]


@attrs.define
class ToolResult:
    path: str  # the client's tool message
    id: str
    name: str | None  # the name of the call it answers (Gemini wants it), if that call is in the history
    content: str


Block = Text | Image | ToolCall | ToolResult


@attrs.define
class Turn:
    role: str  # "user" (tool results too) or "assistant"
    blocks: list[Block]


@attrs.define
class Tool:
    name: str
    description: str | None
    parameters: dict[str, Any]


@attrs.define
class Chat:
    model: str | None
    system: list[str]
    turns: list[Turn]
    max_tokens: int | None
    temperature: float | None
    top_p: float | None
    stop: list[str]
    stream: bool
    include_usage: bool
    tools: list[Tool]
    tool_choice: str | None  # None, "auto", "required", "none", or "function:<name>"
    parallel_tool_calls: bool | None
    user: str | None
    extra: dict[str, Any]  # the provider-specific keys the caller asked for (``supports``)


#: keys with a neutral value that changes nothing: accepted whatever the provider
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "n": (1,), "logprobs": (False,), "frequency_penalty": (0, 0.0), "presence_penalty": (0, 0.0),
    "store": (False,), "response_format": ({"type": "text"},), "modalities": (["text"],),
    "metadata": ({},),
}


def read_chat(obj: dict[str, Any], provider: str, supports: frozenset[str] = frozenset()) -> Chat:
    """``obj`` (a parsed OpenAI chat request) as a ``Chat``; ``supports`` names the optional keys the
    provider maps itself (``seed``, ``frequency_penalty``, ``response_format``, ...), kept in ``extra``."""
    f = Fields(obj, "", provider, "openai")
    model = f.take("model", str)
    messages = f.take("messages", list)
    if not messages:
        raise f.refuse("messages", "an empty or missing list")
    max_tokens = f.take("max_completion_tokens", int)
    legacy = f.take("max_tokens", int)
    max_tokens = max_tokens if max_tokens is not None else legacy
    stop = f.take("stop", (str, list))
    if isinstance(stop, str):
        stop = [stop]
    elif stop is not None and not all(isinstance(s, str) for s in stop):
        raise f.refuse("stop", "a list that is not all strings")
    stream = f.take("stream", bool) is True
    options = f.take("stream_options", dict) or {}
    tool_choice = _tool_choice(f, f.take("tool_choice", (str, dict)))
    user = f.take("user", str)
    extra = {key: f.take(key) for key in supports if obj.get(key) is not None}
    chat = Chat(
        model=model, system=[], turns=[], max_tokens=max_tokens,
        temperature=f.take("temperature", (int, float)), top_p=f.take("top_p", (int, float)),
        stop=stop or [], stream=stream, include_usage=options.get("include_usage") is True,
        tools=_tools(f, f.take("tools", list) or []), tool_choice=tool_choice,
        parallel_tool_calls=f.take("parallel_tool_calls", bool), user=user, extra=extra)
    f.done(NEUTRAL)
    _messages(f, messages, chat)
    return chat


def _tool_choice(f: Fields, choice: Any) -> str | None:
    if choice is None or choice in ("auto", "required", "none"):
        return str(choice) if choice is not None else None
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = (choice.get("function") or {}).get("name")
        if isinstance(name, str):
            return f"function:{name}"
    raise f.refuse("tool_choice", json.dumps(choice))


def _tools(f: Fields, tools: list[Any]) -> list[Tool]:
    out = []
    for i, tool in enumerate(tools):
        t = f.sub("tools", tool)
        t.path = f"tools[{i}]"
        kind = t.take("type", str)
        if kind != "function":
            raise t.refuse("type", f"tool type {kind!r}")
        fn = t.sub("function", t.take("function", dict))
        name = fn.take("name", str)
        if not name:
            raise fn.refuse("name", "a missing name")
        description = fn.take("description", str)
        parameters = fn.take("parameters", dict) or {"type": "object", "properties": {}}
        fn.drop("strict")  # a decoding hint; the schema itself still goes
        fn.done()
        t.done()
        out.append(Tool(name, description, parameters))
    return out


def _messages(f: Fields, messages: list[Any], chat: Chat) -> None:
    names: dict[str, str] = {}  # tool call id -> function name
    for i, message in enumerate(messages):
        m = Fields(message, f"messages[{i}]", f.provider, "openai") if isinstance(message, dict) else None
        if m is None:
            raise f.refuse(f"messages[{i}]", "a message that is not an object")
        role = m.take("role", str)
        m.drop("name")  # the participant name has no place at these providers; it is not content
        content = m.take("content", (str, list))
        if role in ("system", "developer"):
            if chat.turns:
                raise m.refuse("role", f"a {role} message after the conversation started")
            chat.system.append(_text_only(m, content))
            m.done()
        elif role == "user":
            m.done()
            _add(chat, "user", _user_blocks(m, content))
        elif role == "assistant":
            blocks: list[Block] = []
            m.drop("refusal")
            text = _text_only(m, content) if content is not None else ""
            if text:
                blocks.append(Text(text))
            for j, call in enumerate(m.take("tool_calls", list) or []):
                c = m.sub("tool_calls", call)
                c.path = f"{m.path}.tool_calls[{j}]"
                if c.take("type", str) not in (None, "function"):
                    raise c.refuse("type", f"tool call type {call.get('type')!r}")
                fn = c.sub("function", c.take("function", dict))
                name, arguments = fn.take("name", str), fn.take("arguments", str)
                fn.done()
                try:
                    args = json.loads(arguments or "{}")
                except ValueError:
                    raise fn.refuse("arguments", "arguments that are not JSON") from None
                if not isinstance(args, dict):
                    raise fn.refuse("arguments", "arguments that are not a JSON object")
                call_id = c.take("id", str) or f"call_{i}_{j}"
                c.done()
                names[call_id] = name or ""
                blocks.append(ToolCall(call_id, name or "", args))
            m.done()
            if not blocks:
                blocks.append(Text(""))
            _add(chat, "assistant", blocks)
        elif role == "tool":
            call_id = m.take("tool_call_id", str)
            if not call_id:
                raise m.refuse("tool_call_id", "a missing tool_call_id")
            m.done()
            _add(chat, "user", [ToolResult(m.path, call_id, names.get(call_id), _text_only(m, content))])
        else:
            raise m.refuse("role", f"role {role!r}")


def _add(chat: Chat, role: str, blocks: list[Block]) -> None:
    """Consecutive turns of one role become one (tool results then a user message: one user turn)."""
    if chat.turns and chat.turns[-1].role == role:
        chat.turns[-1].blocks.extend(blocks)
    else:
        chat.turns.append(Turn(role, blocks))


def _text_only(m: Fields, content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for k, part in enumerate(content):
        p = m.sub("content", part)
        p.path = f"{m.path}.content[{k}]"
        kind = p.take("type", str)
        if kind != "text":
            raise p.refuse("type", f"content type {kind!r} in this message")
        parts.append(p.take("text", str) or "")
        p.done()
    return "".join(parts)


def _user_blocks(m: Fields, content: Any) -> list[Block]:
    if content is None:
        raise m.refuse("content", "a missing content")
    if isinstance(content, str):
        return [Text(content)]
    blocks: list[Block] = []
    for k, part in enumerate(content):
        p = m.sub("content", part)
        p.path = f"{m.path}.content[{k}]"
        kind = p.take("type", str)
        if kind == "text":
            blocks.append(Text(p.take("text", str) or ""))
        elif kind == "image_url":
            image = p.sub("image_url", p.take("image_url", dict))
            url = image.take("url", str) or ""
            image.take("detail")  # a resolution hint for OpenAI's tiling; the others size images themselves
            image.done()
            inline = data_url(url)
            if inline is not None:
                blocks.append(Image(image.at("url"), media_type=inline[0], data=inline[1]))
            elif url.startswith(("http://", "https://")):
                blocks.append(Image(image.at("url"), url=url))
            else:
                raise image.refuse("url", "an image URL that is neither http(s) nor a base64 data: URL")
        else:
            raise p.refuse("type", f"content type {kind!r}")
        p.done()
    return blocks


def refuse(path: str, what: str, provider: str) -> TranslationError:
    return TranslationError(path, what, provider, "openai")
