"""The Keycloak realm set-up sequence behind ``trioproxy idp setup`` (docs/idp.md).

Nine steps, each a few admin REST calls made with httpx, written against how Keycloak 24–26
really answers rather than how its OpenAPI says it does:

1. admin token from ``--admin-realm`` with ``admin-cli`` (password grant; master tokens live 60 s,
   so any admin call answered 401 gets a new token and is repeated once);
2. an initial access token (200 up to Keycloak 26.6, 201 with ``Location`` from 26.7);
3. client registration with ``bearer <initial token>`` — on a second run Keycloak answers 400
   ``Client Identifier in use``, and the existing client is looked up instead;
4. client update (service accounts, direct access grants, authorization services, redirect URIs ``*``);
5. the ``group`` attribute → ``group`` claim mapper (409 when it exists: updated in place);
6. the realm user profile declares ``group`` — since Keycloak 24 undeclared attributes are dropped
   without an error, and the tokens would silently lack the claim;
7. users with email, first and last name, a non-temporary password and ``group`` (without them the
   password grant fails with ``Account is not fully set up``); 409 → updated in place;
8. the ``trusted-hosts`` and anonymous ``allowed-client-templates`` registration policies removed;
9. the discovery document, for the issuer and JWKS URI the gateway needs;
10. with ``--mcp-resource``: a public client for MCP clients (authorization code with PKCE, and
    direct access grants), its audience mapper (the resource URL in ``aud``: the gateway's
    ``mcpAuthentication`` accepts only tokens bound to it) and the ``group`` mapper; a second run
    updates them (409 → lookup and PUT, as for the gateway's client).

Every failure becomes one ``SetupFailed`` naming the step and Keycloak's own message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

import attrs
import httpx

__all__ = ["MCP_STEP", "STEPS", "SetupFailed", "SetupRequest", "SetupResult", "UserSpec", "run_setup", "steps_for"]

STEPS = (
    "admin token", "initial access", "client registration", "client update", "protocol mapper",
    "user profile", "users", "registration policies", "discovery",
)
REGISTRATION_POLICY_TYPE = "org.keycloak.services.clientregistration.policy.ClientRegistrationPolicy"
GROUP_ATTRIBUTE = "group"
GROUP_MAPPER = {
    "name": GROUP_ATTRIBUTE,
    "protocol": "openid-connect",
    "protocolMapper": "oidc-usermodel-attribute-mapper",
    "config": {
        "claim.name": GROUP_ATTRIBUTE, "jsonType.label": "String", "user.attribute": GROUP_ATTRIBUTE,
        "id.token.claim": "true", "access.token.claim": "true", "userinfo.token.claim": "true",
    },
}
GROUP_DECLARATION = {
    "name": GROUP_ATTRIBUTE, "displayName": "Group", "multivalued": False,
    "permissions": {"view": ["admin", "user"], "edit": ["admin"]},
}
KEPT_UNMANAGED = ("ENABLED", "ADMIN_EDIT")
MCP_STEP = "mcp client"
#: where MCP clients (Claude, VS Code, the SDK's OAuth helper) listen for the authorization redirect
MCP_REDIRECT_URIS = ["http://localhost:*", "http://127.0.0.1:*"]
INITIAL_ACCESS = {"expiration": 600, "count": 1}  # seconds; one registration


@attrs.frozen
class UserSpec:
    """One ``--user NAME:PASSWORD:GROUP[:EMAIL]``."""

    name: str
    password: str
    group: str
    email: str

    @classmethod
    def parse(cls, text: str) -> UserSpec:
        """The password may itself contain ``:``; an email is recognised by its ``@``."""
        parts = text.split(":")
        if len(parts) >= 4 and "@" in parts[-1]:
            name, password, group, email = parts[0], ":".join(parts[1:-2]), parts[-2], parts[-1]
        elif len(parts) >= 3:
            name, password, group, email = parts[0], ":".join(parts[1:-1]), parts[-1], ""
        else:
            raise ValueError(f"expected NAME:PASSWORD:GROUP[:EMAIL], got {text!r}")
        if not name or not password or not group:
            raise ValueError(f"expected NAME:PASSWORD:GROUP[:EMAIL] with none of them empty, got {text!r}")
        return cls(name.lower(), password, group, email or f"{name.lower()}@example.com")


@attrs.frozen
class SetupRequest:
    idp_url: str  # base address, no trailing slash
    realm: str
    admin_user: str
    admin_password: str
    client_id: str
    admin_realm: str = "master"
    users: tuple[UserSpec, ...] = ()
    #: the MCP endpoint's URL (``--mcp-resource``): prepare a public client whose tokens name it
    mcp_resource: str | None = None
    mcp_client_id: str = "mcp-client"


def steps_for(request: SetupRequest) -> tuple[str, ...]:
    """The steps ``request`` runs: the nine, and the MCP client's when asked for."""
    return (*STEPS, MCP_STEP) if request.mcp_resource else STEPS


