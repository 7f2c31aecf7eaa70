"""The console's queries on a store holding a million runs: time per page and query plans.

    python bench/console_queries.py [--runs 1000000] [--backend sqlite|postgres]
    python bench/console_queries.py --quick          # 50,000 runs

Migrates a fresh store, writes N runs straight into it in bulk (statuses, workflows,
versions, business keys and error classes spread as in a busy system: 70% completed, 15%
waiting, 5% sleeping, 5% failed, ...; on SQLite the counters are kept by the production
triggers, on PostgreSQL counted once after the COPY as migration 0020 does), their timers,
then calls the very `Store` methods each console page calls and
prints each one's time (median of 5) and its query plan (EXPLAIN QUERY PLAN / EXPLAIN
ANALYZE). Target: every page's query index-backed, none growing with N (a few ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio

from bench import common as c
from foliot.storage.base import Store, json_dumps
from foliot.storage.console import RunQuery, run_query_sql
from foliot.storage.factory import open_store, sqlite_path

T0 = 1_790_000_000_000
STATUSES = [
    ("completed", 70.0),
    ("waiting", 15.0),
    ("sleeping", 5.0),
    ("failed", 5.0),
    ("running", 3.0),
    ("stuck", 1.0),
    ("cancelled", 0.5),
    ("timed_out", 0.5),
]
WORKFLOWS = ["order-fulfilment", "refund", "onboarding", "invoice", "shipping"]
ERRORS = {
    "failed": ["http_500", "card_declined", "timeout"],
    "stuck": ["no_choice_matched"],
    "timed_out": ["run_timeout"],
}
OPEN = {"running", "waiting", "sleeping", "stuck"}


def rows(count: int, seed: int = 7) -> Any:
    """(runs row, timer rows) per run: the columns `storage.base.run_row` writes."""
    rnd = random.Random(seed)
    names = [s for s, _ in STATUSES]
    weights = [w for _, w in STATUSES]
    for i in range(count):
        status = rnd.choices(names, weights)[0]
        workflow = WORKFLOWS[i % len(WORKFLOWS)]
        created = T0 + i * 10
        run_id = f"run_{i:012x}"
        error = None
        if status in ERRORS:
            error = {"step": "charge", "cls": rnd.choice(ERRORS[status]), "message": "m"}
        wake = created + 14 * 86_400_000 if status in ("waiting", "sleeping") else None
        doc = {
            "run_id": run_id,
            "app": "shop",
            "workflow": workflow,
            "version": 1 + i % 3,
            "status": status,
            "input": {"orderId": i},
            "state": {},
            "generation": 1,
            "created_at": created,
            "updated_at": created,
            "trace_id": "t",
            "business_key": f"order-{i}",
            "current_step": "charge",
            "wake_at": wake,
            "error": error,
            "timer": {"kind": "sleep", "due": wake, "key": f"1:nap#{i}"} if wake else None,
            "seq": 3,
        }
        is_open = status in OPEN
        closed = None if is_open else created + 5
        cls = None if error is None else json_dumps(error["cls"])
        run = (
            *(run_id, "shop", workflow, status, f"order-{i}", is_open, created, 3, json_dumps(doc)),
            *(closed, doc["version"], cls),
        )
        timers = [(run_id, "step", "sleep", f"1:nap#{i}", wake)] if wake else []
        yield run, timers


def history(count: int) -> list[tuple[Any, ...]]:
    """A 300-event history for the run the run-detail page reads."""
    run_id = f"run_{count // 2:012x}"
    return [(run_id, n, T0 + n, 1, "signal_received", "pay", None, '{"name":"ping"}') for n in range(1, 301)]


def seed_sqlite(url: str, count: int) -> None:
    import sqlite3

    conn = sqlite3.connect(sqlite_path(url), isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    batch_runs: list[Any] = []
    batch_timers: list[Any] = []
    t0 = time.perf_counter()

    def flush() -> None:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO runs (run_id, app, workflow, status, business_key, is_open, created_at, seq, doc,"
            " closed_at, workflow_version, error_class) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            batch_runs,
        )
        conn.executemany(
            "INSERT INTO timers (run_id, slot, kind, key, due_at) VALUES (?, ?, ?, ?, ?)", batch_timers
        )
        conn.execute("COMMIT")
        batch_runs.clear()
        batch_timers.clear()

    for done, (run, timers) in enumerate(rows(count), 1):
        batch_runs.append(run)
        batch_timers.extend(timers)
        if done % 50_000 == 0:
            flush()
            print(f"  seeded {done:,}/{count:,} ({done / (time.perf_counter() - t0):,.0f}/s)", flush=True)
    flush()
    conn.executemany(
        "INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        history(count),
    )
    conn.execute("ANALYZE")
    conn.close()


def seed_postgres(url: str, count: int) -> None:
    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(url)
        # Row triggers updating one counter row 50,000 times in one COPY walk an ever longer
        # chain of row versions (quadratic): seed without them and count once, as migration
        # 0020 does for an existing store.
        await conn.execute("ALTER TABLE runs DISABLE TRIGGER USER")
        t0 = time.perf_counter()
        batch_runs: list[Any] = []
        batch_timers: list[Any] = []

        async def flush() -> None:
            async with conn.transaction():
                await conn.copy_records_to_table(
                    "runs",
                    records=batch_runs,
                    columns=[
                        *("run_id", "app", "workflow", "status", "business_key"),
                        *("is_open", "created_at", "seq", "doc", "closed_at"),
                        *("workflow_version", "error_class"),
                    ],
                )
                await conn.copy_records_to_table(
                    "timers", records=batch_timers, columns=["run_id", "slot", "kind", "key", "due_at"]
                )
            batch_runs.clear()
            batch_timers.clear()

        for done, (run, timers) in enumerate(rows(count), 1):
            batch_runs.append(run)
            batch_timers.extend(timers)
            if done % 50_000 == 0:
                await flush()
                print(f"  seeded {done:,}/{count:,} ({done / (time.perf_counter() - t0):,.0f}/s)", flush=True)
        await flush()
        await conn.executemany(
            "INSERT INTO events (run_id, seq, at, generation, type, step, attempt, data)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            history(count),
        )
        await conn.execute(
            "INSERT INTO run_counts (app, status, shard, n) SELECT app, status, 0, COUNT(*) FROM runs"
            " GROUP BY app, status"
        )
        await conn.execute("ALTER TABLE runs ENABLE TRIGGER USER")
        await conn.execute("VACUUM ANALYZE runs")
        await conn.execute("VACUUM ANALYZE timers")
        await conn.close()

    asyncio.run(go())


# page, what it shows, the Store call, its SQL for a backend (postgres?) to explain, or None
Case = tuple[str, str, Callable[[Store], Awaitable[Any]], Callable[[bool], str] | None]


def literal(sql: str, params: list[Any], postgres: bool) -> str:
    def lit(p: Any) -> str:
        return "'" + p.replace("'", "''") + "'" if isinstance(p, str) else str(p)

    if postgres:
        for n in range(len(params), 0, -1):
            sql = sql.replace(f"${n}", lit(params[n - 1]))
        return sql
    for p in params:
        sql = sql.replace("?", lit(p), 1)
    return sql


def fixed(sql: str) -> Callable[[bool], str]:
    return lambda postgres: sql


def cases(count: int) -> list[Case]:
    mid = (T0 + count * 5, f"run_{count // 2:012x}")  # a cursor halfway down the list
    far = T0 + 10 * count + 30 * 86_400_000

    def q(**kw: Any) -> RunQuery:
        return RunQuery("shop", **kw)

    def lst(
        query: RunQuery, after: Any = None
    ) -> tuple[Callable[[Store], Awaitable[Any]], Callable[[bool], str]]:
        def sql(postgres: bool) -> str:
            return literal(*run_query_sql(query, 51, after, postgres=postgres), postgres)

        return (lambda s: s.query_runs(query, 51, after)), sql

    out: list[Case] = [
        (
            "overview",
            "runs by status per app (counters)",
            lambda s: s.run_counts(),
            fixed("SELECT app, status, n FROM run_counts WHERE n <> 0"),
        ),
        (
            "overview, timers",
            "timers in storage, counted up to 100,000",
            lambda s: s.count_timers(100_000),
            fixed("SELECT COUNT(*) FROM (SELECT 1 FROM timers LIMIT 100000) AS t"),
        ),
    ]
    for label, query, after in (
        ("runs: app, newest first", q(), None),
        ("runs: app, page at the middle", q(), mid),
        ("runs: status=stuck", q(status="stuck"), None),
        ("runs: status=failed, page at the middle", q(status="failed"), mid),
        ("runs: workflow=refund", q(workflow="refund"), None),
        ("runs: workflow=refund version=2", q(workflow="refund", version=2), None),
        ("runs: businessKey", q(business_key=f"order-{count // 3}"), None),
        (
            "runs: status=failed errorClass=card_declined",
            q(status="failed", error_class="card_declined"),
            None,
        ),
        ("runs: errorClass=card_declined (no status)", q(error_class="card_declined"), None),
        ("runs: errorClass=run_timeout (0.5% of runs)", q(error_class="run_timeout"), None),
        ("runs: errorClass=card_declined, page at the middle", q(error_class="card_declined"), mid),
        (
            "runs: created in one hour",
            q(created_from=T0 + count * 5, created_to=T0 + count * 5 + 3_600_000),
            None,
        ),
        (
            "runs: status=waiting, one hour",
            q(status="waiting", created_from=T0 + count * 5, created_to=T0 + count * 5 + 3_600_000),
            None,
        ),
    ):
        call, sql = lst(query, after)
        out.append(("runs", label, call, sql))
    run_id = f"run_{count // 2:012x}"
    out += [
        (
            "run detail",
            "the run",
            lambda s: s.get_run(run_id),
            fixed(f"SELECT doc FROM runs WHERE run_id = '{run_id}'"),
        ),
        (
            "run detail",
            "its history (200 events)",
            lambda s: s.list_events(run_id, 0, 201),
            fixed(f"SELECT * FROM events WHERE run_id = '{run_id}' AND seq > 0 ORDER BY seq LIMIT 201"),
        ),
        (
            "run detail",
            "its timers from storage",
            lambda s: s.timers_for_run(run_id),
            fixed(f"SELECT * FROM timers WHERE run_id = '{run_id}' ORDER BY slot"),
        ),
        (
            "timers",
            "next 50 due",
            lambda s: s.timers_due_before(far, 51),
            fixed(f"SELECT * FROM timers WHERE due_at < {far} ORDER BY due_at, run_id, slot LIMIT 51"),
        ),
        (
            "workflows",
            "latest versions",
            lambda s: s.list_workflows("shop", 51),
            fixed(
                "SELECT w.* FROM workflows w JOIN (SELECT name, MAX(version) AS v FROM workflows"
                " WHERE app = 'shop' AND name > '' GROUP BY name) latest"
                " ON w.name = latest.name AND w.version = latest.v"
                " WHERE w.app = 'shop' ORDER BY w.name LIMIT 51"
            ),
        ),
    ]
    return out


def plan_sqlite(url: str, sql: str) -> str:
    import sqlite3

    conn = sqlite3.connect(sqlite_path(url))
    try:
        return " | ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
    finally:
        conn.close()


def plan_postgres(url: str, sql: str) -> str:
    from tests.pg import _bin

    out = subprocess.run(
        [_bin("psql"), url, "-XAt", "-c", f"EXPLAIN (COSTS OFF) {sql}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return " | ".join(ln.strip() for ln in out.stdout.splitlines() if ln.strip()) or out.stderr.strip()


async def measure(url: str, todo: list[Case]) -> list[list[Any]]:
    out = []
    async with open_store(url) as store:
        for page, label, call, _ in todo:
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                result = await call(store)
                times.append(time.perf_counter() - t0)
            n = len(result) if isinstance(result, (list, dict)) else result if isinstance(result, int) else 1
            out.append([page, label, f"{statistics.median(times) * 1000:.2f}", n])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--quick", action="store_true", help="50,000 runs")
    args = c.parse_args(parser, runs=50_000)
    c.header(f"console queries at {args.runs:,} runs ({args.backend})", args)
    workdir = c.tmpdir("console")
    cluster = c.pg_cluster() if args.backend == "postgres" else None
    url = c.database_url(args.backend, workdir, cluster)

    async def migrate() -> None:
        async with open_store(url) as store:
            await store.migrate()
            await store.add_workflow_version(
                "shop", "refund", json.dumps({"name": "refund", "steps": []}), T0
            )

    trio.run(migrate)
    t0 = time.perf_counter()
    (seed_sqlite if args.backend == "sqlite" else seed_postgres)(url, args.runs)
    print(f"  seeded {args.runs:,} runs in {time.perf_counter() - t0:.0f}s")
    todo = cases(args.runs)
    timed = trio.run(measure, url, todo)
    plan = plan_sqlite if args.backend == "sqlite" else plan_postgres
    table = []
    for (_page, _label, _, sql), row in zip(todo, timed, strict=True):
        text = plan(url, sql(args.backend == "postgres")) if sql else ""
        full = (
            "FULL SCAN"
            if (" SCAN runs" in f" {text}" and "USING" not in text) or "Seq Scan on runs" in text
            else "SORT"
            if "TEMP B-TREE FOR ORDER BY" in text or re.search(r"(?<!Incremental )\bSort\b(?! Key)", text)
            else ""
        )
        table.append([*row, full, text[:160]])
    print(
        c.table(
            f"console queries at {args.runs:,} runs ({args.backend})",
            ["page", "query", "ms (median of 5)", "rows", "", "plan"],
            table,
        )
    )


if __name__ == "__main__":
    main()
