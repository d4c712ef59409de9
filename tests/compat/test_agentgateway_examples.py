"""agentgateway's own example configs, as its users will bring them (copied with their licence header).

Each file is loaded unchanged except for its ports (3000 and the backend's 8080 become free
ports here) and must behave as the comments in it say. Where an example points at an external
service (llm-basic: the OpenAI and Anthropic APIs), its test says exactly what it substitutes.
"""

from __future__ import annotations

import random
from pathlib import Path

import trio

from fixtures.echo_backend import EchoBackend
from trioproxy.config import load_config

from ..conftest import free_port, start_gateway

HERE = Path(__file__).resolve().parent


def _example(name: str, **ports: int) -> str:
    text = (HERE / name).read_text()
    return text.replace("port: 3000", f"port: {ports['port']}").replace("localhost:8080", f"127.0.0.1:{ports['backend']}")


#: examples that need their external services substituted before they load (see their tests)
EXTERNAL = {"llm-basic.yaml"}


def test_every_copied_example_validates_unchanged():
    for path in HERE.glob("*.yaml"):
        if path.name not in EXTERNAL:
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
    mock_clock.jump(60)  # also the keep-alive timeout: a new connection, so no race with the idle close
    async with gw.client() as client:
        assert (await client.get("/")).status_code == 200
        assert (await client.get("/")).status_code == 429
    assert backend.requests == 11  # the 429s never reached the backend


# --- traffic-http ------------------------------------------------------------------------------------


async def test_traffic_http_routes_and_policies_behave_as_its_comments_say(nursery, backend, mock_clock):
    """Substitution: ports only (3000, the backend 127.0.0.1:8080 and the mirror 127.0.0.1:8081 become
    free local ports). The mock clock holds time still, so `requestTimeout: 1s` and the 10 RPS limit are
    exact."""
    mirror = await nursery.start(EchoBackend().serve)
    text = (HERE / "traffic-http.yaml").read_text()
    assert text.count("127.0.0.1:8080") == 2 and text.count("127.0.0.1:8081") == 1
    text = (text.replace("port: 3000", f"port: {free_port()}")
            .replace("127.0.0.1:8080", f"127.0.0.1:{backend.port}").replace("127.0.0.1:8081", f"127.0.0.1:{mirror.port}"))
    gw = await start_gateway(nursery, text.replace("{", "{{").replace("}", "}}"))
    random.seed(7)  # requestMirror's 50%: a fixed sequence
    async with gw.client() as client:
        # "Test with: curl '127.0.0.1:3000/match?param=hello' -H "x-header: test-0"": the match-example route
        matched = await client.get("/match?param=hello", headers={"x-header": "test-0"})
        assert matched.json()["path"] == "/match" and matched.json()["query"] == "param=hello"
        # without the header it is the policy-example route (no matches: every request)
        answers = [await client.get(f"/match?n={i}", headers={"x-illegal-header": "1", "origin": "http://a.example"})
                   for i in range(10)]
        first = answers[0]
        echoed = first.json()
        headers = dict(echoed["headers"])
        assert echoed["path"] == "/new-path" and echoed["query"] == "n=0"  # urlRewrite path.full keeps the query
        assert headers["host"] == "custom-host-header"  # urlRewrite authority.full
        assert headers["x-req-added"] == "value" and "x-illegal-header" not in headers  # requestHeaderModifier
        assert first.headers["x-req-added"] == "value"  # responseHeaderModifier
        assert first.headers["access-control-allow-origin"] == "http://a.example"  # cors: "*" with credentials echoes
        assert first.headers["access-control-expose-headers"] == "header2"
        # "Allow 10 RPS": maxTokens 10, one token a second
        assert [a.status_code for a in answers] == [200] * 10
        assert (await client.get("/other")).status_code == 429
        mock_clock.jump(1)
        assert (await client.get("/other")).status_code == 200
        # "Mirror 50% of requests": some copies of the policy-example requests, none of the others
        with trio.fail_after(5):
            await gw.info.runtime.mirrors.wait_idle()
        mirrored = [target for _, target, _ in mirror.seen]
        assert 0 < len(mirrored) < 12 and all(t.startswith("/new-path") for t in mirrored)
        # direct-response and ip-rules (127.0.0.1 is in 127.0.0.1/8)
        direct = await client.get("/direct")
        assert (direct.status_code, direct.text) == (200, "hello!")
        ips = await client.get("/ips")
        assert (ips.status_code, ips.text) == (200, "hello!")
    assert all(not t.startswith(("/direct", "/ips")) for _, t, _ in backend.seen)