@attrs.frozen
class SetupResult:
    issuer: str
    jwks_uri: str
    jwks_path: str
    client_id: str
    client_uuid: str
    client_secret: str
    users: tuple[dict[str, str], ...]
    token_endpoint: str
    #: with ``--mcp-resource``: {clientId, clientUuid, resource}
    mcp: dict[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"issuer": self.issuer, "jwksUri": self.jwks_uri, "jwksPath": self.jwks_path,
                               "clientId": self.client_id, "clientUuid": self.client_uuid,
                               "clientSecret": self.client_secret, "users": [dict(u) for u in self.users]}
        if self.mcp is not None:
            out["mcp"] = dict(self.mcp)
        return out


class SetupFailed(Exception):
    """The one line the CLI prints: ``step N/9 (name): what Keycloak said``."""


class _StepError(Exception):
    """What went wrong inside a step; ``run_setup`` adds the step's number and name."""


def _answer(response: httpx.Response, what: str) -> _StepError:
    """An unexpected HTTP answer, with Keycloak's own message."""
    return _StepError(f"{what}: Keycloak answered {response.status_code} {_keycloak_message(response)}".rstrip())


def _not_keycloak(response: httpx.Response, missing: str) -> _StepError:
    """A success status without what Keycloak always sends: probably not Keycloak at that address."""
    return _StepError(f"{response.request.method} {response.request.url.path} answered {response.status_code} "
                      f"without {missing}; is {response.request.url.scheme}://{response.request.url.netloc.decode()} "
                      "a Keycloak?")


def _keycloak_message(response: httpx.Response) -> str:
    """Keycloak's error bodies come in three shapes: OAuth (``error``/``error_description``),
    admin (``errorMessage``) and JAX-RS (``error: HTTP 401 Unauthorized``)."""
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip().replace("\n", " ")
        return text[:200]
    if not isinstance(body, dict):
        return str(body)[:200]
    error, description, message = body.get("error"), body.get("error_description"), body.get("errorMessage")
    if error and description:
        return f"{error}: {description}"
    return str(message or error or description or body)[:200]


Progress = Callable[[int, str], None]


