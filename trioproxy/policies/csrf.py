"""``csrf``: refuse state-changing requests a browser sent from another site (agentgateway's
``http/csrf.rs``).

GET, HEAD and OPTIONS always pass. Otherwise ``Sec-Fetch-Site`` decides when the browser sent
it (``same-origin`` and ``none`` pass; anything else passes only from a trusted origin); without
it, a request passes when it has no ``Origin`` (or ``Origin: null``), when its Origin is the
request's own ``scheme://host``, or when it is one of ``additionalOrigins``. The rest is
``403 CSRF validation failed``.
"""

from __future__ import annotations

from collections.abc import Iterable

from attrs import frozen

from ..asgi import Header

__all__ = ["CsrfSpec", "csrf_refusal"]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@frozen
class CsrfSpec:
    additional_origins: tuple[str, ...] = ()  # a tuple: traces show a policy's spec as JSON


def csrf_refusal(spec: CsrfSpec, method: str, headers: Iterable[Header], scheme: str, host: str) -> str | None:
    """Why the request is refused, or None when it passes."""
    if method in SAFE_METHODS:
        return None
    origin = site = None
    for name, value in headers:
        if name == b"origin" and origin is None:
            origin = value
        elif name == b"sec-fetch-site" and site is None:
            site = value
    try:
        origin_text = None if origin is None or origin == b"null" else origin.decode("ascii")
        site_text = None if site is None else site.decode("ascii")
    except UnicodeDecodeError:
        return "malformed Origin or Sec-Fetch-Site header"
    trusted = origin_text is not None and origin_text in spec.additional_origins
    if site_text is not None:
        if site_text in ("same-origin", "none") or trusted:
            return None
        return f"Sec-Fetch-Site is {site_text}"
    if origin_text is None or origin_text == f"{scheme}://{host}" or trusted:
        return None
    return f"Origin {origin_text} is not {scheme}://{host}"
