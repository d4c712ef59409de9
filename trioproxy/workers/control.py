"""The channel between the supervisor and one worker: length-prefixed pickled dicts over a Unix
socket pair.

Pickle, not JSON: the supervisor sends the compiled ``Config`` it validated, so every worker
serves exactly that object (a manifest's "last valid version of a resource" included) without
parsing the file again. Both ends are the same program on the same machine; nothing else can
reach a socket pair.
"""

from __future__ import annotations

import pickle
import socket
import struct
from typing import Any

import trio

_LENGTH = struct.Struct("!I")


class Control:
    """One end of the channel; ``send`` may be called from several tasks (a lock keeps frames whole)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        self.stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
        self._lock = trio.Lock()
        self._buffer = bytearray()

    async def send(self, message: dict[str, Any]) -> None:
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        async with self._lock:
            await self.stream.send_all(_LENGTH.pack(len(data)) + data)

    async def receive(self) -> dict[str, Any] | None:
        """The next message, or None once the other end has closed (or died)."""
        while True:
            if len(self._buffer) >= 4:
                (size,) = _LENGTH.unpack_from(self._buffer)
                if len(self._buffer) >= 4 + size:
                    data = bytes(self._buffer[4:4 + size])
                    del self._buffer[:4 + size]
                    message: dict[str, Any] = pickle.loads(data)
                    return message
            try:
                chunk = await self.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            if not chunk:
                return None
            self._buffer += chunk

    async def aclose(self) -> None:
        await self.stream.aclose()
