"""``trioproxy demo``: the gateway and a demo backend in one process, for a first look.

The backend is a small raw ASGI app in the same root nursery as the gateway: it echoes any
request as JSON and answers ``POST /v1/chat/completions`` as an OpenAI-compatible model would
(with ``usage``, and SSE when ``stream: true``), so request limits, token limits and traces can be
tried with nothing else installed. Ctrl-C drains and stops both; nothing is left listening.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import MutableMapping
from typing import Any

import trio

from ..asgi import read_body, serve_lifespan
from ..config import ConfigError, parse_config
from ..config.model import Address
from ..frontend.server import ServerInfo, StartupError, listen_socket, run_until_signalled, serve_app
from ..telemetry.access_log import configure_logging

Scope = MutableMapping[str, Any]

DEMO_CONFIG = """\
binds:
- port: {port}
  listeners:
  - name: demo
    routes:
    - name: llm
      matches: [{{path: {{pathPrefix: /v1/chat/completions}}}}]
      policies:
        localRateLimit:
        - {{maxTokens: 2000, tokensPerFill: 2000, fillInterval: 60s, type: tokens}}
      backends:
      - ai:
          name: demo-llm
          provider: {{openAI: {{model: demo-model}}}}
          hostOverride: 127.0.0.1:{backend}
    - name: echo
      policies:
        localRateLimit:
        - {{maxTokens: 5, tokensPerFill: 5, fillInterval: 1s}}
      backends:
      - host: 127.0.0.1:{backend}
"""


async def demo_backend(scope: Scope, receive: Any, send: Any) -> None:
    """Echo the request as JSON; play an OpenAI-compatible model on /v1/chat/completions."""
    if scope["type"] == "lifespan":
        await serve_lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    body = await read_body(receive)
    if scope["method"] == "POST" and scope["path"] == "/v1/chat/completions":
        await _completion(body, send)
        return
    answer = json.dumps({
        "method": scope["method"], "path": scope["path"], "query": scope["query_string"].decode("latin-1"),
        "headers": {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]},
        "body_length": len(body),
    }, indent=2).encode() + b"\n"
    await _respond(send, 200, b"application/json", answer)


async def _completion(body: bytes, send: Any) -> None:
    try:
        request = json.loads(body)
        text = str(request["messages"][-1]["content"])
    except (ValueError, LookupError, TypeError):
        await _respond(send, 400, b"application/json", b'{"error": {"message": "expected {messages: [...]}"}}\n')
        return
    reply = f"You said: {text}"
    usage = {"prompt_tokens": len(text.split()) + 5, "completion_tokens": len(reply.split())}
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    model = request.get("model", "demo-model")
    if request.get("stream"):
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")]})
        for word in reply.split():
            chunk = {"object": "chat.completion.chunk", "model": model,
                     "choices": [{"index": 0, "delta": {"content": word + " "}}]}
            await send({"type": "http.response.body", "body": f"data: {json.dumps(chunk)}\n\n".encode(),
                        "more_body": True})
        last = {"object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}
        await send({"type": "http.response.body", "body": f"data: {json.dumps(last)}\n\ndata: [DONE]\n\n".encode()})
        return
    answer = {"object": "chat.completion", "model": model, "usage": usage,
              "choices": [{"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}]}
    await _respond(send, 200, b"application/json", json.dumps(answer).encode() + b"\n")


async def _respond(send: Any, status: int, content_type: bytes, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--port", type=int, default=3000, help="gateway port (default %(default)s)")
    parser.add_argument("--backend-port", type=int, default=0,
                        help="demo backend port on 127.0.0.1 (default: any free port)")
    parser.add_argument("--drain-timeout", type=float, default=5.0, metavar="SECONDS", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Serve the demo until SIGINT/SIGTERM; one-line errors (busy port) and exit 1, never a traceback."""
    try:
        backend_sock = listen_socket(Address("127.0.0.1", args.backend_port), "--backend-port")
    except StartupError as error:
        print(f"trioproxy: error: {error}", file=sys.stderr)
        return 1
    backend_port = backend_sock.getsockname()[1]
    try:
        config = parse_config(DEMO_CONFIG.format(port=args.port, backend=backend_port))
    except ConfigError as error:
        backend_sock.close()
        for problem in error.problems:
            print(f"trioproxy: error: {problem}", file=sys.stderr)
        return 1

    async def backend(nursery: trio.Nursery, info: ServerInfo) -> None:
        await nursery.start(serve_app, demo_backend, backend_sock, 1.0, trio.Event())
        print(f"trioproxy: demo backend on http://127.0.0.1:{backend_port}\n"
              f"trioproxy: try  curl -i localhost:{info.ports[args.port]}/hello\n"
              f"trioproxy: and  curl localhost:{info.ports[args.port]}/v1/chat/completions "
              "-H 'content-type: application/json' -d '{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'",
              file=sys.stderr, flush=True)

    configure_logging(None, "text")
    failures: list[BaseException] = []
    try:
        trio.run(lambda: run_until_signalled(config, config_path=None, drain_timeout=args.drain_timeout,
                                             extra_tasks=backend))
    except* StartupError as group:
        failures.extend(group.exceptions)
    finally:
        with contextlib.suppress(OSError):
            backend_sock.close()
    for failure in failures:
        print(f"trioproxy: error: {failure}", file=sys.stderr)
    return 1 if failures else 0


__all__ = ["DEMO_CONFIG", "configure_parser", "demo_backend", "run"]
