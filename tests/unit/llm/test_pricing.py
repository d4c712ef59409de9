"""``llm/pricing.py`` in-process (issue 30, "Money"): the bundled catalog's shape, how a provider's
model name finds its entry (namespaces, aliases, dated snapshots, Bedrock ids), the cost formula term
by term on usage read from each provider's own usage object, and ``config.prices`` overrides."""

from __future__ import annotations

import json
import math
from importlib import resources

import pytest

from trioproxy.config.model import PriceOverride
from trioproxy.llm.pricing import FIELDS, MissingPrice, Price, PriceCatalog, base_name, namespaces, uncached_input
from trioproxy.llm.usage import Usage, provider_usage, usage_from_response

CATALOG = PriceCatalog.bundled()
RAW = json.loads(resources.files("trioproxy.llm").joinpath("prices.json").read_text())


def key_of(price: Price | None) -> str | None:
    """The qualified name of the bundled entry ``price`` is (identity, not equality)."""
    return next((name for name, entry in CATALOG.entries().items() if entry is price), None)


# --- the shipped data ---------------------------------------------------------------------------


def test_the_file_says_where_and_when_the_figures_come_from_and_is_small():
    assert RAW["currency"] == "USD" and RAW["unit"] == "per 1M tokens"
    assert RAW["date"] == CATALOG.date == "2025-10-01"
    assert "NOT checked against the live pages" in RAW["source"] and CATALOG.source == RAW["source"]
    assert len(resources.files("trioproxy.llm").joinpath("prices.json").read_bytes()) < 100_000
    assert 60 <= len(CATALOG) <= 100


def test_every_entry_has_its_pricing_page_and_sane_numbers():
    pages = {"openai": "https://openai.com/", "anthropic": "https://docs.anthropic.com/",
             "gemini": "https://ai.google.dev/", "bedrock": "https://aws.amazon.com/bedrock/",
             "mistral": "https://mistral.ai/", "groq": "https://groq.com/", "deepseek": "https://api-docs.deepseek.com/"}
    seen = set()
    for name, fields in RAW["models"].items():
        provider = name.split("/", 1)[0]
        seen.add(provider)
        assert fields["source"].startswith(pages[provider]), name
        assert set(fields) <= {*FIELDS, "aliases", "source"}, name
        price = CATALOG.price(provider, name.split("/", 1)[1])
        assert price is not None and price.source == fields["source"], name
        assert price.input >= 0 and price.output >= 0, name
        if price.cached_input is not None:
            assert price.cached_input <= price.input, name  # a cache read never costs more than a miss
        if price.cache_write is not None:
            assert price.cache_write >= price.input, name  # a cache write never costs less
    assert seen == set(pages)


def test_bundled_is_read_once():
    assert PriceCatalog.bundled() is CATALOG


# --- names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("model", "base"), [
    ("gpt-4o-2024-08-06", "gpt-4o"), ("GPT-4o", "gpt-4o"), ("o3-mini-2025-01-31", "o3-mini"),
    ("gpt-3.5-turbo-0125", "gpt-3.5-turbo"), ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
    ("claude-3-5-sonnet-latest", "claude-3-5-sonnet"), ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
    ("mistral-large-2411", "mistral-large"), ("gemini-2.0-flash-001", "gemini-2.0-flash"),
    ("models/gemini-2.5-flash", "gemini-2.5-flash"), ("publishers/google/models/gemini-1.5-pro-002", "gemini-1.5-pro"),
    ("us.anthropic.claude-3-5-sonnet-20241022-v2:0", "anthropic.claude-3-5-sonnet"),
    ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", "anthropic.claude-sonnet-4-5"),
    ("amazon.nova-pro-v1:0", "amazon.nova-pro"), ("gpt-4o", "gpt-4o"), ("llama-3.1-8b-instant", "llama-3.1-8b-instant"),
    ("2024", "2024"),  # a name that is all suffix is kept
])
def test_base_name_strips_what_names_a_snapshot(model, base):
    assert base_name(model) == base