# --- traffic-ratelimiting-global ---------------------------------------------------------------------


async def test_traffic_ratelimiting_global_against_trioproxy_ratelimit_server(nursery, backend):
    """Substitutions: ports only (3000, the backend localhost:8080, and the rate limit service
    127.0.0.1:8081 which becomes a `trioproxy ratelimit-server --store memory` serving the copied
    ratelimit-config). Its limits, per minute: GET / 5, POST 10."""
    from ..rls_helpers import ratelimit_server

    with ratelimit_server(HERE / "traffic-ratelimiting-global.ratelimit-config.yml", "--store", "memory") as rls:
        text = _example("traffic-ratelimiting-global.yaml", port=free_port(), backend=backend.port)
        assert "127.0.0.1:8081" in text
        text = text.replace("127.0.0.1:8081", rls.target)
        gw = await start_gateway(nursery, text.replace("{", "{{").replace("}", "}}"))
        async with gw.client() as client:
            statuses = [(await client.get("/")).status_code for _ in range(6)]
            assert statuses == [200] * 5 + [429]  # GET / : 5 a minute
            assert (await client.get("/elsewhere")).status_code == 200  # GET of another path: no limit
            posts = [(await client.post("/", content=b"x")).status_code for _ in range(11)]
        # POST: the request's descriptor is (method, path); the config limits POST at its first level
        # only, so the two-entry descriptor matches no limit, in envoyproxy/ratelimit as in trioproxy
        assert posts == [200] * 11
    assert backend.requests == 5 + 1 + 11


# --- llm-basic ---------------------------------------------------------------------------------------


async def test_llm_basic_maps_model_names_as_its_comments_say(nursery, monkeypatch):
    """Substitutions, because the example calls the real OpenAI and Anthropic APIs: `port: 4000` becomes
    a free port; each model's `params` gets `hostOverride` pointing at the mock OpenAI-compatible fixture
    (fixtures/mock_openai.py), and `provider: anthropic` becomes `openAI` since the mock speaks OpenAI's
    API (trioproxy does not translate OpenAI's chat format to Anthropic's Messages API); the API keys come
    from the environment as the example expects. `frontendPolicies` is kept as written."""
    from fixtures.mock_openai import MockOpenAI

    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-anthropic")
    mock = MockOpenAI()
    await nursery.start(mock.serve)
    text = (HERE / "llm-basic.yaml").read_text()
    text = text.replace("port: 4000", f"port: {free_port()}").replace("provider: anthropic", "provider: openAI")
    text = text.replace("    params:\n", f"    params:\n      hostOverride: 127.0.0.1:{mock.port}\n")
    gw = await start_gateway(nursery, text.replace("{", "{{").replace("}", "}}"))
    messages = [{"role": "user", "content": "hi"}]
    async with gw.client() as client:
        # "Map an explicit model name to another explicit model name"
        smart = await client.post("/v1/chat/completions", json={"model": "smart", "messages": messages})
        # "Map `anthropic/<model>` to `<model>`"
        claude = await client.post("/v1/chat/completions", json={"model": "anthropic/claude-x", "messages": messages})
        unknown = await client.post("/v1/chat/completions", json={"model": "gpt-4o", "messages": messages})
    assert smart.status_code == claude.status_code == 200
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    first, second = mock.requests
    assert first.json["model"] == "gpt-5.5" and first.header("authorization") == "Bearer sk-openai"
    assert second.json["model"] == "claude-x" and second.header("authorization") == "Bearer sk-anthropic"
