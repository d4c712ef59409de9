"""ProxyPolicy ``spec.traffic.jwtAuthentication`` and ``spec.traffic.authorization`` → the same specs
the standalone config builds (``JwtAuthSpec``, ``AuthorizationSpec``).

::

    jwtAuthentication: {mode: Strict|Optional|Permissive,
                        providers: [{issuer, audiences, jwks: {remote: {url}} | {inline: "<JWKS JSON>"}}]}
    authorization: {rules: [<CEL> | {allow|deny|require: <CEL>}]}

Each function takes the field's plain value and returns the ``model.Policies`` fields it sets, or
raises :class:`ManifestValueError` whose message starts with the field's path
(``spec.traffic.jwtAuthentication.providers[0].jwks: ...``), fit for a status condition.
"""

from __future__ import annotations

from typing import Any, cast

from ..cel import CelError, compile_expression
from .authorization import AuthorizationSpec, Rule, RuleMode
from .jwt import JwksError, JwksSource, JwtAuthSpec, ProviderSpec, parse_jwks
from .manifest_values import ManifestValueError, expect_mapping, expect_text

__all__ = ["ManifestValueError", "translate_authorization", "translate_jwt_authentication"]

JWT_PATH = "spec.traffic.jwtAuthentication"
AUTHZ_PATH = "spec.traffic.authorization"
MODES = {"Strict": "strict", "Optional": "optional", "Permissive": "permissive"}


def _jwks(value: Any, path: str) -> JwksSource:
    jwks = expect_mapping(value, path, {"remote", "inline"})
    if len(jwks) != 1:
        raise ManifestValueError(f"{path}: expected exactly one of: inline, remote")
    if "remote" in jwks:
        remote = expect_mapping(jwks["remote"], f"{path}.remote", {"url"})
        url = expect_text(remote.get("url"), f"{path}.remote.url")
        if not url.startswith(("http://", "https://")):
            raise ManifestValueError(f"{path}.remote.url: expected an http:// or https:// URL, got {url!r}")
        return JwksSource(url=url)
    inline = expect_text(jwks["inline"], f"{path}.inline")
    try:
        parse_jwks(inline)
    except JwksError as exc:
        raise ManifestValueError(f"{path}.inline: {exc}") from None
    return JwksSource(inline=inline)


def translate_jwt_authentication(value: Any, policy: Any = None) -> dict[str, Any]:
    """``jwtAuthentication`` → ``{"jwt_auth": JwtAuthSpec}``."""
    spec = expect_mapping(value, JWT_PATH, {"mode", "providers"})
    mode = spec.get("mode", "Optional")
    if mode not in MODES:
        raise ManifestValueError(f"{JWT_PATH}.mode: expected one of: {', '.join(MODES)}, got {mode!r}")
    raw = spec.get("providers")
    if not isinstance(raw, list) or not raw:
        raise ManifestValueError(f"{JWT_PATH}.providers: expected at least one provider")
    providers = []
    for i, item in enumerate(raw):
        path = f"{JWT_PATH}.providers[{i}]"
        provider = expect_mapping(item, path, {"issuer", "audiences", "jwks"})
        issuer = expect_text(provider.get("issuer"), f"{path}.issuer")
        audiences = provider.get("audiences") or []
        if not isinstance(audiences, list) or not all(isinstance(a, str) and a for a in audiences):
            raise ManifestValueError(f"{path}.audiences: expected a list of strings")
        if "jwks" not in provider:
            raise ManifestValueError(f"{path}.jwks: required field is missing")
        providers.append(ProviderSpec(issuer, _jwks(provider["jwks"], f"{path}.jwks"), tuple(audiences)))
    return {"jwt_auth": JwtAuthSpec(tuple(providers), MODES[mode])}  # type: ignore[arg-type]


def translate_authorization(value: Any, policy: Any = None) -> dict[str, Any]:
    """``authorization`` → ``{"authorization": AuthorizationSpec}``; every rule must compile."""
    spec = expect_mapping(value, AUTHZ_PATH, {"rules"})
    raw = spec.get("rules")
    if not isinstance(raw, list):
        raise ManifestValueError(f"{AUTHZ_PATH}.rules: expected a list")
    rules = []
    for i, item in enumerate(raw):
        path = f"{AUTHZ_PATH}.rules[{i}]"
        if isinstance(item, str):
            mode, source = "allow", item
        else:
            rule = expect_mapping(item, path, {"allow", "deny", "require"})
            if len(rule) != 1:
                raise ManifestValueError(f"{path}: expected exactly one of: allow, deny, require")
            ((mode, source),) = rule.items()
            path = f"{path}.{mode}"
        try:
            compile_expression(source)
        except CelError as exc:
            raise ManifestValueError(f"{path}: {exc}") from None
        rules.append(Rule(cast(RuleMode, mode), source))  # expect_mapping allowed only the three modes
    return {"authorization": AuthorizationSpec(tuple(rules))}
