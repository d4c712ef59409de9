"""What a runtime key costs per request in the key service alone (no HTTP): SQLite and PostgreSQL.

    python -m bench.keys_store [--requests 2000] [--concurrency 32] [--postgres URL]

Per engine, over a fresh store: ``authenticate`` (a cache hit: no I/O), ``reserve`` of a key with
limits (one store transaction: the round trip the budget costs), ``settle`` (queued, no I/O) and
the batched flush, each as wall-clock p50/p99 and CPU (process time, the store's threads included)
per request; then ``reserve`` with ``--concurrency`` tasks at once (requests per second). Without
``--postgres`` a throwaway PostgreSQL cluster is started (Debian's initdb, as tests do); without
PostgreSQL binaries that row is skipped. docs/keys.md quotes a run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from trioproxy.config.model import KeysSettings
from trioproxy.keys import KeyService


def _quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def measure(location: str, requests: int, concurrency: int) -> dict[str, Any]:
    svc = KeyService.open(location, KeysSettings())
    _, secret = await svc.create_key(name="bench", limits={"requests": {"minute": 10**9},
                                                           "tokens": {"day": 10**12}})
    principal = await svc.authenticate(secret)
    row: dict[str, Any] = {}

    async def timed(name: str, work: Any) -> None:
        wall: list[float] = []
        cpu = time.process_time()
        for _ in range(requests):
            started = time.perf_counter()
            await work()
            wall.append(time.perf_counter() - started)
        cpu = time.process_time() - cpu
        p50, p99 = _quantiles(wall)
        row[name] = (p50 * 1e6, p99 * 1e6, cpu / requests * 1e6)

    await timed("authenticate (cache hit)", lambda: svc.authenticate(secret))
    reservations = []

    async def reserve() -> None:
        reservations.append(await svc.reserve(principal, tokens=1100, cost=0.01))

    await timed("reserve (1 transaction)", reserve)

    async def settle() -> None:
        svc.settle(reservations.pop(), tokens=900, cost=0.008, model="m", provider="p", status=200)

    await timed("settle (queued)", settle)
    cpu = time.process_time()
    started = time.perf_counter()
    await svc.flush()
    row["flush of all settlements"] = ((time.perf_counter() - started) / requests * 1e6, None,
                                       (time.process_time() - cpu) / requests * 1e6)

    async def worker(count: int) -> None:
        for _ in range(count):
            await svc.reserve(principal, tokens=1100, cost=0.01)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(concurrency):
            nursery.start_soon(worker, requests // concurrency)
    elapsed = time.perf_counter() - started
    row["concurrent reserves per second"] = (requests // concurrency) * concurrency / elapsed
    await svc.aclose()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--postgres", help="postgresql:// URL of an empty database (default: a throwaway cluster)")
    args = parser.parse_args()
    engines: list[tuple[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        engines.append(("sqlite", str(Path(scratch) / "keys.db")))
        cluster = None
        if args.postgres:
            engines.append(("postgresql", args.postgres))
        else:
            from tests.postgres_helpers import PostgresCluster, find_bin_dir

            bin_dir = find_bin_dir()
            if bin_dir is None:
                print("postgresql: skipped (no initdb found)")
            else:
                cluster = PostgresCluster(bin_dir, Path(tempfile.mkdtemp(prefix="trioproxy-pg-")))
                cluster.start()
                engines.append(("postgresql", cluster.create_database()))
        try:
            for engine, location in engines:
                row = trio.run(measure, location, args.requests, args.concurrency)
                print(f"\n{engine}: {args.requests} requests (microseconds per request: p50 / p99 / CPU)")
                for name, value in row.items():
                    if isinstance(value, tuple):
                        p50, p99, cpu = value
                        p99_text = f"{p99:9.1f}" if p99 is not None else "        -"
                        print(f"  {name:<28} {p50:9.1f} {p99_text} {cpu:9.1f}")
                    else:
                        print(f"  {name:<28} {value:9.0f} (concurrency {args.concurrency})")
        finally:
            if cluster is not None:
                import shutil

                cluster.stop()
                shutil.rmtree(cluster.directory, ignore_errors=True)


if __name__ == "__main__":
    main()
