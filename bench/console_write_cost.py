"""What the operator console costs the write path: the `run_counts` triggers and its indexes.

    python bench/console_write_cost.py [--backend sqlite|postgres|both] [--seconds 4] [--rounds 3]
    python bench/console_write_cost.py --quick

The overview reads runs by status per app from counters kept by triggers on `runs` (migration
0020), and the run search walks six indexes of migrations 0020 and 0021. Both are paid by every
commit that inserts a run or changes its status. This measures units of work committed per
second through the `Store` (group commit, as the engine commits) on three databases side by side:

- `shipped`: the schema as migrated;
- `row counters` (PostgreSQL): inserts and deletes counted by a row trigger, as migration 0020
  did before 0022 counted them once per statement;
- `no counters`: the same without the counter triggers;
- `bare`: without the triggers and without the console's indexes (`runs_by_status`,
  `runs_by_workflow`, `runs_by_business_key`, `runs_by_version`, `runs_by_error_class`,
  `runs_by_status_error_class`).

Two paths: **start** (a new run and its first event: the insert trigger) and **signal** (a run
changes status, waiting <-> running, with one event: the update trigger, every time). The
variants are measured interleaved, round after round, so machine load hits them alike; each
figure is the median of the rounds and the ratios are taken within the same run. Besides units
per second (which the load of a shared machine moves by 3x from one round to the next), each
phase's CPU time per unit is measured: this process (Trio, the SQLite writer thread) plus, on
PostgreSQL, the server's processes; that is what the triggers and indexes cost, whatever the
scheduling. PostgreSQL runs on a throwaway cluster with fsync off (as the tests do), so the
figures are CPU and lock cost, not the disk's: an upper bound of the relative cost.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import attrs
import trio

from bench import common as c
from foliot.core.workflow.model import Event, Run
from foliot.storage.base import Store, UnitOfWork
from foliot.storage.factory import open_store
from tests.storage.test_contract import make_run as contract_run
from tests.storage.test_contract import raw

T0 = 1_800_000_000_000
VARIANTS = ("shipped", "row counters", "no counters", "bare")
PATHS = ("start", "signal")
INDEXES = (
    "runs_by_status",
    "runs_by_workflow",
    "runs_by_business_key",
    "runs_by_version",
    "runs_by_error_class",
    "runs_by_status_error_class",
)
TRIGGERS = {
    "sqlite": [
        "DROP TRIGGER run_counts_insert",
        "DROP TRIGGER run_counts_update",
        "DROP TRIGGER run_counts_delete",
    ],
    "postgres": [
        "DROP TRIGGER run_counts_insert ON runs",
        "DROP TRIGGER run_counts_delete ON runs",
        "DROP TRIGGER run_counts_update ON runs",
    ],
}
# PostgreSQL's counters as migration 0020 left them (a row trigger on inserts and deletes too),
# before 0022 counted those once per statement.
ROW_COUNTERS = [
    "DROP TRIGGER run_counts_insert ON runs",
    "DROP TRIGGER run_counts_delete ON runs",
    "CREATE TRIGGER run_counts_insert_delete AFTER INSERT OR DELETE ON runs"
    " FOR EACH ROW EXECUTE FUNCTION foliot_run_counts()",
]


def variants(backend: str) -> tuple[str, ...]:
    """SQLite's triggers are row triggers only: no `row counters` variant there."""
    return VARIANTS if backend == "postgres" else tuple(v for v in VARIANTS if v != "row counters")


def make_run(run_id: str) -> Run:
    """A waiting run with a business key (so `runs_by_business_key` is written too)."""
    return contract_run(run_id, bk=f"k-{run_id}", created=T0, seq=1)


def drops(backend: str, variant: str) -> list[str]:
    if variant == "shipped":
        return []
    if variant == "row counters":
        return list(ROW_COUNTERS)
    out = list(TRIGGERS[backend])
    if variant == "bare":
        out += [f"DROP INDEX {name}" for name in INDEXES]
    return out


def server_cpu(cluster: Any) -> float:
    """CPU seconds used so far by a PostgreSQL cluster's postmaster and its children (0 for SQLite,
    whose writer is a thread of this process)."""
    if cluster is None:
        return 0.0
    pid = int((cluster.data / "postmaster.pid").read_text().split()[0])
    total = c.cpu_seconds(pid)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            total += c.cpu_seconds(int(entry))
    return total


async def starts(store: Store, callers: int, seconds: float, tag: str) -> int:
    done = 0
    stop = time.perf_counter() + seconds

    async def caller(n: int) -> None:
        nonlocal done
        i = 0
        while time.perf_counter() < stop:
            run_id = f"{tag}-{n}-{i}"
            i += 1
            await store.commit(UnitOfWork(make_run(run_id), None, (Event(1, T0, 1, "run_started"),)))
            done += 1

    async with trio.open_nursery() as nursery:
        for n in range(callers):
            nursery.start_soon(caller, n)
    return done


