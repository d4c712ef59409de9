"""Real redis-server and `trioproxy ratelimit-server` processes for the global rate-limit tests."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
READY_SECONDS = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free and valid too."""
    for _ in range(200):
        port = free_port()
        if port + 10000 > 65535:
            port = port % 40000 + 10000
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue
    raise AssertionError("no free port pair for a cluster node")


def _wait(predicate, what: str, bound: float = READY_SECONDS) -> None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError(f"{what} not ready within {bound}s")


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Redis:
    def __init__(self, tmp: Path, port: int | None = None, cluster: bool = False) -> None:
        self.port = port or (free_cluster_port() if cluster else free_port())
        self.dir = tmp / f"redis-{self.port}"
        self.dir.mkdir(exist_ok=True)
        self.cluster = cluster
        self.proc: subprocess.Popen | None = None

    def start(self) -> Redis:
        args = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.dir)]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait(lambda: _accepts(self.port), "redis-server")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"


@contextmanager
def redis_server(tmp: Path) -> Iterator[Redis]:
    r = Redis(tmp).start()
    try:
        yield r
    finally:
        r.stop()


class RlsProcess:
    def __init__(self, proc: subprocess.Popen, port: int, stats_port: int | None) -> None:
        self.proc, self.port, self.stats_port = proc, port, stats_port
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def call(self, domain: str, descriptors: list[list[tuple[str, str]]], hits: int | None = None,
             request_hits: int = 0):
        from google.protobuf import wrappers_pb2

        from trioproxy.rls.protos import rls_pb2

        req = rls_pb2.RateLimitRequest(domain=domain, hits_addend=request_hits)
        for entries in descriptors:
            d = req.descriptors.add()
            for k, v in entries:
                d.entries.add(key=k, value=v)
            if hits is not None:
                d.hits_addend.CopyFrom(wrappers_pb2.UInt64Value(value=hits))
        call = self.channel.unary_unary(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            request_serializer=rls_pb2.RateLimitRequest.SerializeToString,
            response_deserializer=rls_pb2.RateLimitResponse.FromString)
        return call(req, timeout=5)


@contextmanager
def ratelimit_server(config: Path, *store: str, stats: bool = False,
                     env: dict[str, str] | None = None) -> Iterator[RlsProcess]:
    args = [sys.executable, "-m", "trioproxy", "ratelimit-server", "--config", str(config),
            "--addr", "127.0.0.1:0", *store]
    if stats:
        args += ["--stats-addr", "127.0.0.1:0"]
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+)(?:, metrics on http://127\.0\.0\.1:(\d+))?", line)
        if not m:
            proc.kill()
            raise AssertionError(f"ratelimit-server did not start: {line!r} {proc.stderr.read()!r}")
        rls = RlsProcess(proc, int(m.group(1)), int(m.group(2)) if m.group(2) else None)
        yield rls
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
