"""Per-request tracing: event records, the tracer of one request, and the watcher registry.

A watcher is someone reading ``/debug/trace``: it waits (first come, first served among
those whose expression matches) for the next request, which it claims for itself — one-shot,
so a keep-alive sibling of the traced request is not traced too. While no watcher waits, a
request pays one truthiness check of ``TraceHub.watchers``.

Events travel from the request to the reader over a bounded Trio memory channel. The request
never waits on it: when the reader stalls and the buffer is full, or the events it has not read
yet would pass its memory budget (``watcher_budget`` bytes, estimated), events are dropped and
counted (``Tracer.dropped``, reported by the endpoint, and ``on_drop`` → metrics at once),
except the closing ``requestFinished``, for which a slot is kept free so every stream ends
properly. At most ``max_watchers`` readers exist at once (the endpoint answers 429 past it), so
memory held for readers is bounded by ``max_watchers × watcher_budget`` whatever they do
(docs/reliability.md, row 3).

A ``Follower`` (``/debug/trace?follow=true``) reads every matching request on one stream. It waits
among the watchers and stays there: a claim gives it a new watcher for the request (``accept``)
and puts it behind the others waiting, so no request slips through between two (re-subscribing
after each ``requestFinished`` from the client lost most of a burst). Requests are written out
whole, one after another in the order they were claimed; their unread events share one
``watcher_budget``, and while ``FOLLOW_PENDING`` requests wait behind a slow reader it stops
waiting (``TraceHub.offer``; under ``--workers`` the supervisor's hub publishes and withdraws it,
workers/trace_relay.py).
"""

from __future__ import annotations

import base64
import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import trio

from ..asgi import Header, Scope
from ..cel import build_activation
from ..config.dump import policies_by_kind
from ..config.model import Backend, Listener, Route
from ..redaction import CREDENTIAL_HEADERS, DEFAULT, Redaction
from ..redaction import REDACTED as REDACTED  # re-exported: trace_stream and tests import it here

DEFAULT_BODY_LIMIT = 2 * 1024 * 1024  # env TRIOPROXY_TRACE_BODY_LIMIT (bytes) overrides
DEFAULT_BUFFER = 256
DEFAULT_MAX_WATCHERS = 16  # env TRIOPROXY_TRACE_MAX_WATCHERS overrides
DEFAULT_WATCHER_BUDGET = 8 * 1024 * 1024  # bytes of unread events per watcher; env TRIOPROXY_TRACE_WATCHER_BUDGET
KEEPALIVE_SECONDS = 1.0
FOLLOW_PENDING = 64  # claimed requests a follower's reader may lag behind; past it requests go untraced
#: ``POST /api/replay`` marks the request it sends with this header (a random value) and waits for
#: it with a watcher whose expression matches that value; the gateway removes it from a request
#: while any watcher waits (``Pipeline.open_exchange``), so neither the trace nor the backend sees it
REPLAY_HEADER = b"x-trioproxy-replay"


class Traced(Protocol):
    """What a snapshot or an activation reads of a request: an ``Exchange`` (exchange.py), named by
    what is read, since the exchange holds its tracer and so sits above this module."""

    @property
    def scope(self) -> Scope: ...
    @property
    def headers(self) -> list[Header]: ...
    @property
    def host(self) -> str: ...
    @property
    def upstream_path(self) -> str | None: ...
    @property
    def listener(self) -> Listener | None: ...
    @property
    def route(self) -> Route | None: ...
    @property
    def backend(self) -> Backend | None: ...
    @property
    def llm(self) -> dict[str, Any] | None: ...
    @property
    def jwt(self) -> dict[str, Any] | None: ...
    @property
    def api_key(self) -> dict[str, Any] | None: ...
    @property
    def basic_auth(self) -> dict[str, Any] | None: ...
    @property
    def key(self) -> dict[str, Any] | None: ...
    @property
    def team(self) -> dict[str, Any] | None: ...

    def uri(self) -> str: ...


def body_limit_from_env() -> int:
    """``TRIOPROXY_TRACE_BODY_LIMIT``: bytes of each body a trace keeps (default 2 MiB)."""
    raw = os.environ.get("TRIOPROXY_TRACE_BODY_LIMIT", "")
    return int(raw) if raw.strip().isdigit() else DEFAULT_BODY_LIMIT


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "")
    return int(raw) if raw.strip().isdigit() else default


