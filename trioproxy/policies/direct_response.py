"""``directResponse``: an answer the gateway gives itself, always or under a CEL condition."""

from __future__ import annotations

from attrs import frozen


@frozen
class DirectResponsePolicy:
    status: int
    body: str = ""
    condition: str | None = None  # CEL source, in a ``conditional`` entry; None: always


@frozen
class ConditionalDirectResponse:
    """``directResponse: {conditional: [...]}``: the first entry whose condition holds answers."""

    entries: tuple[DirectResponsePolicy, ...]
