"""What every client of the admin API does alike: the CLI's commands (``trace``, ``requests``,
``replay``, ``keys``) and the text UI. The bearer token an admin server off loopback wants
(``ADMIN_TOKEN``, the variable the gateway itself reads: README, "Admin server"), and a JSON answer
read, or its refusal named with the server's own ``error``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import httpx

__all__ = ["AdminRefused", "auth_headers", "json_answer"]


def auth_headers(env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """``Authorization: Bearer $ADMIN_TOKEN`` when the variable is set, else None."""
    token = (os.environ if env is None else env).get("ADMIN_TOKEN")
    return {"authorization": f"Bearer {token}"} if token else None


class AdminRefused(Exception):
    """The admin server answered, but not with a 200 and a JSON object: ``status`` and what it said."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"{status} {detail}")
        self.status = status
        self.detail = detail


def json_answer(response: httpx.Response) -> dict[str, Any]:
    """The answer's JSON object; ``AdminRefused`` (its ``error``, its text or its reason) otherwise."""
    try:
        answer = response.json()
    except ValueError:
        answer = None
    if response.status_code != 200 or not isinstance(answer, dict):
        detail = answer.get("error") if isinstance(answer, dict) else response.text.strip()
        raise AdminRefused(response.status_code, detail or response.reason_phrase)
    return answer
