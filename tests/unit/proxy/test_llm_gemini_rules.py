"""Gemini's native API passed through (proxy/llm_gemini.py), in-process on a real exchange and a
real ``AIBackend``: the model and method read from the path, the upstream path (the provider's
template, a ``pathOverride`` naming one method, or the client's path with the backend's model), the
credential header and ``x.llm``."""

from __future__ import annotations

from typing import Any

import pytest

from trioproxy.config.model import AIBackend
from trioproxy.llm.providers import GEMINI_COUNT_TOKENS, GENERATE_CONTENT, PROVIDERS, vertex_defaults
from trioproxy.proxy.exchange import Exchange
from trioproxy.proxy.llm_gemini import NATIVE_PROVIDERS, model_and_method, prepare


async def _never(*_: Any) -> Any:
    raise AssertionError("not called")


def exchange(path: str, *, raw_path: bytes | None = None, headers: list[tuple[bytes, bytes]] | None = None) -> Exchange:
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": path,
                             "headers": headers if headers is not None else [(b"host", b"gw")]}
    if raw_path is not None:
        scope["raw_path"] = raw_path
    return Exchange(scope, _never, _never, arrival=0.0)


def backend(provider: str = "gemini", *, model: str | None = None, path_override: str | None = None,
            paths: tuple[tuple[str, str], ...] | None = None) -> AIBackend:
    if paths is None:
        paths = PROVIDERS[provider].paths if provider in PROVIDERS else ()
    return AIBackend("ai", provider, model, path_override, paths)


def test_the_native_providers():
    assert NATIVE_PROVIDERS == ("gemini", "vertex")


@pytest.mark.parametrize(("path", "kind", "expected"), [
    ("/v1beta/models/gemini-2.5:streamGenerateContent", GENERATE_CONTENT, ("gemini-2.5", "streamGenerateContent")),
    ("/v1beta/models/google%2Fgemma:countTokens", GENERATE_CONTENT, ("google/gemma", "countTokens")),
    ("/v1/publishers/google/models/google/gemma:generateContent", GENERATE_CONTENT, ("google/gemma", "generateContent")),
    ("/v1beta/models/m:generateContent/more", GENERATE_CONTENT, (None, "generateContent")),  # the method ends the path
    ("/v1beta/models/m:generate-content", GENERATE_CONTENT, (None, "generateContent")),  # a method is one word
    ("/v1beta/models/:generateContent", GENERATE_CONTENT, (None, "generateContent")),  # a model has a name
    ("/v1beta/models/m", GEMINI_COUNT_TOKENS, (None, "countTokens")),
    ("/v1beta/models/m", GENERATE_CONTENT, (None, "generateContent")),
    ("/v1beta/models/m", None, (None, "generateContent")),
])
def test_model_and_method_of_a_native_path(path, kind, expected):
    assert model_and_method(path, kind) == expected


def test_the_providers_template_gets_the_requests_model_and_method():
    x = exchange("/v1beta/models/gemini-2.5:streamGenerateContent")
    prepare(x, backend(), GENERATE_CONTENT)
    assert x.upstream_path == "/v1beta/models/gemini-2.5:streamGenerateContent"
    assert x.llm == {"provider": "gemini", "model": "gemini-2.5", "streaming": True}


def test_generate_content_is_not_streamed_and_count_tokens_keeps_its_method():
    x = exchange("/v1beta/models/gemini-2.5:generateContent")
    prepare(x, backend(), GENERATE_CONTENT)
    assert x.llm == {"provider": "gemini", "model": "gemini-2.5", "streaming": False}
    x = exchange("/v1beta/models/gemini-2.5:countTokens")
    prepare(x, backend(), GEMINI_COUNT_TOKENS)
    assert x.upstream_path == "/v1beta/models/gemini-2.5:countTokens"


def test_the_backends_model_wins_without_its_models_prefix_and_the_override_wins_over_it():
    x = exchange("/v1beta/models/asked:generateContent")
    prepare(x, backend(model="models/gemini-pro"), GENERATE_CONTENT)
    assert x.upstream_path == "/v1beta/models/gemini-pro:generateContent"
    assert x.llm is not None and x.llm["model"] == "gemini-pro"
    x = exchange("/v1beta/models/asked:generateContent")
    prepare(x, backend(model="gemini-pro"), GENERATE_CONTENT, model_override="models/flash")
    assert x.upstream_path == "/v1beta/models/flash:generateContent"
    assert x.llm is not None and x.llm["model"] == "flash"


