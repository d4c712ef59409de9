"""``trioproxy idp setup``: prepare a Keycloak realm for the gateway's ``jwtAuth`` (docs/idp.md).

Bad flags end as one line naming the flag and exit 2; a failing step as one line naming the
step and Keycloak's message and exit 1; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from urllib.parse import urlsplit

import trio

from ..usage import OneLineParser
from .keycloak_setup import (
    SetupFailed,
    SetupRequest,
    SetupResult,
    UserSpec,
    run_setup,
    steps_for,
)

SETUP_DESCRIPTION = """\
Prepare a Keycloak (24-26) realm for token authentication at the gateway: register a client,
map the user attribute `group` to a `group` claim, create users, and print the issuer and JWKS
the gateway's jwtAuth policy needs. Safe to run again on the same realm."""


def _url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(f"expected http(s)://HOST[:PORT][/PATH], got {text!r}")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected http(s)://HOST[:PORT][/PATH], got {text!r}") from None
    return text.rstrip("/")


def _user(text: str) -> UserSpec:
    try:
        return UserSpec.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _name(text: str) -> str:
    if not text.strip() or "/" in text:
        raise argparse.ArgumentTypeError(f"expected a non-empty name without '/', got {text!r}")
    return text


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """``parser`` is the ``idp`` subcommand of the main CLI."""
    commands = parser.add_subparsers(dest="idp_command", metavar="COMMAND", required=True,
                                     parser_class=OneLineParser)
    setup = commands.add_parser("setup", help="prepare a Keycloak realm for jwtAuth", description=SETUP_DESCRIPTION)
    setup.add_argument("--idp-url", required=True, type=_url, metavar="URL",
                       help="Keycloak's base address, e.g. http://localhost:8080")
    setup.add_argument("--realm", required=True, type=_name, metavar="R", help="the realm to prepare (must exist)")
    setup.add_argument("--admin-user", required=True, metavar="U")
    setup.add_argument("--admin-password", required=True, metavar="P")
    setup.add_argument("--admin-realm", default="master", type=_name, metavar="REALM",
                       help="realm of the admin user (default master)")
    setup.add_argument("--client-id", required=True, type=_name, metavar="ID", help="the client to register")
    setup.add_argument("--user", action="append", type=_user, default=[], metavar="NAME:PASSWORD:GROUP[:EMAIL]",
                       help="a user to create or update (repeatable); email defaults to NAME@example.com")
    setup.add_argument("--mcp-resource", type=_url, metavar="URL",
                       help="the gateway's MCP endpoint, e.g. http://localhost:3000/mcp: also prepare a public client "
                            "for MCP clients whose tokens name it as audience, and print the mcpAuthentication policy")
    setup.add_argument("--mcp-client-id", default="mcp-client", type=_name, metavar="ID",
                       help="the MCP clients' client id (default mcp-client)")
    setup.add_argument("-o", "--output", choices=("text", "json"), default="text",
                       help="text: progress, a jwtAuth policy and a curl example (default); json: one object")
    setup.set_defaults(handler=run, setup_parser=setup)


def run(args: argparse.Namespace) -> int:
    names = [u.name for u in args.user]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        args.setup_parser.error(f"argument --user: user {duplicate!r} given twice")
    request = SetupRequest(idp_url=args.idp_url, realm=args.realm, admin_user=args.admin_user,
                           admin_password=args.admin_password, admin_realm=args.admin_realm,
                           client_id=args.client_id, users=tuple(args.user), mcp_resource=args.mcp_resource,
                           mcp_client_id=args.mcp_client_id)
    text = args.output == "text"
    steps = steps_for(request)

    def progress(step: int, line: str) -> None:
        if text:
            try:
                print(f"[{step}/{len(steps)}] {steps[step - 1]}: {line}", flush=True)
            except BrokenPipeError:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())

    try:
        result = trio.run(lambda: run_setup(request, progress=progress))
    except SetupFailed as error:
        print(f"trioproxy: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("trioproxy: error: interrupted", file=sys.stderr)
        return 130
    try:
        if text:
            print()
            print(render_text(result, request))
        else:
            print(json.dumps(result.to_json(), indent=2))
        sys.stdout.flush()
    except BrokenPipeError:  # `idp setup | head`: the reader left; the realm is set up all the same
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def jwt_auth_policy(result: SetupResult) -> str:
    """The ``jwtAuth`` policy for the gateway config; Keycloak access tokens carry ``aud: account``."""
    return "\n".join([
        "jwtAuth:",
        "  mode: strict",
        f"  issuer: {json.dumps(result.issuer)}",
        "  audiences: [account]",
        "  jwks:",
        f"    url: {json.dumps(result.jwks_uri)}",
    ])


def mcp_authentication_policy(result: SetupResult) -> str:
    """The ``mcpAuthentication`` policy for the route of the MCP endpoint: tokens must name the
    resource as audience (the mapper ``idp setup`` made puts it there)."""
    assert result.mcp is not None
    return "\n".join([
        "mcpAuthentication:",
        "  mode: strict",
        f"  issuer: {json.dumps(result.issuer)}",
        "  jwks:",
        f"    url: {json.dumps(result.jwks_uri)}",
        "  provider: {keycloak: {}}",
        "  resourceMetadata:",
        f"    resource: {json.dumps(result.mcp['resource'])}",
        "    scopesSupported: [openid, profile, email]",
        "    bearerMethodsSupported: [header]",
    ])


def token_curl(result: SetupResult, request: SetupRequest) -> str:
    """A curl that gets a token: the first user's (password grant), else the client's own."""
    args = ["curl", "-s", result.token_endpoint, "-d", f"client_id={result.client_id}",
            "-d", f"client_secret={result.client_secret}"]
    if request.users:
        user = request.users[0]
        args += ["-d", "grant_type=password", "-d", f"username={user.name}", "-d", f"password={user.password}"]
    else:
        args += ["-d", "grant_type=client_credentials"]
    return " ".join(shlex.quote(a) for a in args)


def render_text(result: SetupResult, request: SetupRequest) -> str:
    users = ", ".join(f"{u['username']} (group {u['group']})" for u in result.users) or "none"
    return "\n".join([
        f"Realm {request.realm} is ready: client {result.client_id}, users {users}.",
        f"issuer: {result.issuer}",
        f"JWKS:   {result.jwks_uri}",
        "",
        "jwtAuth policy (paste under a listener's or a route's policies):",
        "",
        jwt_auth_policy(result),
        "",
        "A token (send it as Authorization: Bearer <access_token>):",
        "",
        token_curl(result, request),
        *([] if result.mcp is None else [
            "",
            f"MCP: public client {result.mcp['clientId']} for MCP clients; tokens name {result.mcp['resource']} "
            "as audience.",
            "mcpAuthentication policy (paste under the policies of the route serving the MCP endpoint; its matches",
            "must also take /.well-known/oauth-protected-resource<path>):",
            "",
            mcp_authentication_policy(result),
        ]),
    ])