class _Keycloak:
    """The admin session: base address, realm paths, and the current admin token."""

    def __init__(self, http: httpx.AsyncClient, request: SetupRequest, progress: Progress) -> None:
        self.http = http
        self.request = request
        self.progress = progress
        self.token: str | None = None
        self.admin_base = f"{request.idp_url}/admin/realms/{quote(request.realm, safe='')}"
        self.realm_base = f"{request.idp_url}/realms/{quote(request.realm, safe='')}"

    async def get_admin_token(self) -> None:
        r = await self.http.post(
            f"{self.request.idp_url}/realms/{quote(self.request.admin_realm, safe='')}/protocol/openid-connect/token",
            data={"client_id": "admin-cli", "grant_type": "password", "username": self.request.admin_user,
                  "password": self.request.admin_password})
        if r.status_code != 200:
            raise _answer(r, f"admin token for {self.request.admin_user!r} in realm {self.request.admin_realm!r}")
        try:
            self.token = r.json()["access_token"]
        except (ValueError, KeyError, TypeError):
            raise _not_keycloak(r, "an access_token") from None

    async def admin(self, method: str, path: str, *, expect: tuple[int, ...], what: str,
                    allow: tuple[int, ...] = (), **kwargs: Any) -> httpx.Response:
        """An admin call; a 401 (the admin token expired) gets a new token and one retry.
        Statuses in ``allow`` are returned for the caller to handle (409, 404 ...)."""
        for attempt in (1, 2):
            r = await self.http.request(method, f"{self.admin_base}{path}",
                                        headers={"authorization": f"Bearer {self.token}"}, **kwargs)
            if r.status_code == 401 and attempt == 1:
                self.progress(1, "admin token refused (expired?): getting a new one and repeating the call")
                await self.get_admin_token()
                continue
            if r.status_code in expect or r.status_code in allow:
                return r
            raise _answer(r, what)
        raise AssertionError("unreachable")


def _json(r: httpx.Response, what: str) -> Any:
    try:
        return r.json()
    except ValueError:
        raise _not_keycloak(r, f"a JSON body ({what})") from None


async def run_setup(request: SetupRequest, *, progress: Progress = lambda step, text: None,
                    http: httpx.AsyncClient | None = None, timeout: float = 15.0) -> SetupResult:
    """Run the nine steps; ``progress(step, text)`` reports each one as it completes."""
    if http is None:
        async with httpx.AsyncClient(timeout=timeout) as own:
            return await run_setup(request, progress=progress, http=own)
    kc = _Keycloak(http, request, progress)
    state: dict[str, Any] = {}
    steps = steps_for(request)
    for number, name in enumerate(steps, 1):
        step = _STEP_FUNCTIONS[number - 1]
        try:
            text = await step(kc, state)
        except _StepError as error:
            raise SetupFailed(f"step {number}/{len(steps)} ({name}): {error}") from None
        except httpx.TransportError as error:
            raise SetupFailed(f"step {number}/{len(steps)} ({name}): cannot reach {request.idp_url}: "
                              f"{_transport_reason(error)}") from None
        except (KeyError, TypeError, AttributeError, ValueError) as error:  # JSON of an unexpected shape
            raise SetupFailed(f"step {number}/{len(steps)} ({name}): unexpected answer from {request.idp_url} "
                              f"({type(error).__name__}: {error}); is it a Keycloak?") from None
        progress(number, text)
    result: SetupResult = state["result"]
    return result


def _transport_reason(error: httpx.TransportError) -> str:
    """Why the IdP could not be reached, in words: the root cause (trio reports a refused
    connection as "all attempts to connect ... failed" around a group of the real errors)."""
    if isinstance(error, httpx.TimeoutException):
        return f"timed out ({type(error).__name__})"
    pending: list[BaseException | None] = [error]
    while pending:
        cause = pending.pop()
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, BaseExceptionGroup):
            pending.extend(cause.exceptions)
        elif cause is not None:
            pending.append(cause.__cause__ or cause.__context__)
    return str(error) or type(error).__name__


# --- the steps: each returns its progress line ----------------------------------------------------


async def _admin_token(kc: _Keycloak, state: dict[str, Any]) -> str:
    await kc.get_admin_token()
    return f"admin token for {kc.request.admin_user} from realm {kc.request.admin_realm} (admin-cli)"


