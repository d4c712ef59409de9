"""The standalone config: what loads, and the exact message for each kind of mistake."""

from __future__ import annotations

import textwrap

import pytest

from tests.conftest import ROOT
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
        "localhost:15000", "localhost:15020", "localhost:15021")
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
     ["<config>:4:15: binds[0].listeners[0].protocol: expected HTTP or HTTPS, got 'TCP'"]),
    ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - matches: [{path: {regex: '('}}]\n",
     ['<config>:5:32: binds[0].listeners[0].routes[0].matches[0].path.regex: invalid regular expression: missing ), unterminated subpattern at position 0']),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - matches: [{path: {pathPrefix: v1}}]\n',
     ["<config>:5:37: binds[0].listeners[0].routes[0].matches[0].path.pathPrefix: expected a path starting with '/', got 'v1'"]),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - matches: [{method: FETCH}]\n',
     ["<config>:5:26: binds[0].listeners[0].routes[0].matches[0].method: expected an HTTP method such as GET or POST, got 'FETCH'"]),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {timeout: {requestTimeout: soon}}\n',
     ["<config>:5:44: binds[0].listeners[0].routes[0].policies.timeout.requestTimeout: expected a duration such as 500ms, 1s, 60s or 1h, got 'soon'"]),
    ('binds:\n- port: 3000\n  listeners:\n  - policies: {timeout: {requestTimeout: 1s}}\n',
     ['<config>:4:16: binds[0].listeners[0].policies.timeout: unknown field (expected one of: apiKey, authorization, basicAuth, cors, jwtAuth, localRateLimit, remoteRateLimit)']),
    ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends: [{host: 'a:1', ai: {name: x}}]\n",
     ['<config>:5:18: binds[0].listeners[0].routes[0].backends[0]: expected exactly one of: host, ai, mcp']),
    ("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - hostnames: ['bad host']\n",
     ["<config>:5:19: binds[0].listeners[0].routes[0].hostnames[0]: expected a hostname such as api.example.com or *.example.com, got 'bad host'"]),
    ('binds:\n- port: $NOPE\n',
     ['<config>:2:9: binds[0].port: environment variable NOPE is not set', "<config>:2:9: binds[0].port: expected an integer, got ''"]),
    ('config: {adminAddr: nowhere}\nbinds: []\n',
     ["<config>:1:21: config.adminAddr: expected HOST:PORT or off, got 'nowhere'"]),
    ('binds:\n- port: 3000\n- port: 3000\n',
     ['<config>:3:9: binds[1].port: port 3000 is already bound by binds[0]']),
    ('binds: [\n',
     ['<config>:2:1: invalid YAML: did not find expected node content']),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {jwtAuth: {issuer: x}}\n',
     ['<config>:5:27: binds[0].listeners[0].routes[0].policies.jwtAuth: jwks is required (or give providers)']),
    ('binds:\n- port: 3000\n  listeners:\n  - routes:\n    - policies: {retry: {attempts: 2}}\n',
     ['<config>:5:25: binds[0].listeners[0].routes[0].policies.retry.codes: required field is missing']),
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


ROUTES = "binds:\n- port: 3000\n  listeners:\n  - routes:\n"

DID_YOU_MEAN = [
    ("binds:\n- port: 3000\n  listeners:\n  - rotues: []\n",
     "<config>:4:5: binds[0].listeners[0].rotues: unknown field; did you mean 'routes'?"),
    ("binds:\n- port: 3000\n  listener: []\n", "<config>:3:3: binds[0].listener: unknown field; did you mean 'listeners'?"),
    (ROUTES + "    - backends: [{hots: 'a:1'}]\n",
     "<config>:5:19: binds[0].listeners[0].routes[0].backends[0].hots: unknown field; did you mean 'host'?"),
    (ROUTES + "    - matches: [{path: {prefix: /v1}}]\n",
     ("<config>:5:25: binds[0].listeners[0].routes[0].matches[0].path.prefix: unknown field; "
     "did you mean 'pathPrefix'?")),
    (ROUTES + "    - policies: {localRatelimit: []}\n",
     ("<config>:5:18: binds[0].listeners[0].routes[0].policies.localRatelimit: unknown field; "
     "did you mean 'localRateLimit'?")),
    ("config: {AdminAddr: 'a:1'}\n", "<config>:1:10: config.AdminAddr: unknown field; did you mean 'adminAddr'?"),
    ("binds:\n- port: 3000\n  zzz: 1\n",
     "<config>:3:3: binds[0].zzz: unknown field (expected one of: listeners, port)"),
]


@pytest.mark.parametrize("text, expected", DID_YOU_MEAN, ids=[e[1].split(": ")[1] for e in DID_YOU_MEAN])
def test_unknown_fields_suggest_the_closest_known_one(text, expected):
    assert problems(text) == [expected]


def test_agentgateway_fields_trioproxy_lacks_are_named_as_such():
    found = problems(ROUTES + "    - policies: {extAuthz: {host: 'a:1'}}\n      ruleName: r\nmcp: {}\n")
    assert found == [
        ("<config>:5:18: binds[0].listeners[0].routes[0].policies.extAuthz: "
        "'extAuthz' is an agentgateway feature that trioproxy does not implement"),
        ("<config>:6:7: binds[0].listeners[0].routes[0].ruleName: "
        "'ruleName' is an agentgateway feature that trioproxy does not implement"),
        "<config>:7:1: mcp: 'mcp' is an agentgateway feature that trioproxy does not implement",
    ]


