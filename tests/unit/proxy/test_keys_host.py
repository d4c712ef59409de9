"""``runtime.keys``' host: the service opened when first needed, its task run while serving, the
final flush after the body (the drain), a store change on reload closing the old one."""

from __future__ import annotations

from types import SimpleNamespace

import trio

from trioproxy.config import parse_config
from trioproxy.proxy import keys_host
from trioproxy.proxy.keys_host import KeysHost, needs_keys, store_of

PLAIN = "config: {{store: {store}}}\nbinds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends: [{{host: '127.0.0.1:1'}}]\n"
KEYED = PLAIN.replace("backends:", "policies: {{apiKey: {{runtimeKeys: true}}}}\n      backends:")


class FakeService:
    def __init__(self, store: str, events: list[str]) -> None:
        self.store_name, self.events, self.settings = store, events, None
        self.running = False
        self.store = SimpleNamespace(describe=lambda: store)

    async def run(self) -> None:
        self.running = True
        self.events.append(f"run {self.store_name}")
        try:
            await trio.sleep_forever()
        finally:
            self.running = False

    async def aclose(self) -> None:
        await trio.sleep(0.01)  # a flush that takes a moment, even while cancelled around it
        self.events.append(f"close {self.store_name}")


def host_for(text: str, events: list[str]) -> tuple[KeysHost, dict[str, object]]:
    state = {"config": parse_config(text, env={})}
    host = KeysHost(lambda: state["config"], lambda store, config: FakeService(store, events))  # type: ignore[arg-type, return-value]
    return host, state


async def test_lazy_run_while_serving_and_flushed_after_the_body():
    events: list[str] = []
    host, _ = host_for(PLAIN.format(store="/tmp/a.db"), events)
    async with host.serving():
        await trio.sleep(0.01)
        assert host.service is None and events == []  # nothing uses keys yet
        service = host.get()
        assert host.get() is service
        await trio.sleep(0.01)
        assert events == ["run /tmp/a.db"] and service.running  # type: ignore[attr-defined]
    assert events == ["run /tmp/a.db", "close /tmp/a.db"] and host.service is None


async def test_a_runtime_keys_policy_opens_it_at_start_and_a_cancelled_gateway_still_flushes():
    events: list[str] = []
    host, _ = host_for(KEYED.format(store="/tmp/b.db"), events)
    with trio.CancelScope() as scope:
        async with host.serving():
            assert host.service is not None
            await trio.sleep(0.01)
            scope.cancel()
            await trio.sleep(1)
    assert events == ["run /tmp/b.db", "close /tmp/b.db"]


async def test_reload_replaces_the_service_only_when_the_store_changes():
    events: list[str] = []
    host, state = host_for(PLAIN.format(store="/tmp/one.db"), events)
    async with host.serving():
        first = host.get()
        await trio.sleep(0.01)
        changed = parse_config(PLAIN.format(store="/tmp/one.db").replace("one.db}", "one.db, keys: {refreshInterval: 2s}}"),
                               env={})
        state["config"] = changed
        host.configure(changed)
        assert host.service is first and first.settings.refresh_interval == 2.0  # type: ignore[attr-defined]
        moved = parse_config(PLAIN.format(store="/tmp/two.db"), env={})
        state["config"] = moved
        host.configure(moved)
        await trio.sleep(0.05)
        assert host.service is None  # reopened at the next use, on the new store
        assert events == ["run /tmp/one.db", "close /tmp/one.db"]
        assert host.get().store_name == "/tmp/two.db"  # type: ignore[attr-defined]
        await trio.sleep(0.01)
    assert events == ["run /tmp/one.db", "close /tmp/one.db", "run /tmp/two.db", "close /tmp/two.db"]


def test_store_override_and_needs_keys(monkeypatch):
    config = parse_config(PLAIN.format(store="/tmp/c.db"), env={})
    assert store_of(config) == "/tmp/c.db" and not needs_keys(config)
    assert needs_keys(parse_config(KEYED.format(store="/tmp/c.db"), env={}))
    monkeypatch.setenv(keys_host.STORE_ENV, "postgresql://gw@db/keys")
    assert store_of(config) == "postgresql://gw@db/keys"