async def _initial_access(kc: _Keycloak, state: dict[str, Any]) -> str:
    r = await kc.admin("POST", "/clients-initial-access", json=INITIAL_ACCESS, expect=(200, 201),
                       what="create an initial access token")
    body = _json(r, "initial access")
    if not isinstance(body, dict) or not isinstance(body.get("token"), str):
        raise _not_keycloak(r, "a token")
    state["initial_token"] = body["token"]
    return f"initial access token ({r.status_code})"


async def _registration(kc: _Keycloak, state: dict[str, Any]) -> str:
    client_id = kc.request.client_id
    r = await kc.http.post(f"{kc.realm_base}/clients-registrations/default", json={"clientId": client_id},
                           headers={"authorization": f"bearer {state['initial_token']}"})
    if r.status_code == 201:
        body = _json(r, "client registration")
        state["client_uuid"], state["client_secret"] = body.get("id"), body.get("secret")
        if not state["client_uuid"]:
            raise _not_keycloak(r, "the client id")
        return f"registered client {client_id} (id {state['client_uuid']})"
    if r.status_code == 400 and "Client Identifier in use" in r.text:
        found = await kc.admin("GET", "/clients", params={"clientId": client_id}, expect=(200,),
                               what=f"look up the existing client {client_id}")
        matches = [c for c in _json(found, "client lookup") or [] if c.get("clientId") == client_id]
        if not matches:
            raise _answer(r, f"client {client_id} is in use but the admin API does not list it")
        state["client_uuid"], state["client_secret"] = matches[0]["id"], None
        return f"client {client_id} exists: reusing it (id {state['client_uuid']})"
    raise _answer(r, f"register client {client_id}")


async def _client_update(kc: _Keycloak, state: dict[str, Any]) -> str:
    uuid = state["client_uuid"]
    await kc.admin("PUT", f"/clients/{uuid}", expect=(204,), what=f"update client {kc.request.client_id}", json={
        "publicClient": False, "serviceAccountsEnabled": True, "directAccessGrantsEnabled": True,
        "authorizationServicesEnabled": True, "redirectUris": ["*"]})
    if not state["client_secret"]:
        r = await kc.admin("GET", f"/clients/{uuid}/client-secret", expect=(200,), what="read the client secret")
        state["client_secret"] = (_json(r, "client secret") or {}).get("value")
        if not state["client_secret"]:
            raise _not_keycloak(r, "the secret value")
    return "service accounts, direct access grants, authorization services on; redirect URIs *"


async def _mapper(kc: _Keycloak, state: dict[str, Any]) -> str:
    models = f"/clients/{state['client_uuid']}/protocol-mappers/models"
    r = await kc.admin("POST", models, json=GROUP_MAPPER, expect=(201,), allow=(409,), what="create the group mapper")
    if r.status_code == 201:
        return "user attribute group -> claim group (ID and access tokens): created"
    listed = await kc.admin("GET", models, expect=(200,), what="list the client's mappers")
    existing = next((m for m in _json(listed, "mappers") or [] if m.get("name") == GROUP_MAPPER["name"]), None)
    if existing is None:
        raise _answer(r, "the group mapper exists but is not listed")
    await kc.admin("PUT", f"{models}/{existing['id']}", json={**GROUP_MAPPER, "id": existing["id"]},
                   expect=(204,), what="update the group mapper")
    return "user attribute group -> claim group (ID and access tokens): existed, updated"


async def _user_profile(kc: _Keycloak, state: dict[str, Any]) -> str:
    r = await kc.admin("GET", "/users/profile", expect=(200,), allow=(404,), what="read the realm user profile")
    if r.status_code == 404:  # Keycloak before 24 without the user-profile feature: attributes are free
        return "no realm user profile (Keycloak before 24): attribute group needs no declaration"
    profile = _json(r, "user profile")
    attributes = profile.get("attributes") if isinstance(profile, dict) else None
    if not isinstance(attributes, list):
        raise _not_keycloak(r, "an attributes list")
    if any(isinstance(a, dict) and a.get("name") == GROUP_ATTRIBUTE for a in attributes):
        return "attribute group already declared"
    if profile.get("unmanagedAttributePolicy") in KEPT_UNMANAGED:
        return f"unmanaged attributes {profile['unmanagedAttributePolicy']}: group is kept"
    profile["attributes"] = [*attributes, GROUP_DECLARATION]
    await kc.admin("PUT", "/users/profile", json=profile, expect=(200,), what="declare the group attribute")
    return "attribute group declared (undeclared attributes are dropped since Keycloak 24)"


