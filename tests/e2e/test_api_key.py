"""apiKey authentication (trioproxy/policies/api_key.py) through a gateway on 127.0.0.1, as agentgateway's."""

from __future__ import annotations

import hashlib

import pytest

from tests.conftest import LOOPBACK_SERVERS, free_port, start_routes
from tests.e2e.test_trace import watch
from trioproxy.config import ConfigError, parse_config

K2_HASH = "sha256:" + hashlib.sha256(b"k2").hexdigest()


def headers_of(response) -> dict[str, str]:
    return dict(response.json()["headers"])


@pytest.mark.parametrize(("mode", "missing", "wrong"), [
    ("strict", 401, 401),
    ("optional", 200, 401),
    ("permissive", 200, 200),
])
async def test_modes_decide_what_a_missing_or_wrong_key_gets(nursery, backend, mode, missing, wrong):
    gw = await start_routes(nursery, """
        - policies:
            apiKey: {{mode: {mode}, keys: [{{key: k1}}]}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, mode=mode)
    async with gw.client() as client:
        none = await client.get("/")
        bad = await client.get("/", headers={"authorization": "Bearer nope"})
        good = await client.get("/", headers={"authorization": "Bearer k1"})
    assert (none.status_code, bad.status_code, good.status_code) == (missing, wrong, 200)
    if missing == 401:
        assert none.text == "api key authentication failure: no API Key found"
    if wrong == 401:
        assert bad.text == "api key authentication failure: invalid credentials"
    assert "authorization" not in headers_of(good)  # the key never reaches the backend
    if mode == "permissive":  # an unknown key passes untouched: it was not ours to remove
        assert headers_of(bad)["authorization"] == "Bearer nope"


async def test_metadata_is_cel_apikey_and_a_hash_stands_for_the_key(nursery, backend):
    gw = await start_routes(nursery, """
        - policies:
            apiKey:
              mode: strict
              keys:
              - {{key: k1, metadata: {{team: eng}}}}
              - {{keyHash: "{k2}", metadata: {{team: ops}}}}
            authorization: {{rules: ['apiKey.team == "eng"', 'request.path == "/open"']}}
            requestHeaderModifier: {{set: [{{name: x-team, value: from-config}}]}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, k2=K2_HASH)
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        eng = await client.get("/x", headers={"authorization": "bearer k1"})  # the prefix ignores case
        events = await reader.events()
        ops = await client.get("/x", headers={"authorization": "Bearer k2"})
        ops_open = await client.get("/open", headers={"authorization": "Bearer k2"})
    assert (eng.status_code, ops.status_code, ops_open.status_code) == (200, 403, 200)
    policy = next(e for e in events if e["message"].get("kind") == "apiKey")
    assert (policy["message"]["type"], policy["severity"], policy["message"]["result"],
            policy["message"]["metadata"]) == ("policy", "success", "authenticated", {"team": "eng"})
    snapshot = next(e["message"] for e in events if e["message"].get("stage") == "apiKey")
    assert snapshot["requestState"]["apiKey"] == {"team": "eng", "key": "<redacted>"}
    assert "authorization" not in snapshot["requestState"]["request"]["headers"]  # gone once it matched
    assert "k1" not in str(events)  # neither the key nor its header shows in the trace
    assert hashlib.sha256(b"k1").hexdigest() not in str(events)  # nor its digest (policySelection)


def test_config_dump_shows_the_policy_but_not_the_keys():
    import json

    from trioproxy.config.dump import config_dump

    text = ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies:\n        apiKey: {mode: strict, keys: "
            f"[{{key: k1, metadata: {{team: eng}}}}, {{keyHash: '{K2_HASH}'}}], location: {{cookie: {{name: s}}}}}}\n")
    dump = config_dump(parse_config(text, env=LOOPBACK_SERVERS))
    dumped = json.dumps(dump)

    def policies(node):  # every dumped apiKey policy, wherever it sits
        if isinstance(node, dict):
            if isinstance(node.get("apiKey"), dict):
                yield node["apiKey"]
            for value in node.values():
                yield from policies(value)
        elif isinstance(node, list):
            for value in node:
                yield from policies(value)

    assert list(policies(dump)) == [{"keys": "<redacted>", "mode": "strict", "runtimeKeys": False,
                                     "logPayloads": False,
                                     "location": {"kind": "cookie", "name": "s", "prefix": ""}}]
    assert hashlib.sha256(b"k1").hexdigest() not in dumped and K2_HASH[7:] not in dumped


@pytest.mark.parametrize(("mode", "authorization", "severity", "result", "reason"), [
    ("strict", None, "warn", "rejected", "no API Key found"),
    ("optional", None, "info", "skipped", "no API key (optional mode)"),
    ("optional", "Bearer nope", "warn", "rejected", "invalid credentials"),
    ("permissive", "Bearer nope", "warn", "skipped", "invalid credentials (permissive mode: passed without apiKey)"),
])
async def test_every_decision_is_a_trace_event(nursery, backend, mode, authorization, severity, result, reason):
    gw = await start_routes(nursery, """
        - policies:
            apiKey: {{mode: {mode}, keys: [{{key: k1}}]}}
            authorization: {{rules: ['apiKey.key == "<redacted>" || !has(apiKey.key)']}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, mode=mode)
    reader = await watch(nursery, gw)
    async with gw.client() as client:
        await client.get("/", headers={"authorization": authorization} if authorization else {})
        events = await reader.events()
    (decision,) = [e for e in events if e["message"].get("kind") == "apiKey"]
    assert (decision["message"]["type"], decision["severity"], decision["message"]["result"],
            decision["message"]["reason"]) == ("policy", severity, result, reason)


async def test_cel_sees_the_key_redacted(nursery, backend):
    gw = await start_routes(nursery, """
        - policies:
            apiKey: {{keys: [{{key: k1}}]}}
            authorization: {{rules: ['apiKey.key == "<redacted>"']}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port)
    async with gw.client() as client:
        assert (await client.get("/", headers={"authorization": "Bearer k1"})).status_code == 200
        assert (await client.get("/")).status_code == 403  # no key: apiKey is empty


@pytest.mark.parametrize(("location", "send", "kept"), [
    ("{header: {name: x-key}}", {"headers": {"x-key": "k1", "x-other": "1"}}, ("x-other", None)),
    ("{header: {name: x-key, prefix: 'Key '}}", {"headers": {"x-key": "Key k1"}}, (None, None)),
    ("{queryParameter: {name: api_key}}", {"params": {"a": "1", "api_key": "k1", "b": "2"}}, (None, "a=1&b=2")),
    ("{queryParameter: {name: api_key}}", {"url": "/p?a=1&api%5Fkey=k1"}, (None, "a=1")),  # read decoded, removed too
    ("{cookie: {name: session}}", {"headers": {"cookie": "theme=dark; session=k1"}}, ("cookie", None)),
    ("{cookie: {name: session}}", {"headers": {"cookie": "session=k1"}}, ("no cookie", None)),
])
async def test_each_location_reads_the_key_and_removes_only_it(nursery, backend, location, send, kept):
    gw = await start_routes(nursery, """
        - policies:
            apiKey: {{mode: strict, keys: [{{key: k1}}], location: {location}}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port, location=location)
    async with gw.client() as client:
        send = dict(send)
        answer = await client.get(send.pop("url", "/p"), **send)
        missing = await client.get("/p", headers={"authorization": "Bearer k1"})  # not where the key is read
    assert (answer.status_code, missing.status_code) == (200, 401)
    echoed = answer.json()
    headers = headers_of(answer)
    assert "x-key" not in headers and "k1" not in echoed["query"]
    header, query = kept
    cookies = [v for k, v in echoed["headers"] if k == "cookie"]
    if header == "cookie":
        assert cookies == ["theme=dark"]  # the other cookies stay, in one header
    elif header == "no cookie":
        assert cookies == []  # the key was the only cookie: no empty header is left
    elif header is not None:
        assert headers[header] == "1"
    if query is not None:
        assert echoed["query"] == query


@pytest.mark.parametrize(("policy", "message"), [
    ("{keys: [{key: a, keyHash: 'sha256:00'}]}", "expected exactly one of: key, keyHash"),
    ("{keys: [{keyHash: 'md5:abc'}]}", "keyHash: expected sha256:<64 hex digits>, got 'md5:abc'"),
    ("{keys: [{key: a, allowedModels: [gpt-4o]}]}",
     "'allowedModels' is an agentgateway feature that trioproxy does not implement"),
    ("{keys: [{key: a}], location: {expression: 'request.headers[\"x\"]'}}",
     "'expression' is an agentgateway feature that trioproxy does not implement"),
    ("{keys: [{key: a}], mode: lenient}", "expected one of: strict, optional, permissive"),
])
def test_bad_api_key_policies_are_named(policy, message):
    text = f"binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {{apiKey: {policy}}}\n"
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env=LOOPBACK_SERVERS)
    assert any("policies.apiKey" in p and message in p for p in caught.value.problems), caught.value.problems


async def test_custom_credential_places_are_redacted_in_traces_and_filters(nursery, backend):
    """A key in ``x-team-key`` or ``?sk=`` is as secret as one in ``authorization``: the snapshots
    before the policy removed it, the URI, and what a trace filter can test (docs/reliability.md,
    row 6) hide it. A wrong key is never removed, so it would show in every snapshot."""
    gw = await start_routes(nursery, """
        - matches: [{{path: {{pathPrefix: /h}}}}]
          policies: {{apiKey: {{keys: [{{key: k1}}], location: {{header: {{name: X-Team-Key}}}}}}}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
        - matches: [{{path: {{pathPrefix: /q}}}}]
          policies: {{apiKey: {{keys: [{{key: k1}}], location: {{queryParameter: {{name: sk}}}}}}}}
          backends: [{{host: "127.0.0.1:{backend}"}}]
    """, port=free_port(), backend=backend.port)
    header = await watch(nursery, gw)
    async with gw.client() as client:
        await client.get("/h", headers={"x-team-key": "wrong-k"})
        query = await watch(nursery, gw)
        await client.get("/q?sk=wrong-k&a=1")
        probe = await watch(nursery, gw, 'request.headers["x-team-key"] == "wrong-k"')
        await client.get("/h", headers={"x-team-key": "wrong-k"})
        anything = await watch(nursery, gw)  # takes the next request: the probe never matched
        await client.get("/h")
    assert "wrong-k" not in str(await header.events()) + str(await query.events())
    initial = next(e["message"]["requestState"]["request"] for e in await query.events()
                   if e["message"].get("stage") == "initial request")
    assert initial["uri"].endswith("/q?sk=<redacted>&a=1")
    assert await anything.events() and probe.status == 200 and not probe._done.is_set()


def test_a_worker_hubs_filters_see_the_redacted_request_too():
    """Under --workers the worker evaluates the supervisor's filter expressions: the same redaction."""
    from trioproxy.redaction import DEFAULT
    from trioproxy.workers.trace_relay import TraceTable, WorkerTraceHub

    table = TraceTable.create()
    hub = WorkerTraceHub(table, lambda watcher_id, sequence, watcher: None)
    hub.redaction = DEFAULT.also(headers=frozenset({b"x-team-key"}))
    assert table.publish(1, 'request.headers["x-team-key"] == "k1" || request.headers["authorization"] == "Bearer s"',
                         following=False, first=False)
    activation = {"request": {"headers": {"x-team-key": "k1", "authorization": "Bearer s"}}}
    assert hub.claim(0.0, lambda: activation) is None  # neither secret can be tested
    assert table.publish(2, 'request.headers["x-team-key"] == "<redacted>"', following=False, first=False)
    assert hub.claim(0.0, lambda: activation) is not None
