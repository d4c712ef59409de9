"""A config file caught half-written is never applied (issue 27; ``trioproxy/settle.py``).

A real gateway on port 0 watches its file on a ``MockClock`` that moves only when the test jumps
it, so "the writer paused 0.9 s" and "the watcher polled" happen in a fixed order; each step waits
for every task to block, then asks the gateway over a real socket what it now serves.
"""

from __future__ import annotations

import os

import trio
import trio.testing

from tests.conftest import free_port, start_gateway
from trioproxy.settle import SETTLE_SECONDS, SettledFile

HEAD = """\
binds:
- port: {port}
  listeners:
  - routes:
    - name: rest
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""
DENY = """\
    - name: admin
      matches: [{path: {pathPrefix: /admin}}]
      policies: {directResponse: {status: 403, body: "denied"}}
"""
FRESH = """\
    - name: fresh
      matches: [{path: {pathPrefix: /fresh}}]
      policies: {directResponse: {status: 200, body: "fresh"}}
"""


async def _serving(gw, clock: trio.testing.MockClock, seconds: float) -> list[tuple[int, int, str]]:
    """Advance virtual time in 1/8 s steps (exact in binary: the old 1 s poll falls on a step);
    after each, what /admin and /fresh answer."""
    seen = []
    async with gw.client() as client:
        for _ in range(round(seconds / 0.125)):
            clock.jump(0.125)
            await trio.testing.wait_all_tasks_blocked()
            admin, fresh = await client.get("/admin"), await client.get("/fresh")
            seen.append((admin.status_code, fresh.status_code, fresh.text))
    return seen


async def _start(nursery, tmp_path, backend):
    port = free_port()
    head = HEAD.format(port=port, backend=backend.port)
    path = tmp_path / "gw.yaml"
    path.write_text(head + DENY)
    gw = await start_gateway(nursery, path.read_text().replace("{", "{{").replace("}", "}}"),
                             config_path=str(path))
    return gw, path, head


async def test_a_writer_that_pauses_mid_file_never_gets_its_prefix_applied(nursery, tmp_path, backend, mock_clock):
    gw, path, head = await _start(nursery, tmp_path, backend)
    seen = await _serving(gw, mock_clock, 0.5)
    with path.open("r+") as file:  # in place, as an editor or `cat >` does: same inode
        file.truncate(0)
        file.write(head)  # a valid config on its own: no deny route
        file.flush()
        paused = await _serving(gw, mock_clock, 0.875)  # across the old watcher's 1 s poll
        file.write(FRESH + DENY)
    finished = await _serving(gw, mock_clock, 2.0)
    assert all(admin == 403 for admin, _, _ in seen + paused + finished), paused
    assert finished[-1] == (403, 200, "fresh")  # the whole file was applied once it settled


async def test_in_place_changes_wait_to_settle_and_a_rename_applies_at_the_next_poll(
        nursery, tmp_path, backend, mock_clock):
    gw, path, head = await _start(nursery, tmp_path, backend)
    await _serving(gw, mock_clock, 0.5)
    path.write_text(head + FRESH + DENY)  # complete, but in place: applied only once settled
    early = await _serving(gw, mock_clock, 0.5)
    assert all(fresh == 200 and text != "fresh" for _, fresh, text in early)
    later = await _serving(gw, mock_clock, 1.0)
    assert later[-1] == (403, 200, "fresh")
    replacement = tmp_path / "gw.yaml.new"
    replacement.write_text(head + DENY)  # the fresh route removed, renamed into place
    os.replace(replacement, path)
    renamed = await _serving(gw, mock_clock, 0.375)
    assert renamed[-1][1] == 200 and renamed[-1][2] != "fresh"  # before a settle interval passed
    assert 0.375 < SETTLE_SECONDS


async def test_an_invalid_settled_file_keeps_the_old_config(nursery, tmp_path, backend, mock_clock):
    gw, path, head = await _start(nursery, tmp_path, backend)
    await _serving(gw, mock_clock, 0.5)
    path.write_text(head + "    - name: broken\n      backends: [")
    seen = await _serving(gw, mock_clock, 2.0)
    assert all(admin == 403 for admin, _, _ in seen)
    registry = gw.info.runtime.metrics.registry
    assert registry.get_sample_value("trioproxy_config_reloads_total", {"result": "rejected"}) == 1


def test_settled_file_decisions(tmp_path):
    path = tmp_path / "f"
    path.write_text("a")
    watched = SettledFile(path, settle=1.0)
    assert not watched.poll(0.5)  # unchanged
    path.write_text("ab")
    assert not watched.poll(1.0)  # changed: pending
    path.write_text("abc")
    assert not watched.poll(1.9)  # changed again: the wait restarts
    assert not watched.poll(2.8)
    assert watched.poll(2.9) and watched.content == b"abc"
    assert not watched.poll(10.0)
    stat = path.stat()
    path.write_text("xyz")  # same size, mtime restored: the content hash still sees it
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert not watched.poll(11.0) and watched.poll(12.0) and watched.content == b"xyz"
    os.utime(path)  # touched: the same content, nothing to load
    assert not watched.poll(12.5) and not watched.poll(13.5)
    twin = tmp_path / "twin"
    twin.write_text("xyz")
    twin.replace(path)  # the same content renamed into place: nothing to load either
    assert not watched.poll(13.6)
    path.unlink()
    assert not watched.poll(14.0) and watched.poll(15.0) and watched.content is None  # gone, settled
    path.write_text("new")  # a new inode appears: at once
    assert watched.poll(15.1) and watched.content == b"new"


def test_the_rate_limit_server_never_loads_a_half_written_file(tmp_path):
    """The same rule for ``trioproxy ratelimit-server``'s config (its watcher polls every 0.5 s):
    a writer that paused after a valid prefix (the domain without its tight limit) for longer
    than a poll used to get the prefix loaded."""
    from trioproxy.rls.server import RateLimitServer
    from trioproxy.rls.store import MemoryStore

    head = "domain: gw\ndescriptors:\n- key: user\n  rate_limit: {unit: minute, requests_per_unit: 1000}\n"
    tight = "  descriptors:\n  - key: path\n    value: /admin\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"
    path = tmp_path / "limits.yaml"
    path.write_text(head + tight)
    server = RateLimitServer(str(path), MemoryStore())
    admin = [("user", "x"), ("path", "/admin")]
    assert server.domains.find("gw").find(admin).requests_per_unit == 1
    with path.open("r+") as file:
        file.truncate(0)
        file.write(head)
        file.flush()
        for now in (0.5, 1.0, 1.25):  # polls while the writer pauses: the old watcher loaded at 1.0
            server.reload_if_changed(now)
            assert server.domains.find("gw").find(admin).requests_per_unit == 1
        file.write(tight.replace("requests_per_unit: 1}", "requests_per_unit: 2}"))
    server.reload_if_changed(1.5)
    assert server.domains.find("gw").find(admin).requests_per_unit == 1
    server.reload_if_changed(2.5)
    assert server.domains.find("gw").find(admin).requests_per_unit == 2
    replacement = tmp_path / "new.yaml"
    replacement.write_text(head + tight)
    replacement.replace(path)
    server.reload_if_changed(2.6)  # renamed into place: at once
    assert server.domains.find("gw").find(admin).requests_per_unit == 1