async def _users(kc: _Keycloak, state: dict[str, Any]) -> str:
    done: list[dict[str, str]] = []
    words: list[str] = []
    for user in kc.request.users:
        rep = {"username": user.name, "email": user.email, "emailVerified": True,
               "firstName": user.name.capitalize(), "lastName": "User", "enabled": True, "requiredActions": [],
               "attributes": {GROUP_ATTRIBUTE: [user.group]}}
        credential = {"type": "password", "value": user.password, "temporary": False}
        r = await kc.admin("POST", "/users", json={**rep, "credentials": [credential]}, expect=(201,), allow=(409,),
                           what=f"create user {user.name}")
        if r.status_code == 201:
            user_id = r.headers.get("location", "").rstrip("/").rsplit("/", 1)[-1]
            verb = "created"
        else:
            user_id = await _existing_user_id(kc, user.name, r)
            await kc.admin("PUT", f"/users/{user_id}", json=rep, expect=(204,), what=f"update user {user.name}")
            await kc.admin("PUT", f"/users/{user_id}/reset-password", json=credential, expect=(204,),
                           what=f"set the password of {user.name}")
            verb = "existed, updated"
        if not user_id:
            user_id = await _existing_user_id(kc, user.name, r)
        stored = _json(await kc.admin("GET", f"/users/{user_id}", expect=(200,), what=f"read user {user.name}"),
                       "user")
        if (stored.get("attributes") or {}).get(GROUP_ATTRIBUTE) != [user.group]:
            raise _StepError(f"user {user.name}: Keycloak did not keep the attribute group "
                                    "(check the realm user profile)")
        done.append({"username": user.name, "email": user.email, "group": user.group, "id": user_id})
        words.append(f"{user.name} ({user.group}) {verb}")
    state["users"] = tuple(done)
    return ", ".join(words) if words else "no --user given"


async def _existing_user_id(kc: _Keycloak, name: str, conflict: httpx.Response) -> str:
    r = await kc.admin("GET", "/users", params={"username": name, "exact": "true"}, expect=(200,),
                       what=f"look up user {name}")
    matches = [u for u in _json(r, "users") or [] if u.get("username") == name]
    if not matches:  # 409 for another reason, e.g. "User exists with same email"
        raise _answer(conflict, f"create user {name}")
    return str(matches[0]["id"])


async def _policies(kc: _Keycloak, state: dict[str, Any]) -> str:
    r = await kc.admin("GET", "/components", params={"type": REGISTRATION_POLICY_TYPE}, expect=(200,),
                       what="list client registration policies")
    removed = []
    for component in _json(r, "components") or []:
        provider, sub_type = component.get("providerId"), component.get("subType")
        if provider == "trusted-hosts" or (provider == "allowed-client-templates" and sub_type == "anonymous"):
            await kc.admin("DELETE", f"/components/{quote(str(component['id']), safe='')}", expect=(204,),
                           allow=(404,), what=f"delete registration policy {component.get('name', provider)}")
            removed.append(f"{provider} ({sub_type})")
    return f"removed {', '.join(removed)}" if removed else "trusted-hosts and anonymous allowed-client-templates already gone"


