"""``remoteRateLimit``: global limits through an Envoy rate limit service (docs/ratelimit-server.md).

Several gateway replicas share one budget because the counting happens in the service (whose
counters live in Redis). Per request:

- every descriptor's entries are CEL expressions over ``request.*``, ``source.*``, ``jwt.*`` and
  ``llm.*``; a descriptor with an entry that fails to evaluate (no JWT, no such header...) is
  skipped for this request, with a trace ``policy`` event saying why; a value longer than 256
  characters is sent as its SHA-256 (``rls/descriptor_text.py``: the service keeps values in its
  counter keys);
- ONE ``ShouldRateLimit`` call carries all descriptors: ``requests`` ones add one hit, ``tokens``
  ones only look (``hits_addend: 0``); after the response, a second call charges the tokens
  descriptors ``usage.total_tokens``, outside the request (the client already has its whole
  response then, and its connection's next keep-alive request does not wait for the call);
- OVER_LIMIT: 429, not forwarded, body ``raw_body`` or ``rate limit exceeded``, with every
  ``response_headers_to_add``; OK: ``request_headers_to_add`` go upstream and
  ``response_headers_to_add`` to the client. ``x-ratelimit-*``: the service's when it sent them,
  otherwise derived (Envoy's way) from the status with the fewest remaining;
- the service unreachable, slower than ``timeout`` or answering an error: ``failClosed`` (the
  default) answers 500 ``rate limit failed``; ``failOpen`` forwards.

``RemoteRateLimitPolicy`` is the pure part (descriptors from an activation, a decision from a
response); ``RemoteRateLimitStage`` only does the call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

from attrs import frozen

from ..cel import CelError, Expression, compile_expression
from ..errors import RateLimited
from ..rls.descriptor_text import MAX_DESCRIPTOR_TEXT, bounded

Header = tuple[bytes, bytes]
FailureMode = Literal["failClosed", "failOpen"]
DEFAULT_TIMEOUT = 1.0
UNIT_SECONDS = {1: 1, 2: 60, 3: 3600, 4: 86400}  # RateLimitResponse.RateLimit.Unit
OVER_LIMIT = 2
_UNIT_NAMES = {1: "SECOND", 2: "MINUTE", 3: "HOUR", 4: "DAY"}


@frozen
class RemoteEntry:
    key: str
    value: str  # CEL source (the spec stays plain data: /config_dump and traces show it)


@frozen
class RemoteDescriptor:
    entries: tuple[RemoteEntry, ...]
    kind: Literal["requests", "tokens"] = "requests"


@frozen
class RemoteRateLimitSpec:
    host: str
    domain: str
    descriptors: tuple[RemoteDescriptor, ...]
    failure_mode: FailureMode = "failClosed"
    timeout: float = DEFAULT_TIMEOUT


_HEADER = re.compile(r"""request\.headers\[\s*(?:"([!#$%&'*+.^_`|~0-9A-Za-z-]+)"|'([!#$%&*+.^_`|~0-9A-Za-z-]+)')\s*\]""")
_STRING = re.compile(r"""(?:"([^"\\]*)"|'([^'\\]*)')""")
_FIELD = re.compile(r"request\.(path|method|host|scheme)")


class DirectEntry:
    """The commonest entry values, read without the CEL engine (whose call, converting the
    headers map, was the largest part of the gateway's own per-check CPU: bench/README.md):
    ``evaluate`` from an activation, ``read`` straight from the exchange, so a policy whose
    entries are all direct does not build the activation at all. Same results as CEL: a missing
    header is None (the descriptor is skipped), a string literal is itself."""

    __slots__ = ("evaluate", "read", "source")

    def __init__(self, source: str, evaluate: Callable[[Mapping[str, Any]], Any], read: Callable[[Any], Any]) -> None:
        self.source = source
        self.evaluate = evaluate
        self.read = read


