"""Rate-limit descriptor values are capped (issue 27): envoyproxy/ratelimit keeps keys and values in
its Redis counter keys, and 300 requests with a 30,000-character ``x-user`` grew Redis by ~10 MB.
Past 256 characters a key or value is its ``sha256:<hex>`` (``rls/descriptor_text.py``), from the
gateway and in the server for any other client; the same long value still meets one counter."""

from __future__ import annotations

import redis as redis_lib
import trio

from tests.conftest import free_port, start_routes
from tests.rls_helpers import ratelimit_server, redis_server
from trioproxy.rls.descriptor_text import MAX_DESCRIPTOR_TEXT, bounded

RLS = """
domain: gw
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
"""
ROUTE = """
- policies:
    remoteRateLimit:
      host: "{rls}"
      domain: gw
      descriptors:
      - entries: [{{key: user, value: 'request.headers["x-user"]'}}]
  backends: [{{host: "127.0.0.1:{backend}"}}]
"""


def test_bounded_keeps_short_text_and_hashes_long_text():
    short = "u" * MAX_DESCRIPTOR_TEXT
    assert bounded(short) is short
    long = bounded(short + "x")
    assert long.startswith("sha256:") and len(long) == 71 and long == bounded(short + "x") != bounded(short + "y")


async def test_long_values_reach_redis_hashed_and_are_still_limited(nursery, backend, tmp_path):
    config = tmp_path / "rls.yaml"
    config.write_text(RLS)
    with redis_server(tmp_path) as redis, ratelimit_server(config, "--redis", redis.url) as rls:
        store = redis_lib.Redis.from_url(redis.url)
        gw = await start_routes(nursery, ROUTE, port=free_port(), rls=rls.target, backend=backend.port)
        async with gw.client() as client:
            same = "a" * 30_000
            answers = [(await client.get("/", headers={"x-user": same})).status_code for _ in range(4)]
            others = [(await client.get("/", headers={"x-user": f"{i:05d}" * 6_000})).status_code
                      for i in range(20)]
        assert answers == [200, 200, 200, 429]  # one counter for the same long value: still limited
        assert others == [200] * 20
        # another client of the service, straight to it: the server caps keys and values too
        response = await trio.to_thread.run_sync(lambda: rls.call("gw", [[("user", "z" * 30_000)]]))
        assert response.overall_code == 1  # OK
        await trio.to_thread.run_sync(lambda: rls.call("gw", [[("k" * 5_000, "v")]]))  # no limit: no counter
        keys = store.keys("*")
        assert len(keys) == 22
        assert max(len(key) for key in keys) < 120, max(len(key) for key in keys)
        assert sum(len(key) for key in keys) < 22 * 120  # the 30 KB values took 660 KB before
