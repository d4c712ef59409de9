"""A real PostgreSQL server for tests: one cluster per session, a fresh database per test.

``postgres_cluster`` (session) runs Debian's ``initdb`` (``/usr/lib/postgresql/<v>/bin``, not on
PATH) in a temporary directory and starts it with ``pg_ctl`` on a free port of 127.0.0.1, its unix
socket in that directory; as root the server runs as the user ``postgres`` (PostgreSQL refuses
root). ``postgres_url`` (function) creates an empty database and gives its ``postgresql://`` URL.

Without any PostgreSQL binary the tests are skipped, except in CI (``CI`` set), where they fail:
``.ci/run`` installs it. Use them from a conftest.py or a test module::

    from tests.postgres_helpers import postgres_cluster, postgres_url  # noqa: F401
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

__all__ = ["PostgresCluster", "find_bin_dir", "postgres_cluster", "postgres_url"]


def find_bin_dir() -> Path | None:
    """The newest installed PostgreSQL's bin directory (the one holding initdb), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PostgresCluster:
    """A running server: ``url(db)``, ``create_database()``."""

    def __init__(self, bin_dir: Path, directory: Path) -> None:
        self.bin_dir = bin_dir
        self.directory = directory
        self.data = directory / "data"
        self.port = _free_port()
        self.as_postgres = os.geteuid() == 0
        self._names = itertools.count(1)

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        command = [str(self.bin_dir / args[0]), *args[1:]]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        return done

    def start(self) -> None:
        """initdb, then start the server."""
        if self.as_postgres:
            user = pwd.getpwnam("postgres")
            os.chown(self.directory, user.pw_uid, user.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        self.start_server()

    def start_server(self) -> None:
        """Start the server (again, after ``stop`` or ``pause``: same port, same data)."""
        options = (f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off "
                   f"-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.directory / "server.log"), "-o", options,
                  "-w", "-t", "60", "start")

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server; ``immediate`` is a crash (with this cluster's synchronous_commit=off the
        last commits may be lost), ``fast`` a clean shutdown that ends every connection."""
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop", timeout=60)
        except (RuntimeError, subprocess.TimeoutExpired):
            pass

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def log(self) -> str:
        try:
            return (self.directory / "server.log").read_text(errors="replace")
        except OSError:
            return ""


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    bin_dir = find_bin_dir()
    if bin_dir is None:
        message = "PostgreSQL is not installed (apt-get install postgresql; .ci/run does it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    # not under pytest's tmp dir: its parents are 0700 root, which the postgres user cannot enter
    directory = Path(tempfile.mkdtemp(prefix="trioproxy-pg-"))
    cluster = PostgresCluster(bin_dir, directory)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> str:
    """The URL of a fresh, empty database on the session's server."""
    return postgres_cluster.create_database()
