"""Which requests open a nursery of their own (gateway.py ``Gateway.handle``/``_serve``,
``CompiledRoute.needs_tasks``): a nursery's exit is one more scheduling round per request, so
a request served on a socket the disconnect monitor watches (``asgi.CLIENT_FD``) opens one only
when it may need a task beside it: an upload streamed while the answer is read, an MCP
listening stream, a disconnect watcher when no monitor can watch."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import trio
import trio.testing

from trioproxy.asgi import CLIENT_FD, CONNECTION_SCOPE
from trioproxy.config import parse_config
from trioproxy.llm.providers import endpoint_kind
from trioproxy.proxy.disconnect_monitor import available
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.gateway import Gateway
from trioproxy.proxy.runtime import Runtime
from trioproxy.upstream.pool import UpstreamPool

pytestmark = pytest.mark.skipif(not available(), reason="epoll is Linux only")

CONFIG = """binds:
- port: 3000
  listeners:
  - routes:
    - name: llm
      matches: [{path: {pathPrefix: /v1/}}]
      backends:
      - ai: {name: mock, provider: {openAI: {model: m}}, hostOverride: "127.0.0.1:9"}
    - name: mapped
      matches: [{path: {pathPrefix: /mapped/}}]
      backends:
      - ai: {name: mapped, provider: {openAI: {model: m}}, hostOverride: "127.0.0.1:9"}
        policies:
          ai: {routes: {"/mapped/v1/chat/completions": completions}}
    - name: plain
      matches: [{path: {pathPrefix: /plain}}]
      backends: [{host: "127.0.0.1:9"}]
    - name: tools
      matches: [{path: {pathPrefix: /mcp}}]
      backends:
      - mcp:
          targets:
          - {name: t, mcp: {host: "127.0.0.1:9"}}
