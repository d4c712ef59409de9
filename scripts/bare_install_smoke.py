#!/usr/bin/env python3
"""Bare-install smoke: ``pip install .`` with no extras into a new ``python3 -m venv``, then every
command of the README's Commands table once, on the bundled configs and manifests.

CI installs ``.[test]``, which hides a runtime import that only the test extra brings (jsonschema
once did: ``trioproxy status`` failed on a bare install). This runs the installed console script
(``VENV/bin/trioproxy``, never the source tree), and fails on a non-zero exit, on a request that
is not answered, and on any ``Traceback`` in any output.

    python3 scripts/bare_install_smoke.py [--venv DIR]   # DIR kept and reused; default a temp dir

It uses the bundled configs' fixed ports (3000, 8080, 15000, 15020, 15021) and checks first that
they are free. About a minute once pip's cache is warm.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXED_PORTS = (3000, 8080, 15000, 15020, 15021)
TIMEOUT = 30.0


class SmokeFailure(Exception):
    pass


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _wait_listening(port: int, process: subprocess.Popen[bytes], name: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not _listening(port):
        if process.poll() is not None:
            raise SmokeFailure(f"{name}: exited {process.returncode} before listening on {port}")
        if time.monotonic() > deadline:
            raise SmokeFailure(f"{name}: not listening on {port} after {TIMEOUT:.0f}s")
        time.sleep(0.1)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


class Smoke:
    def __init__(self, venv: Path, logs: Path) -> None:
        self.venv = venv
        self.logs = logs
        self.started: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self.ran = 0

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def run(self, name: str, *argv: str, expect: int = 0, contains: str = "") -> str:
        result = subprocess.run(argv, cwd=ROOT, capture_output=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
        output = result.stdout.decode(errors="replace") + result.stderr.decode(errors="replace")
        self._check(name, output, result.returncode, expect)
        if contains not in output:
            raise SmokeFailure(f"{name}: output lacks {contains!r}:\n{output}")
        print(f"ok  {name}", flush=True)
        return output

    def start(self, name: str, *argv: str) -> subprocess.Popen[bytes]:
        log = self.logs / f"{len(self.started)}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.started.append((name, process, log))
        return process

    def stop(self, process: subprocess.Popen[bytes], expect: int | None = 0) -> None:
        """SIGTERM, wait, and check the exit code and the output."""
        ((name, _, log),) = [entry for entry in self.started if entry[1] is process]
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            raise SmokeFailure(f"{name}: still running {TIMEOUT:.0f}s after SIGTERM") from None
        self._check(name, log.read_text(errors="replace"), code, expect)
        print(f"ok  {name}", flush=True)

    def _check(self, name: str, output: str, code: int, expect: int | None) -> None:
        self.ran += 1
        if "Traceback" in output:
            raise SmokeFailure(f"{name}: a traceback:\n{output}")
        if expect is not None and code != expect:
            raise SmokeFailure(f"{name}: exit {code}, expected {expect}:\n{output}")

    def cleanup(self) -> None:
        for _, process, _ in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()


def install(venv: Path) -> None:
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(ROOT)], check=True, env=env)
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import trioproxy; print(trioproxy.__file__)"],
                           cwd=venv, check=True, capture_output=True, text=True).stdout.strip()
    if not where.startswith(str(venv)):
        raise SmokeFailure(f"trioproxy is imported from {where}, not from the bare venv {venv}")


def smoke(s: Smoke) -> None:
    trioproxy, python = s.bin("trioproxy"), s.bin("python")
    local, manifest = "fixtures/configs/local.yaml", "fixtures/configs/manifests/local-llm.yaml"

    s.run("--validate-only (standalone)", trioproxy, "--config", local, "--validate-only", contains="valid")
    s.run("--validate-only (manifest)", trioproxy, "--config", manifest, "--validate-only", contains="valid")
    s.run("status", trioproxy, "status", "--config", manifest, contains="Accepted")
    s.run("status -o json", trioproxy, "status", "--config", manifest, "-o", "json", contains="Accepted")
    s.run("schema", trioproxy, "schema", contains="2020-12")
    s.run("idp setup --help", trioproxy, "idp", "setup", "--help", contains="--idp-url")
    s.run("keys --help", trioproxy, "keys", "--help", contains="rotate")
    s.run("keys create --help", trioproxy, "keys", "create", "--help", contains="--limit")
    s.run("trace --file (no such file)", trioproxy, "trace", "--file", "/nonexistent/trace.jsonl", expect=1)

    # The gateway on the README's example: the echo backend on 8080, local.yaml on 3000.
    backend = s.start("echo backend", python, "-m", "fixtures.echo_backend", "--port", "8080")
    _wait_listening(8080, backend, "echo backend")
    for config in (local, manifest):
        gateway = s.start(f"gateway --config {config} (start, one request, SIGTERM)", trioproxy, "--config", config)
        _wait_listening(3000, gateway, f"gateway --config {config}")
        _wait_listening(15021, gateway, f"gateway --config {config} readiness")
        if config == local:  # trace --raw: claims the next request, prints its events, exits 0
            trace = s.start("trace --local --raw", trioproxy, "trace", "--local", "--raw")
            deadline = time.monotonic() + TIMEOUT
            while trace.poll() is None and time.monotonic() < deadline:
                _get("http://127.0.0.1:3000/traced")
                time.sleep(0.2)
            s.stop(trace)
            if "requestFinished" not in s.started[-1][2].read_text():
                raise SmokeFailure("trace --local --raw: no requestFinished event")
        status, body = _get("http://127.0.0.1:3000/hello")
        if status != 200:
            raise SmokeFailure(f"gateway --config {config}: GET /hello answered {status} {body[:200]!r}")
        if config == local:  # the request history has it
            s.run("requests --local --raw", trioproxy, "requests", "--local", "--raw", contains='"/hello"')
        s.stop(gateway)
    s.stop(backend, expect=None)  # a fixture: only its output is checked

    demo = s.start("demo (start, one request, SIGTERM)", trioproxy, "demo")
    _wait_listening(3000, demo, "demo")
    status, body = _get("http://127.0.0.1:3000/hello")
    if status != 200:
        raise SmokeFailure(f"demo: GET /hello answered {status} {body[:200]!r}")
    s.stop(demo)

    port = _free_port()
    rls = s.start("ratelimit-server --store memory", trioproxy, "ratelimit-server", "--store", "memory",
                  "--config", "examples/global-ratelimit/ratelimit-config.yaml", "--addr", f"127.0.0.1:{port}")
    _wait_listening(port, rls, "ratelimit-server")
    s.stop(rls)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--venv", type=Path, help="the venv to create (or reuse); default a temporary one")
    args = parser.parse_args()
    if busy := [port for port in FIXED_PORTS if _listening(port)]:
        print(f"bare-install smoke: error: ports in use: {busy}", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="trioproxy-bare-") as tmp:
        venv = args.venv.resolve() if args.venv else Path(tmp) / "venv"
        started = time.monotonic()
        s = Smoke(venv, Path(tmp))
        try:
            install(venv)
            print(f"bare-install smoke: pip install . into {venv} ({time.monotonic() - started:.0f}s)", flush=True)
            smoke(s)
        except (SmokeFailure, subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            print(f"bare-install smoke: FAILED: {error}", file=sys.stderr)
            return 1
        finally:
            s.cleanup()
    print(f"bare-install smoke: {s.ran} commands passed ({time.monotonic() - started:.0f}s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
