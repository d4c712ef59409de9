"""ProxyPolicy jwtAuthentication/authorization → the same specs as the standalone config."""

from __future__ import annotations

import json

import pytest

from tests.jwt_helpers import jwks, make_key
from trioproxy.policies.auth_manifest import ManifestValueError, translate_authorization, translate_jwt_authentication
from trioproxy.policies.authorization import AuthorizationSpec, Rule
from trioproxy.policies.jwt import JwksSource, JwtAuthSpec, ProviderSpec


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


# --- through the manifest translation and a gateway started from a manifest ---------------------------


def test_proxy_policy_applies_jwt_and_authorization_to_its_route(jwks_text):
    from tests.unit.config.test_manifest import GATEWAY, ROUTE, VALID, compile_docs, policy, routes

    result = compile_docs(GATEWAY, ROUTE, policy(f"""
        spec:
          targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm}}]
          traffic:
            jwtAuthentication:
              mode: Strict
              providers: [{{issuer: "https://idp", audiences: [api], jwks: {{inline: {json.dumps(jwks_text)}}}}}]
            authorization:
              rules: ['jwt.group == "eng"']
        """))
    assert result.statuses[2]["status"]["ancestors"][0]["conditions"] == VALID
    for route in routes(result).values():
        assert route.policies.jwt_auth.mode == "strict"
        assert route.policies.jwt_auth.providers[0].issuer == "https://idp"
        assert route.policies.authorization == AuthorizationSpec((Rule("allow", 'jwt.group == "eng"'),))


def test_an_invalid_jwt_authentication_is_not_accepted_and_names_the_field():
    from tests.unit.config.test_manifest import GATEWAY, ROUTE, compile_docs, cond, policy, routes

    result = compile_docs(GATEWAY, ROUTE, policy("""
        spec:
          targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: llm}]
          traffic:
            jwtAuthentication: {mode: Strict, providers: [{issuer: i, jwks: {remote: {url: "ftp://x"}}}]}
        """))
    conditions = result.statuses[2]["status"]["ancestors"][0]["conditions"]
    assert conditions == [
        cond("Accepted", False, "Invalid", "spec.traffic.jwtAuthentication.providers[0].jwks.remote.url: "
                                           "expected an http:// or https:// URL, got 'ftp://x'"),
        cond("Attached", False, "Pending", "the policy is not valid")]
    assert all(route.policies.jwt_auth is None for route in routes(result).values())


async def test_a_gateway_from_a_manifest_enforces_jwt_authentication(nursery, backend):
    from tests.conftest import free_port, start_gateway
    from tests.e2e.test_manifest_e2e import GATEWAY, manifest, route
    from tests.jwks_server import JwksServer
    from tests.jwt_helpers import AUDIENCE, ISSUER

    key = make_key("RS256", "manifest-key")
    server = await nursery.start(JwksServer(jwks(key)).serve)
    proxy_policy = f"""
apiVersion: trioproxy.dev/v1alpha1
kind: ProxyPolicy
metadata: {{{{name: auth, namespace: gateway-system}}}}
spec:
  targetRefs: [{{{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: api}}}}]
  traffic:
    jwtAuthentication:
      mode: Strict
      providers:
      - issuer: {ISSUER}
        audiences: [{AUDIENCE}]
        jwks: {{{{remote: {{{{url: "{server.url}"}}}}}}}}
    authorization:
      rules: ['jwt.group == "eng"']
"""
    gw = await start_gateway(nursery, manifest(GATEWAY, route("api", "/", backend.port), proxy_policy),
                             port=free_port())
    async with gw.client() as client:
        missing = await client.get("/")
        assert (missing.status_code, missing.text) == (401, "authentication failure: no bearer token found")
        ok = await client.get("/", headers={"authorization": f"Bearer {key.token()}"})
        assert ok.status_code == 200
        assert not any(name.lower() == "authorization" for name, _ in ok.json()["headers"])
        denied = await client.get("/", headers={"authorization": f"Bearer {key.token(group='sales')}"})
        assert (denied.status_code, denied.text) == (403, "authorization failed")
    assert backend.requests == 1