"""

BODY = b'{"model": "m", "messages": []}'
ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"


class _Backend(trio.abc.Stream):
    """Answers ``ANSWER`` once a request head has arrived, without waiting for its body (``hang``:
    never answers)."""

    def __init__(self, hang: bool = False) -> None:
        self.received = b""
        self.head = trio.Event()
        self.hang = hang

    async def send_all(self, data: Any) -> None:
        await trio.lowlevel.checkpoint()
        self.received += bytes(data)
        if b"\r\n\r\n" in self.received:
            self.head.set()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self.hang:
            await trio.sleep_forever()
        await self.head.wait()
        self.head = trio.Event()
        return ANSWER

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def _gateway(hang: bool = False) -> tuple[Runtime, Gateway, list[trio.Nursery | None]]:
    """The gateway and, per upstream call, the nursery the request handed the pool (None: none open)."""
    async def connect(target: Any) -> trio.abc.Stream:
        return _Backend(hang)

    pool = UpstreamPool(connect=connect)
    nurseries: list[trio.Nursery | None] = []
    request = pool.request

    async def recording(*args: Any, nursery: trio.Nursery | None = None, **kwargs: Any) -> Any:
        nurseries.append(nursery)
        return await request(*args, nursery=nursery, **kwargs)

    pool.request = recording  # type: ignore[method-assign]
    runtime = Runtime(parse_config(CONFIG, env={}), pool=pool)
    return runtime, Gateway(runtime, 3000), nurseries


def _scope(method: str, path: str, body: bytes, fd: int | None) -> dict[str, Any]:
    headers = [(b"host", b"x"), (b"content-type", b"application/json")]
    if body:
        headers.append((b"content-length", str(len(body)).encode()))
    return {"type": "http", "http_version": "1.1", "method": method, "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": b"", "headers": headers, "client": ("127.0.0.1", 5000),
            "extensions": {CLIENT_FD: fd} if fd is not None else {}}


async def _call(app: Gateway, scope: dict[str, Any], body: bytes) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if reads == 1 and body:
            return {"type": "http.request", "body": body, "more_body": False}
        await trio.sleep_forever()  # a client that stays (a watcher task waits here)
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    with trio.fail_after(5):
        await app(scope, receive, send)
    return sent


@pytest.mark.parametrize(("method", "path", "body", "opens"), [
    ("POST", "/v1/chat/completions", BODY, False),  # the body is read whole: nothing to upload
    ("GET", "/plain", b"", False),  # no body at all
    ("POST", "/plain", BODY, True),  # streamed to the backend by an upload task
    ("POST", "/v1/files", BODY, True),  # a provider endpoint the gateway forwards unread
    ("POST", "/mapped/v1/chat/completions", BODY, True),  # an ai routes map picks the kind per backend
])
async def test_on_a_watched_socket_a_nursery_is_opened_only_for_a_task(pair, method, path, body, opens) -> None:
    runtime, app, nurseries = _gateway()
    sent = await _call(app, _scope(method, path, body, pair[0].fileno()), body)
    assert sent[0]["status"] == 200
    assert [n is not None for n in nurseries] == [opens]
    assert runtime.disconnects is not None and runtime.disconnects.watching == 0


async def test_without_the_socket_the_request_keeps_its_nursery_for_the_watcher_task() -> None:
    runtime, app, nurseries = _gateway()
    sent = await _call(app, _scope("POST", "/v1/chat/completions", BODY, None), BODY)
    assert sent[0]["status"] == 200 and nurseries[0] is not None


async def test_an_upload_still_streams_while_the_backends_early_answer_is_read(pair) -> None:
    """Full duplex on a watched socket: the backend answers after the head, the client's body
    still coming; the answer reaches the client before the client sends the rest."""
    runtime, app, nurseries = _gateway()
    answered = trio.Event()
    sent: list[dict[str, Any]] = []
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if reads == 1:
            return {"type": "http.request", "body": BODY[:5], "more_body": True}
        if reads == 2:
            await answered.wait()  # without an upload task the gateway would wait here for ever
            return {"type": "http.request", "body": BODY[5:], "more_body": False}
        await trio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.start":
            answered.set()

    with trio.fail_after(5):
        await app(_scope("POST", "/plain", BODY, pair[0].fileno()), receive, send)
    assert sent[0]["status"] == 200 and sent[-1].get("more_body") is False and nurseries[0] is not None


def test_which_routes_may_need_a_task() -> None:
    runtime = Runtime(parse_config(CONFIG, env={}), pool=UpstreamPool(connect=None))  # type: ignore[arg-type]
    routes = {key.rsplit("/", 1)[-1]: compiled for key, compiled in runtime.state.routes.items()}

    def needs(route: str, method: str, path: str, body: bytes, version: str = "1.1") -> bool:
        scope = _scope(method, path, body, None)
        scope["http_version"] = version
        x = Exchange(scope, None, None, 0.0)  # type: ignore[arg-type]
        if routes[route].llm:
            x.llm_kind = endpoint_kind(path)
        return routes[route].needs_tasks(x)

    assert needs("tools", "GET", "/mcp", b"")  # a listening stream runs in the request's nursery
    assert not needs("llm", "POST", "/v1/chat/completions", BODY)
    assert not needs("llm", "GET", "/v1/models", b"")
    assert needs("llm", "POST", "/v1/files", BODY)
    assert needs("plain", "POST", "/plain", BODY)
    assert not needs("plain", "GET", "/plain", b"")
    assert needs("plain", "GET", "/plain", b"", version="2")  # HTTP/2 may send a body undeclared
    assert needs("mapped", "POST", "/mapped/v1/chat/completions", BODY)


@pytest.mark.parametrize(("method", "path", "body", "own_scope"), [
    ("GET", "/plain", b"", False),  # no task beside it: the connection's scope is the request's
    ("POST", "/v1/chat/completions", BODY, False),
    ("POST", "/plain", BODY, True),  # an upload task: a nursery of its own
])
async def test_a_client_gone_cancels_the_connection_scope_the_server_gave_unless_a_nursery_was_opened(
        pair, method, path, body, own_scope) -> None:
    """``asgi.CONNECTION_SCOPE`` (http1.py): the request runs in the server's scope around its
    connection instead of entering one of its own; a disconnect cancels it, ending the connection."""
    runtime, app, nurseries = _gateway(hang=True)
    scope = _scope(method, path, body, pair[0].fileno())
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if body and not sent:
            sent.append({})
            return {"type": "http.request", "body": body, "more_body": False}
        await trio.sleep_forever()
        raise AssertionError

    async def send(message: dict[str, Any]) -> None:
        raise AssertionError("the backend never answers")

    async def leave_once_the_backend_is_called() -> None:
        await trio.testing.wait_all_tasks_blocked()
        pair[1].close()  # the client leaves mid-request

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(leave_once_the_backend_is_called)
            with trio.CancelScope() as connection:
                scope["extensions"][CONNECTION_SCOPE] = connection
                await app(scope, receive, send)
    assert nurseries == [None] if not own_scope else len(nurseries) == 1 and nurseries[0] is not None
    assert connection.cancelled_caught is not own_scope
    assert runtime.disconnects is not None and runtime.disconnects.watching == 0
