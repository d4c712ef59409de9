"""String syntaxes of the config (durations, addresses, hostnames...): parser + schema + message.

Each is a ``describe.Scalar``: use it in ``document.py`` as ``Annotated[T, DURATION]``. A parser
returns the value or raises ``ValueError`` (empty message → "expected <expected>, got X").
``parse_address`` is the one HOST:PORT parser of the project.
"""

from __future__ import annotations

import re

from .describe import Scalar
from .model import Address

DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
HOST_PORT = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})$")
HOSTNAME = re.compile(r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_address(text: str, *, allow_port_zero: bool = False) -> Address:
    """``HOST:PORT`` or ``[v6]:PORT`` → ``Address``; port 0 (any free port) only where allowed."""
    found = HOST_PORT.match(text)
    if found is None or int(found.group(2)) > 65535 or (int(found.group(2)) == 0 and not allow_port_zero):
        raise ValueError()
    return Address(found.group(1).strip("[]"), int(found.group(2)))


def parse_duration(text: str) -> float:
    """``500ms``, ``1s``, ``1m30s``, ``1h``, ``7d`` → seconds (> 0)."""
    text = text.strip()
    pos, total = 0, 0.0
    for found in DURATION_PART.finditer(text):
        if found.start() != pos:
            break
        total += float(found.group(1)) * _UNITS[found.group(2)]
        pos = found.end()
    if pos != len(text) or not text or total <= 0:
        raise ValueError()
    return total


def parse_hostname(text: str) -> str:
    if not HOSTNAME.match(text.lower()):
        raise ValueError()
    return text.lower()


def parse_regex(text: str) -> str:
    if not text:
        raise ValueError()
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    return text


def parse_path(text: str) -> str:
    if not text.startswith("/"):
        raise ValueError()
    return text


def parse_method(text: str) -> str:
    if text.upper() not in METHODS:
        raise ValueError()
    return text.upper()


def parse_header_name(text: str) -> str:
    if not TOKEN.match(text):
        raise ValueError(f"invalid header name {text!r}")
    return text.lower()


def parse_header_value(text: str) -> str:
    if "\n" in text or "\r" in text:
        raise ValueError(f"invalid header value {text!r}")
    return text


DURATION = Scalar("duration", parse_duration,
                  {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ms|s|m|h|d))+$"},
                  "a duration such as 500ms, 1s, 60s or 1h")
HOST_PORT_ADDRESS = Scalar("address", parse_address,
                           {"type": "string", "pattern": r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}$"},
                           "HOST:PORT")
def parse_server_address(text: str) -> Address | str:
    """``HOST:PORT`` (port 0: any free port), or ``off``: that server is not started."""
    return "off" if text == "off" else parse_address(text, allow_port_zero=True)


SERVER_ADDRESS = Scalar("server address", parse_server_address,
                        {"type": "string", "pattern": r"^((\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}|off)$"},
                        "HOST:PORT or off")
HOSTNAME_NAME = Scalar("hostname", parse_hostname,
                       {"type": "string", "pattern": r"^(\*\.)?[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$"},
                       "a hostname such as api.example.com or *.example.com")
REGEX = Scalar("regex", parse_regex, {"type": "string", "minLength": 1, "format": "regex"},
               "a regular expression")
PATH = Scalar("path", parse_path, {"type": "string", "pattern": "^/"}, "a path starting with '/'")
METHOD = Scalar("method", parse_method,
                {"type": "string", "enum": [*METHODS, *(m.lower() for m in METHODS)]},
                "an HTTP method such as GET or POST")
HEADER_NAME = Scalar("header name", parse_header_name,
                     {"type": "string", "pattern": r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"}, "a header name")
def parse_cel(text: str) -> str:
    """A CEL expression that compiles (the source is kept; policies compile it once more)."""
    from ..cel import compile_expression  # late: cel imports the native engine

    compile_expression(text)  # CelError is a ValueError with a one-line message
    return text


def parse_origin_pattern(text: str) -> str:
    """``*`` or ``scheme://host[:port]`` where the host may hold ``*`` wildcards."""
    from ..policies.cors import parse_origin

    if text != "*" and parse_origin(text, allow_wildcard_host=True) is None:
        raise ValueError()
    return text


def parse_token_or_star(text: str) -> str:
    if text != "*" and not TOKEN.match(text):
        raise ValueError()
    return text


HEADER_VALUE = Scalar("header value", parse_header_value, {"type": "string"}, "a header value")
CEL = Scalar("CEL expression", parse_cel, {"type": "string", "minLength": 1}, "a CEL expression")
ORIGIN = Scalar("origin", parse_origin_pattern, {"type": "string", "minLength": 1},
                "* or an origin such as https://app.example.com or https://*.example.com")
TOKEN_OR_STAR = Scalar("token", parse_token_or_star, {"type": "string", "pattern": r"^([!#$%&'*+.^_`|~0-9A-Za-z-]+|\*)$"},
                       "* or a method or header name")


def parse_sampling(text: str) -> float:
    """agentgateway's sampling value: true/false or a ratio from 0.0 to 1.0 (CEL expressions are not built)."""
    word = text.strip().lower()
    if word in ("true", "false"):
        return 1.0 if word == "true" else 0.0
    try:
        ratio = float(word)
    except ValueError:
        raise ValueError(f"expected true, false or a ratio from 0.0 to 1.0, got {text!r} "
                         "(CEL sampling expressions are not supported)") from None
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"expected a ratio from 0.0 to 1.0, got {text}")
    return ratio


def parse_ratio(text: str) -> float:
    """A share from 0.0 to 1.0 (``requestMirror.percentage``)."""
    try:
        ratio = float(text.strip())
    except ValueError:
        raise ValueError() from None
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"expected a ratio from 0.0 to 1.0, got {text!r}")
    return ratio


RATIO = Scalar("ratio", parse_ratio, {"type": "number", "minimum": 0, "maximum": 1}, "a ratio from 0.0 to 1.0")
SAMPLING = Scalar("sampling", parse_sampling,
                  {"anyOf": [{"type": "boolean"}, {"type": "number", "minimum": 0, "maximum": 1}]},
                  "true, false or a ratio from 0.0 to 1.0")


#: Most worker processes ``config.workers`` / ``--workers`` accept (a typo guard, not a design limit).
MAX_WORKERS = 256


def parse_workers(text: str) -> int:
    """``config.workers``: ``auto`` (0: one per CPU, resolved at start) or a count from 1 (docs/workers.md)."""
    word = text.strip().lower()
    if word == "auto":
        return 0
    if not word.isdigit() or not 1 <= int(word) <= MAX_WORKERS:
        raise ValueError(f"expected auto or a number of worker processes from 1 to {MAX_WORKERS}, got {text!r}")
    return int(word)


WORKERS = Scalar("workers", parse_workers,
                 {"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_WORKERS}, {"const": "auto"}]},
                 f"auto or a number of worker processes from 1 to {MAX_WORKERS}")