def test_agentgateway_table_names_described_classes_and_no_described_field():
    from trioproxy.config import document
    from trioproxy.config.agentgateway_fields import UNIMPLEMENTED
    from trioproxy.config.describe import plan_of

    for class_name, names in UNIMPLEMENTED.items():
        described = set(plan_of(getattr(document, class_name)).by_wire)
        assert not names & described, f"{class_name}: now described, drop from the table: {names & described}"


def test_yaml_1_2_scalars_stay_strings_where_strings_are_expected():
    config = load(ROUTES + "    - name: off\n      namespace: no\n      backends: [{host: '127.0.0.1:1'}]\n"
                  "      policies: {requestHeaderModifier: {set: {x-version: 1.10, x-on: on, x-yes: yes}}}\n")
    route = config.binds[0].listeners[0].routes[0]
    assert (route.name, route.namespace) == ("off", "no")
    assert route.policies.request_header_modifier.set == ((b"x-version", b"1.10"), (b"x-on", b"on"), (b"x-yes", b"yes"))


def test_yaml_1_1_booleans_are_not_integers_or_booleans():
    assert problems("binds:\n- port: yes\n") == ["<config>:2:9: binds[0].port: expected an integer, got 'yes'"]
    assert problems(ROUTES + "    - backends: [{host: 'a:1', weight: true}]\n") == [
        "<config>:5:40: binds[0].listeners[0].routes[0].backends[0].weight: expected an integer, got a boolean"]


def test_duplicate_keys_and_non_string_keys_are_problems():
    assert problems("binds: []\nbinds: []\n") == ["<config>:2:1: binds: duplicate field (first at line 1)"]
    assert problems("binds:\n- port: 1\n  [a]: 2\n") == ["<config>:3:3: binds[0]: expected a field name, got a list"]


def test_aliases_are_read_once_and_cannot_recurse_or_explode():
    config = load(ROUTES + "    - &r {name: a, backends: [{host: 'a:1'}]}\n    - {name: b, backends: *b}\n"
                  .replace("*b", "[{host: 'b:1'}]"))
    assert [r.name for r in config.binds[0].listeners[0].routes] == ["a", "b"]
    assert problems("binds:\n- &a {port: 1, listeners: [{routes: [{policies: {timeout: *a}}]}]}\n") == [
        "<config>:2:3: binds[0].listeners[0].routes[0].policies.timeout: recursive alias"]
    route = "&r {matches: [{path: {pathPrefix: /}}], backends: [{host: 'a:1'}]}"
    listener = "&l {routes: [" + route + ", " + ", ".join(["*r"] * 99) + "]}"
    bind = "&b {port: 0, listeners: [" + listener + ", " + ", ".join(["*l"] * 99) + "]}"
    found = problems("binds: [" + bind + ", " + ", ".join(["*b"] * 99) + "]\n")
    assert len(found) == 1 and "document too large: aliases expand it past 250000 values" in found[0]


def test_problems_past_the_cap_are_counted_not_listed():
    found = problems("binds:\n" + "- port: x\n" * 250)
    assert len(found) == 201
    assert found[-1] == "<config>: 50 more problems not shown"


def test_load_config_names_the_file_in_every_problem(tmp_path):
    from trioproxy.config import load_config

    path = tmp_path / "gw.yaml"
    path.write_text("binds:\n- port: 3000\n  listeners:\n  - routes:\n    - backends: [{host: nohostport}]\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, env={})
    assert info.value.problems == [
        f"{path}:5:25: binds[0].listeners[0].routes[0].backends[0].host: expected HOST:PORT, got 'nohostport'"]


def test_local_rate_limit_cross_field_rule_is_placed():
    assert problems(ROUTES + "    - policies: {localRateLimit: [{maxTokens: 1, tokensPerFill: 5, fillInterval: 1s}]}\n") == [
        ("<config>:5:47: binds[0].listeners[0].routes[0].policies.localRateLimit[0].maxTokens: "
        "must be at least tokensPerFill (5), got 1")]


def test_env_override_problem_names_the_variable():
    assert problems("binds: []\n", env={"ADMIN_ADDR": "nowhere"}) == ["env ADMIN_ADDR: expected HOST:PORT or off, got 'nowhere'"]


def test_build_config_takes_plain_data_without_positions():
    from trioproxy.config import build_config

    assert build_config({"binds": [{"port": 1}]}, env={}).binds[0].port == 1
    with pytest.raises(ConfigError) as info:
        build_config({"binds": [{"port": "x"}]}, env={})
    assert info.value.problems == ["binds[0].port: expected an integer, got 'x'"]


def test_bench_old_and_new_loaders_build_the_same_config():
    """bench/config_load.py on a small generated file: the 51298de walker and the new loader agree."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    done = subprocess.run([sys.executable, "-m", "bench.config_load", "--routes", "40", "--repeat", "1"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "same Config from both loaders: yes" in done.stdout or "before: skipped" in done.stdout, done.stdout


def test_the_pure_python_parser_reads_the_same(monkeypatch):
    """Without ruamel.yaml.clib the loader falls back to ruamel's pure parser: same problems
    (syntax errors aside, which libyaml words differently), same config."""
    import ruamel.yaml

    expected = [problems(text) for text, _ in BAD_CONFIGS if not text.startswith("binds: [")]
    example = (ROOT / "fixtures" / "configs" / "all-fields.yaml").read_text()
    config = load(example)
    init = ruamel.yaml.YAML.__init__
    monkeypatch.setattr(ruamel.yaml.YAML, "__init__", lambda self, **kw: init(self, **{**kw, "pure": True}))
    assert [problems(text) for text, _ in BAD_CONFIGS if not text.startswith("binds: [")] == expected
    assert load(example) == config
