"""A plain socket read and written through its descriptor, where trio's stream calls cost more
than they do (the client side in ``http1.py``, a plain backend in ``upstream.py``).

trio's ``receive_some`` always tries a ``recv`` before it waits, which fails with EAGAIN wherever
nothing can have arrived yet (a backend's answer right after the request went out, a client's
next request while this one is answered), and both of its calls pass a conflict detector, an
error translator and a scheduling round. The callers keep trio's single-reader, single-writer rule
themselves and fall back to ``send_all`` for what the socket does not take at once.
"""

from __future__ import annotations

import os

import trio


async def receive(fd: int, size: int, *, wait_first: bool) -> bytes:
    """Up to ``size`` bytes, ``b""`` at EOF; ``wait_first`` where bytes are not expected yet.
    OSError (a reset) is the caller's to map."""
    if wait_first:
        await trio.lowlevel.wait_readable(fd)
    else:
        await trio.lowlevel.checkpoint_if_cancelled()
    while True:
        try:
            return os.read(fd, size)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(fd)


def send_now(fd: int, data: bytes) -> int:
    """How many bytes of ``data`` the socket took at once (0 when its buffer is full); OSError
    when the connection is broken."""
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0
