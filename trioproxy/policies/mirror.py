"""``requestMirror``: copies of requests sent to another backend, whose answers are thrown away.

The stage only picks the request (``percentage``) and records the target in ``x.mirrors``; once
the request's upstream body is known the gateway hands each copy to ``MirrorSender`` (mirror_sender.py), which runs
it in the root nursery (a task of ``Runtime.mirrors.run``), so a copy never delays or fails the
original and outlives it. A copy carries the request's body only when it is buffered (an LLM
body, a retryable body) and is empty otherwise, as agentgateway's mirrors are. Bounded: at most
``max_in_flight`` copies at once (more are dropped and counted) and ``timeout`` seconds each.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attrs import frozen

from ..asgi import Header

if TYPE_CHECKING:
    from ..config.address import Address

__all__ = ["MirrorSpec", "mirror_headers"]


@frozen
class MirrorSpec:
    target: Address
    percentage: float  # 0.0 to 1.0


def mirror_headers(headers: list[Header], body: bytes) -> list[Header]:
    """The upstream request's headers with the copy's own framing."""
    out = [h for h in headers if h[0] not in (b"content-length", b"transfer-encoding")]
    if body:
        out.append((b"content-length", str(len(body)).encode()))
    return out
