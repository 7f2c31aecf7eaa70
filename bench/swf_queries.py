"""The SWF read path on a store holding many executions: time per call and query plans.

    python bench/swf_queries.py [--executions 200000] [--backend sqlite|postgres]
    python bench/swf_queries.py --quick          # 20,000 executions

Migrates a fresh store and writes N executions of one domain straight into it, each made by
the pure machine (`machine.start`, a third of them then terminated) and written with the
store's own statements (`swf_sql.unit_statements`) in large transactions: five workflow
types, tags, a pending decision task per open execution. Then calls the very `Store` methods
the read actions and polls call and prints each one's time (median of 5) and the plan of its
statement. Target: every call an index range, none growing with N (a few ms).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio

from bench import common as c
from bench.console_queries import literal, plan_postgres, plan_sqlite
from foliot.core.swf import machine
from foliot.core.swf import messages as m
from foliot.core.swf.model import TypeRef, WorkflowTypeInfo
from foliot.storage import swf_sql
from foliot.storage.base import Store
from foliot.storage.factory import open_store, sqlite_path
from foliot.storage.swf import (
    DECISION,
    REGISTERED,
    SwfDomain,
    SwfQuery,
    SwfUnit,
    facet_tag,
    facet_type,
)

T0 = 1_790_000_000_000
R, D = "us-east-1", "orders"
TYPES = [TypeRef(name, "1") for name in ("Order", "Refund", "Invoice", "Ship", "Onboard")]
INFOS = {
    t: WorkflowTypeInfo(
        t,
        default_task_start_to_close_timeout="60",
        default_execution_start_to_close_timeout="3600",
        default_task_list="deciders",
        default_child_policy="TERMINATE",
    )
    for t in TYPES
}


def units(count: int) -> Any:
    """One insert unit per execution: started 10 ms apart, every third one terminated."""
    for i in range(count):
        t = TYPES[i % len(TYPES)]
        now = T0 + i * 10
        request = m.StartRequest(
            domain=D, workflow_id=f"wf-{i:09d}", workflow_type=t, tag_list=(f"customer-{i % 1000}", "bulk")
        )
        tr = machine.start(request, INFOS[t], f"run-{i:012x}", now)
        assert isinstance(tr, m.Transition)
        ex, events = tr.execution, tr.events
        if i % 3 == 0:
            closed = machine.transition(ex, m.Terminate(reason="bench"), m.Context(now=now + 5))
            assert isinstance(closed, m.Transition)
            ex, events = closed.execution, events + closed.events
        yield SwfUnit(R, ex, None, events)


def seed(url: str, count: int, postgres: bool) -> None:
    t0 = time.perf_counter()

    def progress(done: int) -> None:
        print(f"  seeded {done:,}/{count:,} ({done / (time.perf_counter() - t0):,.0f}/s)", flush=True)

    if not postgres:
        import sqlite3

        conn = sqlite3.connect(sqlite_path(url), isolation_level=None)
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("BEGIN")
        for done, unit in enumerate(units(count), 1):
            for stmt in swf_sql.unit_statements(unit):
                if stmt.many:
                    conn.executemany(stmt.sql, stmt.rows)
                else:
                    conn.execute(stmt.sql, stmt.args)
            if done % 20_000 == 0:
                conn.execute("COMMIT")
                progress(done)
                conn.execute("BEGIN")
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.close()
        return

    import asyncpg

    async def go() -> None:
        conn = await asyncpg.connect(url)
        batch: dict[str, list[tuple[Any, ...]]] = {}

        async def flush() -> None:
            async with conn.transaction():
                for sql, rows in batch.items():
                    await conn.executemany(swf_sql.numbered(sql), rows)
            batch.clear()

        for done, unit in enumerate(units(count), 1):
            for stmt in swf_sql.unit_statements(unit):
                batch.setdefault(stmt.sql, []).extend(stmt.rows if stmt.many else [stmt.args])
            if done % 20_000 == 0:
                await flush()
                progress(done)
        await flush()
        for table in swf_sql.PRUNED_TABLES:
            await conn.execute(f"VACUUM ANALYZE {table}")
        await conn.close()

    asyncio.run(go())


# what, the Store call, its statement and arguments (to explain), or None
Case = tuple[str, Callable[[Store], Awaitable[Any]], tuple[str, list[Any]] | None]


def cases(count: int) -> list[Case]:
    def q(**kw: Any) -> SwfQuery:
        return SwfQuery(**{"region": R, "domain": D, "open": True, "oldest": 0, **kw})

    middle = T0 + (count // 2) * 10
    deep = (middle, f"wf-{count // 2:09d}", f"run-{count // 2:012x}")
    page = 100

    def listing(label: str, query: SwfQuery, after: Any = None) -> Case:
        return (
            label,
            lambda s: s.swf_list_executions(query, after, page),
            swf_sql.list_sql(query, after, page),
        )

    def counting(label: str, query: SwfQuery, cap: int = 100_001) -> Case:
        return (label, lambda s: s.swf_count_executions(query, cap), swf_sql.count_sql(query, cap))

    some = f"wf-{count // 2 + 1:09d}"
    return [
        listing("ListOpen: newest 100", q()),
        listing("ListOpen: 100 from the middle (token)", q(), deep),
        listing("ListOpen: 100 oldest (reverseOrder)", q(reverse=True)),
        listing("ListOpen: typeFilter Refund", q(facet=facet_type("Refund"))),
        listing("ListOpen: tagFilter customer-7", q(facet=facet_tag("customer-7"))),
        listing("ListClosed: closeTimeFilter, newest 100", q(open=False, by_close=True)),
        listing("ListClosed: startTimeFilter window", q(open=False, oldest=middle, latest=middle + 100_000)),
        counting("CountOpen (to the 100,000 cap)", q()),
        counting("CountClosed: tagFilter customer-7", q(open=False, facet=facet_tag("customer-7"))),
        (
            "Describe (find by workflow id, run id)",
            lambda s: s.swf_find(R, D, some, f"run-{count // 2 + 1:012x}"),
            swf_sql.find_sql(R, D, some, f"run-{count // 2 + 1:012x}"),
        ),
        (
            "GetWorkflowExecutionHistory: a page",
            lambda s: s.swf_events(R, f"run-{count // 2 + 1:012x}", None, False, 1000),
            swf_sql.events_sql(R, f"run-{count // 2 + 1:012x}", None, False, 1000),
        ),
        (
            "CountPendingDecisionTasks (to the cap)",
            lambda s: s.swf_count_pending(R, D, DECISION, "deciders", 100_001),
            (swf_sql.PENDING_COUNT_SQL, [R, D, DECISION, "deciders", 100_001]),
        ),
        ("claim a decision task", claim_and_release, None),
        ("open executions, a rehydration page of 1000", lambda s: s.swf_open_executions(None, 1000), None),
        ("a pruning pass with nothing expired", lambda s: s.swf_prune_closed(T0, 200), None),
    ]


async def claim_and_release(store: Store) -> Any:
    task = await store.swf_claim_task(R, D, DECISION, "deciders", T0, 60_000)
    assert task is not None
    await store.swf_release_task(R, task.run_id, task.scheduled_event_id)
    return 1


async def measure(url: str, todo: list[Case]) -> list[list[Any]]:
    out = []
    async with open_store(url) as store:
        for label, call, _ in todo:
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                result = await call(store)
                times.append(time.perf_counter() - t0)
            n = len(result) if isinstance(result, list) else result if isinstance(result, int) else 1
            out.append([label, f"{statistics.median(times) * 1000:.2f}", n])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--executions", type=int, default=200_000)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--quick", action="store_true", help="20,000 executions")
    args = c.parse_args(parser, executions=20_000)
    postgres = args.backend == "postgres"
    c.header(f"SWF read path at {args.executions:,} executions ({args.backend})", args)
    workdir = c.tmpdir("swf")
    cluster = c.pg_cluster() if postgres else None
    url = c.database_url(args.backend, workdir, cluster)

    async def migrate() -> None:
        async with open_store(url) as store:
            await store.migrate()
            await store.swf_insert_domain(SwfDomain(R, D, REGISTERED, None, "30", "[]", T0), 100)

    trio.run(migrate)
    t0 = time.perf_counter()
    seed(url, args.executions, postgres)
    print(f"  seeded {args.executions:,} executions in {time.perf_counter() - t0:.0f}s")
    todo = cases(args.executions)
    timed = trio.run(measure, url, todo)
    table = []
    for (_label, _, stmt), row in zip(todo, timed, strict=True):
        text = ""
        if stmt is not None:
            sql, params = stmt
            sql = swf_sql.numbered(sql) if postgres else sql
            text = (plan_postgres if postgres else plan_sqlite)(url, literal(sql, params, postgres))
        table.append([*row, text[:150]])
    print(
        c.table(
            f"SWF read path at {args.executions:,} executions ({args.backend})",
            ["call", "ms (median of 5)", "rows", "plan"],
            table,
        )
    )


if __name__ == "__main__":
    main()
