"""Fields agentgateway's standalone config has and trioproxy does not implement.

A key listed here for a described class gets ``<path>: '<field>' is an agentgateway feature that
trioproxy does not implement`` instead of "unknown field; did you mean ...": a user bringing an
agentgateway config learns the feature is missing, not that they made a typo. Keys are the
``document.py`` class names; values are wire names (agentgateway's, from its schema/config.json).
When trioproxy builds one of these, move it from here to a ``field(...)`` in ``document.py``.
"""

from __future__ import annotations

UNIMPLEMENTED: dict[str, frozenset[str]] = {
    # only the Authorization: Bearer header is read; exp is always required
    "JwtAuth": frozenset({"location", "jwtValidationOptions"}),
    "JwtProvider": frozenset({"jwtValidationOptions"}),
}
