"""Local rate-limit buckets in shared memory, so N workers spend one budget, not N.

A table of slots in a file on ``/dev/shm`` (unlinked at once: only inherited descriptors reach
it), mapped by the supervisor and by every worker. A slot holds one bucket's state — its start,
the fills credited, the balance — under a 16-byte digest of (limiter key, specs, entry index),
so every process that compiles the same limiter finds the same slots, a restarted worker
included, and a reload that keeps a limiter's specs keeps its budget as it does in one process.

Each decision runs today's ``LocalRateLimiter`` code unchanged on the slot states, between an
exclusive ``fcntl.lockf`` on the limiter's first slot and its release: load, decide, store. So
admission and charging are exactly those of one process (check every entry, then commit), and
the added cost is two system calls and a struct copy per entry (``bench/shared_limits.py``).
POSIX record locks belong to the process, which is what is wanted here: each worker is one Trio
thread, and a lock is never held across an ``await``.

Clocks: a bucket's instants are ``time.monotonic()`` values, the same clock in every process.
Callers pass their own ``now`` (``trio.current_time()``, which adds a per-run random offset);
each limiter converts with the offset it measured when it was built.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import struct
import time

from ..policies.ratelimit_local import Decision, LocalRateLimiter, LocalRateLimitSpec
from . import shared_memory

log = logging.getLogger("trioproxy")

_MAGIC = b"TPLIMIT1"
_HEADER = 64  # magic + capacity; byte 0 is also the directory lock
_SLOT = struct.Struct("<16sB7xdqq")  # digest, state, start, fills, tokens
_STATE = struct.Struct("<dqq")  # start, fills, tokens (at slot offset + 24)
_STATE_AT = 24
_EMPTY, _LIVE, _RETIRED = 0, 1, 2
DEFAULT_CAPACITY = 4096  # bucket entries (one per localRateLimit entry of each listener and route)


def digest(key: str, specs: tuple[LocalRateLimitSpec, ...], index: int) -> bytes:
    return hashlib.blake2b(f"{key}\0{specs!r}\0{index}".encode(), digest_size=16).digest()


class SharedLimits:
    """The slot table: created by the supervisor, attached by each worker from an inherited fd."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.mm = shared_memory.attach(fd, _MAGIC, "shared limits: not a trioproxy slot table")
        self.capacity: int = struct.unpack_from("<q", self.mm, 8)[0]
        self.clock = time.monotonic  # the clock shared by every process (tests replace it)

    @classmethod
    def create(cls, capacity: int = DEFAULT_CAPACITY) -> SharedLimits:
        return cls(shared_memory.create("trioproxy-limits-", _HEADER + capacity * _SLOT.size,
                                        _MAGIC + struct.pack("<q", capacity)))

    def _offset(self, index: int) -> int:
        return _HEADER + index * _SLOT.size

    def slot(self, key_digest: bytes, start: float, max_tokens: int) -> int | None:
        """The slot of ``key_digest``, found or made full at ``start``; None when the table is full."""
        fcntl.lockf(self.fd, fcntl.LOCK_EX, 1, 0)
        try:
            first = int.from_bytes(key_digest[:8], "little") % self.capacity
            for probe in range(self.capacity):
                index = (first + probe) % self.capacity
                offset = self._offset(index)
                found, state = self.mm[offset:offset + 16], self.mm[offset + 16]
                if state == _EMPTY or found == key_digest:
                    if state != _LIVE:  # new, or retired by a reload that dropped it: starts full
                        _SLOT.pack_into(self.mm, offset, key_digest, _LIVE, start, 0, max_tokens)
                    return index
            return None
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, 0)

    def retire_except(self, keep: set[bytes]) -> None:
        """After a reload (supervisor): slots no limiter uses now start full if their limiter returns,
        as a limiter dropped by one reload and added back by the next does in one process."""
        fcntl.lockf(self.fd, fcntl.LOCK_EX, 1, 0)
        try:
            for index in range(self.capacity):
                offset = self._offset(index)
                if self.mm[offset + 16] == _LIVE and self.mm[offset:offset + 16] not in keep:
                    self.mm[offset + 16] = _RETIRED
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, 0)

    def limiter(self, specs: tuple[LocalRateLimitSpec, ...], key: str, now: float) -> LocalRateLimiter:
        """A limiter over shared slots (a ``runtime.LimiterFactory``); a process-local one if the table is full."""
        clock = self.clock() - now
        offsets = []
        for index, spec in enumerate(specs):
            slot = self.slot(digest(key, specs, index), now + clock, spec.max_tokens)
            if slot is None:
                log.error("shared rate-limit table full (%d entries): %s counts per worker", self.capacity, key)
                return LocalRateLimiter(specs, now)
            offsets.append(self._offset(slot) + _STATE_AT)
        return SharedLimiter(specs, now, self, tuple(offsets), clock)

    def digests(self, limiters: dict[str, tuple[tuple[LocalRateLimitSpec, ...], LocalRateLimiter]]) -> set[bytes]:
        return {digest(key, specs, i) for key, (specs, _) in limiters.items() for i in range(len(specs))}


class SharedLimiter(LocalRateLimiter):
    """``LocalRateLimiter`` whose bucket states live in shared slots: every call is load, decide, store,
    under the lock of its first slot."""

    __slots__ = ("_clock", "_fd", "_lock_at", "_mm", "_offsets")

    def __init__(self, specs: tuple[LocalRateLimitSpec, ...], now: float, table: SharedLimits,
                 offsets: tuple[int, ...], clock: float) -> None:
        super().__init__(specs, now)
        self._fd = table.fd
        self._mm = table.mm
        self._offsets = offsets
        self._lock_at = offsets[0]
        self._clock = clock  # caller's now + clock = time.monotonic()

    def _load(self) -> None:
        mm = self._mm
        for bucket, offset in zip(self.buckets, self._offsets):
            bucket._start, bucket._fills, bucket._tokens = _STATE.unpack_from(mm, offset)

    def _store(self) -> None:
        mm = self._mm
        for bucket, offset in zip(self.buckets, self._offsets):
            _STATE.pack_into(mm, offset, bucket._start, bucket._fills, bucket._tokens)

    def admit(self, now: float) -> Decision:
        fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, self._lock_at)
        try:
            self._load()
            decision = super().admit(now + self._clock)
            self._store()
            return decision
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, self._lock_at)

    def charge_tokens(self, now: float, total_tokens: int) -> Decision | None:
        if not self._token_buckets:
            return None
        fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, self._lock_at)
        try:
            self._load()
            decision = super().charge_tokens(now + self._clock, total_tokens)
            self._store()
            return decision
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, self._lock_at)

    def peek(self, now: float) -> Decision:
        fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, self._lock_at)
        try:
            self._load()
            decision = super().peek(now + self._clock)
            self._store()
            return decision
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, self._lock_at)

    def observe(self, now: float) -> tuple[tuple[Decision, int], ...]:
        fcntl.lockf(self._fd, fcntl.LOCK_EX, 1, self._lock_at)
        try:
            self._load()
        finally:
            fcntl.lockf(self._fd, fcntl.LOCK_UN, 1, self._lock_at)
        return super().observe(now + self._clock)
