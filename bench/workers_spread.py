#!/usr/bin/env python3
"""How evenly do 2 workers share connections: one inherited socket, or SO_REUSEPORT sockets?

    python -m bench.workers_spread [--duration 5]

Starts two ``python -m trioproxy.workers.worker`` processes directly (the supervisor's control
protocol, ``trioproxy/workers/control.py``), first on one listening socket both inherit (what
``--workers`` does), then on one ``SO_REUSEPORT`` socket each, and counts the requests each
worker handled: wrk with 50 and with 8 keep-alive connections, then 200 sequential requests on
new connections. The nginx backend and wrk are bench/harness.py's.
"""

from __future__ import annotations

import argparse
import json
import pickle
import re
import socket
import struct
import subprocess
import sys
import urllib.request
from typing import Any

from bench import harness as pc
from trioproxy.config import parse_config
from trioproxy.workers.shared_limits import SharedLimits
from trioproxy.workers.trace_relay import TraceTable

LENGTH = struct.Struct("!I")


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    data = pickle.dumps(message)
    sock.sendall(LENGTH.pack(len(data)) + data)


def receive(sock: socket.socket) -> dict[str, Any]:
    buffer = b""
    while len(buffer) < 4 or len(buffer) < 4 + LENGTH.unpack_from(buffer)[0]:
        buffer += sock.recv(65536)
    message: dict[str, Any] = pickle.loads(buffer[4:])
    return message


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args()
    pc.install_signal_handlers()
    with pc.workspace("workers_spread-", keep=False) as (tmp, procs):
        backend_port = pc.free_port()
        pc.start_nginx(procs, tmp, "backend", pc.nginx_backend_conf(tmp, backend_port), backend_port, 0)
        limits, table = SharedLimits.create(), TraceTable.create()
        config = parse_config(pc.trioproxy_conf(backend_port))
        for mode in ("inherited", "reuseport"):
            port = pc.free_port()

            def listener(mode: str = mode, port: int = port) -> socket.socket:
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if mode == "reuseport":
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen(1024)
                return sock

            shared = listener() if mode == "inherited" else None
            workers = []
            for index in range(2):
                sock = shared or listener()
                ours, theirs = socket.socketpair()
                spec = {"index": index, "binds": [(config.binds[0].port, sock.fileno())], "control": theirs.fileno(),
                        "limits": limits.fd, "trace": table.fd, "drain_timeout": 1.0, "log_level": "error"}
                proc = subprocess.Popen([sys.executable, "-m", "trioproxy.workers.worker", json.dumps(spec)],
                                        pass_fds=[sock.fileno(), theirs.fileno(), limits.fd, table.fd],
                                        cwd=pc.ROOT, stderr=subprocess.DEVNULL)
                theirs.close()
                send(ours, {"t": "config", "config": config})
                workers.append((proc, ours))
            for _, control in workers:
                assert receive(control)["t"] == "ready"

            def counts() -> list[float]:
                out = []
                for _, control in workers:
                    send(control, {"t": "metrics", "id": 1})
                    text = receive(control)["text"]
                    out.append(sum(float(v) for v in re.findall(rb"trioproxy_requests_total\{[^}]*\} (\S+)", text)))
                return out

            for connections in (50, 8):
                before = counts()
                result, _ = pc.run_wrk(port, connections, args.duration, None)
                after = counts()
                print(f"{mode:<9} wrk {connections:>2} connections: per worker "
                      f"{[int(a - b) for a, b in zip(after, before)]}, {result.rps:,.0f} req/s", flush=True)
            before = counts()
            for _ in range(200):
                request = urllib.request.Request(f"http://127.0.0.1:{port}/", headers={"Connection": "close"})
                urllib.request.urlopen(request).read()
            after = counts()
            print(f"{mode:<9} 200 new connections:  per worker {[int(a - b) for a, b in zip(after, before)]}",
                  flush=True)
            for proc, control in workers:
                send(control, {"t": "stop"})
                proc.wait(15)
                control.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