async def _discovery(kc: _Keycloak, state: dict[str, Any]) -> str:
    r = await kc.http.get(f"{kc.realm_base}/.well-known/openid-configuration")
    if r.status_code != 200:
        raise _answer(r, "read the discovery document")
    doc = _json(r, "discovery")
    issuer, jwks_uri = doc.get("issuer"), doc.get("jwks_uri")
    if not isinstance(issuer, str) or not isinstance(jwks_uri, str):
        raise _not_keycloak(r, "issuer and jwks_uri")
    state["result"] = SetupResult(
        issuer=issuer, jwks_uri=jwks_uri, jwks_path=urlsplit(jwks_uri).path, client_id=kc.request.client_id,
        client_uuid=state["client_uuid"], client_secret=state["client_secret"], users=state["users"],
        token_endpoint=str(doc.get("token_endpoint") or f"{issuer}/protocol/openid-connect/token"))
    return f"issuer {issuer}, JWKS {jwks_uri}"


async def _mcp_client(kc: _Keycloak, state: dict[str, Any]) -> str:
    """The MCP client: public (a desktop or CLI app keeps no secret), code flow with PKCE S256 and
    direct access grants, loopback redirects; an audience mapper putting the resource in ``aud``;
    the ``group`` mapper, so ``mcpAuthorization`` rules can read ``jwt.group``."""
    request = kc.request
    resource, client_id = request.mcp_resource, request.mcp_client_id
    assert resource is not None
    rep = {"clientId": client_id, "name": "MCP clients", "publicClient": True, "standardFlowEnabled": True,
           "directAccessGrantsEnabled": True, "serviceAccountsEnabled": False, "redirectUris": MCP_REDIRECT_URIS,
           "attributes": {"pkce.code.challenge.method": "S256"}}
    r = await kc.admin("POST", "/clients", json=rep, expect=(201,), allow=(409,), what=f"create client {client_id}")
    if r.status_code == 201:
        uuid = r.headers.get("location", "").rstrip("/").rsplit("/", 1)[-1]
        verb = "created"
    else:
        found = await kc.admin("GET", "/clients", params={"clientId": client_id}, expect=(200,),
                               what=f"look up the existing client {client_id}")
        matches = [c for c in _json(found, "client lookup") or [] if c.get("clientId") == client_id]
        if not matches:
            raise _answer(r, f"client {client_id} exists but the admin API does not list it")
        uuid = str(matches[0]["id"])
        await kc.admin("PUT", f"/clients/{uuid}", json=rep, expect=(204,), what=f"update client {client_id}")
        verb = "existed, updated"
    if not uuid:
        raise _not_keycloak(r, "a Location header")
    audience = {"name": "mcp-resource-audience", "protocol": "openid-connect", "protocolMapper": "oidc-audience-mapper",
                "config": {"included.custom.audience": resource, "access.token.claim": "true",
                           "id.token.claim": "false", "introspection.token.claim": "true"}}
    for mapper in (audience, GROUP_MAPPER):
        models = f"/clients/{uuid}/protocol-mappers/models"
        r = await kc.admin("POST", models, json=mapper, expect=(201,), allow=(409,),
                           what=f"create the {mapper['name']} mapper of {client_id}")
        if r.status_code == 409:
            listed = await kc.admin("GET", models, expect=(200,), what=f"list the mappers of {client_id}")
            existing = next((m for m in _json(listed, "mappers") or [] if m.get("name") == mapper["name"]), None)
            if existing is None:
                raise _answer(r, f"the {mapper['name']} mapper exists but is not listed")
            await kc.admin("PUT", f"{models}/{existing['id']}", json={**mapper, "id": existing["id"]}, expect=(204,),
                           what=f"update the {mapper['name']} mapper of {client_id}")
    state["result"] = attrs.evolve(state["result"], mcp={"clientId": client_id, "clientUuid": uuid,
                                                         "resource": resource})
    return f"public client {client_id} {verb}: PKCE S256, audience {resource}, claim group"


_STEP_FUNCTIONS = (_admin_token, _initial_access, _registration, _client_update, _mapper, _user_profile, _users,
                   _policies, _discovery, _mcp_client)
