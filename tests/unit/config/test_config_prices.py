"""``config.prices`` (issue 30, "Money"): read into the compiled config in the file's order, applied over
the bundled catalog by the gateway's state, and each mistake answered with its path."""

from __future__ import annotations

import json
import textwrap

import pytest

from tests.conftest import ROOT
from trioproxy.config import ConfigError, parse_config
from trioproxy.config.dump import config_dump
from trioproxy.config.model import PriceOverride
from trioproxy.llm.pricing import Price
from trioproxy.proxy.runtime import GatewayState


def load(text: str, env: dict[str, str] | None = None):
    return parse_config(textwrap.dedent(text), env=env or {})


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(text)
    return info.value.problems


def test_prices_compile_in_order_and_the_gateway_applies_them():
    config = load("""
        config:
          prices:
            gpt-4o: {input: 3, cachedInput: 1.5}
            bedrock/amazon.nova-pro-v1:0: {output: 3.0}
            my-llama: {input: 0.1, output: "$OUT", reasoning: 0.3, cacheWrite: 0}
    """, env={"OUT": "0.2"})
    assert config.prices == (
        ("gpt-4o", PriceOverride(input=3.0, cached_input=1.5)),
        ("bedrock/amazon.nova-pro-v1:0", PriceOverride(output=3.0)),
        ("my-llama", PriceOverride(input=0.1, output=0.2, reasoning=0.3, cache_write=0.0)),
    )
    prices = GatewayState(config).prices
    assert prices.price("openAI", "gpt-4o-2024-08-06") == Price(input=3.0, output=10.0, cached_input=1.5)
    assert prices.price("bedrock", "amazon.nova-pro-v1:0") == Price(input=0.8, output=3.0, cached_input=0.2)
    assert prices.price("vllm", "my-llama") == Price(input=0.1, output=0.2, reasoning=0.3, cache_write=0.0)
    assert config_dump(config)["config"]["prices"] == {  # /config_dump shows the overrides as written
        "gpt-4o": {"input": 3.0, "cachedInput": 1.5}, "bedrock/amazon.nova-pro-v1:0": {"output": 3.0},
        "my-llama": {"input": 0.1, "output": 0.2, "reasoning": 0.3, "cacheWrite": 0.0}}


def test_no_prices_is_the_bundled_catalog():
    config = load("binds: []")
    assert config.prices == () and "prices" not in config_dump(config)["config"]
    assert GatewayState(config).prices.price("openAI", "gpt-4o") == Price(input=2.5, output=10.0, cached_input=1.25)


def test_each_mistake_names_its_path():
    found = problems("""
        config:
          prices:
            gpt-4o: {input: -1}
            gpt-4.1: {output: abc, cached: 1}
            my-llama: {output: 0.2}
            other: {input: 1}
            none: 3
    """)
    assert found == [
        "<config>:4:21: config.prices.gpt-4o.input: expected a number of USD from 0, got '-1'",
        "<config>:5:23: config.prices.gpt-4.1.output: expected a number of USD from 0, got 'abc'",
        "<config>:5:28: config.prices.gpt-4.1.cached: unknown field; did you mean 'cachedInput'?",
        "<config>:6:15: config.prices.my-llama.input: required: the bundled price catalog has no 'my-llama' "
        "(docs/pricing.md)",
        "<config>:7:12: config.prices.other.output: required: the bundled price catalog has no 'other' "
        "(docs/pricing.md)",
        "<config>:8:11: config.prices.none: expected a mapping, got 3",
    ]


def test_the_schema_describes_prices():
    schema = json.loads((ROOT / "trioproxy/config/schema.json").read_text())
    text = json.dumps(schema)
    assert '"prices"' in text and '"cachedInput"' in text and '"cacheWrite"' in text
