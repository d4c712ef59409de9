"""Request path normalisation: the one path routing, policies and the backend all see.

Without it ``/x/../admin``, ``/./admin``, ``//admin`` and the absolute form ``http://x/admin``
skip a route or policy written for ``/admin`` while the backend serves ``/admin`` (issue: path
bypass). As Envoy's ``normalize_path`` + ``merge_slashes`` and agentgateway do, the gateway
routes on, and forwards, the normalised path:

- the absolute form (``http://host/p``) keeps only its path;
- ``%2E``/``%2e`` (an encoded unreserved ``.``) is decoded so encoded dot segments are removed too;
- runs of ``/`` collapse to one;
- RFC 3986 §5.2.4 removes ``.`` and ``..`` segments (``..`` above the root stays at the root).

A path that cannot be normalised safely is refused with 400 (``PathError``): a target with a
``#`` (a fragment is never part of a request target, RFC 9112 §3.2; a backend would drop it and
serve the path a route on it did not see), a target that is not origin-form or absolute-form, a malformed percent-escape, an encoded ``/`` or ``\\`` (a backend
may decode it into a separator we did not route on), control bytes, or a backslash.
"""

from __future__ import annotations

import re

_ABSOLUTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_ENCODED_SEPARATOR = re.compile(r"%(2[Ff]|5[Cc])")
_ENCODED_DOT = re.compile(r"%2[Ee]")
_SLASHES = re.compile(r"/{2,}")
_INVALID_CHAR = re.compile(r"[\x00-\x20\x7f\\]")  # control bytes, space, backslash
#: a path with nothing to normalise: segments that neither are empty nor start with ``.``, no
#: escape, no invalid character; almost every request's, so it costs one match, not the steps
_ALREADY_NORMAL = re.compile(r"(?:/[^\x00-\x20\x7f\\%/.#][^\x00-\x20\x7f\\%/#]*)*/?")


FRAGMENT = "fragment in request target"


class PathError(ValueError):
    """The request target cannot be normalised; the message is the 400 body's reason."""


def normalize_path(target: str) -> str:
    """The normalised path of a request target (no query: pass the part before ``?``)."""
    if target and _ALREADY_NORMAL.fullmatch(target):
        return target
    return _normalize(target)


def _normalize(target: str) -> str:
    if "#" in target:
        raise PathError(FRAGMENT)
    if target.startswith("/"):
        path = target
    elif (m := _ABSOLUTE.match(target)) is not None:
        path = target[m.end():] or "/"
        if not path.startswith("/"):
            raise PathError("invalid request target")
    else:
        raise PathError("invalid request target")
    if _INVALID_CHAR.search(path):
        raise PathError("invalid character in path")
    if _BAD_ESCAPE.search(path):
        raise PathError("malformed percent-encoding in path")
    if _ENCODED_SEPARATOR.search(path):
        raise PathError("encoded path separator")
    path = _ENCODED_DOT.sub(".", path)
    path = _SLASHES.sub("/", path)
    return remove_dot_segments(path)


def remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4 for an absolute path (starts with ``/``); the result starts with ``/``."""
    out: list[str] = []
    segments = path.split("/")[1:]
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if segment == ".":
            if last:
                out.append("")
        elif segment == "..":
            if out:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)
