"""``Vary`` on CORS answers, through a real gateway: a response whose CORS headers echo the
request's ``Origin`` must say so, or a shared cache keyed on the URL hands one origin's
``Access-Control-Allow-Origin`` (or a response without one) to every other origin."""

from __future__ import annotations

from tests.conftest import free_port, start_routes

ROUTES = """
    - name: api
      policies:
        cors: {{allowOrigins: ["https://app.example.com"], allowMethods: ["*"], allowHeaders: ["*"]}}
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


def varies(response) -> set[str]:
    return {v.strip().lower() for line in response.headers.get_list("vary") for v in line.split(",")}


async def test_every_forwarded_response_of_a_cors_route_varies_on_origin(nursery, backend):
    gw = await start_routes(nursery, ROUTES, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        allowed = await client.get("/x", headers={"origin": "https://app.example.com"})
        other = await client.get("/x", headers={"origin": "https://evil.example"})
        without = await client.get("/x")
    assert allowed.headers["access-control-allow-origin"] == "https://app.example.com"
    assert "access-control-allow-origin" not in other.headers
    assert [varies(r) for r in (allowed, other, without)] == [{"origin"}] * 3
    assert backend.requests == 3


async def test_an_allowed_preflight_varies_on_what_it_echoes(nursery, backend):
    gw = await start_routes(nursery, ROUTES, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        answer = await client.options("/x", headers={"origin": "https://app.example.com",
                                                     "access-control-request-method": "PUT",
                                                     "access-control-request-headers": "x-a"})
    assert answer.status_code == 200 and answer.headers["access-control-allow-methods"] == "PUT"
    assert varies(answer) == {"origin", "access-control-request-method", "access-control-request-headers"}
    assert backend.requests == 0
