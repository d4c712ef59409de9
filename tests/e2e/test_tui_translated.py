"""The body view of a translated LLM stream, from a real trace: an OpenAI chat stream answered by the
Anthropic and Gemini mocks through an in-process gateway shows both forms reassembled, the provider's
answer and the client's, with the same text."""

from __future__ import annotations

import pytest

from fixtures.mock_anthropic import MockAnthropic
from fixtures.mock_gemini import MockGemini
from tests.e2e.test_llm_translate_gateway import serve
from tests.e2e.test_trace import watch
from trioproxy.tui.state import TraceView


def sections(lines: list[tuple[str, str]]) -> dict[str, list[str]]:
    """Column lines by body stage (the ``── stage · ...`` captions)."""
    out: dict[str, list[str]] = {}
    current = None
    for style, text in lines:
        if style == "body.caption" and text.startswith("── "):
            current = text[3:].split(" · ", 1)[0]
            out[current] = []
        elif current is not None:
            out[current].append(text)
    return out


@pytest.mark.parametrize(("mock", "provider", "extra", "dialect"), [
    (MockAnthropic, "{anthropic: {}}", "", "Anthropic messages"),
    (MockGemini, "{gemini: {}}", "          pathOverride: /v1beta/models/{{model}}:generateContent", "Gemini"),
])
async def test_translated_stream_shows_the_provider_and_client_forms_reassembled(nursery, mock, provider, extra,
                                                                                  dialect):
    gw = await serve(nursery, mock(), provider, extra)
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        response = await client.post("/v1/chat/completions", json={
            "model": "claude-x" if dialect.startswith("Anthropic") else "gemini-x",
            "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "translate me twice"}]})
    assert response.status_code == 200
    view = TraceView()
    for event in await reader.events():
        view.add_event(event)
    left, right = (sections(column) for column in view.body_columns())
    assert set(left) == {"client request", "final request"} and set(right) == {"provider response", "response"}
    provider_form, client_form = right["provider response"], right["response"]
    assert provider_form[0].startswith(f"{dialect} stream reassembled from")
    assert client_form[0].startswith("OpenAI chat stream reassembled from")
    for form in (provider_form, client_form):
        assert form[form.index("text:") + 1] == "translate me twice"
        assert any(line.startswith("tokens: input ") for line in form)
    # both forms count the same tokens: the translator carried the usage over
    tokens = [next(line for line in form if line.startswith("tokens: ")) for form in (provider_form, client_form)]
    assert tokens[0] == tokens[1]
