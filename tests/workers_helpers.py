"""A real ``trioproxy --workers N`` process for tests: started with port 0 admin servers, its stderr
read by a thread, its ``/metrics`` read as numbers. Every wait polls with a deadline."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import httpx
import trio
from prometheus_client.parser import text_string_to_metric_families

from .conftest import LOOPBACK_SERVERS, ROOT


class WorkersGateway:
    def __init__(self, proc: subprocess.Popen, bind_port: int) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.bind_port = bind_port
        self.ports: dict[str, int] = {}
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.bind_port}"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['admin']}"

    @property
    def stats_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['stats']}"

    async def wait_line(self, pattern: str, *, start: int = 0, timeout: float = 60) -> re.Match[str]:
        with trio.fail_after(timeout):
            while True:
                for line in self.lines[start:]:
                    if found := re.search(pattern, line):
                        return found
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise AssertionError(f"gateway exited ({self.proc.returncode}):\n{''.join(self.lines)}")
                await trio.sleep(0.02)

    async def wait_ready(self) -> None:
        for name in ("admin", "stats", "readiness"):
            found = await self.wait_line(rf"trioproxy: {name} listening on http://[^:]+:(\d+)")
            self.ports[name] = int(found.group(1))

    def worker_pids(self) -> dict[int, int]:
        """worker index -> pid of its latest start (from the ``worker N serving (pid P)`` lines)."""
        pids = {}
        for line in self.lines:
            if found := re.match(r"trioproxy: worker (\d+) serving \(pid (\d+)\)", line):
                pids[int(found.group(1))] = int(found.group(2))
        return pids

    async def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        async with httpx.AsyncClient(timeout=10) as client:
            text = (await client.get(f"{self.stats_url}/metrics")).text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    async def total(self, name: str, **labels: str) -> float:
        """Sum of the samples called ``name`` whose labels include ``labels``."""
        return sum(value for (sample, sample_labels), value in (await self.metrics()).items()
                   if sample == name and all((k, v) in sample_labels for k, v in labels.items()))

    async def per_worker(self) -> dict[str, float]:
        return {dict(labels)["worker"]: value for (name, labels), value in (await self.metrics()).items()
                if name == "trioproxy_worker_requests_total"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        # the workers see their control channel close and drain; kill any left (own pids only)
        for pid in self.worker_pids().values():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


async def start_workers(tmp_path: Path, config_yaml: str, *, workers: int = 2, bind_port: int,
                        args: tuple[str, ...] = ()) -> WorkersGateway:
    path = tmp_path / "gw.yaml"
    path.write_text(textwrap.dedent(config_yaml))
    proc = subprocess.Popen([sys.executable, "-m", "trioproxy", "--config", str(path), "--workers", str(workers),
                             *args], cwd=ROOT, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **LOOPBACK_SERVERS})
    gw = WorkersGateway(proc, bind_port)
    try:
        await gw.wait_ready()
        if isinstance(workers, int) and workers > 1:  # every worker accepting, or the first up may take all
            for index in range(workers):
                await gw.wait_line(rf"trioproxy: worker {index} serving")
    except BaseException:
        gw.stop()
        raise
    return gw
