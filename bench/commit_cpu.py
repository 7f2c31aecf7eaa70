"""CPU per commit of a signal-like unit of work, through the `Store`, in this process.

    python bench/commit_cpu.py [--backend sqlite|postgres] [--commits 400] [--committers 1,8]

Each committer owns one run and moves it on in a loop, as signals and task answers do: a run
update (guarded by its seq), three events, a task opened or closed, its timers replaced. Per
committer count it prints the CPU per commit of this process's main (Trio) thread and of its
other threads (SQLite's writer, or asyncpg's loop thread), from `/proc`, and the wall time per
commit. `BENCH_SERVER_ROOT=<checkout>` measures another checkout's store (A/B runs).
PostgreSQL is a throwaway cluster from `tests/pg.py` (fsync off).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import common as c  # this checkout's bench, imported before the root below

_ROOT = os.environ.get("BENCH_SERVER_ROOT", str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, _ROOT)  # the store measured (and the test helpers) come from there

import attrs  # noqa: E402
import trio  # noqa: E402

from foliot.core.workflow.model import Event, Run, TaskRow, Timer  # noqa: E402
from foliot.storage.base import UnitOfWork  # noqa: E402
from tests.storage.test_contract import T0, make_run, seed_app  # noqa: E402

FAR = T0 + 10**9


def threads_cpu() -> tuple[float, float]:
    """(main thread, other threads) CPU seconds of this process."""
    pid = os.getpid()
    main = other = 0.0
    for tid, seconds in c.thread_cpu_seconds(pid).items():
        if tid == pid:
            main += seconds
        else:
            other += seconds
    return main, other


def next_unit(run: Run, k: int, tag: str) -> UnitOfWork:
    """The k-th move of `run`: even k opens a task (a signal), odd k closes it (its answer)."""
    seq = run.seq
    if k % 2 == 0:
        moved = attrs.evolve(run, status="running", seq=seq + 3, timer=None, deadline=T0 + 30_000)
        task = TaskRow(f"{tag}-{k}", run.run_id, "app", 1, "t", 1, None, "open", None, T0 + 50, T0)
    else:
        moved = attrs.evolve(
            run, status="waiting", seq=seq + 3, deadline=None, timer=Timer("wait_timeout", FAR, f"w#{k}")
        )
        task = TaskRow(
            f"{tag}-{k - 1}", run.run_id, "app", 1, "t", 1, None, "closed", "answered", T0 + 50, T0
        )
    events = tuple(Event(seq + j, T0, 1, "x", "s", 1, {"k": k}) for j in (1, 2, 3))
    return UnitOfWork(moved, seq, events, (task,))


async def measure(url: str, commits: int, committers: int, tag: str) -> dict[str, Any]:
    if url.startswith("postgres"):
        from foliot.storage.postgres import open_postgres

        opened: Any = open_postgres(url)
    else:
        from foliot.storage.sqlite import open_sqlite

        opened = open_sqlite(url.removeprefix("sqlite:///"))
    async with opened as store:
        await seed_app(store)
        runs = []
        for i in range(committers):
            run = make_run(f"{tag}-{i}", seq=1, timer=Timer("wait_timeout", FAR, "w#0"))
            await store.commit(UnitOfWork(run, None, (Event(1, T0, 1, "run_started"),)))
            runs.append(run)

        async def committer(i: int) -> None:
            run = runs[i]
            for k in range(commits):
                unit = next_unit(run, k, f"{tag}-{i}")
                await store.commit(unit)
                run = unit.run

        main0, other0 = threads_cpu()
        t0 = time.perf_counter()
        with trio.fail_after(600):
            async with trio.open_nursery() as nursery:
                for i in range(committers):
                    nursery.start_soon(committer, i)
        wall = time.perf_counter() - t0
        main1, other1 = threads_cpu()
    total = commits * committers
    return {
        "main": 1000 * (main1 - main0) / total,
        "other": 1000 * (other1 - other0) / total,
        "wall": 1000 * wall / total,
        "total": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--commits", type=int, default=400, help="commits per committer")
    parser.add_argument("--committers", default="1,8", help="committer counts, one measure each")
    parser.add_argument("--quick", action="store_true", help="100 commits per committer")
    args = parser.parse_args()
    commits = 100 if args.quick else args.commits
    work = c.tmpdir("commit-cpu")
    cluster = c.pg_cluster() if args.backend == "postgres" else None
    rows = []
    for n in (int(x) for x in args.committers.split(",")):
        url = c.database_url(args.backend, work / f"c{n}", cluster)
        (work / f"c{n}").mkdir(exist_ok=True)
        r = trio.run(measure, url, commits, n, f"c{n}")
        rows.append(
            [
                n,
                r["total"],
                f"{r['main']:.3f}",
                f"{r['other']:.3f}",
                f"{r['main'] + r['other']:.3f}",
                f"{r['wall']:.2f}",
            ]
        )
    print(f"# store {args.backend} from {_ROOT}; load average {os.getloadavg()[0]:.1f}")
    print(
        c.table(
            "CPU per commit of a signal-like unit (ms; main = the Trio thread, other = the store's threads)",
            ["committers", "commits", "main", "other", "total", "wall/commit"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
