"""The overdue view's storage on both backends: grouping, order, closed runs, migration 0010."""

from __future__ import annotations

import attrs

from foliot.core.workflow.model import run_to_dict
from foliot.storage.base import OVERDUE_SQL, OverdueGroup, Store, UnitOfWork, json_dumps

from .test_contract import T0, make_run, query_plan, raw, store  # noqa: F401  (fixture)

HOUR = 3_600_000


async def test_overdue_runs_are_grouped_largest_first(store: Store) -> None:  # noqa: F811
    def at(run_id: str, step: str, since: int, status: str = "waiting", **kw: object) -> UnitOfWork:
        return UnitOfWork(make_run(run_id, status=status, current_step=step, step_since=since, **kw), None)

    units = [
        at("a1", "pay", T0 - 5 * HOUR),
        at("a2", "pay", T0 - 3 * HOUR),
        at("a3", "pay", T0 - 2 * HOUR),
        at("b1", "ship", T0 - 9 * HOUR, status="running"),
        at("b2", "ship", T0 - 9 * HOUR, status="paused"),
        at("c1", "pay", T0 - 10 * 60_000),  # pending 10 minutes: not overdue at 1 h
        at("d1", "pay", T0 - 20 * HOUR, status="completed", closed_at=T0 - 19 * HOUR),
    ]
    for unit in units:
        await store.commit(unit)
    groups = await store.overdue_runs(T0 - HOUR, 100)
    assert groups == [
        OverdueGroup("app", "wf", "pay", "waiting", 3, T0 - 5 * HOUR),
        OverdueGroup("app", "wf", "ship", "paused", 1, T0 - 9 * HOUR),
        OverdueGroup("app", "wf", "ship", "running", 1, T0 - 9 * HOUR),
    ]
    assert len(await store.overdue_runs(T0 - HOUR, 1)) == 1
    assert await store.overdue_runs(T0 - 24 * HOUR, 100) == []
    # The run moves on: its row follows (a new step, a new entry time); closing removes it.
    moved = attrs.evolve(units[0].run, current_step="ship", step_since=T0, seq=1)
    await store.commit(UnitOfWork(moved, 0))
    closed = attrs.evolve(units[1].run, status="cancelled", closed_at=T0, seq=1)
    await store.commit(UnitOfWork(closed, 0))
    assert await store.overdue_runs(T0 - HOUR, 100) == [  # equal counts: oldest first
        OverdueGroup("app", "wf", "ship", "paused", 1, T0 - 9 * HOUR),
        OverdueGroup("app", "wf", "ship", "running", 1, T0 - 9 * HOUR),
        OverdueGroup("app", "wf", "pay", "waiting", 1, T0 - 2 * HOUR),
    ]


async def test_the_overdue_query_walks_its_index(store: Store) -> None:  # noqa: F811
    from foliot.storage.sqlite import SqliteStore

    true = "1" if isinstance(store, SqliteStore) else "TRUE"
    plan = await query_plan(store, OVERDUE_SQL.format(true=true, p1="$1", p2="$2"), T0, 10)
    assert "runs_step_since" in plan, plan


async def test_migration_fills_the_columns_of_runs_stored_before(store: Store) -> None:  # noqa: F811
    legacy = run_to_dict(make_run("legacy", current_step="pay"))
    legacy["updated_at"] = T0 - 7 * HOUR
    del legacy["step_since"]
    await raw(
        store,
        "DROP INDEX runs_open_by_step",  # migration 0077 indexes these columns too
        "DROP INDEX runs_step_since",
        "ALTER TABLE runs DROP COLUMN step_since",
        "ALTER TABLE runs DROP COLUMN current_step",
        "DELETE FROM schema_migrations WHERE version = 10",
    )
    text = json_dumps(legacy).replace("'", "''")
    await raw(
        store,
        "INSERT INTO runs (run_id, app, workflow, status, business_key, is_open, created_at, seq, doc)"
        f" VALUES ('legacy', 'app', 'wf', 'waiting', NULL, TRUE, {T0}, 0, '{text}')",
    )
    await store.migrate()
    assert await store.overdue_runs(T0 - HOUR, 10) == [
        OverdueGroup("app", "wf", "pay", "waiting", 1, T0 - 7 * HOUR)
    ]
