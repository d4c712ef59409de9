"""agentgateway's own example configs, as its users will bring them (copied with their licence header).

Each file is loaded unchanged except for its ports (3000 and the backend's 8080 become free
ports here) and must behave as the comments in it say.
"""

from __future__ import annotations

from pathlib import Path

from trioproxy.config import load_config

from ..conftest import free_port, start_gateway

HERE = Path(__file__).resolve().parent


def _example(name: str, **ports: int) -> str:
    text = (HERE / name).read_text()
    return text.replace("port: 3000", f"port: {ports['port']}").replace("localhost:8080", f"127.0.0.1:{ports['backend']}")


def test_every_copied_example_validates_unchanged():
    for path in HERE.glob("*.yaml"):
        config = load_config(path)
        assert config.binds, path


async def test_traffic_ratelimiting_local_allows_10_then_429_until_a_token_refills(nursery, backend, mock_clock):
    """maxTokens 10, tokensPerFill 1, fillInterval 60s: a burst of 10, then one request a minute."""
    port = free_port()
    text = _example("traffic-ratelimiting-local.yaml", port=port, backend=backend.port)
    gw = await start_gateway(nursery, text.replace("{", "{{").replace("}", "}}"))
    async with gw.client() as client:
        statuses = [(await client.get("/")).status_code for _ in range(11)]
        assert statuses == [200] * 10 + [429]
        mock_clock.jump(60)
        assert (await client.get("/")).status_code == 200
        assert (await client.get("/")).status_code == 429
    assert backend.requests == 11  # the 429s never reached the backend
