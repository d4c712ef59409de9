"""``settle.read`` exactly (issue 35): the stamp is the file's (device, inode), mtime in ns, size and
SHA-256 of the bytes read, and a file that cannot be read is the missing stamp with no content."""

from __future__ import annotations

import hashlib
import os

from trioproxy.settle import Stamp, read


def test_the_stamp_is_inode_mtime_size_and_digest(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_bytes(b"binds: []\n")
    os.utime(path, ns=(1, 1_700_000_000_123_456_789))
    st = os.stat(path)
    assert read(path) == (Stamp((st.st_dev, st.st_ino), 1_700_000_000_123_456_789, 10,
                                hashlib.sha256(b"binds: []\n").digest()), b"binds: []\n")


def test_a_missing_file_is_the_stamp_without_inode(tmp_path):
    assert read(tmp_path / "missing") == (Stamp(None), None)
    assert Stamp(None) == Stamp(None, 0, 0, b"")
