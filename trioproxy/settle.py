"""When a watched file's change may be applied: once it has settled (issue 27).

A writer that pauses mid-file (an editor saving in pieces, ``cat > file`` from a slow pipe)
leaves a prefix on disk that may be a valid config on its own: before this, the gateway applied a
prefix without the deny route written later, and 3,577 of 13,534 ``/admin`` requests reached the
backend. So a change is applied only once the file's identity (inode, mtime, size, SHA-256 of its
content) has stayed the same for ``SETTLE_SECONDS``; content, not only the mtime, because two
writes within the file system's timestamp resolution (or an editor restoring the mtime) keep it.

A rename into place (a new inode at the path: ``mv new.yaml gw.yaml``, a Kubernetes ConfigMap's
symlink swap) is atomic, so it is applied at the next poll without waiting: writing elsewhere and
renaming is the way to make a change apply at once and never half. A writer that pauses longer
than the settle interval still exposes its prefix; that is what renaming avoids.

Pure decision object: the caller reads the clock (``trio.current_time()`` or ``time.monotonic()``)
and polls; ``poll`` reads the file once and says whether to load now, and ``content`` is what to
load: the bytes that were hashed, not a second read that a new write could have cut.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SETTLE_SECONDS = 1.0  # the file must be unchanged this long before an in-place change is applied
POLL_SECONDS = 0.25  # how often the watchers look (a small file read and hashed)


@dataclass(frozen=True)
class Stamp:
    """What identifies one version of the file (``inode`` None: the file is missing)."""

    inode: tuple[int, int] | None
    mtime_ns: int = 0
    size: int = 0
    digest: bytes = b""


def read(path: str | os.PathLike[str]) -> tuple[Stamp, bytes | None]:
    """The file's stamp and content (None: it cannot be read)."""
    try:
        with open(path, "rb") as file:
            st = os.fstat(file.fileno())
            content = file.read()
    except OSError:
        return Stamp(None), None
    return Stamp((st.st_dev, st.st_ino), st.st_mtime_ns, st.st_size, hashlib.sha256(content).digest()), content


class SettledFile:
    """Tracks one file; ``poll(now)`` is True when a change is to be loaded now."""

    def __init__(self, path: str | os.PathLike[str], *, settle: float = SETTLE_SECONDS,
                 reader: Callable[[Any], tuple[Stamp, Any]] = read) -> None:
        """``reader`` reads the path's stamp and content (a directory of files can be one config)."""
        self.path = path
        self.settle = settle
        self.reader = reader
        self.applied, self.content = reader(path)  # the version the caller holds
        self._pending: Stamp | None = None
        self._since = 0.0

    def poll(self, now: float) -> bool:
        current, content = self.reader(self.path)
        if current == self.applied:
            self._pending = None
            return False
        renamed = current.inode is not None and current.inode != self.applied.inode
        if not renamed:
            if current != self._pending:
                self._pending, self._since = current, now  # changed (again): wait for it to settle
                return False
            if now - self._since < self.settle:
                return False
        unchanged = current.digest == self.applied.digest and self.applied.inode is not None
        self.applied, self.content, self._pending = current, content, None
        return not unchanged  # touched, or the same content renamed into place: nothing to load
