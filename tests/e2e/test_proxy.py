"""End-to-end proxying through an in-process gateway over real sockets."""

from __future__ import annotations

import hashlib
import json

import h11
import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port, start_routes


async def test_get_forwards_method_path_query_and_headers(gateway, backend):
    async with gateway.client() as client:
        response = await client.get("/some/path?a=1&b=two", headers={
            "x-custom": "yes", "connection": "keep-alive, x-hop", "x-hop": "dropped",
            "keep-alive": "timeout=5", "x-forwarded-for": "10.0.0.1",
        })
    assert response.status_code == 200
    echo = response.json()
    headers = dict(echo["headers"])
    assert echo["method"] == "GET"
    assert echo["path"] == "/some/path"
    assert echo["query"] == "a=1&b=two"
    assert headers["x-custom"] == "yes"
    assert headers["host"] == f"127.0.0.1:{gateway.info.ports[gateway.port]}"  # Host kept
    assert headers["x-forwarded-for"] == "10.0.0.1, 127.0.0.1"
    assert headers["x-forwarded-proto"] == "http"
    for hop in ("connection", "keep-alive", "x-hop"):
        assert hop not in headers


async def test_methods_are_forwarded(gateway):
    async with gateway.client() as client:
        for method in ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"):
            response = await client.request(method, "/m")
            assert response.json()["method"] == method
        head = await client.head("/m")
        assert head.status_code == 200 and head.content == b""


