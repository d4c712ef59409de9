"""The runtime's key service (``runtime.keys``): created when first needed, run in the gateway's
root nursery, flushed and closed at shutdown, and replaced on reload only when the store changes.

"First needed" is a route or listener whose ``apiKey`` policy takes runtime keys (checked when the
gateway starts and at each reload) or the first admin call (``/api/keys``, ``/api/spend``...): a
gateway that uses neither never opens the store file. The store is ``config.store`` unless
``--store`` (or ``TRIOPROXY_STORE``, which the flag sets so worker processes and reloads see it
too) names another one.

Shutdown order: the service's background task (cache refresh, settlement flushes) keeps running
while the binds drain, so requests finishing during the drain are still settled; once everything
has drained, ``aclose`` flushes what is pending (``serving`` below).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import trio

from ..config.model import DEFAULT_STORE, Config
from ..keys.metrics import KeysMetrics
from ..keys.service import KeyService

log = logging.getLogger("trioproxy")

STORE_ENV = "TRIOPROXY_STORE"
CLOSE_TIMEOUT = 10.0  # the final flush of a store that hangs must not hold the exit forever


def store_of(config: Config) -> str:
    """The store a config names, unless ``--store``/``TRIOPROXY_STORE`` overrides it (a config
    built without the compiler has none: ``trioproxy.db`` in the working directory)."""
    return os.environ.get(STORE_ENV) or config.store or os.path.abspath(DEFAULT_STORE)


def needs_keys(config: Config) -> bool:
    """Whether any ``apiKey`` policy of ``config`` takes runtime keys (``runtimeKeys: true``)."""
    for bind in config.binds:
        for listener in bind.listeners:
            for policies in (listener.policies, *(route.policies for route in listener.routes),
                             *(backend.policies for route in listener.routes for backend in route.backends)):
                api_key = getattr(policies, "api_key", None)
                if api_key is not None and getattr(api_key, "runtime_keys", False):
                    return True
    return False


class KeysHost:
    """Owns at most one ``KeyService`` at a time for a ``Runtime``."""

    def __init__(self, config: Callable[[], Config],
                 factory: Callable[[str, Config], KeyService] | None = None,
                 metrics: KeysMetrics | None = None) -> None:
        self._config = config
        self._factory = factory or open_service
        self.metrics = metrics  # its budget snapshots run beside the service
        self.service: KeyService | None = None
        self.store: str | None = None  # the store ``service`` uses
        self._nursery: trio.Nursery | None = None
        self._scopes: dict[int, trio.CancelScope] = {}

    def get(self) -> KeyService:
        """The service, created (and started, once the gateway runs) at the first call."""
        if self.service is None:
            config = self._config()
            self.store = store_of(config)
            self.service = self._factory(self.store, config)
            if self._nursery is not None:
                self._start(self.service)
        return self.service

    def configure(self, config: Config) -> None:
        """A reload: a different store replaces the service (the old one flushed and closed in the
        background); the same store keeps it, with the new settings."""
        if self.service is None:
            if self._nursery is not None and needs_keys(config):
                self.get()
            return
        if store_of(config) != self.store:
            old, self.service = self.service, None
            log.info("config.store changed: closing the key store %s", old.store.describe())
            if self._nursery is not None:
                self._nursery.start_soon(self._close, old)
            if needs_keys(config):
                self.get()
            return
        self.service.settings = config.keys  # read at each use: intervals, failure mode, request log

    def _start(self, service: KeyService) -> None:
        assert self._nursery is not None
        scope = trio.CancelScope()
        self._scopes[id(service)] = scope
        self._nursery.start_soon(self._run, service, scope)

    async def _run(self, service: KeyService, scope: trio.CancelScope) -> None:
        with scope:
            try:
                async with trio.open_nursery() as nursery:
                    if self.metrics is not None:
                        nursery.start_soon(self.metrics.snapshots, service)
                    await service.run()
            except Exception:  # the service reports store trouble itself; never take the gateway down
                log.exception("the key service stopped")

    async def _close(self, service: KeyService) -> None:
        scope = self._scopes.pop(id(service), None)
        if scope is not None:
            scope.cancel()
        with trio.CancelScope(shield=True) as shielded:
            shielded.deadline = trio.current_time() + CLOSE_TIMEOUT
            try:
                await service.aclose()
            except Exception:
                log.exception("closing the key store failed; settlements not yet written are lost")
        if shielded.cancelled_caught:
            log.error("closing the key store took over %gs; settlements not yet written are lost", CLOSE_TIMEOUT)

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """While the gateway runs: the service's task in its own nursery; at the end, the final flush."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                if self.service is not None:
                    self._start(self.service)
                elif needs_keys(self._config()):
                    self.get()
                try:
                    yield
                finally:
                    self._nursery = None
                    for scope in self._scopes.values():
                        scope.cancel()
        finally:  # also when the gateway is cancelled (a second signal): what is settled is written
            if self.service is not None:
                service, self.service = self.service, None
                await self._close(service)


def open_service(store: str, config: Config) -> KeyService:
    """A service on ``store``, which its ``aclose`` closes (nothing is opened until its first use)."""
    return KeyService.open(store, config.keys)