async def signals(store: Store, runs: list[Run], seconds: float) -> int:
    """Each caller moves its own run waiting <-> running, one event per commit."""
    done = 0
    stop = time.perf_counter() + seconds

    async def caller(k: int) -> None:
        nonlocal done
        while time.perf_counter() < stop:
            run = runs[k]
            status = "running" if run.status == "waiting" else "waiting"
            new = attrs.evolve(run, status=status, seq=run.seq + 1, updated_at=run.updated_at + 1)
            event = Event(new.seq, new.updated_at, 1, "signal_received", None, None, {"name": "go"})
            await store.commit(UnitOfWork(new, run.seq, (event,)))
            runs[k] = new
            done += 1

    async with trio.open_nursery() as nursery:
        for k in range(len(runs)):
            nursery.start_soon(caller, k)
    return done


@asynccontextmanager
async def variant_store(url: str, backend: str, variant: str) -> AsyncIterator[Store]:
    async with open_store(url) as store:
        await store.migrate()
        await raw(store, *drops(backend, variant))  # DDL behind the protocol's back
        yield store


def one_backend(backend: str, args: argparse.Namespace) -> list[list[Any]]:
    names = variants(backend)
    work = c.tmpdir(f"write-cost-{backend}")
    cluster = c.pg_cluster() if backend == "postgres" else None
    urls = {}
    for v in names:
        sub = work / v.replace(" ", "-")
        sub.mkdir()
        urls[v] = c.database_url(backend, sub, cluster)
    rates: dict[tuple[str, str], list[float]] = {(p, v): [] for p in PATHS for v in names}
    cpus: dict[tuple[str, str], list[float]] = {(p, v): [] for p in PATHS for v in names}

    async def measure(path: str, v: str, phase: Awaitable[int]) -> None:
        """Units/s on the wall, and CPU µs per unit (this process and the PostgreSQL server:
        what a loaded machine's scheduling does not change)."""
        cpu0, t0 = time.process_time() + server_cpu(cluster), time.perf_counter()
        units = await phase
        wall = time.perf_counter() - t0
        cpu = time.process_time() + server_cpu(cluster) - cpu0
        rates[path, v].append(units / wall)
        cpus[path, v].append(cpu / max(units, 1) * 1e6)

    async def go() -> None:
        async with AsyncExitStack() as stack:
            stores = {v: await stack.enter_async_context(variant_store(urls[v], backend, v)) for v in names}
            parked: dict[str, list[Run]] = {}
            for v, store in stores.items():
                parked[v] = [make_run(f"sig-{k}") for k in range(args.callers)]
                for run in parked[v]:
                    await store.commit(UnitOfWork(run, None))
            for r in range(args.rounds):
                # rotate the order each round: no variant always runs first or last
                order = names[r % len(names) :] + names[: r % len(names)]
                for v in order:
                    await measure("start", v, starts(stores[v], args.callers, args.seconds, f"r{r}"))
                    await measure("signal", v, signals(stores[v], parked[v], args.seconds))
                line = ", ".join(
                    f"{p}/{v} {rates[p, v][-1]:,.0f}/s {cpus[p, v][-1]:,.0f} µs" for p in PATHS for v in names
                )
                print(f"  round {r + 1}: {line}", flush=True)

    trio.run(go)
    out = []
    for p in PATHS:
        for unit, series in (("units/s", rates), ("CPU µs/unit", cpus)):
            med = {v: statistics.median(series[p, v]) for v in names}
            row = med.get("row counters")
            out.append(
                [
                    backend,
                    p,
                    unit,
                    *(f"{med[v]:,.0f}" if v in med else "—" for v in VARIANTS),
                    f"{med['shipped'] / row:.2f}x" if row else "—",
                    f"{med['shipped'] / med['no counters']:.2f}x",
                    f"{med['shipped'] / med['bare']:.2f}x",
                ]
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each measurement")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    parser.add_argument("--callers", type=int, default=32, help="concurrent committers")
    parser.add_argument("--quick", action="store_true", help="1 s, 1 round")
    args = c.parse_args(parser, seconds=1.0, rounds=1)
    c.header("console write cost: counter triggers and search indexes", args)
    rows = []
    for backend in ("sqlite", "postgres") if args.backend == "both" else (args.backend,):
        rows += one_backend(backend, args)
    print(
        c.table(
            "units of work per second and CPU per unit (median of the rounds)",
            [
                *("store", "path", "measure"),
                *VARIANTS,
                *("shipped / row counters", "shipped / no counters", "shipped / bare"),
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
