"""The shared-memory files a supervisor hands its workers (the rate-limit slots, the trace watcher
table): made once here, so both live where shared memory is cheap and leave nothing behind."""

from __future__ import annotations

import mmap
import os
import tempfile


def create(prefix: str, size: int, header: bytes) -> int:
    """A ``size``-byte file that starts with ``header``, in /dev/shm where there is one, unlinked at
    once: only inherited descriptors reach it, so nothing is left to clean up. Returns its fd."""
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, path = tempfile.mkstemp(prefix=prefix, dir=directory)
    os.unlink(path)
    os.ftruncate(fd, size)
    os.pwrite(fd, header, 0)
    return fd


def attach(fd: int, magic: bytes, error: str) -> mmap.mmap:
    """The file behind ``fd`` mapped, checked to start with ``magic`` (else ``ValueError(error)``)."""
    mm = mmap.mmap(fd, 0)
    if mm[:len(magic)] != magic:
        raise ValueError(error)
    return mm
