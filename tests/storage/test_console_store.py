"""The console's storage, both backends: counters kept by triggers, filtered keyset lists,
stored timers, operator tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest

from foliot.core.workflow.model import ErrorInfo, Run, Timer
from foliot.storage.base import Store, UnitOfWork
from foliot.storage.console import OperatorTokenRecord, RunQuery, run_query_sql
from foliot.storage.factory import open_store

from .test_contract import T0, make_run, query_plan, raw


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with open_store(database_url) as s:
        yield s


async def change(store: Store, run: Run, **kw: object) -> Run:
    new = attrs.evolve(run, seq=run.seq + 1, updated_at=run.updated_at + 1, **kw)  # type: ignore[arg-type]
    await store.commit(UnitOfWork(new, run.seq))
    return new


async def test_run_counts_follow_every_status_change_and_prune(store: Store) -> None:
    assert await store.run_counts() == {}
    a = make_run("a", status="running")
    b = make_run("b", status="running")
    c = attrs.evolve(make_run("c", status="waiting"), app="other")
    for run in (a, b, c):
        await store.commit(UnitOfWork(run, None))
    assert await store.run_counts() == {("app", "running"): 2, ("other", "waiting"): 1}
    a = await change(store, a, status="waiting")
    a = await change(store, a, state={"x": 1})  # same status: no change
    b = await change(store, b, status="completed", closed_at=T0 + 5)
    assert await store.run_counts() == {
        ("app", "waiting"): 1,
        ("app", "completed"): 1,
        ("other", "waiting"): 1,
    }
    assert await store.prune_closed_runs(T0 + 100, 10) == 1
    assert await store.run_counts() == {("app", "waiting"): 1, ("other", "waiting"): 1}


async def test_query_runs_filters_and_keyset_pages(store: Store) -> None:
    runs = []
    for i in range(30):
        run = make_run(
            f"r{i:02}",
            status="failed" if i % 3 == 0 else "waiting",
            bk=f"k{i}",
            created=T0 + i // 2,  # pairs share a created_at: the run id breaks the tie
            error=ErrorInfo("s", "boom" if i % 6 == 0 else "other", "m") if i % 3 == 0 else None,
        )
        run = attrs.evolve(run, version=1 + i % 2, workflow="wf2" if i % 5 == 0 else "wf")
        await store.commit(UnitOfWork(run, None))
        runs.append(run)

    async def all_pages(q: RunQuery, size: int) -> list[str]:
        out: list[str] = []
        after = None
        while True:
            page = await store.query_runs(q, size, after)
            out += [r.run_id for r in page]
            if len(page) < size:
                return out
            after = (page[-1].created_at, page[-1].run_id)

    newest_first = [r.run_id for r in sorted(runs, key=lambda r: (r.created_at, r.run_id), reverse=True)]
    assert await all_pages(RunQuery("app"), 7) == newest_first
    assert await all_pages(RunQuery("nope"), 7) == []

    def expect(pred: object) -> list[str]:
        return [r for r in newest_first if pred(next(x for x in runs if x.run_id == r))]  # type: ignore[operator]

    cases = [
        (RunQuery("app", status="failed"), lambda r: r.status == "failed"),
        (RunQuery("app", workflow="wf2"), lambda r: r.workflow == "wf2"),
        (RunQuery("app", workflow="wf", version=2), lambda r: r.workflow == "wf" and r.version == 2),
        (RunQuery("app", business_key="k7"), lambda r: r.business_key == "k7"),
        (RunQuery("app", error_class="boom"), lambda r: r.error is not None and r.error.cls == "boom"),
        (RunQuery("app", created_from=T0 + 3, created_to=T0 + 6), lambda r: T0 + 3 <= r.created_at < T0 + 6),
        (
            RunQuery("app", status="failed", created_from=T0 + 4),
            lambda r: r.status == "failed" and r.created_at >= T0 + 4,
        ),
    ]
    for q, pred in cases:
        assert await all_pages(q, 2) == expect(pred), q
        assert await store.count_runs(q, 1000) == len(expect(pred)), q
    assert await store.count_runs(RunQuery("app"), 7) == 7  # stops at the cap


async def test_timers_for_run_and_count(store: Store) -> None:
    run = make_run("t1", status="sleeping", timer=Timer("sleep", T0 + 99, "1:nap#1"), deadline=T0 + 500)
    await store.commit(UnitOfWork(run, None))
    await store.commit(UnitOfWork(make_run("t2", status="waiting"), None))
    rows = await store.timers_for_run("t1")
    assert [(t.slot, t.kind, t.key, t.due_at) for t in rows] == [
        ("run", "run_timeout", "1", T0 + 500),
        ("step", "sleep", "1:nap#1", T0 + 99),
    ]
    assert await store.timers_for_run("t2") == []
    assert await store.count_timers(100) == 2
    assert await store.count_timers(1) == 1  # counting stops at the cap


async def test_operator_tokens(store: Store) -> None:
    a = OperatorTokenRecord("op_a", "alice", "viewer", "h1", T0)
    b = OperatorTokenRecord("op_b", None, "operator", "h2", T0 + 1)
    await store.add_operator_token(a)
    await store.add_operator_token(b)
    assert await store.get_operator_token("op_a") == a
    assert await store.get_operator_token("op_zz") is None
    assert await store.list_operator_tokens() == [a, b]
    assert await store.revoke_operator_token("op_a", T0 + 9)
    assert not await store.revoke_operator_token("op_a", T0 + 10)  # once
    assert not await store.revoke_operator_token("op_zz", T0 + 10)
    assert await store.get_operator_token("op_a") == attrs.evolve(a, revoked_at=T0 + 9)
    assert await store.list_operator_tokens() == [b]


async def test_error_class_and_version_search_hostile_classes(store: Store) -> None:
    """The generated search columns (migration 0021) take any class a handler may send,
    \\u0000, quotes and non-ASCII included, without failing the write; the filter finds it."""
    classes = ["nul\x00byte", 'quote"and\\\\slash', "ünï✓", "<script>x</script>", "plain"]
    runs = []
    for i, cls in enumerate(classes):
        run = make_run(f"h{i}", status="failed", error=ErrorInfo("s", cls, "m"))
        await store.commit(UnitOfWork(attrs.evolve(run, version=7 + i), None))
        runs.append(run)
    await store.commit(UnitOfWork(make_run("ok", status="running"), None))
    for i, cls in enumerate(classes):
        found = await store.query_runs(RunQuery("app", error_class=cls), 10, None)
        assert [r.run_id for r in found] == [f"h{i}"], cls
        found = await store.query_runs(RunQuery("app", workflow=runs[i].workflow, version=7 + i), 10, None)
        assert [r.run_id for r in found] == [f"h{i}"]
    # a run that recovers leaves the error-class search (the column follows the document)
    await change(store, runs[4], status="running", error=None)
    assert await store.query_runs(RunQuery("app", error_class="plain"), 10, None) == []
    assert await store.count_open_runs() == {"running": 2}


async def test_migration_0021_fills_the_search_columns(store: Store) -> None:
    """Runs stored before 0021 get their version and error class from their documents."""
    failed = make_run("m1", status="failed", error=ErrorInfo("s", "card_declined", "m"))
    await store.commit(UnitOfWork(attrs.evolve(failed, version=3), None))
    await store.commit(UnitOfWork(make_run("m2", status="running"), None))
    await raw(
        store,
        "DROP INDEX runs_open_by_step",  # migration 0077 indexes these columns too
        "DROP INDEX runs_by_version",
        "DROP INDEX runs_by_error_class",
        "DROP INDEX runs_by_status_error_class",
        "ALTER TABLE runs DROP COLUMN workflow_version",
        "ALTER TABLE runs DROP COLUMN error_class",
        "DELETE FROM schema_migrations WHERE version = 21",
    )
    await store.migrate()
    found = await store.query_runs(RunQuery("app", error_class="card_declined"), 10, None)
    assert [r.run_id for r in found] == ["m1"]
    found = await store.query_runs(RunQuery("app", workflow=failed.workflow, version=3), 10, None)
    assert [r.run_id for r in found] == ["m1"]


SEARCHES = [
    (RunQuery("app"), "runs_by_app"),
    (RunQuery("app", status="failed"), "runs_by_status"),
    (RunQuery("app", workflow="wf"), "runs_by_workflow"),
    (RunQuery("app", workflow="wf", version=2), "runs_by_version"),
    (RunQuery("app", business_key="k"), "runs_by_business_key"),
    (RunQuery("app", error_class="boom"), "runs_by_error_class"),
    (RunQuery("app", status="failed", error_class="boom"), "runs_by_status_error_class"),
    (RunQuery("app", workflow="wf", version=2, status="failed"), "runs_by_"),
]


@pytest.mark.parametrize(("query", "index"), SEARCHES)
async def test_every_run_search_walks_an_index_in_order(store: Store, query: RunQuery, index: str) -> None:
    """Each filter the console offers is answered by an index walked in the list's order (no
    sort), from the keyset cursor too: its time does not grow with the table."""
    from foliot.storage.sqlite import SqliteStore

    postgres = not isinstance(store, SqliteStore)
    for after in (None, (T0, "r5")):
        sql, params = run_query_sql(query, 51, after, postgres=True)
        plan = await query_plan(store, sql, *params)
        assert index in plan, (query, plan)
        assert "TEMP B-TREE" not in plan and "Sort" not in plan, (query, plan)
        assert not any(line.startswith("SCAN runs") for line in plan.splitlines()), plan
        assert "Seq Scan" not in plan or not postgres, plan


async def test_run_counts_follow_batched_starts_and_pruning(store: Store) -> None:
    """Starts committed together (group commit writes them as one statement) and a page of runs
    pruned at once are counted exactly (PostgreSQL counts them per statement, migration 0022)."""
    import trio

    async def start(i: int) -> None:
        status = "completed" if i % 4 == 0 else "waiting"
        run = make_run(f"b{i:02}", status=status, closed_at=T0 + 1 if status == "completed" else None)
        await store.commit(UnitOfWork(attrs.evolve(run, app="other" if i % 5 == 0 else "app"), None))

    async with trio.open_nursery() as nursery:
        for i in range(40):
            nursery.start_soon(start, i)
    expected: dict[tuple[str, str], int] = {}
    for i in range(40):
        key = ("other" if i % 5 == 0 else "app", "completed" if i % 4 == 0 else "waiting")
        expected[key] = expected.get(key, 0) + 1
    assert await store.run_counts() == expected
    assert await store.prune_closed_runs(T0 + 100, 1000) == 10
    assert await store.run_counts() == {k: n for k, n in expected.items() if k[1] == "waiting"}
    assert await store.count_open_runs() == {"waiting": 30}