def _header(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> str | None:
    """``request.headers[name]`` (``name`` lowercase) as the activation has it: names compared
    lowercased (the map's keys are), repeats joined with ``,``, latin-1."""
    found = None
    size = len(name)
    for raw_name, raw_value in headers:
        if len(raw_name) == size and (raw_name == name or raw_name.lower() == name):  # (lower() only if it can match)
            value = raw_value.decode("latin-1")
            found = value if found is None else f"{found},{value}"
    return found


_EXCHANGE_FIELDS: dict[str, Callable[[Any], str]] = {
    "path": lambda x: x.uri().split("?", 1)[0],
    "method": lambda x: x.scope["method"],
    "host": lambda x: x.host,
    "scheme": lambda x: x.scope.get("scheme", "http"),
}


def _direct(source: str) -> DirectEntry | None:
    text = source.strip()
    if m := _HEADER.fullmatch(text):
        name = m.group(1) or m.group(2)  # as CEL: the map has lowercase names, lookups are exact
        raw = name.encode("latin-1")
        read: Callable[[Any], Any] = (lambda x: _header(x.headers, raw)) if name == name.lower() else (lambda x: None)
        return DirectEntry(source, lambda a: a["request"]["headers"].get(name), read)
    if m := _STRING.fullmatch(text):
        value = m.group(1) if m.group(1) is not None else m.group(2)
        return DirectEntry(source, lambda a: value, lambda x: value)
    if m := _FIELD.fullmatch(text):
        field = m.group(1)
        return DirectEntry(source, lambda a: a["request"][field], _EXCHANGE_FIELDS[field])
    return None


def compile_entry(source: str) -> tuple[Expression | DirectEntry | None, str]:
    """The compiled value, or None and why it can never evaluate (an unknown variable: ``users``
    meant as ``"users"``). Syntax errors raise ``CelError``. Compiled by CEL in every case (the
    same errors and warnings); the commonest forms then evaluate directly (``DirectEntry``)."""
    try:
        expression = compile_expression(source)
        return _direct(source) or expression, ""
    except CelError as exc:
        if "unknown variable" not in str(exc):
            raise
        hint = f' (a string needs quotes: \'"{source}"\')' if source.isidentifier() else ""
        return None, f"can never evaluate: {exc}{hint}"


def never_evaluating(spec: RemoteRateLimitSpec) -> list[str]:
    """Warnings for entries that can never evaluate (their descriptor is always skipped)."""
    out = []
    for i, d in enumerate(spec.descriptors):
        for j, entry in enumerate(d.entries):
            problem = compile_entry(entry.value)[1]
            if problem:
                out.append(f"descriptors[{i}].entries[{j}] ({entry.key}: {entry.value}): {problem}")
    return out


def _text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return None


class Decision(NamedTuple):
    """What one answer decides (a NamedTuple: made once per request, ~1 µs less than frozen attrs)."""

    allowed: bool
    body: str
    response_headers: tuple[Header, ...]  # to the client (429 or forwarded response)
    request_headers: tuple[Header, ...]  # upstream, when allowed
    limit: int | None = None
    remaining: int | None = None


#: a service's response header name -> (its lowercase latin-1 bytes, whether it is x-ratelimit-*):
#: the same few names in every answer, so each is lowered, encoded and classified once
_NAMES: dict[str, tuple[bytes, bool]] = {}


def _name(key: str) -> tuple[bytes, bool]:
    lower = key.lower()
    found = (lower.encode("latin-1"), lower.startswith("x-ratelimit-"))
    if len(_NAMES) < 64:  # (names come from the service: bounded)
        _NAMES[key] = found
    return found


class RemoteRateLimitPolicy:
    """The pure part: which descriptors a request sends, what a response decides."""

    def __init__(self, spec: RemoteRateLimitSpec) -> None:
        self.spec = spec
        self.counts_tokens = any(d.kind == "tokens" for d in spec.descriptors)
        #: per descriptor: (key, source, compiled or None, why it never evaluates)
        self.compiled = tuple(tuple((e.key, e.value, *compile_entry(e.value)) for e in d.entries)
                              for d in spec.descriptors)
        #: every entry reads the exchange directly: no CEL activation is built per request
        self.direct = all(isinstance(c[2], DirectEntry) for d in self.compiled for c in d)
        #: per descriptor: its hits (None: one; 0: only look, tokens are charged after)
        self.hits = tuple(0 if d.kind == "tokens" else None for d in spec.descriptors)

    def descriptors(self, activation: Mapping[str, Any]) -> tuple[list[tuple[int, list[tuple[str, str]]]], list[str]]:
        """``[(descriptor index, entries)]`` that evaluated, and a reason per skipped descriptor."""
        return self.choose(activation, False)

    def choose(self, subject: Any, direct: bool) -> tuple[list[tuple[int, list[tuple[str, str]]]], list[str]]:
        out: list[tuple[int, list[tuple[str, str]]]] = []
        skipped: list[str] = []
        for i, descriptor in enumerate(self.compiled):
            entries = []
            for key, source, expression, problem in descriptor:
                if expression is None:
                    skipped.append(f"descriptors[{i}]: entry {key} {problem}")
                    break
                value = _text(expression.read(subject) if direct and isinstance(expression, DirectEntry)
                              else expression.evaluate(subject))
                if value is None:
                    skipped.append(f"descriptors[{i}]: entry {key} ({source}) did not evaluate to a value")
                    break
                entries.append((key, value if len(value) <= MAX_DESCRIPTOR_TEXT else bounded(value)))
            else:
                out.append((i, entries))
        return out, skipped

    @staticmethod
    def refusal(response: Any, descriptors: Sequence[Sequence[tuple[str, str]]]) -> dict[str, Any]:
        """Why the service said OVER_LIMIT (built only on a refusal): the first descriptor it
        refused (``descriptors``: those sent, in order, as the statuses answer them), its limit,
        what it has ``remaining`` and ``resetSeconds`` until its window ends."""
        why: dict[str, Any] = {"policy": "remoteRateLimit"}
        for i, status in enumerate(response.statuses):
            if status.code != OVER_LIMIT:
                continue
            if i < len(descriptors):
                why["descriptor"] = [[k, v] for k, v in descriptors[i]]
            if status.HasField("current_limit"):
                limit = status.current_limit
                why["limit"] = {"requestsPerUnit": limit.requests_per_unit,
                                "unit": _UNIT_NAMES.get(limit.unit, "UNKNOWN"), **({"name": limit.name} if limit.name else {})}
            why["remaining"] = status.limit_remaining
            why["resetSeconds"] = status.duration_until_reset.seconds
            return why
        why["descriptor"] = None  # OVER_LIMIT overall, no descriptor named
        return why

    @staticmethod
    def decide(response: Any, detail: bool = True) -> Decision:
        """``detail`` False (nobody watches the trace): ``limit`` and ``remaining`` are not looked
        up when the service sent its own ``x-ratelimit-*`` headers, as nothing else reads them."""
        # Plain loops, no generators or key lambdas: this runs once per request (bench/README.md).
        headers: list[Header] = []
        service_sent = False
        for h in response.response_headers_to_add:
            key = h.key
            name, ratelimit = _NAMES.get(key) or _name(key)
            service_sent = service_sent or ratelimit
            headers.append((name, (h.value or h.raw_value.decode("latin-1")).encode("latin-1")))
        limit = remaining = None
        if detail or not service_sent:
            best = None
            for s in response.statuses:
                if s.HasField("current_limit") and (best is None or s.limit_remaining < best.limit_remaining):
                    best = s
            if best is not None:
                limit, remaining = best.current_limit.requests_per_unit, best.limit_remaining
                if not service_sent:
                    window = UNIT_SECONDS.get(best.current_limit.unit, 0)
                    headers += ((b"x-ratelimit-limit", f"{limit}, {limit};w={window}".encode()),
                                (b"x-ratelimit-remaining", str(remaining).encode()),
                                (b"x-ratelimit-reset", str(best.duration_until_reset.seconds).encode()))
        if response.overall_code == OVER_LIMIT:
            body = response.raw_body.decode("utf-8", "replace") if response.raw_body else RateLimited.default_message
            return Decision(False, body, tuple(headers), (), limit, remaining)
        request_headers: tuple[Header, ...] = ()
        if response.request_headers_to_add:
            request_headers = tuple((h.key.lower().encode("latin-1"),
                                     (h.value or h.raw_value.decode("latin-1")).encode("latin-1"))
                                    for h in response.request_headers_to_add)
        return Decision(True, "", tuple(headers), request_headers, limit, remaining)