def approximate_size(value: Any) -> int:
    """About the bytes ``value`` takes as JSON: what a queued event costs its watcher's budget."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        return 2 + sum(len(k) + 4 + approximate_size(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 2 + sum(approximate_size(v) + 1 for v in value)
    return 8


class TooManyWatchers(Exception):
    """``max_watchers`` readers exist already (the endpoint answers 429)."""


def headers_map(headers: Iterable[Header], secret: frozenset[bytes] = CREDENTIAL_HEADERS) -> dict[str, str]:
    """Headers as a name → value map (repeats joined with ", "), the ``secret`` ones redacted."""
    out: dict[str, str] = {}
    for name, value in headers:
        text = REDACTED if name in secret else value.decode("latin-1")
        key = name.decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def duration_string(seconds: float) -> str:
    """Duration text as agentgateway prints it: ``"1.234ms"``, ``"2.500s"``, ``"87µs"``."""
    if seconds >= 1:
        return f"{seconds:.3f}s"
    if seconds >= 0.001:
        return f"{seconds * 1000:.3f}ms"
    return f"{seconds * 1_000_000:.0f}µs"


def activation(x: Traced) -> dict[str, Any]:
    """The CEL activation of a request as the stages have shaped it so far (``jwt`` claims,
    ``source.address``, ``llm``...): what trace expressions, authorization rules and the access
    log's filter see (docs/trace-events.md)."""
    scope = x.scope
    client = scope.get("client") or ("", 0)
    return build_activation(
        method=scope["method"], path=x.uri(), host=x.host, headers=x.headers,
        scheme=scope.get("scheme", "http"), version=f"HTTP/{scope.get('http_version', '1.1')}",
        source_address=client[0], source_port=client[1], llm=x.llm, jwt=x.jwt, api_key=x.api_key,
        basic_auth=x.basic_auth, key=x.key, team=x.team, mcp=getattr(x, "mcp_call", None),
    )


def request_state(x: Traced, *, headers: list[Header] | None = None, response: dict[str, Any] | None = None,
                  proxy: dict[str, str] | None = None, redaction: Redaction = DEFAULT) -> dict[str, Any]:
    """``requestState`` of a snapshot: the request as the stages have shaped it so far."""
    scope = x.scope
    client = scope.get("client") or ("", 0)
    state: dict[str, Any] = {
        "request": {
            "method": scope["method"],
            "path": x.upstream_path or scope["path"],
            "uri": redaction.target(x.uri()),
            "host": x.host,
            "scheme": scope.get("scheme", "http"),
            "version": f"HTTP/{scope.get('http_version', '1.1')}",
            "headers": headers_map(x.headers if headers is None else headers, redaction.headers),
        },
        "source": {"address": client[0], "port": client[1]},
        "env": {
            "gateway": "default/default",
            "listener": x.listener.key if x.listener else None,
            "route": x.route.key if x.route else None,
        },
    }
    if x.backend is not None:
        state["backend"] = {"name": x.backend.name, "type": x.backend.kind, "protocol": "http"}
    if x.llm is not None:
        state["llm"] = dict(x.llm)  # as it is now: token counts are added to x.llm later
    if x.jwt is not None:
        state["jwt"] = x.jwt
    if x.basic_auth is not None:
        state["basicAuth"] = x.basic_auth
    if x.api_key is not None:
        state["apiKey"] = x.api_key
    if x.key is not None:
        state["key"] = x.key
    if x.team is not None:
        state["team"] = x.team
    if response is not None:
        state["response"] = response
    if proxy is not None:
        state["proxy"] = proxy
    return state


class BodyCapture:
    """Keeps the first ``limit`` bytes of a body that passes through unchanged."""

    __slots__ = ("limit", "parts", "size", "truncated")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0
        self.truncated = False

    def feed(self, chunk: bytes) -> None:
        room = self.limit - self.size
        if room <= 0:
            self.truncated = self.truncated or bool(chunk)
            return
        piece = chunk[:room]
        self.parts.append(piece)
        self.size += len(piece)
        if len(chunk) > room:
            self.truncated = True

    def encoded(self) -> str:
        return base64.b64encode(b"".join(self.parts)).decode("ascii")


