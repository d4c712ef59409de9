"""``backendAuth``: the credential the gateway sends to the backend (kept out of ``repr``)."""

from __future__ import annotations

import attrs
from attrs import frozen


@frozen
class BackendAuth:
    key: str = attrs.field(repr=False)
