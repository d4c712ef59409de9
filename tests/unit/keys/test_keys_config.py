"""config.store, config.keys and apiKey.runtimeKeys: read, defaulted, resolved and checked."""

from __future__ import annotations

import os
import textwrap

import pytest

from trioproxy.config import ConfigError, load_config, parse_config
from trioproxy.config.model import KeysSettings

ROUTE = """
binds:
- port: 3000
  listeners:
  - routes:
    - backends: [{host: '127.0.0.1:8080'}]
      policies:
        apiKey: %s
"""


def test_defaults_put_the_store_beside_the_config_file(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text("binds: []\n")
    config = load_config(path, env={})
    assert config.store == str(tmp_path / "trioproxy.db")
    assert config.keys == KeysSettings()
    assert config.keys.refresh_interval == 0.5 and config.keys.failure_mode == "closed"


def test_a_relative_store_is_resolved_against_the_config_files_directory(tmp_path):
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "gw.yaml"
    path.write_text("config: {store: data/keys.sqlite}\n")
    assert load_config(path, env={}).store == str(tmp_path / "conf" / "data" / "keys.sqlite")


def test_a_postgresql_url_is_kept_as_written():
    url = "postgresql://gw@db.example:5432/keys"
    assert parse_config(f"config: {{store: '{url}'}}\n", env={}).store == url
    assert parse_config("config: {store: $DB}\n", env={"DB": url}).store == url


def test_text_without_a_file_resolves_against_the_working_directory():
    assert parse_config("binds: []\n", env={}).store == os.path.join(os.getcwd(), "trioproxy.db")


def test_keys_settings_are_compiled():
    config = parse_config(textwrap.dedent("""
        config:
          keys:
            refreshInterval: 250ms
            flushInterval: 1s
            reservationTtl: 2m
            failureMode: open
            defaultMaxTokens: 2048
            requestLog: {enabled: true, retention: 30d}
    """), env={})
    assert config.keys == KeysSettings(refresh_interval=0.25, flush_interval=1.0, reservation_ttl=120.0,
                                       failure_mode="open", default_max_tokens=2048,
                                       request_log_enabled=True, request_log_retention=30 * 86400.0)


def test_bad_keys_settings_name_the_field():
    with pytest.raises(ConfigError) as info:
        parse_config("config:\n  keys: {failureMode: maybe, refreshInterval: soon}\n", source="c.yaml", env={})
    text = "\n".join(info.value.problems)
    assert "config.keys.failureMode" in text and "config.keys.refreshInterval" in text


def test_strict_runtime_keys_need_no_static_keys():
    config = parse_config(ROUTE % "{mode: strict, runtimeKeys: true}", env={})
    spec = config.binds[0].listeners[0].routes[0].policies.api_key
    assert spec is not None and spec.runtime_keys is True and spec.keys == () and spec.mode == "strict"


def test_static_keys_alone_are_not_runtime_keys():
    spec = parse_config(ROUTE % "{keys: [{key: abc}]}", env={}).binds[0].listeners[0].routes[0].policies.api_key
    assert spec is not None and spec.runtime_keys is False and len(spec.keys) == 1


def test_no_keys_and_no_runtime_keys_is_still_an_error():
    with pytest.raises(ConfigError) as info:
        parse_config(ROUTE % "{mode: strict}", source="c.yaml", env={})
    assert any("apiKey.keys: required field is missing (or set runtimeKeys: true)" in p for p in info.value.problems)
