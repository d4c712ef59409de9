"""The HTTP/2 wire vocabulary both hand-framed gRPC ends share (``wire_client.py``, the gateway's
RLS client, and ``wire_server.py``, the ratelimit-server's transport): frame types, flags and
error codes (RFC 9113), the frame header, and the HPACK integer and literal encodings (RFC 7541)
their fixed header blocks are built from. Huffman coding and a dynamic table are never used for
what we send, so these few encoders are all either end needs.
"""

from __future__ import annotations

import struct

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
# RFC 9113 §7 error codes
NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
FRAME_SIZE_ERROR, REFUSED_STREAM, CANCEL, COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x6, 0x7, 0x8, 0x9, 0xB

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
MAX_WINDOW = 2**31 - 1
MAX_FRAME = 16384  # SETTINGS_MAX_FRAME_SIZE: the default, which both ends keep
TOP_UP = 2**30  # consumed connection window that triggers our WINDOW_UPDATE

FRAME_HEAD = struct.Struct(">HBBBI")  # a frame header: 24-bit length as 16 + 8 bits, type, flags, stream


def frame(kind: int, flags: int, sid: int, payload: bytes) -> bytes:
    n = len(payload)
    return FRAME_HEAD.pack(n >> 8, n & 0xFF, kind, flags, sid) + payload


def hpack_int(value: int, prefix_bits: int, first: int) -> bytes:
    """RFC 7541 §5.1: ``value`` with a ``prefix_bits`` prefix, ``first`` carrying the pattern bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((first | value,))
    out = bytearray((first | limit,))
    value -= limit
    while value >= 128:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_literal(value: bytes) -> bytes:
    """RFC 7541 §5.2, without Huffman coding."""
    return hpack_int(len(value), 7, 0) + value