class NullTracer:
    """The tracer of a request no watcher claimed: every call does nothing.

    Stages call ``x.tracer.event(...)`` unconditionally; the helpers below (``snapshot``,
    ``response_snapshot``, ``policy_selection``) build their payloads only in ``Tracer``, so an
    untraced request pays one call, never a snapshot. Check ``active`` before building an
    expensive payload for ``event``. Falsy, so ``if x.tracer:`` also works.
    """

    __slots__ = ()
    active = False
    body_limit = 0

    def __bool__(self) -> bool:
        return False

    def event(self, message_type: str, **fields: Any) -> None:
        pass

    def snapshot(self, stage: str, x: Traced, *, headers: list[Header] | None = None) -> None:
        pass

    def response_snapshot(self, stage: str, x: Traced, status: int, headers: list[Header], *,
                          severity: str = "info", proxy: dict[str, str] | None = None) -> None:
        pass

    def policy_selection(self, phase: str, policies: Any) -> None:
        pass

    def body(self, stage: str, capture: BodyCapture | None) -> None:
        pass

    def finish(self, status: int, error: str | None, why: dict[str, Any] | None = None) -> None:
        pass


NULL_TRACER = NullTracer()


class Tracer:
    """Records the events of one request into its watcher's channel."""

    active = True

    def __init__(self, watcher: Watcher, arrival: float, body_limit: int, redaction: Redaction = DEFAULT) -> None:
        self.watcher = watcher
        self.arrival = arrival
        self.body_limit = body_limit
        self.redaction = redaction
        self.dropped = 0
        self._last = 0
        self._finished = False

    def _micros(self, at: float | None = None) -> int:
        value = int(((trio.current_time() if at is None else at) - self.arrival) * 1_000_000)
        # eventEnd never decreases along a trace, whatever the clock's resolution did.
        self._last = max(self._last, value)
        return self._last

    def event(self, message_type: str, *, start: float | None = None, severity: str = "info",
              scope: list[str] | None = None, **fields: Any) -> None:
        if self._finished:
            return
        record: dict[str, Any] = {
            "eventStart": None if start is None else max(0, int((start - self.arrival) * 1_000_000)),
            "eventEnd": self._micros(),
            "severity": severity,
        }
        if scope:
            record["scope"] = scope
        record["message"] = {"type": message_type, **fields}
        self._put(record)

    def finish(self, status: int, error: str | None, why: dict[str, Any] | None = None) -> None:
        """The last event; closes the stream. ``why``: the reason of a refusal or the attempts of a
        failover (docs/history.md, "Why"), a field only when there is one."""
        if self._finished:
            return
        severity = "error" if status >= 500 or error and status == 0 else ("warn" if status >= 400 else "success")
        if why is None:
            self.event("requestFinished", severity=severity, status=status, error=error)
        else:
            self.event("requestFinished", severity=severity, status=status, error=error, why=why)
        self._finished = True
        self.watcher.close(self.dropped)

    def _put(self, record: dict[str, Any]) -> None:
        watcher = self.watcher
        send = watcher.send
        # Keep one slot for requestFinished: drop ordinary events when only one slot is left.
        stats = send.statistics()
        is_last = record["message"]["type"] == "requestFinished"
        size = approximate_size(record)
        if not is_last and (stats.current_buffer_used >= stats.max_buffer_size - 1
                            or watcher.queued_bytes + size > watcher.budget):
            self._drop()
            return
        try:
            send.send_nowait(record)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            self._drop()
            return
        watcher.sizes.append(size)
        watcher.queued_bytes += size
        watcher.high_water = max(watcher.high_water, watcher.queued_bytes)

    def _drop(self) -> None:
        self.dropped += 1
        self.watcher.on_drop()

    def snapshot(self, stage: str, x: Traced, *, headers: list[Header] | None = None) -> None:
        """A ``requestSnapshot`` of the request as it is now (``headers`` overrides its headers)."""
        self.event("requestSnapshot", stage=stage, requestState=request_state(x, headers=headers,
                                                                               redaction=self.redaction))

    def response_snapshot(self, stage: str, x: Traced, status: int, headers: list[Header], *,
                          severity: str = "info", proxy: dict[str, str] | None = None) -> None:
        self.event("responseSnapshot", stage=stage, severity=severity, requestState=request_state(
            x, response={"code": status, "headers": headers_map(headers, self.redaction.headers)}, proxy=proxy,
            redaction=self.redaction))

    def policy_selection(self, phase: str, policies: Any) -> None:
        self.event("policySelection", phase=phase, effectivePolicy=policies_by_kind(policies, phase))

    def body(self, stage: str, capture: BodyCapture | None) -> None:
        if capture is not None and (capture.size or capture.truncated):
            fields: dict[str, Any] = {"stage": stage, "body": capture.encoded()}
            if capture.truncated:
                fields["truncated"] = True
            self.event("bodySnapshot", **fields)


