"""The length cap on rate-limit descriptor keys and values (issue 27).

envoyproxy/ratelimit stores every descriptor's keys and values in its counter's Redis key, so a
client-chosen value is memory the attacker picks: 300 requests with a 30,000-character
``x-user`` grew Redis by ~10 MB. Past ``MAX_DESCRIPTOR_TEXT`` characters a key or value is
replaced by ``sha256:<64 hex digits>`` of its UTF-8 bytes: the same long value still meets the
same counter (so it is still limited, not refused), and a counter key stays a few hundred bytes.
The gateway does it before sending (``remoteRateLimit``), the rate-limit server again for any
other client; a configured ``value`` longer than the cap is matched by the server before it
hashes, but a value the gateway hashed meets only wildcard or key-only entries.
"""

from __future__ import annotations

import hashlib

MAX_DESCRIPTOR_TEXT = 256


def bounded(text: str) -> str:
    """``text``, or ``sha256:<hex>`` of it when longer than ``MAX_DESCRIPTOR_TEXT`` characters."""
    if len(text) <= MAX_DESCRIPTOR_TEXT:
        return text
    return "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