def test_namespaces_of_the_config_provider_names():
    assert namespaces("openAI") == ("openai",)
    assert namespaces("azure") == namespaces("azureOpenAI") == ("azure", "openai")
    assert namespaces("vertex") == ("vertex", "gemini", "anthropic")
    assert namespaces("bedrock") == ("bedrock",) and namespaces("gemini") == ("gemini",)
    assert namespaces("Groq") == ("groq",) and namespaces("vllm") == ("vllm",)
    assert namespaces(None) == namespaces("") == ()


@pytest.mark.parametrize(("provider", "model", "entry"), [
    ("openAI", "gpt-4o", "openai/gpt-4o"),
    ("openAI", "gpt-4o-2024-08-06", "openai/gpt-4o"),  # a snapshot resolves to its base model
    ("openAI", "gpt-4o-2024-05-13", "openai/gpt-4o-2024-05-13"),  # ... unless it has its own price
    ("openAI", "chatgpt-4o-latest", "openai/gpt-4o"),  # an alias
    ("openAI", "gpt-5-chat-latest", "openai/gpt-5"),
    ("openAI", "gpt-4-0613", "openai/gpt-4"),
    ("azure", "gpt-4o-mini", "openai/gpt-4o-mini"),  # Azure OpenAI at OpenAI's prices
    ("anthropic", "claude-sonnet-4-5-20250929", "anthropic/claude-sonnet-4-5"),
    ("anthropic", "claude-3-5-haiku-latest", "anthropic/claude-3-5-haiku"),
    ("anthropic", "claude-opus-4-0", "anthropic/claude-opus-4"),
    ("vertex", "claude-sonnet-4-5@20250929", "anthropic/claude-sonnet-4-5"),
    ("vertex", "gemini-2.5-pro", "gemini/gemini-2.5-pro"),
    ("gemini", "models/gemini-2.0-flash-001", "gemini/gemini-2.0-flash"),
    ("gemini", "gemini-2.5-flash-lite-preview-06-17", "gemini/gemini-2.5-flash-lite"),
    ("bedrock", "anthropic.claude-3-5-sonnet-20241022-v2:0", "bedrock/anthropic.claude-3-5-sonnet-20241022-v2:0"),
    ("bedrock", "us.anthropic.claude-3-5-sonnet-20241022-v2:0", "bedrock/anthropic.claude-3-5-sonnet-20241022-v2:0"),
    ("bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0", "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0"),
    ("bedrock", "eu.amazon.nova-pro-v1:0", "bedrock/amazon.nova-pro-v1:0"),
    ("bedrock", "anthropic.claude-sonnet-4-5", "bedrock/anthropic.claude-sonnet-4-5-20250929-v1:0"),
    ("mistral", "mistral-large-latest", "mistral/mistral-large"),
    ("mistral", "mistral-small-2503", "mistral/mistral-small"),
    ("groq", "openai/gpt-oss-120b", "groq/openai/gpt-oss-120b"),  # a model name with a slash, in its namespace
    ("groq", "llama-3.3-70b-versatile", "groq/llama-3.3-70b-versatile"),
    ("deepseek", "deepseek-reasoner", "deepseek/deepseek-reasoner"),
    ("openrouter", "anthropic/claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"),  # qualified by a namespace
    ("openAI", "anthropic/claude-3-haiku-20240307", "anthropic/claude-3-haiku"),
    (None, "gpt-4o-mini", "openai/gpt-4o-mini"),  # no provider: any namespace
    (None, "claude-haiku-4-5", "anthropic/claude-haiku-4-5"),
    (None, "anthropic.claude-3-haiku-20240307-v1:0", "bedrock/anthropic.claude-3-haiku-20240307-v1:0"),
])
def test_a_provider_model_finds_its_entry(provider, model, entry):
    assert key_of(CATALOG.price(provider, model)) == entry


@pytest.mark.parametrize(("provider", "model"), [
    ("openAI", None), ("openAI", ""), ("openAI", "my-fine-tune"), ("vllm", "gpt-4o"),  # a guess is no price
    ("anthropic", "gpt-4o"),  # another provider's model
    ("bedrock", "claude-sonnet-4-5"),  # Bedrock's ids are its own
    ("openAI", "nope/gpt-4o"),  # not a namespace
    (None, "nothing-like-it"),
])
def test_no_price(provider, model):
    assert CATALOG.price(provider, model) is None
    assert CATALOG.cost(provider, model, Usage(10, 10, 20)) is None


