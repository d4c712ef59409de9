"""``Host: secure.example.com.`` (the fully qualified spelling) meets the routes and listeners of
``secure.example.com``: before, it skipped them and fell to the catch-all route, past the
secure route's policies."""

from __future__ import annotations

import trio

from fixtures.echo_backend import EchoBackend
from tests.conftest import free_port, start_gateway, start_routes
from trioproxy.proxy.routing import host_without_port


async def test_a_trailing_dot_host_meets_the_hostname_route_not_the_catch_all(nursery: trio.Nursery, backend):
    other = await nursery.start(EchoBackend().serve)
    gw = await start_routes(nursery, """
            - name: secure
              hostnames: [secure.example.com, "*.wild.example.com"]
              policies: {{directResponse: {{status: 403, body: "secure route"}}}}
              backends: [{{host: "127.0.0.1:{backend}"}}]
            - name: everything-else
              backends: [{{host: "127.0.0.1:{other}"}}]
        """, port=free_port(), backend=backend.port, other=other.port)
    async with gw.client() as client:
        answers = [await client.get("/", headers={"host": host}) for host in
                   ("secure.example.com.", "SECURE.example.com.:8080", "a.wild.example.com.", "a.wild.example.com")]
        plain = await client.get("/", headers={"host": "secure.example.org"})
    assert [a.status_code for a in answers] == [403] * 4
    assert plain.status_code == 200 and other.requests == 1 and backend.requests == 0


async def test_a_trailing_dot_host_meets_the_listener_of_its_name(nursery: trio.Nursery, backend):
    other = await nursery.start(EchoBackend().serve)
    gw = await start_gateway(nursery, """
        binds:
        - port: {port}
          listeners:
          - name: secure
            hostname: secure.example.com
            routes: [{{backends: [{{host: "127.0.0.1:{backend}"}}]}}]
          - name: rest
            routes: [{{backends: [{{host: "127.0.0.1:{other}"}}]}}]
        """, port=free_port(), backend=backend.port, other=other.port)
    async with gw.client() as client:
        assert (await client.get("/", headers={"host": "secure.example.com."})).status_code == 200
    assert backend.requests == 1 and other.requests == 0


def test_host_without_port_drops_one_root_dot():
    assert host_without_port("Example.COM.:443") == "example.com"
    assert host_without_port("example.com.") == "example.com"
    assert host_without_port("[::1]:80") == "[::1]"