class Ledger:
    """Bytes of unread events held for one reader; a follower's watchers share one."""

    __slots__ = ("high_water", "queued_bytes")

    def __init__(self) -> None:
        self.queued_bytes = 0  # estimated bytes of the events sent and not yet received
        self.high_water = 0  # the most queued_bytes ever was (tests: never above budget)


class Watcher:
    """One reader of ``/debug/trace`` waiting for (then reading) one request's events."""

    def __init__(self, matches: Callable[[Mapping[str, Any]], bool] | None, buffer: int,
                 budget: int = DEFAULT_WATCHER_BUDGET, on_drop: Callable[[], None] = lambda: None,
                 ledger: Ledger | None = None) -> None:
        self.matches = matches
        self.send, self.receive = trio.open_memory_channel[dict[str, Any]](buffer)
        self.dropped = 0
        self.budget = budget
        self.on_drop = on_drop
        self.ledger = ledger if ledger is not None else Ledger()
        self.sizes: deque[int] = deque()  # the estimate of each queued event, oldest first
        self._writing = 0  # the estimate of the event the reader is writing out now
        self.forgotten = False
        self.counted = True  # in TraceHub.open (a follower's watchers count as their follower)

    @property
    def queued_bytes(self) -> int:
        return self.ledger.queued_bytes

    @queued_bytes.setter
    def queued_bytes(self, value: int) -> None:
        self.ledger.queued_bytes = value

    @property
    def high_water(self) -> int:
        return self.ledger.high_water

    @high_water.setter
    def high_water(self, value: int) -> None:
        self.ledger.high_water = value

    async def next_event(self) -> dict[str, Any]:
        """The next event (``trio.EndOfChannel`` after the last). Asking for it means the previous
        one was written out, so only now does the previous one's share of the budget come back."""
        self.queued_bytes -= self._writing
        self._writing = 0
        event = await self.receive.receive()
        if self.sizes:
            self._writing = self.sizes.popleft()
        return event

    def close(self, dropped: int) -> None:
        self.dropped = dropped
        self.send.close()


