"""ProxyPolicy jwtAuthentication/authorization → the same specs as the standalone config."""

from __future__ import annotations

import json

import pytest

from trioproxy.policies.auth_manifest import ManifestValueError, translate_authorization, translate_jwt_authentication
from trioproxy.policies.authorization import AuthorizationSpec, Rule
from trioproxy.policies.jwt import JwksSource, JwtAuthSpec, ProviderSpec

from .jwt_helpers import jwks, make_key


@pytest.fixture(scope="module")
def jwks_text():
    return json.dumps(jwks(make_key("EdDSA", "k1")))


def test_jwt_authentication_translates_to_the_standalone_spec(jwks_text):
    value = {"mode": "Strict", "providers": [
        {"issuer": "https://a", "audiences": ["api"], "jwks": {"remote": {"url": "https://a/certs"}}},
        {"issuer": "https://b", "jwks": {"inline": jwks_text}}]}
    assert translate_jwt_authentication(value) == {"jwt_auth": JwtAuthSpec((
        ProviderSpec("https://a", JwksSource(url="https://a/certs"), ("api",)),
        ProviderSpec("https://b", JwksSource(inline=jwks_text)),
    ), "strict")}
    assert translate_jwt_authentication({"providers": value["providers"][:1]})["jwt_auth"].mode == "optional"


@pytest.mark.parametrize("value, message", [
    ({"mode": "strict", "providers": []}, "spec.traffic.jwtAuthentication.mode: expected one of: Strict, Optional, "
                                          "Permissive, got 'strict'"),
    ({"providers": []}, "spec.traffic.jwtAuthentication.providers: expected at least one provider"),
    ({"providers": [{"issuer": "i"}]}, "spec.traffic.jwtAuthentication.providers[0].jwks: required field is missing"),
    ({"providers": [{"issuer": "i", "jwks": {"inline": '{"keys": []}'}}]},
     "spec.traffic.jwtAuthentication.providers[0].jwks.inline: JWKS has no usable signing key"),
    ({"providers": [{"issuer": "i", "jwks": {"remote": {"url": "ftp://x"}}}]},
     "spec.traffic.jwtAuthentication.providers[0].jwks.remote.url: expected an http:// or https:// URL"),
    ({"providers": [{"issuer": "", "jwks": {"remote": {"url": "https://x"}}}]},
     "spec.traffic.jwtAuthentication.providers[0].issuer: expected a non-empty string"),
    ({"providers": [], "location": {}}, "spec.traffic.jwtAuthentication.location: unknown field"),
])
def test_invalid_jwt_authentication_names_the_field(value, message):
    with pytest.raises(ManifestValueError) as error:
        translate_jwt_authentication(value)
    assert str(error.value).startswith(message)


def test_authorization_translates_and_checks_every_rule():
    value = {"rules": ['jwt.group == "eng"', {"deny": 'jwt.sub == "mallory"'}, {"require": "has(jwt.sub)"}]}
    assert translate_authorization(value) == {"authorization": AuthorizationSpec((
        Rule("allow", 'jwt.group == "eng"'), Rule("deny", 'jwt.sub == "mallory"'), Rule("require", "has(jwt.sub)")))}
    with pytest.raises(ManifestValueError, match=r"^spec\.traffic\.authorization\.rules\[1\]\.deny: syntax error"):
        translate_authorization({"rules": ["true", {"deny": "jwt.sub =="}]})
    with pytest.raises(ManifestValueError, match=r"rules\[0\]: expected exactly one of: allow, deny, require"):
        translate_authorization({"rules": [{"allow": "true", "deny": "false"}]})
