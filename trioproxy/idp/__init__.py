"""Identity-provider tooling: ``trioproxy idp setup`` prepares a Keycloak realm whose tokens the
gateway's ``jwtAuth`` policy then validates (docs/idp.md)."""
