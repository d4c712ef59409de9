"""The standalone config: what loads, and the exact message for each kind of mistake."""

from __future__ import annotations

import textwrap

import pytest

from trioproxy.config import ConfigError, parse_config

BACKEND = "backends: [{host: '127.0.0.1:8080'}]"


def load(text: str, env: dict[str, str] | None = None):
    return parse_config(textwrap.dedent(text), env=env or {})


def problems(text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(text, env)
    return info.value.problems


def test_keys_follow_the_contract():
    config = load(f"""
        binds:
        - port: 3000
          listeners:
          - routes:
            - name: api
              {BACKEND}
            - {BACKEND}
    """)
    listener = config.binds[0].listeners[0]
    assert listener.key == "default/default/bind/3000/listener0"
    assert [r.key for r in listener.routes] == [
        "default/default/bind/3000/listener0/default/api",
        "default/default/bind/3000/listener0/default/route1",
    ]


def test_defaults_and_env_overrides_for_servers():
    config = load("binds: []")
    assert (str(config.servers.admin), str(config.servers.stats), str(config.servers.readiness)) == (
        "localhost:15000", "0.0.0.0:15020", "0.0.0.0:15021")
    config = load("config: {adminAddr: '127.0.0.1:1500'}\nbinds: []", env={"STATS_ADDR": "127.0.0.1:9"})
    assert str(config.servers.admin) == "127.0.0.1:1500"
    assert str(config.servers.stats) == "127.0.0.1:9"


def test_env_expansion_in_strings():
    config = load("""
        binds:
        - port: $PORT
          listeners:
          - routes:
            - backends: [{host: "${BACKEND_HOST}:8080"}]
              policies: {directResponse: {status: 200, body: "costs $$5"}}
    """, env={"PORT": "3100", "BACKEND_HOST": "10.0.0.1"})
    route = config.binds[0].listeners[0].routes[0]
    assert config.binds[0].port == 3100
    assert str(route.backends[0].target) == "10.0.0.1:8080"
    assert route.policies.direct_response.body == "costs $5"


BAD_CONFIGS = [
    ('binds:\n- port: notaport\n',
     ["<config>:2:9: binds[0].port: expected an integer, got 'notaport'"]),
    ('binds:\n- port: 70000\n',
     ['<config>:2:9: binds[0].port: expected an integer from 0 to 65535, got 70000']),
    ('binds:\n- {}\n',
     ['<config>:2:3: binds[0].port: required field is missing']),
    ('bindz: []\n',
     ["<config>:1:1: bindz: unknown field; did you mean 'binds'?"]),
    ('binds: 3\n',
     ['<config>:1:8: binds: expected a list, got 3']),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends: [{host: nohostport}]\n',
     ["<config>:5:25: binds[0].listeners[0].routes[0].backends[0].host: expected HOST:PORT, got 'nohostport'"]),
    ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends: [{host: 'a:1'}, {host: 'b:0'}]\n",
     ["<config>:5:40: binds[0].listeners[0].routes[0].backends[1].host: expected HOST:PORT, got 'b:0'"]),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - {name: a}\n    - {name: a}\n',
     ["<config>:6:14: binds[0].listeners[0].routes[1].name: duplicate route name 'a' (also at binds[0].listeners[0].routes[0])"]),
    ('binds:\n- port: 3000\n  listeners:\n  - protocol: TCP\n',
     ["<config>:4:15: binds[0].listeners[0].protocol: expected HTTP, got 'TCP'"]),
    ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - matches: [{path: {regex: '('}}]\n",
     ['<config>:5:32: binds[0].listeners[0].routes[0].matches[0].path.regex: invalid regular expression: missing ), unterminated subpattern at position 0']),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - matches: [{path: {pathPrefix: v1}}]\n',
     ["<config>:5:37: binds[0].listeners[0].routes[0].matches[0].path.pathPrefix: expected a path starting with '/', got 'v1'"]),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - matches: [{method: FETCH}]\n',
     ["<config>:5:26: binds[0].listeners[0].routes[0].matches[0].method: expected an HTTP method such as GET or POST, got 'FETCH'"]),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {timeout: {requestTimeout: soon}}\n',
     ["<config>:5:44: binds[0].listeners[0].routes[0].policies.timeout.requestTimeout: expected a duration such as 500ms, 1s, 60s or 1h, got 'soon'"]),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {backendAuth: {key: x}}\n',
     ['<config>:5:18: binds[0].listeners[0].routes[0].policies.backendAuth: unknown field (expected one of: authorization, cors, directResponse, jwtAuth, localRateLimit, remoteRateLimit, requestHeaderModifier, responseHeaderModifier, retry, timeout)']),
    ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends: [{host: 'a:1', ai: {name: x}}]\n",
     ['<config>:5:18: binds[0].listeners[0].routes[0].backends[0]: expected exactly one of: host, ai']),
    ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - hostnames: ['bad host']\n",
     ["<config>:5:19: binds[0].listeners[0].routes[0].hostnames[0]: expected a hostname such as api.example.com or *.example.com, got 'bad host'"]),
    ('binds:\n- port: $NOPE\n',
     ['<config>:2:9: binds[0].port: environment variable NOPE is not set', "<config>:2:9: binds[0].port: expected an integer, got ''"]),
    ('config: {adminAddr: nowhere}\nbinds: []\n',
     ["<config>:1:21: config.adminAddr: expected HOST:PORT, got 'nowhere'"]),
    ('binds:\n- port: 3000\n- port: 3000\n',
     ['<config>:3:9: binds[1].port: port 3000 is already bound by binds[0]']),
    ('binds: [\n',
     ['<config>:2:1: invalid YAML: did not find expected node content']),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {jwtAuth: {issuer: x}}\n',
     ['<config>:5:27: binds[0].listeners[0].routes[0].policies.jwtAuth: jwks is required (or give providers)']),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {retry: {attempts: 2}}\n',
     ['<config>:5:25: binds[0].listeners[0].routes[0].policies.retry: policy is not supported by this version of trioproxy']),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {authorization: {rules: ["jwt.sub =="]}}\n',
     ["<config>:5:42: binds[0].listeners[0].routes[0].policies.authorization.rules[0]: syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER} at line 1, column 11"]),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {jwtAuth: {issuer: x, jwks: \'{"keys": []}\'}}\n',
     ['<config>:5:45: binds[0].listeners[0].routes[0].policies.jwtAuth.jwks: JWKS has no usable signing key']),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {jwtAuth: {issuer: x, jwks: {file: /nonexistent/jwks.json}}}\n',
     ['<config>:5:52: binds[0].listeners[0].routes[0].policies.jwtAuth.jwks.file: cannot read /nonexistent/jwks.json: No such file or directory']),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {cors: {allowOrigins: [\'ftp://x\']}}\n',
     ['<config>:5:40: binds[0].listeners[0].routes[0].policies.cors.allowOrigins[0]: expected * or an origin such as https://app.example.com or https://*.example.com, got \'ftp://x\'']),
]


@pytest.mark.parametrize("text, expected", BAD_CONFIGS, ids=[e[0][:40] for e in BAD_CONFIGS])
def test_bad_configs_name_their_place(text, expected):
    assert problems(text) == expected


def test_every_problem_is_reported_not_just_the_first():
    found = problems("""
        binds:
        - port: x
        - port: 3000
          listeners:
          - routes:
            - backends: [{host: bad}]
              matches: [{method: NOPE}]
    """)
    assert [line.split(": ")[0] for line in found] == ["<config>:3:9", "<config>:7:25", "<config>:8:26"]
    assert found[0].startswith("<config>:3:9: binds[0].port:")
