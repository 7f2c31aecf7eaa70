"""Retention covers every table (issue 37): each table of both stores, read from the schema after
the migrations, has a pruning rule the code really holds, or a stated reason to need none; and
the rules added for schedule fires and debounce keys delete what they should and nothing else."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any, Final

import attrs
import pytest

from foliot.storage import flow, run_sql, schedules, sessions, swf_sql
from foliot.storage.base import DebounceChange, Store, UnitOfWork
from foliot.storage.factory import open_store
from foliot.storage.schedules import FIRES_START, ScheduleFire

from .test_contract import T0, make_run, seed_app


def _text(rule: Any) -> str:
    if isinstance(rule, str):
        return rule
    if isinstance(rule, tuple):
        return " ".join(rule)
    return inspect.getsource(rule)


# table -> where its rows are deleted (a statement, a table list or a function whose source
# names the table): each must name it, so a rule removed from the code fails here.
PRUNED: Final[dict[str, tuple[Any, ...]]] = {
    "runs": (run_sql.prune_runs_tx,),
    "events": (run_sql.prune_runs_tx,),
    "tasks": (run_sql.prune_runs_tx,),
    "timers": (run_sql.prune_runs_tx,),
    "signal_ids": (run_sql.prune_runs_tx,),
    "schedule_fires": (run_sql.prune_runs_tx, schedules.DELETE_ORPHAN_FIRE),
    "debounce_keys": (run_sql.prune_runs_tx, run_sql.OVER_DEBOUNCE, run_sql.DROP_DEBOUNCE),
    "idempotency": (run_sql.SQLITE.prune_idempotency, run_sql.POSTGRES.prune_idempotency),
    "rate_buckets": (flow.PRUNE_BUCKETS_SQLITE, flow.PRUNE_BUCKETS_POSTGRES),
    "console_sessions": (sessions.DELETE_EXPIRED,),
    "swf_executions": (swf_sql.PRUNED_TABLES,),
    "swf_events": (swf_sql.PRUNED_TABLES,),
    "swf_tasks": (swf_sql.PRUNED_TABLES,),
    "swf_listing": (swf_sql.PRUNED_TABLES,),
    "swf_owed": (swf_sql.PRUNED_TABLES, swf_sql.SETTLE_OWED),
    "swf_parked": (swf_sql.PRUNED_TABLES, swf_sql.UNPARK),
}

# Tables that need no pruning: bounded by what an operator or an app defines, each with why.
BOUNDED: Final[dict[str, str]] = {
    "schema_migrations": "one row per migration file",
    "apps": "one per app an operator created",
    "api_keys": "an app's keys, created and revoked by an operator",
    "signing_secrets": "an app's signing secrets, rotated by an operator",
    "secret_key_check": "one row: the check of the server's secret key",
    "operator_tokens": "created and revoked by an operator",
    "workflows": "one per registered version: what an app deploys",
    "schedules": "one per schedule an app defines, at most FOLIOT_SCHEDULES_PER_APP per app",
    "run_counts": "one counter per (app, status) (and shard on PostgreSQL)",
    "app_flow": "one row per app",
    "app_limits": "one row per app at most (its limit overrides); apps are never deleted",
    "swf_domains": "registered by SWF clients, as on AWS",
    "swf_types": "registered by SWF clients, as on AWS",
    "swf_credentials": "created by an operator",
    "swf_lambda_functions": "registered by an operator",
    "cluster_nodes": "one per node of the cluster, deleted when it leaves",
    "cluster_leases": "one per partition",
}

SQLITE_TABLES: Final = "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
POSTGRES_TABLES: Final = (
    "SELECT table_name FROM information_schema.tables"
    " WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'"
)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with open_store(database_url) as s:
        yield s


async def tables_of(store: Any, database_url: str) -> set[str]:
    sql = POSTGRES_TABLES if database_url.startswith("postgres") else SQLITE_TABLES
    return {str(r[0]) for r in await store._all(sql)}


async def test_every_table_has_a_pruning_rule_or_a_reason(store: Store, database_url: str) -> None:
    tables = await tables_of(store, database_url)
    assert "runs" in tables and "schedule_fires" in tables  # the schema was read
    assert not set(PRUNED) & set(BOUNDED)
    unruled = sorted(tables - set(PRUNED) - set(BOUNDED))
    assert unruled == [], f"tables with no pruning rule (add one, or a reason to BOUNDED): {unruled}"
    for table, rules in PRUNED.items():
        for rule in rules:
            assert table in _text(rule), f"{table}: its rule {rule!r} does not name it"


def fired_unit(run_id: str, at: int) -> UnitOfWork:
    run = make_run(run_id, bk=f"schedule:s:{at}")
    return UnitOfWork(run, None, fire=ScheduleFire("app", "s", at, run_id, T0))


def leading_unit(run_id: str, key: str, until: int) -> UnitOfWork:
    claim = DebounceChange("claim", "wf", key, "leading", until)
    return UnitOfWork(make_run(run_id), None, debounce=claim)


async def close(store: Store, run_id: str, at: int) -> None:
    run = await store.get_run(run_id)
    assert run is not None
    closed = attrs.evolve(run, status="completed", seq=run.seq + 1, closed_at=at)
    await store.commit(UnitOfWork(closed, run.seq))


async def test_fire_records_and_debounce_keys_go_with_their_runs(store: Store) -> None:
    await seed_app(store)
    await store.commit(fired_unit("run_old", T0))
    await store.commit(fired_unit("run_new", T0 + 60_000))
    await store.commit(leading_unit("run_lead", "k", T0 + 10**12))  # a burst not over
    for run_id in ("run_old", "run_lead"):
        await close(store, run_id, T0 + 1)
    await close(store, "run_new", T0 + 10_000)

    assert await store.prune_closed_runs(T0 + 5_000, 10) == 2
    assert await store.get_schedule_fire("app", "s", T0) is None
    assert await store.get_debounce("app", "wf", "k") is None
    kept = await store.get_schedule_fire("app", "s", T0 + 60_000)
    assert kept is not None and kept.run_id == "run_new"
    assert [f.fire.run_id for f in await store.last_schedule_fires("app", "s", 10)] == ["run_new"]


async def test_a_leading_key_goes_once_its_burst_is_over_and_its_run_closed(store: Store) -> None:
    await seed_app(store)
    await store.commit(leading_unit("run_over", "over", T0 + 1_000))
    await store.commit(leading_unit("run_open", "open", T0 + 1_000))  # its run still open
    await store.commit(leading_unit("run_later", "later", T0 + 90_000))  # the window not over
    await close(store, "run_over", T0 + 10)
    await close(store, "run_later", T0 + 10)

    assert await store.prune_debounce_keys(T0 + 2_000, 10) == 1
    assert await store.get_debounce("app", "wf", "over") is None
    assert await store.get_debounce("app", "wf", "open") is not None
    assert await store.get_debounce("app", "wf", "later") is not None
    assert await store.prune_debounce_keys(T0 + 2_000, 10) == 0
    assert await store.prune_debounce_keys(T0 + 90_000, 10) == 1
    assert await store.get_debounce("app", "wf", "later") is None


async def orphan(store: Any, at: int, run_id: str) -> None:
    """A fire record whose run is gone: what pruning left before records went with runs."""
    sql = "INSERT INTO schedule_fires (app, name, scheduled_time, run_id, fired_at) VALUES (?, ?, ?, ?, ?)"
    assert await store._change(sql, "app", "s", at, run_id, T0) == 1


async def test_the_sweep_deletes_fire_records_whose_run_is_gone(store: Store) -> None:
    """Fire records of runs pruned before they went together: found a page at a time, in key
    order, and deleted; those of kept runs stay."""
    await seed_app(store)
    for i in (0, 2, 4, 5, 6):
        await store.commit(fired_unit(f"run_{i}", T0 + i))
    await orphan(store, T0 + 1, "run_gone_1")
    await orphan(store, T0 + 3, "run_gone_3")
    pages, after, deleted = 0, FIRES_START, 0
    while True:
        gone, after = await store.prune_orphan_fires(after, 2)
        deleted, pages = deleted + gone, pages + 1
        if after is None:
            break
    assert deleted == 2 and pages == 4  # 7 records, 2 a page
    assert await store.get_schedule_fire("app", "s", T0 + 1) is None
    assert await store.get_schedule_fire("app", "s", T0 + 3) is None
    kept = [f.fire.run_id for f in await store.last_schedule_fires("app", "s", 20)]
    assert kept == ["run_6", "run_5", "run_4", "run_2", "run_0"]
    assert await store.prune_orphan_fires(FIRES_START, 100) == (0, None)
