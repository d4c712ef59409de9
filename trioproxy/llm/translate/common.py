"""What the translators share: reading an OpenAI chat request field by field, refusing by path."""

from __future__ import annotations

import json
import re
import time
from typing import Any

from .errors import TranslationError

__all__ = ["Fields", "data_url", "dumps", "now", "parse_json"]

_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+)(?:;[^,;]*)*;base64,(.*)", re.S)


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def now() -> int:
    return int(time.time())


def data_url(url: str) -> tuple[str, str] | None:
    """``(media type, base64 data)`` of a ``data:…;base64,`` URL, else None."""
    match = _DATA_URL.fullmatch(url)
    return (match.group(1), match.group(2)) if match else None


def parse_json(body: bytes, provider: str, dialect: str) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise TranslationError("body", "a body that is not JSON", provider, dialect) from None
    if not isinstance(obj, dict):
        raise TranslationError("body", "a JSON body that is not an object", provider, dialect)
    return obj


class Fields:
    """A request object read key by key: ``take`` what maps, then ``done`` refuses whatever is left
    that is not at its neutral value (``None``, or a value in ``neutral``)."""

    __slots__ = ("obj", "path", "provider", "dialect", "_left")

    def __init__(self, obj: dict[str, Any], path: str, provider: str, dialect: str) -> None:
        self.obj, self.path, self.provider, self.dialect = obj, path, provider, dialect
        self._left = set(obj)

    def at(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else key

    def refuse(self, key: str | int, what: str) -> TranslationError:
        return TranslationError(self.at(key), what, self.provider, self.dialect)

    def take(self, key: str, kind: type | tuple[type, ...] | None = None) -> Any:
        self._left.discard(key)
        value = self.obj.get(key)
        if value is not None and kind is not None and (not isinstance(value, kind) or isinstance(value, bool)
                                                       and bool not in (kind if isinstance(kind, tuple) else (kind,))):
            raise self.refuse(key, f"a {type(value).__name__}")
        return value

    def drop(self, *keys: str) -> None:
        """Keys that carry nothing the provider needs (hints, already-applied options)."""
        self._left.difference_update(keys)

    def done(self, neutral: dict[str, tuple[Any, ...]] | None = None) -> None:
        neutral = neutral or {}
        for key in sorted(self._left):
            value = self.obj[key]
            if value is None or value in neutral.get(key, ()):
                continue
            raise self.refuse(key, f"{key!r}" if self.path else f"the field {key!r}")

    def sub(self, key: str | int, obj: Any) -> Fields:
        if not isinstance(obj, dict):
            raise self.refuse(key, f"a {type(obj).__name__} where an object is expected")
        return Fields(obj, self.at(key), self.provider, self.dialect)