async def test_large_request_body_with_content_length(gateway):
    body = bytes(range(256)) * (4 * 4096)  # 4 MiB
    async with gateway.client() as client:
        response = await client.post("/upload", content=body)
    echo = response.json()
    assert echo["body_length"] == len(body)
    assert echo["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert ["content-length", str(len(body))] in echo["headers"]


async def test_chunked_request_body_streams_through(gateway):
    parts = [b"x" * 1000, b"y" * 70000, b"z"]

    async def gen():
        for part in parts:
            yield part

    async with gateway.client() as client:
        response = await client.post("/upload", content=gen())
    echo = response.json()
    assert echo["body_sha256"] == hashlib.sha256(b"".join(parts)).hexdigest()
    assert ["transfer-encoding", "chunked"] in echo["headers"]


async def test_mirror_streams_body_both_ways_at_once(gateway):
    """A backend that echoes while it reads: upload and download run concurrently (full duplex).

    httpx sends the whole body before reading, so this client is h11 on a raw stream."""
    body = b"0123456789" * 1_000_000  # 10 MB: far more than socket buffers hold
    stream = await trio.open_tcp_stream("127.0.0.1", gateway.info.ports[gateway.port])
    conn = h11.Connection(h11.CLIENT)
    received = bytearray()

    async def upload() -> None:
        await stream.send_all(conn.send(h11.Request(method="POST", target="/mirror", headers=[
            ("host", "gw"), ("content-length", str(len(body)))])))
        for i in range(0, len(body), 65536):
            await stream.send_all(conn.send(h11.Data(data=body[i:i + 65536])))
        await stream.send_all(conn.send(h11.EndOfMessage()))

    async def download() -> None:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Data):
                received.extend(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(upload)
            nursery.start_soon(download)
    await stream.aclose()
    assert bytes(received) == body


async def test_large_responses_with_length_and_chunked(gateway):
    async with gateway.client() as client:
        sized = await client.get("/bytes/10000000")
        chunked = await client.get("/chunked/3000000")
    assert len(sized.content) == 10_000_000
    assert sized.headers["content-length"] == "10000000"
    assert len(chunked.content) == 3_000_000
    assert "content-length" not in chunked.headers


async def test_server_sent_events_pass_through_one_by_one(gateway, backend):
    """The first event reaches the client while the backend still holds the second."""
    async with gateway.client() as client:
        async with client.stream("GET", "/gated-sse") as response:
            assert response.headers["content-type"] == "text/event-stream"
            chunks = response.aiter_raw()
            with trio.fail_after(5):
                first = await chunks.__anext__()
            assert first == b"data: first\n\n"
            backend.gate.set()
            rest = b"".join([chunk async for chunk in chunks])
    assert rest == b"data: second\n\n"


async def test_upstream_connections_are_reused(gateway, backend):
    async with gateway.client() as client:
        for _ in range(20):
            assert (await client.get("/ka")).status_code == 200
    assert backend.requests == 20
    assert backend.connections == 1


async def test_backend_status_is_passed_through(gateway):
    async with gateway.client() as client:
        response = await client.get("/status/418")
    assert response.status_code == 418
    assert response.text == "status 418"


async def test_no_route_is_404(nursery, backend):
    gw = await start_routes(nursery, """
            - matches: [{{path: {{pathPrefix: /api}}}}]
              backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        missing = await client.get("/other")
        found = await client.get("/api/x")
    assert (missing.status_code, missing.text, missing.headers["content-type"]) == (404, "route not found", "text/plain")
    assert found.status_code == 200


async def test_unreachable_backend_is_503(nursery):
    gw = await start_routes(nursery, """
            - backends: [{{host: "127.0.0.1:{dead}"}}]
        """, port=free_port(), dead=free_port())
    async with gw.client() as client:
        response = await client.get("/")
    assert response.status_code == 503
    assert response.text.startswith("upstream connect error")
    registry = gw.info.runtime.metrics.registry
    assert registry.get_sample_value("trioproxy_upstream_errors_total", {
        "bind": f"bind/{gw.port}", "route": gw.info.runtime.state.config.binds[0].listeners[0].routes[0].key,
        "reason": "BackendUnreachable"}) == 1


async def test_broken_upstream_responses_are_502(gateway):
    async with gateway.client() as client:
        garbage = await client.get("/garbage")
        closed = await client.get("/close")
    assert garbage.status_code == 502 and garbage.text.startswith("invalid upstream response")
    assert closed.status_code == 502
    samples = {s.labels["reason"]: s.value for family in text_string_to_metric_families(
        gateway.info.runtime.metrics.exposition()[0].decode()) for s in family.samples
        if s.name == "trioproxy_upstream_errors_total"}
    assert samples == {"BadUpstreamResponse": 2}


async def test_truncated_upstream_body_truncates_the_client_response(gateway):
    async with gateway.client() as client:
        try:
            response = await client.get("/truncate")
        except httpx.RemoteProtocolError:
            return  # the client saw the connection close mid-body: correct
    raise AssertionError(f"expected a truncated response, got {response.status_code} {response.content!r}")


async def test_backend_timeout_is_504(nursery, backend, mock_clock):
    mock_clock.autojump_threshold = 0  # the backend's sleeps and the deadlines run on virtual time
    gw = await start_routes(nursery, """
            - name: backend-limited
              matches: [{{headers: [{{name: x-limit, value: {{exact: backend}}}}]}}]
              policies: {{timeout: {{backendRequestTimeout: 200ms}}}}
              backends: [{{host: "127.0.0.1:{backend}"}}]
            - name: request-limited
              policies: {{timeout: {{requestTimeout: 200ms}}}}
              backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        backend_limited = await client.get("/slow?ms=3000", headers={"x-limit": "backend"})
        request_limited = await client.get("/slow?ms=3000")
        fast = await client.get("/slow?ms=1")
    assert (backend_limited.status_code, backend_limited.text) == (504, "upstream call timeout")
    assert (request_limited.status_code, request_limited.text) == (504, "request timeout")
    assert fast.status_code == 200


async def test_client_disconnect_cancels_upstream_call_quickly(gateway, backend, mock_clock):
    """The abandoned upstream call is cancelled at once: not one timer has to fire (the mock
    clock never moves), so nothing but the disconnect itself can have stopped it."""
    async def request_and_abandon(cancel_scope: trio.CancelScope) -> None:
        with cancel_scope:
            async with gateway.client() as client:
                await client.get("/hang")

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(request_and_abandon, scope)
        await backend.hang_started.wait()
        start = trio.current_time()
        scope.cancel()  # closes the client connection
        await backend.hung_up.wait()
        assert trio.current_time() == start
    metrics = gateway.info.runtime.metrics.exposition()[0].decode()
    assert 'status="499"' in metrics


async def test_too_many_headers_is_431(gateway):
    async with gateway.client() as client:
        response = await client.get("/", headers=[(f"x-h{i}", "v") for i in range(150)])
    assert response.status_code == 431


async def test_oversized_header_block_is_rejected(gateway):
    async with gateway.client() as client:
        response = await client.get("/", headers={"x-big": "a" * 64 * 1024})
    assert response.status_code in (400, 431)


async def test_header_modifiers_direct_response_and_backend_auth(nursery, backend):
    gw = await start_routes(nursery, """
            - name: direct
              matches: [{{path: {{exact: /direct}}}}]
              policies: {{directResponse: {{status: 202, body: "hello there"}}}}
            - name: modified
              policies:
                requestHeaderModifier: {{set: [{{name: x-set, value: route}}], remove: [x-remove-me]}}
                responseHeaderModifier: {{add: {{x-resp: added}}}}
              backends:
              - host: "127.0.0.1:{backend}"
                policies:
                  backendAuth: {{key: sekret}}
                  requestHeaderModifier: {{add: [{{name: x-backend, value: b1}}]}}
        """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        direct = await client.get("/direct")
        modified = await client.get("/x", headers={"x-remove-me": "1", "x-set": "client", "authorization": "Basic abc"})
    assert (direct.status_code, direct.text) == (202, "hello there")
    headers = dict(modified.json()["headers"])
    assert headers["x-set"] == "route"
    assert "x-remove-me" not in headers
    assert headers["x-backend"] == "b1"
    assert headers["authorization"] == "Bearer sekret"
    assert modified.headers["x-resp"] == "added"


async def test_weighted_backends_split_traffic(nursery):
    from fixtures.echo_backend import EchoBackend

    heavy = await nursery.start(EchoBackend().serve)
    light = await nursery.start(EchoBackend().serve)
    zero = await nursery.start(EchoBackend().serve)
    gw = await start_routes(nursery, """
            - backends:
              - {{host: "127.0.0.1:{heavy}", weight: 9}}
              - {{host: "127.0.0.1:{light}", weight: 1}}
              - {{host: "127.0.0.1:{zero}", weight: 0}}
        """, port=free_port(), heavy=heavy.port, light=light.port, zero=zero.port)
    async with gw.client() as client:
        for _ in range(200):
            await client.get("/")
    assert heavy.requests + light.requests == 200
    assert zero.requests == 0
    assert heavy.requests > 140 and light.requests > 2  # 9:1 split, far from chance of failing


async def test_hostname_routing_and_listener_hostnames(nursery, backend):
    from fixtures.echo_backend import EchoBackend

    other = await nursery.start(EchoBackend().serve)
    gw = await start_routes(nursery, """
            - name: exact
              hostnames: [api.example.com]
              backends: [{{host: "127.0.0.1:{backend}"}}]
            - name: wildcard
              hostnames: ["*.example.com"]
              backends: [{{host: "127.0.0.1:{other}"}}]
        """, port=free_port(), backend=backend.port, other=other.port)
    async with gw.client() as client:
        await client.get("/", headers={"host": "api.example.com:8080"})
        await client.get("/", headers={"host": "web.example.com"})
        none = await client.get("/", headers={"host": "example.org"})
    assert backend.requests == 1 and other.requests == 1
    assert none.status_code == 404


def gateway_backend_port(gateway) -> int:
    return gateway.info.runtime.state.config.binds[0].listeners[0].routes[0].backends[0].target.port


async def test_readiness_metrics_config_dump_and_ui(gateway):
    info = gateway.info
    async with httpx.AsyncClient(timeout=5) as client:
        await client.get(f"{gateway.url}/x")
        ready = await client.get(f"http://{info.readiness}/healthz/ready")
        metrics = await client.get(f"http://{info.stats}/metrics")
        dump = await client.get(f"{gateway.admin_url}/config_dump")
        ui = await client.get(f"{gateway.admin_url}/ui")
        root = await client.get(f"{gateway.admin_url}/")
    assert (ready.status_code, ready.text) == (200, "ready")
    route_key = f"default/default/bind/{gateway.port}/listener0/default/echo"
    listener = f"default/default/bind/{gateway.port}/listener0"
    samples = [s for f in text_string_to_metric_families(metrics.text) for s in f.samples
               if s.name == "trioproxy_requests_total"]
    assert [(s.labels, s.value) for s in samples] == [(
        {"bind": f"bind/{gateway.port}", "gateway": "default/default", "listener": listener, "route": route_key,
         "backend": f"127.0.0.1:{gateway_backend_port(gateway)}", "method": "GET", "status": "200", "reason": ""},
        1.0)]
    assert "trioproxy_request_duration_seconds_bucket" in metrics.text
    assert "trioproxy_upstream_connections_open" in metrics.text
    routes = dump.json()["binds"][0]["listeners"][0]["routes"]
    assert routes[0]["key"] == route_key
    assert ui.status_code == 200 and "trioproxy" in ui.text
    assert root.status_code in (301, 302) and root.headers["location"] == "/ui"


async def test_config_dump_redacts_secrets(nursery, backend):
    gw = await start_routes(nursery, """
            - backends:
              - host: "127.0.0.1:{backend}"
                policies: {{backendAuth: {{key: top-secret}}}}
        """, port=free_port(), backend=backend.port)
    async with httpx.AsyncClient() as client:
        dump = await client.get(f"{gw.admin_url}/config_dump")
    assert "top-secret" not in dump.text
    assert json.loads(dump.text)["binds"][0]["listeners"][0]["routes"][0]["backends"][0]["policies"]["backendAuth"] == {"key": "<redacted>"}


async def test_graceful_shutdown_finishes_request_in_flight(nursery, backend):
    gw = await start_routes(nursery, """
            - backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port)
    results = {}

    async def slow_request() -> None:
        async with gw.client() as client:
            results["slow"] = await client.get("/slow?ms=500")

    async with trio.open_nursery() as inner:
        inner.start_soon(slow_request)
        while backend.requests == 0:
            await trio.sleep(0.01)
        gw.info.shutdown.set()
        async with httpx.AsyncClient() as client:
            ready = await client.get(f"http://{gw.info.readiness}/healthz/ready")
        assert ready.status_code == 503
    assert results["slow"].status_code == 200
    assert results["slow"].text == "slow"
    # The listener is closed now.
    async with gw.client() as client:
        try:
            await client.get("/")
        except httpx.ConnectError:
            pass
        else:
            raise AssertionError("gateway still accepting after shutdown")


async def test_idle_and_slow_clients_are_closed(gateway, mock_clock):
    """A client that stops mid-headers gets 408 after 10 s (requestHeaderTimeout); one that idles
    between requests is disconnected after 60 s (http1IdleTimeout)."""
    port = gateway.info.ports[gateway.port]
    slow = await trio.open_tcp_stream("127.0.0.1", port)
    await slow.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n")  # and nothing more
    idle = await trio.open_tcp_stream("127.0.0.1", port)
    await idle.send_all(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n")
    first = b""
    while b"body_sha256" not in first:
        first += await idle.receive_some(65536)
    assert first.startswith(b"HTTP/1.1 200")
    await trio.testing.wait_all_tasks_blocked()
    assert not _closed(slow) and not _closed(idle)
    mock_clock.jump(9)
    await trio.testing.wait_all_tasks_blocked()
    assert not _closed(slow) and not _closed(idle)
    mock_clock.jump(2)
    await trio.testing.wait_all_tasks_blocked()
    answer = await slow.receive_some(65536)
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout") and answer.endswith(b"request head timeout\n")
    assert _closed(slow) and not _closed(idle)
    mock_clock.jump(48)
    await trio.testing.wait_all_tasks_blocked()
    assert not _closed(idle)
    mock_clock.jump(2)
    await trio.testing.wait_all_tasks_blocked()
    assert _closed(idle)


def _closed(stream: trio.SocketStream) -> bool:
    """Non-blocking: has the peer closed this connection (EOF or reset waiting)?"""
    import select
    import socket

    fd = stream.socket.fileno()
    if not select.select([fd], [], [], 0)[0]:
        return False
    try:
        return stream.socket._sock.recv(1, socket.MSG_PEEK) == b""  # noqa: SLF001 - a peek, not a read
    except ConnectionResetError:
        return True


async def test_a_quiet_client_of_a_long_stream_is_not_cut(gateway, backend, mock_clock):
    """A client with nothing to send while a response streams (an LLM answer) keeps its stream,
    however long the gaps: only idle connections and unfinished request heads time out."""
    async with gateway.client() as client:
        async with client.stream("GET", "/gated-sse") as response:
            chunks = response.aiter_raw()
            assert await chunks.__anext__() == b"data: first\n\n"
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(300)
            await trio.testing.wait_all_tasks_blocked()
            backend.gate.set()
            rest = b"".join([chunk async for chunk in chunks])
    assert rest == b"data: second\n\n"


async def test_http10_request_without_host_gets_the_backend_as_host(gateway, backend):
    stream = await trio.open_tcp_stream("127.0.0.1", gateway.info.ports[gateway.port])
    await stream.send_all(b"GET /old HTTP/1.0\r\n\r\n")
    data = b""
    with trio.fail_after(5):
        while chunk := await stream.receive_some(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.0 200") or data.startswith(b"HTTP/1.1 200")
    assert ("host", f"127.0.0.1:{backend.port}") in backend.last_headers


async def test_malformed_request_framing_is_400(gateway, backend):
    stream = await trio.open_tcp_stream("127.0.0.1", gateway.info.ports[gateway.port])
    await stream.send_all(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
    with trio.fail_after(5):
        data = await stream.receive_some(65536)
    assert data.startswith(b"HTTP/1.1 400")
    assert backend.requests == 0


async def test_hop_by_hop_response_headers_and_those_connection_names_are_stripped(nursery):
    """RFC 9110 §7.6.1 on the response side: the backend's connection-level fields stay with it."""
    async def upstream(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive, x-private\r\n"
            b"keep-alive: timeout=5\r\nx-private: secret\r\nproxy-authenticate: Basic\r\n"
            b"upgrade: h2c\r\nx-kept: yes\r\n\r\nok")
        await stream.aclose()

    listeners = await nursery.start(trio.serve_tcp, upstream, 0)
    port = listeners[0].socket.getsockname()[1]
    gw = await start_routes(nursery, """
            - backends: [{{host: "127.0.0.1:{upstream}"}}]
        """, port=free_port(), upstream=port)
    async with gw.client() as client:
        response = await client.get("/")
    assert (response.status_code, response.text, response.headers["x-kept"]) == (200, "ok", "yes")
    for name in ("x-private", "keep-alive", "proxy-authenticate", "upgrade"):
        assert name not in response.headers, name
    assert "x-private" not in response.headers.get("connection", "")


async def test_request_timeout_does_not_cover_a_streamed_response_body(nursery, backend, mock_clock):
    """requestTimeout ends at the upstream's response headers: a stream (an LLM answer) that
    outlives it is not cut (agentgateway does the same for LLM streams)."""
    gw = await start_routes(nursery, """
            - policies: {{timeout: {{requestTimeout: 1s}}}}
              backends: [{{host: "127.0.0.1:{backend}"}}]
        """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        async with client.stream("GET", "/gated-sse") as response:
            chunks = response.aiter_raw()
            assert await chunks.__anext__() == b"data: first\n\n"
            await trio.testing.wait_all_tasks_blocked()
            mock_clock.jump(30)
            backend.gate.set()
            assert [chunk async for chunk in chunks] == [b"data: second\n\n"]
    assert response.status_code == 200


async def test_request_timeout_covers_the_llm_request_body_read(nursery, backend, mock_clock):
    """The deadline starts before the stages run: a client that never finishes an LLM request
    body gets 504 ``request timeout``, and no upstream call is made."""
    gw = await start_routes(nursery, """
            - policies: {{timeout: {{requestTimeout: 1s}}}}
              backends:
              - ai: {{name: llm, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{backend}"}}
        """, port=free_port(), backend=backend.port)
    stream = await trio.open_tcp_stream("127.0.0.1", gw.info.ports[gw.port])
    await stream.send_all(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{")
    await trio.testing.wait_all_tasks_blocked()
    mock_clock.jump(2)  # the body never completes: only the deadline can answer
    mock_clock.autojump_threshold = 0  # a gateway that does not answer fails the test, never hangs it
    conn = h11.Connection(h11.CLIENT)
    conn.send(h11.Request(method="POST", target="/", headers=[("host", "x"), ("content-length", "100")]))
    response, text = None, b""
    with trio.fail_after(10):
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
            elif isinstance(event, h11.Response):
                response = event
            elif isinstance(event, h11.Data):
                text += event.data
            elif isinstance(event, h11.EndOfMessage):
                break
    await stream.aclose()
    assert response.status_code == 504  # on an ai route, as OpenAI's error JSON (docs/llm-providers.md)
    assert json.loads(text)["error"] == {"message": "request timeout", "type": "timeout_error", "param": None,
                                         "code": "request_timeout"}
    assert backend.requests == 0