# --- the cost ------------------------------------------------------------------------------------

PRICE = Price(input=2.0, output=8.0, cached_input=0.5, reasoning=6.0, cache_write=3.0)


def test_cost_term_by_term():
    assert PRICE.cost(Usage(1_000_000, 0, 1_000_000)) == 2.0
    assert PRICE.cost(Usage(0, 1_000_000, 1_000_000)) == 8.0
    # OpenAI: the cached tokens are part of prompt_tokens, billed at cachedInput
    assert PRICE.cost(Usage(1_000_000, 0, 1_000_000, cached_input_tokens=400_000)) == 600_000 * 2e-6 + 400_000 * 5e-7
    # reasoning tokens are part of completion_tokens, billed once at reasoning
    assert PRICE.cost(Usage(0, 1_000_000, 1_000_000, reasoning_tokens=250_000)) == 750_000 * 8e-6 + 250_000 * 6e-6
    # Anthropic: input_tokens leave out cache reads and writes (usage.py totals all four)
    anthropic = Usage(100, 10, 100 + 10 + 1000 + 200, cached_input_tokens=1000, cache_creation_input_tokens=200)
    assert PRICE.cost(anthropic) == pytest.approx((100 * 2 + 1000 * 0.5 + 200 * 3 + 10 * 8) / 1e6, abs=1e-12)
    assert PRICE.cost(Usage(0, 0, 0)) == 0.0


def test_unset_prices_fall_back_to_input_and_output():
    plain = Price(input=2.0, output=8.0)
    assert plain.cost(Usage(1000, 0, 1000, cached_input_tokens=1000)) == 1000 * 2e-6
    assert plain.cost(Usage(10, 0, 10 + 1000, cache_creation_input_tokens=1000)) == pytest.approx(1010 * 2e-6)
    assert plain.cost(Usage(0, 1000, 1000, reasoning_tokens=400)) == 1000 * 8e-6


def test_reasoning_beyond_the_completion_is_not_billed_twice():
    assert PRICE.cost(Usage(0, 100, 100, reasoning_tokens=500)) == 0.0006  # 100 at reasoning, none at output


def test_cost_is_rounded_below_a_picodollar():
    assert PRICE.cost(Usage(1, 0, 1)) == 2e-6
    assert PRICE.cost(Usage(3, 0, 3)) == 6e-6  # not 5.999999999999999e-06
    assert Price(input=0.1, output=0.2).cost(Usage(1, 2, 3)) == 5e-7


def test_uncached_input_by_provider_shape():
    openai = usage_from_response({"usage": {"prompt_tokens": 1000, "completion_tokens": 5, "total_tokens": 1005,
                                            "prompt_tokens_details": {"cached_tokens": 800}}})
    assert openai is not None and uncached_input(openai) == 200
    responses = usage_from_response({"response": {"usage": {"input_tokens": 50, "output_tokens": 5, "total_tokens": 55,
                                                            "input_tokens_details": {"cached_tokens": 40}}}})
    assert responses is not None and uncached_input(responses) == 10
    anthropic = usage_from_response({"type": "message", "usage": {
        "input_tokens": 30, "output_tokens": 5, "cache_read_input_tokens": 800, "cache_creation_input_tokens": 100}})
    assert anthropic is not None and uncached_input(anthropic) == 30
    gemini = provider_usage({"promptTokenCount": 900, "candidatesTokenCount": 10, "thoughtsTokenCount": 20,
                             "totalTokenCount": 930, "cachedContentTokenCount": 600}, "gemini")
    assert gemini is not None and uncached_input(gemini) == 300 and gemini.reasoning_tokens == 20
    bedrock = provider_usage({"inputTokens": 12, "outputTokens": 3, "totalTokens": 12 + 3 + 500 + 40,
                              "cacheReadInputTokens": 500, "cacheWriteInputTokens": 40}, "bedrock")
    assert bedrock is not None and uncached_input(bedrock) == 12
    assert uncached_input(Usage(5, 0, 5, cached_input_tokens=9)) == 0  # never negative


