"""A gateway process in front of the mock LLM providers (fixtures/mock_openai.py for OpenAI chat, Responses
and Anthropic Messages; fixtures/mock_gemini.py for Gemini's native API), for the web UI's Requests page
and its LLM trace view (tests/e2e/test_webui_requests.py, tests/e2e/test_webui_llm_trace.py) and the
screenshots of docs/webui.md (tests/webui_screenshots.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from .admin_helpers import GatewayProcess
from .conftest import ROOT, free_port

CONFIG = """\
binds:
- port: {port}
  listeners:
  - name: main
    routes:
    - name: openai
      matches: [{{path: {{pathPrefix: /v1/chat}}}}, {{path: {{pathPrefix: /v1/responses}}}}]
      backends:
      - ai: {{name: openai, provider: {{openAI: {{}}}}, hostOverride: "127.0.0.1:{openai}"}}
        policies: {{backendAuth: {{key: sk-test}}}}
    - name: claude
      matches: [{{path: {{pathPrefix: /v1/messages}}}}]
      backends:
      - ai: {{name: anthropic, provider: {{anthropic: {{}}}}, hostOverride: "127.0.0.1:{openai}"}}
        policies: {{backendAuth: {{key: sk-ant-test}}}}
    - name: gemini
      matches: [{{path: {{pathPrefix: /v1beta}}}}]
      backends:
      - ai: {{name: gemini, provider: {{gemini: {{}}}}, hostOverride: "127.0.0.1:{gemini}"}}
        policies: {{backendAuth: {{key: g-test}}}}
    - name: limited
      matches: [{{path: {{pathPrefix: /limited}}}}]
      policies:
        localRateLimit: [{{maxTokens: 3, tokensPerFill: 3, fillInterval: 60s}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
    - name: echo
      matches: [{{path: {{pathPrefix: /api}}}}, {{path: {{pathPrefix: /echo}}}}]
      backends: [{{host: "127.0.0.1:{backend}"}}]
"""


class LlmGateway(GatewayProcess):
    """``GatewayProcess`` with the two mock providers started first (``close()`` stops them too)."""

    def __init__(self, tmp: Path) -> None:
        self.openai_port, self.gemini_port = free_port(), free_port()
        mocks = [subprocess.Popen([sys.executable, "-m", f"fixtures.{name}", "--port", str(port)], cwd=ROOT,
                                  stdout=subprocess.DEVNULL)
                 for name, port in (("mock_openai", self.openai_port), ("mock_gemini", self.gemini_port))]
        try:
            super().__init__(tmp, config_text=CONFIG, openai=self.openai_port, gemini=self.gemini_port)
        except BaseException:
            for proc in mocks:
                proc.kill()
            raise
        self.procs.extend(mocks)
        deadline = time.monotonic() + 20
        for port in (self.openai_port, self.gemini_port):
            while True:
                try:
                    httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        self.close()
                        raise
                    time.sleep(0.05)

    # -- the four streamed APIs, as a client calls them --------------------------------------------
    def chat_stream(self, text: str, model: str = "gpt-4o-mini") -> httpx.Response:
        return httpx.post(f"{self.url}/v1/chat/completions", json={
            "model": model, "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": text}]}, timeout=10)

    def responses_stream(self, text: str, model: str = "gpt-4.1-mini") -> httpx.Response:
        return httpx.post(f"{self.url}/v1/responses", json={"model": model, "stream": True, "input": text}, timeout=10)

    def messages_stream(self, text: str, model: str = "claude-sonnet-4-5") -> httpx.Response:
        return httpx.post(f"{self.url}/v1/messages", headers={"anthropic-version": "2023-06-01"}, json={
            "model": model, "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": text}]}, timeout=10)

    def gemini_stream(self, text: str, model: str = "gemini-2.5-flash") -> httpx.Response:
        return httpx.post(f"{self.url}/v1beta/models/{model}:streamGenerateContent?alt=sse", json={
            "contents": [{"role": "user", "parts": [{"text": text}]}]}, timeout=10)
