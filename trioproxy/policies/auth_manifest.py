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

__all__ = ["ManifestValueError", "translate_authorization", "translate_jwt_authentication"]

JWT_PATH = "spec.traffic.jwtAuthentication"
AUTHZ_PATH = "spec.traffic.authorization"
MODES = {"Strict": "strict", "Optional": "optional", "Permissive": "permissive"}


class ManifestValueError(ValueError):
    """An invalid traffic field; the message names its path."""


def _mapping(value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ManifestValueError(f"{path}: expected a mapping")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ManifestValueError(f"{path}.{unknown[0]}: unknown field (expected one of: {', '.join(sorted(allowed))})")
    return value


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ManifestValueError(f"{path}: expected a non-empty string")
    return value


def _jwks(value: Any, path: str) -> JwksSource:
    jwks = _mapping(value, path, {"remote", "inline"})
    if len(jwks) != 1:
        raise ManifestValueError(f"{path}: expected exactly one of: inline, remote")
    if "remote" in jwks:
        remote = _mapping(jwks["remote"], f"{path}.remote", {"url"})
        url = _text(remote.get("url"), f"{path}.remote.url")
        if not url.startswith(("http://", "https://")):
            raise ManifestValueError(f"{path}.remote.url: expected an http:// or https:// URL, got {url!r}")
        return JwksSource(url=url)
    inline = _text(jwks["inline"], f"{path}.inline")
    try:
        parse_jwks(inline)
    except JwksError as exc:
        raise ManifestValueError(f"{path}.inline: {exc}") from None
    return JwksSource(inline=inline)


def translate_jwt_authentication(value: Any, policy: Any = None) -> dict[str, Any]:
    """``jwtAuthentication`` → ``{"jwt_auth": JwtAuthSpec}``."""
    spec = _mapping(value, JWT_PATH, {"mode", "providers"})
    mode = spec.get("mode", "Optional")
    if mode not in MODES:
        raise ManifestValueError(f"{JWT_PATH}.mode: expected one of: {', '.join(MODES)}, got {mode!r}")
    raw = spec.get("providers")
    if not isinstance(raw, list) or not raw:
        raise ManifestValueError(f"{JWT_PATH}.providers: expected at least one provider")
    providers = []
    for i, item in enumerate(raw):
        path = f"{JWT_PATH}.providers[{i}]"
        provider = _mapping(item, path, {"issuer", "audiences", "jwks"})
        issuer = _text(provider.get("issuer"), f"{path}.issuer")
        audiences = provider.get("audiences") or []
        if not isinstance(audiences, list) or not all(isinstance(a, str) and a for a in audiences):
            raise ManifestValueError(f"{path}.audiences: expected a list of strings")
        if "jwks" not in provider:
            raise ManifestValueError(f"{path}.jwks: required field is missing")
        providers.append(ProviderSpec(issuer, _jwks(provider["jwks"], f"{path}.jwks"), tuple(audiences)))
    return {"jwt_auth": JwtAuthSpec(tuple(providers), MODES[mode])}  # type: ignore[arg-type]


def translate_authorization(value: Any, policy: Any = None) -> dict[str, Any]:
    """``authorization`` → ``{"authorization": AuthorizationSpec}``; every rule must compile."""
    spec = _mapping(value, AUTHZ_PATH, {"rules"})
    raw = spec.get("rules")
    if not isinstance(raw, list):
        raise ManifestValueError(f"{AUTHZ_PATH}.rules: expected a list")
    rules = []
    for i, item in enumerate(raw):
        path = f"{AUTHZ_PATH}.rules[{i}]"
        if isinstance(item, str):
            mode, source = "allow", item
        else:
            rule = _mapping(item, path, {"allow", "deny", "require"})
            if len(rule) != 1:
                raise ManifestValueError(f"{path}: expected exactly one of: allow, deny, require")
            ((mode, source),) = rule.items()
            path = f"{path}.{mode}"
        try:
            compile_expression(source)
        except CelError as exc:
            raise ManifestValueError(f"{path}: {exc}") from None
        rules.append(Rule(cast(RuleMode, mode), source))  # _mapping allowed only the three modes
    return {"authorization": AuthorizationSpec(tuple(rules))}