def test_catalog_cost_of_real_answers():
    gpt = usage_from_response({"model": "gpt-4o-2024-08-06", "usage": {
        "prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500,
        "prompt_tokens_details": {"cached_tokens": 1024}}})
    assert CATALOG.cost("openAI", "gpt-4o-2024-08-06", gpt) == pytest.approx((176 * 2.5 + 1024 * 1.25 + 300 * 10) / 1e6)
    claude = usage_from_response({"usage": {"input_tokens": 20, "output_tokens": 100,
                                            "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 500}})
    assert CATALOG.cost("anthropic", "claude-sonnet-4-5-20250929", claude) == pytest.approx(
        (20 * 3 + 2000 * 0.3 + 500 * 3.75 + 100 * 15) / 1e6)
    o3 = usage_from_response({"usage": {"prompt_tokens": 100, "completion_tokens": 1000, "total_tokens": 1100,
                                        "completion_tokens_details": {"reasoning_tokens": 900}}})
    assert CATALOG.cost("openAI", "o3", o3) == pytest.approx((100 * 2 + 1000 * 8) / 1e6)


# --- overrides -----------------------------------------------------------------------------------


def test_an_override_changes_only_the_fields_it_sets():
    changed = CATALOG.with_overrides([("gpt-4o", PriceOverride(input=3.0))])
    price = changed.price("openAI", "gpt-4o")
    assert price == Price(input=3.0, output=10.0, cached_input=1.25) and price.source == "config"
    assert changed.price("azure", "gpt-4o-2024-08-06") == price  # a snapshot and Azure find the changed entry
    assert CATALOG.price("openAI", "gpt-4o") == Price(input=2.5, output=10.0, cached_input=1.25)  # unchanged
    assert changed.price("openAI", "gpt-4o-mini") is CATALOG.price("openAI", "gpt-4o-mini")
    every = changed.with_overrides({"gpt-4o": PriceOverride(output=1, cached_input=0.1, reasoning=2, cache_write=4)})
    assert every.price("openAI", "gpt-4o") == Price(input=3.0, output=1.0, cached_input=0.1, reasoning=2.0,
                                                    cache_write=4.0)


def test_a_qualified_override_is_its_namespace_s_only():
    changed = CATALOG.with_overrides([("azure/gpt-4o", PriceOverride(input=2.75))])
    assert changed.price("azure", "gpt-4o") == Price(input=2.75, output=10.0, cached_input=1.25)
    assert changed.price("openAI", "gpt-4o") == CATALOG.price("openAI", "gpt-4o")
    bedrock = CATALOG.with_overrides({"bedrock/amazon.nova-pro-v1:0": PriceOverride(cached_input=0.1)})
    assert bedrock.price("bedrock", "us.amazon.nova-pro-v1:0") == Price(input=0.8, output=3.2, cached_input=0.1)
    new = CATALOG.with_overrides({"bedrock/cohere.command-r-v1:0": PriceOverride(input=0.5, output=1.5)})
    assert new.price("bedrock", "cohere.command-r-v1:0") == Price(input=0.5, output=1.5)
    assert new.price("openAI", "cohere.command-r-v1:0") is None
    assert "bedrock/cohere.command-r-v1:0" in new.entries()


def test_an_unqualified_override_changes_the_entry_it_finds_in_every_namespace():
    changed = CATALOG.with_overrides({"gpt-4o-2024-08-06": PriceOverride(output=9.0)})
    assert changed.price("openAI", "gpt-4o-2024-08-06") == Price(input=2.5, output=9.0, cached_input=1.25)
    assert changed.price("openAI", "gpt-4o") == CATALOG.price("openAI", "gpt-4o")  # the base stays
    both = CATALOG.with_overrides({"claude-3-haiku-20240307": PriceOverride(input=0.3)})
    assert both.price("anthropic", "claude-3-haiku-20240307").input == 0.3
    assert both.price("bedrock", "anthropic.claude-3-haiku-20240307-v1:0").input == 0.25  # Bedrock's id is another


def test_a_name_whose_first_part_is_a_namespace_is_qualified():
    # Groq's "openai/gpt-oss-120b" written alone names OpenAI's namespace, which has no such model
    with pytest.raises(MissingPrice):
        CATALOG.with_overrides({"openai/gpt-oss-120b": PriceOverride(input=0.2)})
    groq = CATALOG.with_overrides({"groq/openai/gpt-oss-120b": PriceOverride(input=0.2)})
    assert groq.price("groq", "openai/gpt-oss-120b") == Price(input=0.2, output=0.75)


def test_a_new_model_needs_input_and_output_and_then_serves_any_provider():
    local = CATALOG.with_overrides({"My-Llama": PriceOverride(input=0.1, output=0.2)})
    assert local.price("vllm", "my-llama") == Price(input=0.1, output=0.2)
    assert local.price(None, "my-llama") == Price(input=0.1, output=0.2)
    assert local.entries()["my-llama"].source == "config"
    slashed = CATALOG.with_overrides({"meta-llama/Llama-3.1-8B": PriceOverride(input=0.1, output=0.1)})
    assert slashed.price("vllm", "meta-llama/llama-3.1-8b") == Price(input=0.1, output=0.1)
    with pytest.raises(MissingPrice) as missing:
        CATALOG.with_overrides({"my-llama": PriceOverride(output=0.2)})
    assert (missing.value.name, missing.value.field) == ("my-llama", "input")
    assert str(missing.value).startswith("my-llama.input: required")
    with pytest.raises(MissingPrice) as missing:
        CATALOG.with_overrides({"vertex/my-model": PriceOverride(input=0.2)})
    assert missing.value.field == "output"


def test_later_overrides_build_on_earlier_ones():
    changed = CATALOG.with_overrides([("my-model", PriceOverride(input=1, output=2)),
                                      ("my-model", PriceOverride(output=3))])
    assert changed.price(None, "my-model") == Price(input=1.0, output=3.0)


# --- reading prices.json -------------------------------------------------------------------------


@pytest.mark.parametrize(("entry", "message"), [
    ({"gpt": {"input": 1, "output": 1}}, "'gpt' names no provider"),
    ({"openai/": {"input": 1, "output": 1}}, "names no provider"),
    ({"openai/x": {"input": -1, "output": 1}}, "openai/x.input: expected a number of USD from 0, got -1"),
    ({"openai/x": {"input": True, "output": 1}}, "openai/x.input"),
    ({"openai/x": {"input": "1", "output": 1}}, "openai/x.input"),
    ({"openai/x": {"input": 1, "output": math.nan}}, "openai/x.output"),
    ({"openai/x": {"input": 1}}, "openai/x: input and output are required"),
    ({"openai/x": {"output": 1}}, "openai/x: input and output are required"),
])
def test_a_malformed_catalog_is_refused_naming_the_entry(entry, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PriceCatalog.from_json({"models": entry})


def test_from_json_reads_every_field_aliases_and_a_missing_source():
    catalog = PriceCatalog.from_json({"models": {"Acme/Big": {
        "input": 1, "output": 2, "cachedInput": 0.5, "reasoning": 3, "cacheWrite": 1.5, "aliases": ["Huge"]}}})
    assert catalog.price("acme", "big") == catalog.price("acme", "huge") == Price(1, 2, 0.5, 3, 1.5)
    assert catalog.price("acme", "big").source is None and catalog.source == "" and catalog.date == ""
    assert catalog.price("acme", "huge-2025-01-01") is not None  # an alias's snapshot too
    assert catalog.price("acme", "big").as_dict() == {"input": 1.0, "output": 2.0, "cachedInput": 0.5,
                                                      "reasoning": 3.0, "cacheWrite": 1.5}
    assert Price(1, 2, source="s").as_dict() == {"input": 1, "output": 2, "source": "s"}


def test_the_first_of_several_entries_with_one_base_wins():
    catalog = PriceCatalog.from_json({"models": {"p/m-2024-01-01": {"input": 1, "output": 1},
                                                 "p/m-2025-01-01": {"input": 2, "output": 2}}})
    assert catalog.price("p", "m").input == 1 and catalog.price("p", "m-2026-01-01").input == 1
    assert catalog.price("p", "m-2025-01-01").input == 2


# --- what the bundled catalog (read once, at import) cannot show: each rule on a catalog of its own ---


def test_from_json_keeps_the_file_s_source_date_and_each_entry_s_page():
    catalog = PriceCatalog.from_json({"source": "pages", "date": "2025-10-01", "models": {
        "p/a": {"input": 1, "output": 0, "reasoning": 3, "source": "https://p.example/pricing"},
        "p/b": {"input": 1, "output": 1, "source": 123},
        "groq/vendor/Model": {"input": 1, "output": 1}}})
    assert (catalog.source, catalog.date) == ("pages", "2025-10-01")
    a = catalog.price("p", "a")
    assert a == Price(input=1.0, output=0.0, reasoning=3.0)  # output 0 is a price; reasoning after a missing field
    assert a.source == "https://p.example/pricing"
    assert catalog.price("p", "b").source is None  # not a string: no page
    assert catalog.price("groq", "vendor/model") is not None  # the namespace is the first part only
    assert PriceCatalog({}).source == "" and PriceCatalog({}).date == ""


def test_an_alias_wins_over_another_entry_s_base_name():
    catalog = PriceCatalog.from_json({"models": {"p/big": {"input": 2, "output": 2, "aliases": ["Small-Latest"]},
                                                 "p/small": {"input": 1, "output": 1}}})
    assert catalog.price("p", "small-latest").input == 2 and catalog.price("p", "small").input == 1


def test_a_name_is_tried_as_given_before_its_models_path_is_cut():
    catalog = CATALOG.with_overrides({"tunedModels/My-Model": PriceOverride(input=1, output=1)})
    assert catalog.price("gemini", "tunedModels/my-model") == Price(input=1.0, output=1.0)
    assert base_name("tunedmodels/x/models/gemini-2.0-flash") == "gemini-2.0-flash"  # the last models/ segment
    assert CATALOG.price("openrouter", "groq/openai/gpt-oss-120b") is CATALOG.price("groq", "openai/gpt-oss-120b")


def test_rounding_keeps_twelve_decimals():
    assert Price(input=0.1234567, output=0).cost(Usage(1, 0, 1)) == 1.23457e-07


def test_an_override_keeps_the_catalog_s_aliases_source_and_date():
    changed = CATALOG.with_overrides({"gpt-4o-mini": PriceOverride(input=1)})
    assert (changed.source, changed.date) == (CATALOG.source, CATALOG.date)
    assert changed.price("openAI", "chatgpt-4o-latest") is not None  # an alias, kept
    again = changed.with_overrides({"o3": PriceOverride(input=1)})
    assert again.price("openAI", "chatgpt-4o-latest") is not None and again.date == CATALOG.date
    assert CATALOG.with_overrides([]) is CATALOG  # nothing to change: the same catalog
    by_alias = CATALOG.with_overrides({"chatgpt-4o-latest": PriceOverride(input=3)})  # found through its alias
    assert by_alias.price("openAI", "chatgpt-4o-latest") == Price(input=3.0, output=10.0, cached_input=1.25)
    assert by_alias.price("openAI", "gpt-4o") == CATALOG.price("openAI", "gpt-4o")


def test_a_qualified_override_starts_from_its_own_namespace_only():
    with pytest.raises(MissingPrice):  # Mistral has no gpt-4o: OpenAI's is not its starting point
        CATALOG.with_overrides({"mistral/gpt-4o": PriceOverride(input=1)})
    named = CATALOG.with_overrides({"openai": PriceOverride(input=1, output=1)})  # a model named as a namespace
    assert named.price("vllm", "openai") == Price(input=1.0, output=1.0)


def test_lookups_are_remembered_and_the_memory_is_bounded(monkeypatch):
    import trioproxy.llm.pricing as pricing

    catalog = PriceCatalog.from_json({"models": {"p/m": {"input": 1, "output": 1}}})
    monkeypatch.setattr(pricing, "CACHE_SIZE", 3)
    assert catalog.price("p", "m-2024-01-01") is catalog.price("p", "m-2024-01-01") is catalog.price("p", "m")
    assert catalog.price("p", "x") is None and catalog.price("p", "x") is None
    assert len(catalog._cache) == 3  # m-2024-01-01, m, x
    assert catalog.price("p", "y") is None
    assert list(catalog._cache) == [("p", "y")]  # full: cleared, then the new one kept
