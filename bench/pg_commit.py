"""PostgreSQL commit throughput: units of work per second, four ways, in the same run.

    python bench/pg_commit.py [--callers 64] [--seconds 5] [--fast] [--url postgresql://...]

1. raw asyncpg on plain asyncio: the same three statements as a store commit of a new run
   (INSERT run, INSERT event, DELETE timers) in one transaction per unit, a pool of 10 (the floor
   the bridges are measured against: no Trio, no crossing, no grouping);
2. the store as it is on `main` (`git show main:foliot/storage/postgres.py`): trio-asyncio,
   one crossing per unit, one transaction per unit;
3. this store through trio-asyncio (group commit, asyncio-side timeouts);
4. this store through its own asyncio loop thread (the default).

`--callers` Trio tasks commit in a loop for `--seconds` each. A throwaway cluster is started
(durable: fsync on, as in production) unless `--url` names a server; `--fast` turns fsync off.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import asyncpg
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from foliot.core.workflow.model import Event, Run  # noqa: E402
from foliot.storage.base import UnitOfWork  # noqa: E402
from foliot.storage.postgres import open_postgres  # noqa: E402
from tests.pg import Cluster  # noqa: E402

T0 = 1_800_000_000_000


def make_run(run_id: str) -> Run:
    return Run(
        run_id=run_id,
        app="app",
        workflow="wf",
        version=1,
        status="waiting",
        input={"i": 1},
        state={},
        generation=1,
        created_at=T0,
        updated_at=T0,
        trace_id="t",
    )


def unit(run_id: str) -> UnitOfWork:
    return UnitOfWork(make_run(run_id), None, (Event(1, T0, 1, "run_started"),))


def main_module() -> ModuleType | None:
    """The store module as committed on `main`, loaded beside this one (same package)."""
    try:
        source = subprocess.run(
            ["git", "-C", str(ROOT), "show", "main:foliot/storage/postgres.py"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    spec = importlib.util.spec_from_loader("foliot.storage.postgres_main", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "foliot.storage"
    sys.modules[spec.name] = module
    exec(compile(source, "main:foliot/storage/postgres.py", "exec"), module.__dict__)
    return module


async def raw_asyncpg(url: str, callers: int, seconds: float, tag: str) -> float:
    pool = await asyncpg.create_pool(url, min_size=10, max_size=10)
    done = 0
    stop = time.perf_counter() + seconds

    async def caller(c: int) -> None:
        nonlocal done
        i = 0
        while time.perf_counter() < stop:
            run_id = f"{tag}{c}-{i}"
            i += 1
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    "INSERT INTO runs (run_id, app, workflow, status, business_key, is_open, created_at,"
                    " seq, doc) VALUES ($1, 'app', 'wf', 'waiting', NULL, true, $2, 1, '{}')",
                    run_id,
                    T0,
                )
                await conn.execute(
                    "INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data)"
                    " VALUES ($1, 1, $2, 1, 'run_started', NULL, NULL, '{}')",
                    run_id,
                    T0,
                )
                await conn.execute("DELETE FROM timers WHERE run_id = $1", run_id)
            done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(caller(c) for c in range(callers)))
    elapsed = time.perf_counter() - t0
    await pool.close()
    return done / elapsed


async def through_store(store: Any, callers: int, seconds: float, tag: str) -> float:
    done = 0
    stop = time.perf_counter() + seconds

    async def caller(c: int) -> None:
        nonlocal done
        i = 0
        while time.perf_counter() < stop:
            await store.commit(unit(f"{tag}{c}-{i}"))
            i += 1
            done += 1

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for c in range(callers):
            nursery.start_soon(caller, c)
    return done / (time.perf_counter() - t0)


def measure(label: str, fn: Callable[[], float], results: dict[str, float]) -> None:
    results[label] = fn()
    print(f"{label:<44} {results[label]:8.0f} units/s", flush=True)


def run(url: str, args: argparse.Namespace) -> None:
    results: dict[str, float] = {}

    async def migrate() -> None:
        async with open_postgres(url):
            pass

    trio.run(migrate)
    measure(
        "raw asyncpg, asyncio, 3-statement tx (floor)",
        lambda: asyncio.run(raw_asyncpg(url, args.callers, args.seconds, "raw")),
        results,
    )

    old = main_module()
    if old is not None:

        async def old_store() -> float:
            async with old.open_postgres(url) as store:
                return await through_store(store, args.callers, args.seconds, "old")

        measure("store on main (trio-asyncio, tx per unit)", lambda: trio.run(old_store), results)

    for bridge in ("trio-asyncio", "thread"):

        async def new_store(bridge: str = bridge) -> float:
            async with open_postgres(url, bridge=bridge) as store:
                rate = await through_store(store, args.callers, args.seconds, bridge)
                s = store.stats
                print(f"  ({s['units'] / max(1, s['batches']):.1f} units per transaction)")
                return rate

        measure(f"this store, bridge={bridge} (group commit)", lambda: trio.run(new_store), results)

    floor = results["raw asyncpg, asyncio, 3-statement tx (floor)"]
    print(
        "ratios to the floor: "
        + ", ".join(f"{k.split(' (')[0]}: {v / floor:.2f}x" for k, v in results.items())
    )


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--fast", action="store_true", help="fsync off on the throwaway cluster")
    parser.add_argument("--url", help="an existing database (its tables will get bench rows)")
    args = parser.parse_args()
    if args.url:
        run(args.url, args)
        return
    cluster = Cluster(durable=not args.fast).start()
    try:
        run(cluster.new_database(), args)
    finally:
        cluster.destroy()


if __name__ == "__main__":
    cli()
