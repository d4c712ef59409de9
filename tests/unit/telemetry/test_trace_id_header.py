"""Inject mode's ``x-trioproxy-trace-id`` finds the request in the gateway and goes no further:
the backend never sees it (it is the trace client's marker, not part of the user's request)."""

from __future__ import annotations

import base64
import json

from tests.e2e.test_trace_cli_gateway import events_of, final_request, real_gateway  # noqa: F401  (fixture)


def test_injected_trace_id_is_not_forwarded_to_the_backend(real_gateway):  # noqa: F811
    result = real_gateway.trace(
        "trace", "--local", "--proxy-admin-port", str(real_gateway.admin_port), "--raw",
        "--port", str(real_gateway.port), "--", "http://api.example.com/echo", "-H", "x-tenant: acme")
    events = events_of(result)
    # The trace still shows it where it matched (the request as received) ...
    initial = next(e["message"]["requestState"]["request"] for e in events
                   if e["message"].get("stage") == "initial request")
    assert "x-trioproxy-trace-id" in initial["headers"]
    # ... but not in what went upstream, and the echo backend's answer lists what it received.
    assert "x-trioproxy-trace-id" not in final_request(events)["headers"]
    body = next(e["message"]["body"] for e in events
                if e["message"]["type"] == "bodySnapshot" and e["message"]["stage"] == "response")
    received = {pair[0].lower() for pair in json.loads(base64.b64decode(body))["headers"]}
    assert "x-tenant" in received
    assert "x-trioproxy-trace-id" not in received
