"""Remote JWKS: fetched with httpx at start, refreshed on an interval, refetched for an unknown ``kid``.

One :class:`RemoteJwks` per URL, shared by every ``jwtAuth`` policy naming it and kept across
config reloads by the :class:`JwksRegistry` (owned by the runtime). The registry's ``run`` task
lives in the server's root nursery: it fetches every URL once before the gateway reports ready,
then refreshes each on its interval, and picks up URLs a reload adds.

When the IdP is down the last good keys keep serving: a failed fetch never empties a key set.
``trioproxy_jwks_stale{url}`` is 1 while the newest fetch failed (and 0 after a success), and
``trioproxy_jwks_fetches_total{url,result}`` counts every attempt.

An unknown ``kid`` (an IdP that rotated its key) triggers one refetch, at most once per
``min_refetch_interval`` per URL; concurrent requests that need it wait for the same fetch.
"""

from __future__ import annotations

import logging
import math

import httpx
import trio
from prometheus_client import CollectorRegistry, Counter, Gauge

from .jwt import EMPTY_KEYSET, JwksError, KeyHolder, parse_jwks

log = logging.getLogger("trioproxy.jwks")

__all__ = ["JwksRegistry", "RemoteJwks"]

REFRESH_INTERVAL = 300.0      # seconds between refreshes while the IdP answers
RETRY_INTERVAL = 10.0         # seconds between attempts while it does not
MIN_REFETCH_INTERVAL = 10.0   # an unknown kid refetches at most this often per URL
FETCH_TIMEOUT = 5.0
MAX_JWKS_BYTES = 1024 * 1024


class _Metrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.fetches = Counter("trioproxy_jwks_fetches", "JWKS fetches by URL and result (ok, error).",
                               ["url", "result"], registry=registry)
        self.stale = Gauge("trioproxy_jwks_stale",
                           "1 while the newest JWKS fetch failed and the last good keys keep serving.",
                           ["url"], registry=registry)
        self.keys = Gauge("trioproxy_jwks_keys", "Signing keys currently served from the JWKS.",
                          ["url"], registry=registry)


class RemoteJwks:
    """The keys published at one URL; ``holder`` is what verifiers read."""

    def __init__(self, url: str, *, metrics: _Metrics | None = None,
                 refresh_interval: float = REFRESH_INTERVAL, retry_interval: float = RETRY_INTERVAL,
                 min_refetch_interval: float = MIN_REFETCH_INTERVAL, timeout: float = FETCH_TIMEOUT) -> None:
        self.url = url
        self.holder = KeyHolder(EMPTY_KEYSET)
        self.metrics = metrics or _Metrics(None)
        self.refresh_interval = refresh_interval
        self.retry_interval = retry_interval
        self.min_refetch_interval = min_refetch_interval
        self.timeout = timeout
        self.last_error: str | None = None
        self.last_success: float | None = None   # trio time
        self._last_attempt = -math.inf
        self._last_refetch = -math.inf
        self._inflight: trio.Event | None = None

    @property
    def stale(self) -> bool:
        return self.last_error is not None

    async def _get(self) -> bytes:
        """The body, read as it streams in and abandoned once past ``MAX_JWKS_BYTES`` (or once its
        ``content-length`` says it will be): checking the size after ``response.content`` let a
        hostile or broken IdP make the gateway buffer whatever it sent within the timeout."""
        too_big = JwksError(f"JWKS larger than {MAX_JWKS_BYTES} bytes")
        async with httpx.AsyncClient(timeout=self.timeout, follow_redirects=True) as client, \
                client.stream("GET", self.url, headers={"accept": "application/json"}) as response:
            if response.status_code != 200:
                raise JwksError(f"HTTP {response.status_code}")
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_JWKS_BYTES:
                raise too_big
            body = bytearray()
            async for chunk in response.aiter_bytes():  # decoded: a compressed bomb counts as it expands
                body += chunk
                if len(body) > MAX_JWKS_BYTES:
                    raise too_big
            return bytes(body)

    async def fetch(self) -> bool:
        """Fetch once; concurrent callers share one fetch. True when the keys are fresh now."""
        if self._inflight is not None:
            await self._inflight.wait()
            return self.last_error is None
        self._inflight = done = trio.Event()
        self._last_attempt = trio.current_time()
        try:
            with trio.move_on_after(self.timeout + 1):
                try:
                    keys = parse_jwks(await self._get())
                except (httpx.HTTPError, JwksError, OSError) as exc:
                    self._failed(str(exc) or type(exc).__name__)
                else:
                    self.holder.keys = keys
                    self.last_error = None
                    self.last_success = trio.current_time()
                    self.metrics.fetches.labels(self.url, "ok").inc()
                    self.metrics.stale.labels(self.url).set(0)
                    self.metrics.keys.labels(self.url).set(len(keys.keys))
                    return True
                return False
            self._failed("timed out")
            return False
        finally:
            self._inflight = None
            done.set()

    def _failed(self, why: str) -> None:
        if self.last_error is None:
            log.warning("JWKS fetch from %s failed (%s); %s", self.url, why,
                        "keeping the last good keys" if self.last_success is not None else "no keys yet")
        self.last_error = why
        self.metrics.fetches.labels(self.url, "error").inc()
        self.metrics.stale.labels(self.url).set(1)

    async def refetch_for_unknown_kid(self) -> bool:
        """One rate-limited refetch for a token whose ``kid`` is not published (yet)."""
        if self._inflight is None:
            now = trio.current_time()
            if now - self._last_refetch < self.min_refetch_interval:
                return False
            self._last_refetch = now
        return await self.fetch()

    async def run(self) -> None:
        """Refresh forever: on the interval while the IdP answers, sooner while it does not.

        A set never fetched (``_last_attempt`` is -inf) is fetched at once.
        """
        while True:
            delay = self.retry_interval if self.stale or self.last_success is None else self.refresh_interval
            await trio.sleep_until(self._last_attempt + delay)
            await self.fetch()


class JwksRegistry:
    """Every remote JWKS of the process, by URL; survives reloads so keys and rate limits persist."""

    def __init__(self, metrics_registry: CollectorRegistry | None = None, **options: float) -> None:
        self.metrics = _Metrics(metrics_registry)
        self.options = options
        self.remotes: dict[str, RemoteJwks] = {}
        self._nursery: trio.Nursery | None = None

    def get(self, url: str) -> RemoteJwks:
        remote = self.remotes.get(url)
        if remote is None:
            remote = self.remotes[url] = RemoteJwks(url, metrics=self.metrics, **self.options)
            if self._nursery is not None:  # added by a reload: ``run`` fetches at once, then refreshes
                self._nursery.start_soon(remote.run)
        return remote

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fetch every known URL once (in parallel), report started, then keep them fresh."""
        async with trio.open_nursery() as nursery:
            async with trio.open_nursery() as first:
                for remote in list(self.remotes.values()):
                    first.start_soon(remote.fetch)
            self._nursery = nursery
            for remote in list(self.remotes.values()):
                nursery.start_soon(remote.run)
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None
