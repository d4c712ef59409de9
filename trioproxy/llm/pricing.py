"""Model prices and the cost of one LLM answer, pure (docs/pricing.md).

``prices.json`` (shipped beside this module) lists USD prices per million tokens under
provider-qualified names (``openai/gpt-4o``, ``anthropic/claude-sonnet-4-5``,
``bedrock/anthropic.claude-3-5-sonnet-20241022-v2:0``); ``config.prices`` changes or adds entries
field by field (``PriceCatalog.with_overrides``).

A lookup (``PriceCatalog.price``) tries the provider's namespaces in order (``azure`` falls back to
``openai``, ``vertex`` to ``gemini`` and ``anthropic``), then a name qualified by a namespace
(``anthropic/claude-sonnet-4-5``, the ``llm:`` format's and OpenRouter's style), then the entries
``config.prices`` added without one. In a namespace, a name matches its entry, an alias of it, or,
stripped of what names a snapshot (a date ``-2024-08-06``/``-20241022``/``@20241022``/``-2411``, a
Gemini ``-001``, ``-latest``, a Bedrock version ``-v2:0`` and region prefix ``us.``; a ``models/``
path), the entry of the same base name (the first listed when several share it).

The cost (``Price.cost``) bills uncached input at ``input``, cache reads at ``cachedInput`` (else
``input``), cache writes at ``cacheWrite`` (else ``input``), output at ``output`` and the reasoning
part of the output at ``reasoning`` (else ``output``). ``Usage.completion_tokens`` count the
reasoning tokens (OpenAI's do; usage.py adds Gemini's thoughts), so they are billed once.
Whether ``prompt_tokens`` count the cached ones depends on the provider: OpenAI's and Gemini's
do, Anthropic's and Bedrock's leave out cache reads and writes; usage.py gives such usage a
``total_tokens`` of all four, which is how ``uncached_input`` tells them apart.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

import attrs

from ..config.model import PriceOverride
from .usage import Usage

__all__ = ["CACHE_SIZE", "FIELDS", "MissingPrice", "Price", "PriceCatalog", "base_name", "namespaces", "uncached_input"]

#: wire name (prices.json, config.prices) -> attribute
FIELDS = {"input": "input", "output": "output", "cachedInput": "cached_input", "reasoning": "reasoning",
          "cacheWrite": "cache_write"}

#: the catalog namespaces a provider's models are looked up in, in order (other providers: their own name)
_SPACES = {
    "openai": ("openai",),
    "azure": ("azure", "openai"),  # Azure OpenAI's global deployments are priced as OpenAI's
    "azureopenai": ("azure", "openai"),
    "gemini": ("gemini",),
    "vertex": ("vertex", "gemini", "anthropic"),  # Gemini and Claude on Vertex AI, at their own prices
    "bedrock": ("bedrock",),
}
#: lookups remembered per catalog (cleared whole when full)
CACHE_SIZE = 1024
#: the namespaces searched, in order, when the provider is not known (``price(None, model)``)
_ANY_ORDER = ("openai", "anthropic", "gemini", "mistral", "deepseek", "groq", "bedrock")

# What names a snapshot of a model, at the end of its name: a date (-2024-08-06, -20241022, Vertex's
# @20241022, Mistral's -2411), a Gemini revision (-001), -latest, a Bedrock version (-v2:0, :0).
_SNAPSHOT = re.compile(r"(?:[-@]\d{8}|-\d{4}-\d{2}-\d{2}|-\d{3,4}|-latest|-v\d+(?::\d+)?|:\d+)$")
# Bedrock's cross-region inference profiles prefix the model id with a geography.
_REGION = re.compile(r"^(?:us|us-gov|eu|apac|au|ca|jp|global)\.")


def namespaces(provider: str | None) -> tuple[str, ...]:
    """The catalog namespaces of ``provider`` (the config's name, any case), most specific first."""
    if not provider:
        return ()
    name = provider.lower()
    return _SPACES.get(name, (name,))


def _plain(model: str) -> str:
    """Lower case, without a ``models/`` path (Gemini's ``models/gemini-2.0-flash``, Vertex's
    ``publishers/google/models/...``) or a Bedrock region prefix."""
    name = model.strip().lower()
    if "models/" in name:
        name = name.rsplit("models/", 1)[1]
    return _REGION.sub("", name)


def base_name(model: str) -> str:
    """``model`` without what names its snapshot: ``gpt-4o-2024-08-06`` → ``gpt-4o``,
    ``us.anthropic.claude-3-5-sonnet-20241022-v2:0`` → ``anthropic.claude-3-5-sonnet``."""
    name = _plain(model)
    while True:
        stripped = _SNAPSHOT.sub("", name)
        if stripped == name or not stripped:
            return name
        name = stripped


def uncached_input(usage: Usage) -> int:
    """The input tokens billed at the full input price: ``prompt_tokens`` less the cache reads and
    writes when they are counted in it (OpenAI, Gemini), all of it when they are not (Anthropic,
    Bedrock: ``total_tokens`` then counts all four)."""
    cached = usage.cached_input_tokens + usage.cache_creation_input_tokens
    prompt = usage.prompt_tokens
    if cached and usage.total_tokens == prompt + usage.completion_tokens + cached:
        return prompt
    return max(prompt - cached, 0)


@attrs.frozen
class Price:
    """USD per million tokens. ``None``: billed at ``input`` (cache reads and writes) or ``output``
    (reasoning)."""

    input: float
    output: float
    cached_input: float | None = None
    reasoning: float | None = None
    cache_write: float | None = None
    #: where the figures come from (the provider's pricing page; ``config`` for an override)
    source: str | None = attrs.field(default=None, eq=False)

    def cost(self, usage: Usage) -> float:
        """The USD cost of an answer's ``usage`` (module docstring: the formula)."""
        completion = usage.completion_tokens
        reasoning = min(usage.reasoning_tokens, completion)
        micro = (uncached_input(usage) * self.input
                 + usage.cached_input_tokens * _or(self.cached_input, self.input)
                 + usage.cache_creation_input_tokens * _or(self.cache_write, self.input)
                 + (completion - reasoning) * self.output
                 + reasoning * _or(self.reasoning, self.output))
        return round(micro / 1_000_000, 12)

    def as_dict(self) -> dict[str, Any]:
        """The wire form (prices.json's names), unset fields left out."""
        out = {wire: getattr(self, attr) for wire, attr in FIELDS.items() if getattr(self, attr) is not None}
        if self.source:
            out["source"] = self.source
        return out


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


Key = tuple[str, str]  # (namespace, name); namespace "" for a config entry that names none


class PriceCatalog:
    """Prices by provider and model (module docstring: how a name is found). Immutable: an override
    makes a new catalog."""

    __slots__ = ("_aliases", "_base", "_cache", "_entries", "date", "source")

    def __init__(self, entries: Mapping[Key, Price], aliases: Mapping[Key, Key] | None = None, *,
                 source: str = "", date: str = "") -> None:
        self._entries = dict(entries)
        self._aliases = dict(aliases or {})
        self.source = source
        self.date = date
        # base name -> entry: an entry is its own base first; then the first entry (in order) or
        # alias whose base it is
        base: dict[Key, Key] = {key: key for key in self._entries}
        for key in self._entries:
            base.setdefault((key[0], base_name(key[1])), key)
        for alias, key in self._aliases.items():
            base.setdefault((alias[0], base_name(alias[1])), key)
        self._base = base
        #: (provider, model) -> what ``price`` found: a lookup runs per LLM answer, the names repeat
        self._cache: dict[tuple[str | None, str], Price | None] = {}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PriceCatalog:
        """A catalog from prices.json's shape; a malformed entry raises ``ValueError`` naming it."""
        entries: dict[Key, Price] = {}
        aliases: dict[Key, Key] = {}
        for name, fields in data["models"].items():
            namespace, sep, model = name.partition("/")
            if not sep or not model:
                raise ValueError(f"prices.json: {name!r} names no provider (provider/model)")
            key = (namespace.lower(), model.lower())
            entries[key] = _price(name, fields)
            for alias in fields.get("aliases", ()):
                aliases[(key[0], alias.lower())] = key
        return cls(entries, aliases, source=str(data.get("source", "")), date=str(data.get("date", "")))

    @classmethod
    def bundled(cls) -> PriceCatalog:
        """The catalog shipped with trioproxy (prices.json), read once."""
        return _bundled()

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> dict[str, Price]:
        """Every entry by its qualified name (``openai/gpt-4o``; a config entry that names no
        provider by its name alone)."""
        return {f"{ns}/{name}" if ns else name: price for (ns, name), price in self._entries.items()}

    def _find(self, namespace: str, model: str) -> Key | None:
        """The entry ``model`` means in ``namespace``: its own, an alias's, its base name's."""
        for name in (model.strip().lower(), _plain(model)):
            key = (namespace, name)
            if key in self._entries:
                return key
            target = self._aliases.get(key)
            if target is not None:
                return target
        return self._base.get((namespace, base_name(model)))

    def _resolve(self, provider: str | None, model: str) -> Key | None:
        for namespace in namespaces(provider):
            key = self._find(namespace, model)
            if key is not None:
                return key
        qualifier, sep, rest = model.partition("/")
        if sep:  # a name qualified by a namespace (one that is not finds nothing)
            key = self._find(qualifier.lower(), rest)
            if key is not None:
                return key
        key = self._find("", model)
        if key is not None or provider:
            return key
        for namespace in _ANY_ORDER:
            key = self._find(namespace, model)
            if key is not None:
                return key
        return None

    def _namespaces(self) -> set[str]:
        return {ns for ns, _ in self._entries} | {ns for names in _SPACES.values() for ns in names}

    def price(self, provider: str | None, model: str | None) -> Price | None:
        """The price of ``model`` served by ``provider`` (the config's provider name: ``openAI``,
        ``azure``, ``bedrock``...; ``None``: any provider's), or ``None`` when the catalog has none."""
        if not model:
            return None
        asked = (provider, model)
        cache = self._cache
        if asked in cache:
            return cache[asked]
        key = self._resolve(provider, model)
        found = self._entries[key] if key is not None else None
        if len(cache) >= CACHE_SIZE:  # names come from clients and providers: keep it bounded
            cache.clear()
        cache[asked] = found
        return found

    def cost(self, provider: str | None, model: str | None, usage: Usage) -> float | None:
        """The USD cost of ``usage`` at ``model``'s price; ``None`` when the model has no price."""
        price = self.price(provider, model)
        return price.cost(usage) if price is not None else None

    def with_overrides(self, overrides: Iterable[tuple[str, PriceOverride]] | Mapping[str, PriceOverride]
                       ) -> PriceCatalog:
        """A catalog with ``config.prices`` applied, field by field over the entry each name finds.

        ``ns/model`` (``ns`` a namespace: a provider name such as ``openai``, ``azure``, ``bedrock``)
        changes that namespace's entry, or makes one from the entry the lookup would find for it
        (``azure/gpt-4o`` from ``openai/gpt-4o``). A name without a namespace changes the entry it
        finds in every namespace that has one; when none has, it is a new entry for any provider.
        A new entry needs ``input`` and ``output``: else ``MissingPrice`` naming the field.
        """
        items = overrides.items() if isinstance(overrides, Mapping) else overrides
        entries = dict(self._entries)
        changed = self
        for name, override in items:
            found: list[tuple[Key, Price | None]] = []
            qualifier, sep, rest = name.partition("/")
            if sep and rest and qualifier.lower() in self._namespaces():
                namespace = qualifier.lower()
                key = changed._resolve(namespace, rest)
                found.append(((namespace, rest.lower()), changed._entries[key] if key is not None else None))
            else:
                for namespace in sorted({ns for ns, _ in changed._entries if ns}):
                    key = changed._find(namespace, name)
                    if key is not None:
                        found.append(((namespace, name.lower()), changed._entries[key]))
                if not found:
                    found.append((("", name.lower()), changed._entries.get(("", name.lower()))))
            for key, price in found:
                entries[key] = _overridden(name, price, override)
            changed = PriceCatalog(entries, self._aliases, source=self.source, date=self.date)
        return changed


class MissingPrice(ValueError):
    """An override of a model the catalog lacks leaves out ``field`` (``input`` or ``output``)."""

    def __init__(self, name: str, field: str) -> None:
        super().__init__(f"{name}.{field}: required: the bundled price catalog has no {name!r} (docs/pricing.md)")
        self.name = name
        self.field = field


def _overridden(name: str, price: Price | None, override: PriceOverride) -> Price:
    given = {attr: getattr(override, attr) for attr in FIELDS.values() if getattr(override, attr) is not None}
    if price is None:
        for wire in ("input", "output"):
            if wire not in given:
                raise MissingPrice(name, wire)
        return Price(**given, source="config")
    return attrs.evolve(price, **given, source="config")


def _price(name: str, fields: Mapping[str, Any]) -> Price:
    values: dict[str, float] = {}
    for wire, attr in FIELDS.items():
        value = fields.get(wire)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"prices.json: {name}.{wire}: expected a number of USD from 0, got {value!r}")
        values[attr] = float(value)
    if "input" not in values or "output" not in values:
        raise ValueError(f"prices.json: {name}: input and output are required")
    source = fields.get("source")
    return Price(**values, source=source if isinstance(source, str) else None)


@functools.cache
def _bundled() -> PriceCatalog:
    text = resources.files(__package__).joinpath("prices.json").read_text(encoding="utf-8")
    return PriceCatalog.from_json(json.loads(text))
