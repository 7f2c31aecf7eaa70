"""A dry-run against many open runs and recorded histories: answer time, memory, query plans.

    python bench/dry_run.py [--open 100000] [--recorded 1000] [--backend sqlite|postgres]
    python bench/dry_run.py --quick               # 10,000 open runs, 200 recorded

Seeds the store directly: M closed runs whose histories were made by the machine (signal `go`,
then `done`) committed one transition at a time, then N open runs parked at `a` (a `wait`)
through `common.seed_bulk`. Then times the dry-run's work (`http.deploys.build_report`, what
`POST …/workflows/{name}/dry-run` runs after validating: open runs counted by group in SQL with
20 example runIds each, states read only for the groups whose step has reads that matter, the
last M closed runs replayed) in this process, with tracemalloc's peak of the Python heap during
it, against two candidates: one that renames `a` (stranded) and adds a choice reading
`state.a2.ok` (a key written ahead of the runs: no state is read), and the same reading
`input.customer` too (which every open run lacks: every open run's input and state is read, the
worst case). Prints EXPLAIN of the queries. Target (issue 24): under 2 s and 100 MB.
This one runs in-process (no server): what is measured is the dry-run, not HTTP.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio

from bench import common as c

V1 = {
    "name": "order",
    "steps": [{"name": "a", "type": "wait", "signal": "go"}, {"name": "b", "type": "wait", "signal": "done"}],
}
CANDIDATE = {
    "name": "order",
    "steps": [
        {"name": "a2", "type": "wait", "signal": "go"},
        {"name": "b", "type": "wait", "signal": "done", "next": "check"},
        {
            "name": "check",
            "type": "choice",
            "choices": [{"when": {"path": "state.a2.ok", "op": "eq", "value": True}, "next": "$end"}],
            "default": "$end",
        },
    ],
}

CANDIDATE_READS = {
    **CANDIDATE,
    "steps": [
        *CANDIDATE["steps"][:2],
        {
            "name": "check",
            "type": "choice",
            "choices": [
                {"when": {"path": "state.a2.ok", "op": "eq", "value": True}, "next": "$end"},
                {"when": {"path": "input.customer", "op": "eq", "value": "vip"}, "next": "$end"},
            ],
            "default": "$end",
        },
    ],
}


async def prepare(db_url: str) -> None:
    from foliot.storage.factory import open_store

    async with open_store(db_url) as store:
        await store.migrate()
        await store.add_workflow_version("bench", "order", json.dumps(V1), int(time.time() * 1000))


async def seed_recorded(db_url: str, count: int) -> list[str]:
    from foliot.core.workflow import machine
    from foliot.core.workflow.definition import parse_definition
    from foliot.storage.base import UnitOfWork
    from foliot.storage.factory import open_store

    definition = parse_definition(V1)
    ids: list[str] = []
    async with open_store(db_url) as store:
        for i in range(count):
            now = int(time.time() * 1000)
            ctx = machine.Context(now=now, new_token=lambda: "tt_" + secrets.token_urlsafe(12))
            tr = machine.start(
                run_id="run_" + secrets.token_hex(12),
                app="bench",
                definition=definition,
                version=1,
                input={"i": i},
                business_key=None,
                run_timeout_ms=None,
                trace_id=secrets.token_hex(16),
                ctx=ctx,
            )
            await store.commit(UnitOfWork(tr.run, None, tr.events, tr.tasks))
            for signal in (machine.SignalIn("go", {"ok": i % 2 == 0}), machine.SignalIn("done")):
                seq = tr.run.seq
                tr = machine.transition(tr.run, definition, signal, ctx)
                await store.commit(UnitOfWork(tr.run, seq, tr.events, tr.tasks))
            ids.append(tr.run.run_id)
    return ids


async def measure(db_url: str, recorded: int, raw: dict[str, Any]) -> tuple[float, float, dict[str, Any]]:
    from foliot.core.workflow.definition import parse_definition
    from foliot.http.deploys import build_report
    from foliot.storage.factory import open_store

    v1 = parse_definition(V1)
    candidate = parse_definition(raw)

    async def lookup(version: int) -> Any:
        return v1 if version == 1 else None

    async with open_store(db_url) as store:
        await build_report(store, lookup, "bench", "order", candidate, 10)  # warm the connection
        tracemalloc.start()
        t0 = time.perf_counter()
        report = await build_report(store, lookup, "bench", "order", candidate, recorded)
        took = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return took, peak / 1e6, report


GROUP = "app = 'bench' AND workflow = 'order' AND workflow_version = 1 AND current_step = 'a'"
QUERIES = [
    (
        "open groups",
        "SELECT workflow_version, current_step, status, COUNT(*) FROM runs"
        " WHERE app = 'bench' AND workflow = 'order' AND {open} AND workflow_version BETWEEN 1 AND 1"
        " GROUP BY workflow_version, current_step, status",
    ),
    (
        "group examples",
        f"SELECT run_id, created_at FROM runs WHERE {GROUP} AND status = 'waiting' AND {{open}}"
        " ORDER BY created_at DESC, run_id DESC LIMIT 20",
    ),
    (
        "group states page",
        f"SELECT run_id, created_at, {{state}} FROM runs WHERE {GROUP} AND status = 'waiting' AND {{open}}"
        " AND (created_at, run_id) < ({big}, 'run_z') ORDER BY created_at DESC, run_id DESC LIMIT 2000",
    ),
    (
        "recent closed runs",
        "SELECT doc FROM runs WHERE app = 'bench' AND workflow = 'order' AND {closed}"
        " ORDER BY created_at DESC, run_id DESC LIMIT 1000",
    ),
    (
        "events of 100 runs",
        "SELECT * FROM events WHERE run_id IN ({ids}) AND seq <= 10000 ORDER BY run_id, seq",
    ),
]


def _short(sql: str) -> str:
    """A statement printed without its 100 quoted run ids."""
    return re.sub(r"IN \('[^)]*\)", "IN ('run_…', … 100 ids)", sql)


def explain(db_url: str, ids: list[str]) -> list[list[Any]]:
    rows = []
    quoted = ", ".join(f"'{i}'" for i in ids[:100])
    big = 1 << 62
    if db_url.startswith("sqlite"):
        from foliot.storage.factory import sqlite_path

        conn = sqlite3.connect(sqlite_path(db_url))
        for name, sql in QUERIES:
            sql = sql.format(
                state="doc -> '$.input' AS input, doc -> '$.state' AS state",
                open="is_open = 1",
                closed="is_open = 0",
                ids=quoted,
                big=big,
            )
            plan = " | ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            print(f"-- {name}\nEXPLAIN QUERY PLAN {_short(sql)}\n   {plan}")
            t0 = time.perf_counter()
            conn.execute(sql).fetchall()
            scan = re.search(r"\bSCAN runs\b(?! USING)", plan)
            rows.append([name, c.ms(time.perf_counter() - t0), "FULL SCAN" if scan else "index", plan[:160]])
        conn.close()
        return rows
    from tests.pg import _bin

    for name, sql in QUERIES:
        sql = sql.format(
            state="(doc::json -> 'input')::text AS input, (doc::json -> 'state')::text AS state",
            open="is_open",
            closed="NOT is_open",
            ids=quoted,
            big=big,
        )
        out = subprocess.run(
            [_bin("psql"), db_url, "-XAt", "-c", f"EXPLAIN (ANALYZE, COSTS OFF) {sql}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
        timed = next((ln.split(":")[1].strip() for ln in lines if ln.startswith("Execution Time")), "")
        plan = " | ".join(ln for ln in lines if not ln.startswith(("Planning", "Execution")))
        print(f"-- {name}\nEXPLAIN (ANALYZE, COSTS OFF) {_short(sql)}\n   " + "\n   ".join(lines))
        scan = re.search(r"Seq Scan on (runs|events)", plan)
        rows.append([name, timed, "FULL SCAN" if scan else "index", (plan or out.stderr)[:160]])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--open", type=int, default=100_000)
    parser.add_argument("--recorded", type=int, default=1000)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--quick", action="store_true", help="10,000 open runs, 200 recorded")
    args = parser.parse_args()
    if args.quick:
        args.open, args.recorded = 10_000, 200
    workdir = c.tmpdir("dry-run")
    cluster = c.pg_cluster() if args.backend == "postgres" else None
    db_url = c.database_url(args.backend, workdir, cluster)
    trio.run(prepare, db_url)
    t0 = time.perf_counter()
    ids = trio.run(seed_recorded, db_url, args.recorded)
    c.seed_bulk(db_url, "bench", V1, args.open, progress=False)
    print(f"seeded {args.open:,} open and {args.recorded:,} recorded runs in {time.perf_counter() - t0:.0f}s")
    if args.backend == "postgres":
        subprocess.run(
            [__import__("tests.pg", fromlist=["_bin"])._bin("psql"), db_url, "-XAtc", "VACUUM ANALYZE"],
            check=False,
        )
    rows = []
    for label, raw in (("renames a (no state read)", CANDIDATE), ("+ reads input.customer", CANDIDATE_READS)):
        took, peak_mb, report = trio.run(measure, db_url, args.recorded, raw)
        rows.append(
            [
                label,
                c.ms(took),
                f"{peak_mb:.1f} MB",
                report["openRuns"]["total"],
                len(report["openRuns"]["groups"]),
                report["recorded"]["sampled"],
                report["recorded"]["same"],
                len(report["recorded"]["diverged"]),
                ", ".join(f"{m['path']}: {m['runs']}" for m in report["missingStateKeys"]) or "-",
            ]
        )
    print(
        c.table(
            f"dry-run ({args.backend}): {args.open:,} open runs, {args.recorded:,} recorded",
            [
                "candidate",
                "answer",
                "heap peak",
                "open runs",
                "groups",
                "replayed",
                "same",
                "diverged",
                "missing keys",
            ],
            rows,
        )
    )
    print(c.table("query plans", ["query", "time", "plan kind", "plan"], explain(db_url, ids)))


if __name__ == "__main__":
    main()
