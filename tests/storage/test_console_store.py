"""The console's storage, both backends: counters kept by triggers, filtered keyset lists,
stored timers, operator tokens."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest

from foliot.storage.base import Store, UnitOfWork
from foliot.storage.console import OperatorTokenRecord, RunQuery
from foliot.storage.factory import open_store
from foliot.workflow.model import ErrorInfo, Run, Timer

from .test_contract import T0, make_run


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
