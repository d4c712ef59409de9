"""Per-user runtime registry of running gateways.

Each running trioproxy writes ``<runtime_dir>/<pid>.json`` = ``{pid, gateways, admin, ports}`` so that
``trioproxy trace gateway/NAME`` can find the admin address of the local process that serves the
Gateway ``NAME`` without the user knowing its admin port, and so that a second start on a busy port
can say which trioproxy holds it. Entries of dead processes are ignored
(and cleaned up), so a crashed gateway never misdirects a trace; a name that several live
processes serve is an error listing them, never a guess.

The directory is ``$TRIOPROXY_RUNTIME_DIR`` if set (tests), else ``$XDG_RUNTIME_DIR/trioproxy``,
else ``/tmp/trioproxy-<uid>``. A standalone config serves the gateway name ``default``.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

__all__ = ["AmbiguousGateway", "Registration", "holder_of_port", "lookup", "register", "runtime_dir"]


def runtime_dir() -> Path:
    """The per-user directory holding one JSON file per running gateway process."""
    override = os.environ.get("TRIOPROXY_RUNTIME_DIR")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "trioproxy"
    return Path(tempfile.gettempdir()) / f"trioproxy-{os.getuid()}"


class Registration:
    """A written registry entry; ``close()`` (or leaving the ``with`` block) removes it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def close(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def __enter__(self) -> Registration:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def register(gateway_names: Sequence[str], admin_addr: str, ports: Sequence[int] = ()) -> Registration:
    """Record that this process serves ``gateway_names`` with its admin server at ``admin_addr``.

    Written to a temporary file and renamed, so a concurrent ``lookup`` never reads half a file.
    """
    directory = runtime_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    pid = os.getpid()
    path = directory / f"{pid}.json"
    entry = {"pid": pid, "gateways": list(gateway_names), "admin": admin_addr, "ports": sorted(set(ports))}
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{pid}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return Registration(path)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _serves(gateways: Sequence[str], name: str) -> bool:
    """``name`` matches ``name`` or ``<namespace>/name`` (Kubernetes-style manifests)."""
    return any(g == name or g.endswith("/" + name) for g in gateways)


def _live_entries() -> list[tuple[float, dict[str, object]]]:
    """Registry entries of live processes (mtime, entry); entries of dead ones are removed."""
    directory = runtime_dir()
    found: list[tuple[float, dict[str, object]]] = []
    for path in directory.glob("*.json") if directory.is_dir() else ():
        try:
            entry = json.loads(path.read_text())
            pid = int(entry["pid"])
            mtime = path.stat().st_mtime
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not _pid_alive(pid):
            with contextlib.suppress(OSError):
                path.unlink()
            continue
        found.append((mtime, entry))
    return found


def holder_of_port(port: int) -> int | None:
    """The pid of a live local trioproxy listening on ``port`` (a bind or server port), if any."""
    for _, entry in _live_entries():
        ports = entry.get("ports")
        if isinstance(ports, list) and port in ports and entry.get("pid") != os.getpid():
            pid: int = int(entry["pid"])  # type: ignore[call-overload]
            return pid
    return None


class AmbiguousGateway(LookupError):
    """Several live processes serve the name: which one the user means is theirs to say."""


def lookup(gateway_name: str) -> str:
    """Admin ``host:port`` of the live local process serving ``gateway_name``.

    Every standalone config serves ``default``, so two gateways started from two configs both
    match it; guessing one (say the newest) would attach a trace to the wrong process without a
    word. Several live matches raise ``AmbiguousGateway`` listing each (name, pid, admin address).
    Raises ``LookupError`` with a message fit to show the user.
    """
    directory = runtime_dir()
    found: list[tuple[float, int, str, str]] = []
    for mtime, entry in _live_entries():
        gateways = entry.get("gateways")
        if isinstance(gateways, list) and _serves(gateways, gateway_name) and entry.get("admin"):
            names = ", ".join(str(g) for g in gateways if g == gateway_name or str(g).endswith("/" + gateway_name))
            found.append((mtime, int(entry["pid"]), names, str(entry["admin"])))  # type: ignore[call-overload]
    if not found:
        raise LookupError(
            f"no running trioproxy serves gateway/{gateway_name} "
            f"(looked in {directory}); start it, or use --local --proxy-admin-port PORT"
        )
    if len(found) > 1:
        lines = [f"  gateway/{names}  pid {pid}  admin {admin}" for _, pid, names, admin in sorted(found)]
        raise AmbiguousGateway(
            f"{len(found)} running trioproxy processes serve gateway/{gateway_name}; "
            "pick one with --local --proxy-admin-port PORT:\n" + "\n".join(lines)
        )
    return found[0][3]