def test_vertex_templates_its_publisher_path_and_keeps_the_bearer_token():
    ai = backend("vertex", paths=vertex_defaults("proj", "europe-west4").paths)
    headers = [(b"host", b"gw"), (b"authorization", b"Bearer ya29.token")]
    x = exchange("/v1beta/models/gemini-2.5:streamGenerateContent", headers=headers)
    prepare(x, ai, GENERATE_CONTENT)
    assert x.upstream_path is not None
    assert x.upstream_path.endswith("/publishers/google/models/gemini-2.5:streamGenerateContent")
    assert "europe-west4" in x.upstream_path
    assert x.headers == headers
    assert x.llm == {"provider": "vertex", "model": "gemini-2.5", "streaming": True}


def test_gemini_takes_the_key_in_x_goog_api_key():
    x = exchange("/v1beta/models/m:generateContent",
                 headers=[(b"host", b"gw"), (b"authorization", b"Bearer AIza-key"), (b"x-other", b"1")])
    prepare(x, backend(), GENERATE_CONTENT)
    assert x.headers == [(b"host", b"gw"), (b"x-goog-api-key", b"AIza-key"), (b"x-other", b"1")]


def test_a_path_override_naming_one_method_gets_the_clients_method():
    x = exchange("/v1beta/models/m:streamGenerateContent")
    prepare(x, backend(path_override="/custom/{model}:generateContent"), GENERATE_CONTENT)
    assert x.upstream_path == "/custom/m:streamGenerateContent"
    x = exchange("/v1beta/models/m:countTokens")
    prepare(x, backend(path_override="/custom/{model}:streamGenerateContent?alt=sse"), GEMINI_COUNT_TOKENS)
    assert x.upstream_path == "/custom/m:countTokens?alt=sse"
    x = exchange("/v1beta/models/m:countTokens")
    prepare(x, backend(path_override="/custom/{model}:{method}"), GEMINI_COUNT_TOKENS)
    assert x.upstream_path == "/custom/m:countTokens"


def test_a_path_override_with_a_longer_method_name_is_left_alone():
    x = exchange("/v1beta/models/m:streamGenerateContent")
    prepare(x, backend(path_override="/custom:generateContentNow"), GENERATE_CONTENT)
    assert x.upstream_path == "/custom:generateContentNow"


def test_with_host_override_the_clients_raw_path_gets_the_backends_model_quoted():
    x = exchange("/v1beta/models/asked:generateContent", raw_path=b"/v1beta/models/asked:generateContent")
    prepare(x, backend("gemini", model="google/gemma", paths=()), GENERATE_CONTENT)
    assert x.upstream_path == "/v1beta/models/google%2Fgemma:generateContent"
    assert x.llm is not None and x.llm["model"] == "google/gemma"


def test_with_host_override_the_raw_path_is_read_as_latin_1_and_the_rewritten_path_wins():
    x = exchange("/v1beta/models/asked:generateContent", raw_path="/v1/caf\xe9/models/a%2Fb:generateContent".encode("latin-1"))
    prepare(x, backend("gemini", model="mine", paths=()), GENERATE_CONTENT)
    assert x.upstream_path == "/v1/caf\xe9/models/mine:generateContent"
    x = exchange("/v1beta/models/asked:generateContent", raw_path=b"/v1beta/models/asked:generateContent")
    x.upstream_path = "/rewritten/models/asked:generateContent"  # a urlRewrite ran before
    prepare(x, backend("gemini", model="mine", paths=()), GENERATE_CONTENT)
    assert x.upstream_path == "/rewritten/models/mine:generateContent"


def test_with_host_override_and_no_raw_path_the_decoded_path_is_used():
    x = exchange("/v1beta/models/asked:countTokens")
    prepare(x, backend("gemini", model="mine", paths=()), GEMINI_COUNT_TOKENS)
    assert x.upstream_path == "/v1beta/models/mine:countTokens"


def test_with_host_override_and_no_configured_model_or_no_model_in_the_path_the_path_is_kept():
    x = exchange("/v1beta/models/asked:generateContent", raw_path=b"/v1beta/models/asked:generateContent")
    prepare(x, backend("gemini", paths=()), GENERATE_CONTENT)
    assert x.upstream_path is None
    assert x.llm == {"provider": "gemini", "model": "asked", "streaming": False}
    x = exchange("/other", raw_path=b"/other")
    prepare(x, backend("gemini", model="mine", paths=()), GENERATE_CONTENT)
    assert x.upstream_path is None
    assert x.llm == {"provider": "gemini", "model": "mine", "streaming": False}


def test_a_path_without_a_model_takes_the_method_of_its_kind():
    x = exchange("/count")  # a routes map entry: this path is countTokens
    prepare(x, backend(model="m", path_override="/v1beta/models/{model}:{method}"), GEMINI_COUNT_TOKENS)
    assert x.upstream_path == "/v1beta/models/m:countTokens"
    x = exchange("/generate")
    prepare(x, backend(model="m", path_override="/v1beta/models/{model}:{method}"), GENERATE_CONTENT)
    assert x.upstream_path == "/v1beta/models/m:generateContent"