class TraceHub:
    """The watchers (and followers) waiting for a request, in the order they take one."""

    def __init__(self, *, body_limit: int | None = None, buffer: int = DEFAULT_BUFFER,
                 keepalive: float = KEEPALIVE_SECONDS, max_watchers: int | None = None,
                 watcher_budget: int | None = None) -> None:
        self.watchers: list[Watcher | Follower] = []
        self.keepalive = keepalive
        self.body_limit = body_limit if body_limit is not None else body_limit_from_env()
        self.buffer = buffer
        self.traced = 0
        self.max_watchers = max_watchers if max_watchers is not None else _env_int(
            "TRIOPROXY_TRACE_MAX_WATCHERS", DEFAULT_MAX_WATCHERS)
        self.watcher_budget = watcher_budget if watcher_budget is not None else _env_int(
            "TRIOPROXY_TRACE_WATCHER_BUDGET", DEFAULT_WATCHER_BUDGET)
        self.open = 0  # readers now: waiting for a request or reading one
        self.on_drop: Callable[[], None] = lambda: None  # the runtime counts drops in a metric
        self.redaction = DEFAULT  # the runtime adds the loaded config's credential places

    def _take_slot(self) -> None:
        if self.open >= self.max_watchers:
            raise TooManyWatchers(f"too many trace watchers (limit {self.max_watchers})")
        self.open += 1

    def watch(self, matches: Callable[[Mapping[str, Any]], bool] | None = None, *, first: bool = False) -> Watcher:
        """A new reader; ``TooManyWatchers`` when ``max_watchers`` exist already. ``first``: offered
        requests before the readers already waiting (``/api/replay`` waits for its own request,
        which a reader of every request would otherwise take)."""
        self._take_slot()
        watcher = Watcher(matches, self.buffer, self.watcher_budget, lambda: self.on_drop())
        if first:
            self.watchers.insert(0, watcher)
        else:
            self.watchers.append(watcher)
        return watcher

    def follow(self, matches: Callable[[Mapping[str, Any]], bool] | None = None) -> Follower:
        """A reader of every matching request (``TooManyWatchers`` as ``watch``)."""
        self._take_slot()
        follower = Follower(self, matches)
        follower.arm()
        return follower

    def offer(self, follower: Follower, waiting: bool) -> None:
        """A follower waits for requests (behind the others waiting), or stops waiting."""
        if waiting and follower not in self.watchers:
            self.watchers.append(follower)
        elif not waiting and follower in self.watchers:
            self.watchers.remove(follower)

    def forget(self, watcher: Watcher) -> None:
        """A reader went away: stop offering it requests (a claimed trace just loses its reader)."""
        if watcher in self.watchers:
            self.watchers.remove(watcher)
        if not watcher.forgotten:
            watcher.forgotten = True
            if watcher.counted:
                self.open -= 1
        watcher.receive.close()

    def claim(self, arrival: float, activation: Callable[[], Mapping[str, Any]]) -> Tracer | None:
        """Give the request to the first waiting watcher that wants it, if any."""
        context = None
        for watcher in self.watchers:
            if watcher.matches is not None:
                if context is None:
                    context = self.redaction.activation(activation())  # a filter must not probe secrets
                if not watcher.matches(context):
                    continue
            self.watchers.remove(watcher)
            if isinstance(watcher, Follower):  # it waits again behind the others, before any other request runs
                accepted = watcher.accept()
                assert accepted is not None  # it waits only while it has room
                watcher = accepted
            self.traced += 1
            return Tracer(watcher, arrival, self.body_limit, self.redaction)
        return None


class Follower:
    """The reader of ``/debug/trace?follow=true``: every matching request, whole, in claim order.

    It owns one place among the hub's ``max_watchers`` and waits among the hub's watchers while its
    reader is fewer than ``FOLLOW_PENDING`` requests behind (``arm``); each request claimed for it
    becomes one watcher of its own (``accept``), queued for the stream.
    """

    def __init__(self, hub: TraceHub, matches: Callable[[Mapping[str, Any]], bool] | None) -> None:
        self.hub = hub
        self.matches = matches
        self.ledger = Ledger()  # its requests' unread events share one budget
        self._send, self._claimed_requests = trio.open_memory_channel[Watcher](FOLLOW_PENDING)
        self.pending = 0  # claimed and not yet written out completely
        self.closed = False

    def arm(self) -> None:
        """Wait for requests while there is room for one more behind the reader, else stop."""
        self.hub.offer(self, not self.closed and self.pending < FOLLOW_PENDING)

    def accept(self) -> Watcher | None:
        """The watcher of a request claimed for this follower, queued for the stream (None once
        the reader left, or is ``FOLLOW_PENDING`` behind: a claim made across workers before the
        supervisor withdrew it)."""
        if self.closed or self.pending >= FOLLOW_PENDING:
            return None
        hub = self.hub
        watcher = Watcher(self.matches, hub.buffer, hub.watcher_budget, lambda: hub.on_drop(), self.ledger)
        watcher.counted = False  # the follower holds the place among max_watchers
        self.pending += 1
        self._send.send_nowait(watcher)  # never full: pending <= FOLLOW_PENDING
        self.arm()
        return watcher

    async def next_request(self) -> Watcher:
        """The oldest claimed request not written out yet (waits for one)."""
        return await self._claimed_requests.receive()

    def done(self, watcher: Watcher) -> None:
        """``watcher``'s request is written out (or abandoned): make room for another."""
        self.pending -= 1
        self.hub.forget(watcher)
        self.arm()

    def close(self) -> None:
        """The reader left: stop waiting and drop the queued requests' events."""
        if self.closed:
            return
        self.closed = True
        self.arm()
        while True:
            try:
                self.hub.forget(self._claimed_requests.receive_nowait())
            except trio.WouldBlock:
                break
        self.hub.open -= 1
