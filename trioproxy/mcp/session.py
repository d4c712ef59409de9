"""The session id a client gets: each target's own session id and protocol version, signed.

``<base64url(JSON)>.<base64url(HMAC-SHA256)>``: every gateway process holding the same key
(``config.session.key``) continues the session; nothing about it is kept in memory. A tampered or
foreign id is refused (the client gets 404 and starts a new session, as the MCP spec says).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os

__all__ = ["SESSION_KEY_ENV", "SessionCodec", "TargetSessions", "inherited_key"]

#: the key a supervisor hands its workers when the config names none (all workers read each
#: other's session ids; a restart still forgets them)
SESSION_KEY_ENV = "TRIOPROXY_MCP_SESSION_KEY"


def inherited_key() -> bytes | None:
    """The supervisor's key for its workers (``SESSION_KEY_ENV``), when this process is one."""
    try:
        key = bytes.fromhex(os.environ.get(SESSION_KEY_ENV, ""))
    except ValueError:
        return None
    return key if len(key) == 32 else None

#: target name -> (its session id, or None for a server without sessions; its protocol version)
TargetSessions = dict[str, tuple[str | None, str]]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionCodec:
    """Signs and reads session ids with one key (a random one, this process only, when none is given)."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key if key is not None else os.urandom(32)

    def _mac(self, payload: str) -> str:
        return _b64(hmac.new(self.key, payload.encode(), hashlib.sha256).digest())

    def encode(self, sessions: TargetSessions) -> str:
        payload = _b64(json.dumps({"v": 1, "t": {name: [sid, version] for name, (sid, version) in sessions.items()}},
                                  separators=(",", ":"), sort_keys=True).encode())
        return f"{payload}.{self._mac(payload)}"

    def decode(self, session_id: str) -> TargetSessions | None:
        """The sessions of a genuine id; None for one this key did not sign, or one malformed."""
        payload, dot, mac = session_id.partition(".")
        if not dot or not hmac.compare_digest(mac, self._mac(payload)):
            return None
        try:
            data = json.loads(_unb64(payload))
            return {str(name): (sid if isinstance(sid, str) else None, str(version))
                    for name, (sid, version) in data["t"].items()}
        except (ValueError, KeyError, TypeError, AttributeError):  # a signed payload of another shape
            return None
