"""Fencing on PostgreSQL: a unit of work carries the lease it was made under, and the database
writes it only while `cluster_leases` shows that node holding that partition at that epoch,
unexpired on its own clock. A refused unit raises `Fenced` and leaves nothing behind (run,
events, tasks, timers, signal ids); in a batch it fails alone."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio

from foliot.core.errors import Fenced
from foliot.core.leases import partition_of
from foliot.core.swf import machine as swf_machine
from foliot.core.swf import messages as m
from foliot.core.workflow.model import Event, Timer
from foliot.kinds.swf.actor import transition_unit
from foliot.storage.base import UnitOfWork
from foliot.storage.cluster import NOW_MS
from foliot.storage.fence import Fence
from foliot.storage.postgres import PostgresStore, open_postgres
from foliot.storage.swf import SwfStored, SwfUnit, swf_actor_id

from ..storage.test_contract import T0, make_run, seed_app
from ..storage.test_group_commit import (
    Hold,
    commit_as_one_batch,
    expected,
    postgres_hold,
    stored,
    task,
    until,
)
from ..swf.store_kit import CATALOG, WF, Live

pytestmark = pytest.mark.postgres

TTL = 60_000
R = "us-east-1"


@pytest.fixture
async def pg(pg_cluster: Any) -> AsyncIterator[tuple[PostgresStore, Hold]]:
    """A store with one writer, and `hold()` to queue commits into one batch."""
    async with open_postgres(pg_cluster.new_database(), writers=1) as store:
        await seed_app(store)
        yield store, postgres_hold(store)


def run_in(partition: int, tag: str) -> str:
    """A run id of `partition`."""
    i = 0
    while partition_of(f"run_{tag}{i}") != partition:
        i += 1
    return f"run_{tag}{i}"


def new_run(run_id: str, fence: Fence | None, **kw: Any) -> UnitOfWork:
    run = make_run(run_id, status="sleeping", seq=1, timer=Timer("sleep", T0 + 5, f"{run_id}#1"))
    return UnitOfWork(
        run,
        None,
        (Event(1, T0, 1, "run_started"),),
        (task(f"tok-{run_id}", run_id),),
        signal_ids=(f"sig-{run_id}",),
        fences=() if fence is None else (fence,),
        **kw,
    )


def moved(unit: UnitOfWork, fence: Fence | None) -> UnitOfWork:
    """The next unit of the run `unit` created: closes its task, re-arms its timer."""
    run = unit.run
    after = attrs.evolve(run, seq=2, timer=Timer("sleep", T0 + 9, f"{run.run_id}#2"))
    closed = task(f"tok-{run.run_id}", run.run_id, "closed", "answered")
    return UnitOfWork(
        after,
        1,
        (Event(2, T0 + 1, 1, "step_completed"),),
        (closed,),
        signal_ids=(f"sig2-{run.run_id}",),
        fences=() if fence is None else (fence,),
    )


async def expire(store: PostgresStore, partition: int) -> None:
    """The lease's expiry passes on the database's clock (as if its TTL went by unrenewed)."""
    await store._call(
        lambda c: c.execute(
            f"UPDATE cluster_leases SET expires_at = {NOW_MS} - 1 WHERE partition = $1", partition
        )
    )


async def nothing_of(store: PostgresStore, unit: UnitOfWork) -> None:
    """None of the unit's rows is stored."""
    run_id = unit.run.run_id
    assert await store.get_run(run_id) is None
    assert await store.list_events(run_id, 0, 10) == []
    assert [await store.get_task(t.token) for t in unit.tasks] == [None] * len(unit.tasks)
    assert [t for t in await store.timers_due_before(2**62, 1000) if t.run_id == run_id] == []
    assert not [s for s in unit.signal_ids if await store.signal_taken(run_id, s)]


async def test_a_write_at_a_stale_epoch_is_refused_and_nothing_of_it_is_stored(
    pg: tuple[PostgresStore, Hold],
) -> None:
    store, _ = pg
    assert await store.cluster_acquire("a", [7], 0) == {7: 1}  # expires at once
    assert await store.cluster_acquire("b", [7], TTL) == {7: 2}  # b took it over
    stale, current = Fence("a", 7, 1), Fence("b", 7, 2)

    refused = new_run(run_in(7, "x"), stale)
    with pytest.raises(Fenced):
        await store.commit(refused)
    await nothing_of(store, refused)

    # The new holder writes; the old one cannot move the run on, nor add to it.
    first = new_run(run_in(7, "y"), current)
    await store.commit(first)
    assert await stored(store, first) == expected(first)
    with pytest.raises(Fenced):
        await store.commit(moved(first, stale))
    with pytest.raises(Fenced):  # the right epoch by another node's name is no better
        await store.commit(moved(first, Fence("a", 7, 2)))
    assert await stored(store, first) == expected(first)
    second = moved(first, current)
    await store.commit(second)
    assert await stored(store, second) == expected(second, first.events)


async def test_a_write_after_the_lease_expired_or_was_released_is_refused(
    pg: tuple[PostgresStore, Hold],
) -> None:
    store, _ = pg
    assert await store.cluster_acquire("a", [3], 0) == {3: 1}  # nobody took it, but it expired
    late = new_run(run_in(3, "late"), Fence("a", 3, 1))
    with pytest.raises(Fenced):
        await store.commit(late)
    await nothing_of(store, late)

    assert await store.cluster_acquire("a", [4], TTL) == {4: 1}
    ok = new_run(run_in(4, "ok"), Fence("a", 4, 1))
    await store.commit(ok)  # within the lease
    await expire(store, 4)  # its time runs out, with no renewal
    with pytest.raises(Fenced):
        await store.commit(moved(ok, Fence("a", 4, 1)))
    assert await stored(store, ok) == expected(ok)

    assert await store.cluster_acquire("a", [5], TTL) == {5: 1}
    await store.cluster_release("a", {5: 1})
    released = new_run(run_in(5, "rel"), Fence("a", 5, 1))
    with pytest.raises(Fenced):
        await store.commit(released)
    await nothing_of(store, released)


async def test_in_a_batch_a_fenced_unit_fails_alone(pg: tuple[PostgresStore, Hold]) -> None:
    store, hold = pg
    assert await store.cluster_acquire("a", [1, 2], TTL) == {1: 1, 2: 1}
    assert await store.cluster_acquire("old", [9], 0) == {9: 1}
    assert await store.cluster_acquire("a", [9], TTL) == {9: 2}
    good, stale = Fence("a", 1, 1), Fence("old", 9, 1)

    # Starts only (the one-statement path).
    starts = [
        new_run(run_in(1, "s0"), good),
        new_run(run_in(9, "s1"), stale),
        new_run(run_in(2, "s2"), Fence("a", 2, 1)),
        new_run("run_unfenced", None),
    ]
    outcomes = await commit_as_one_batch(store, hold, starts)
    assert [type(o) for o in outcomes] == [type(None), Fenced, type(None), type(None)]
    for i in (0, 2, 3):
        assert await stored(store, starts[i]) == expected(starts[i])
    await nothing_of(store, starts[1])

    # Updates and starts together (the transaction), a stale update among them.
    mixed = [
        moved(starts[0], good),
        moved(starts[2], stale),  # its own partition is held, but not under this fence
        new_run(run_in(1, "m0"), good),
        new_run(run_in(9, "m1"), stale),
        moved(starts[3], None),
    ]
    outcomes = await commit_as_one_batch(store, hold, mixed)
    assert [type(o) for o in outcomes] == [type(None), Fenced, type(None), Fenced, type(None)]
    assert await stored(store, mixed[0]) == expected(mixed[0], starts[0].events)
    assert await stored(store, starts[2]) == expected(starts[2])  # unchanged
    assert await stored(store, mixed[2]) == expected(mixed[2])
    await nothing_of(store, mixed[3])
    assert await stored(store, mixed[4]) == expected(mixed[4], starts[3].events)
    assert store.stats["units"] >= 7


async def test_runs_moving_on_under_held_leases_are_one_statement_and_a_stale_lease_fails_alone(
    pg: tuple[PostgresStore, Hold],
) -> None:
    """Updates only (signals, answers, timers): the fenced one-statement path writes them when
    every lease holds; one stale fence refuses that statement, and the units are then written
    one by one, the fenced one refused alone."""
    store, hold = pg
    assert await store.cluster_acquire("a", [1, 2], TTL) == {1: 1, 2: 1}
    assert await store.cluster_acquire("old", [9], 0) == {9: 1}
    assert await store.cluster_acquire("a", [9], TTL) == {9: 2}
    good, stale = Fence("a", 1, 1), Fence("old", 9, 1)
    firsts = [new_run(run_in(1, "g0"), good), new_run(run_in(2, "g1"), Fence("a", 2, 1))]
    firsts.append(new_run(run_in(9, "g2"), Fence("a", 9, 2)))
    for unit in firsts:
        await store.commit(unit)

    base = store.stats["units_together"]
    clean = [moved(firsts[0], good), moved(firsts[1], Fence("a", 2, 1))]
    assert await commit_as_one_batch(store, hold, clean) == [None, None]
    assert store.stats["units_together"] - base == 2  # one statement, under both leases
    for unit, first in zip(clean, firsts, strict=False):
        assert await stored(store, unit) == expected(unit, first.events)

    third = attrs.evolve(clean[0].run, seq=3)
    again = attrs.evolve(
        clean[0], run=third, expected_seq=2, events=(Event(3, T0 + 2, 1, "x"),), signal_ids=()
    )
    batch = [again, moved(firsts[2], stale)]
    outcomes = await commit_as_one_batch(store, hold, batch)
    assert [type(o) for o in outcomes] == [type(None), Fenced]
    assert (await store.get_run(firsts[0].run.run_id)).seq == 3  # type: ignore[union-attr]
    assert await stored(store, firsts[2]) == expected(firsts[2])  # unchanged


def swf_run_in(partition: int, tag: str) -> str:
    i = 0
    while partition_of(swf_actor_id(R, f"{tag}{i}")) != partition:
        i += 1
    return f"{tag}{i}"


async def test_an_swf_commit_is_fenced_too(pg: tuple[PostgresStore, Hold]) -> None:
    store, _ = pg
    assert await store.cluster_acquire("old", [6], 0) == {6: 1}
    assert await store.cluster_acquire("a", [6], TTL) == {6: 2}
    stale, current = Fence("old", 6, 1), Fence("a", 6, 2)

    # A start under a stale lease: no execution, no history, no task, no timer.
    run_id = swf_run_in(6, "s")
    req = m.StartRequest(domain="d", workflow_id="wf-fenced", workflow_type=WF)
    tr = swf_machine.start(req, CATALOG.workflow_type(WF), run_id, T0)
    assert isinstance(tr, m.Transition)
    with pytest.raises(Fenced):
        await store.swf_commit(SwfUnit(R, tr.execution, None, tr.events, fences=(stale,)))
    assert await store.swf_load(R, run_id) is None
    assert await store.swf_events(R, run_id, None, False, 100) == []
    assert (
        await store._call(lambda c: c.fetchval("SELECT count(*) FROM swf_tasks WHERE run_id = $1", run_id))
        == 0
    )
    timers = await store.timers_due_before(2**62, 1000)
    assert [t for t in timers if t.run_id == swf_actor_id(R, run_id)] == []

    # Under the current lease it starts; a stale holder then cannot move it on.
    await store.swf_commit(SwfUnit(R, tr.execution, None, tr.events, fences=(current,)))
    live = Live(store, R, SwfStored(R, tr.execution, 1))
    scheduled = live.ex.decision.scheduled_event_id  # type: ignore[union-attr]
    polled = swf_machine.transition(live.ex, m.PollDecision(scheduled, "x"), m.Context(T0 + 1, CATALOG, ""))
    assert isinstance(polled, m.Transition)
    unit, _ = transition_unit(R, polled, 1)
    with pytest.raises(Fenced):
        await store.swf_commit(attrs.evolve(unit, fences=(stale,)))
    after = await store.swf_load(R, run_id)
    assert after is not None and after.version == 1
    assert len(await store.swf_events(R, run_id, None, False, 100)) == len(tr.events)
    await store.swf_commit(attrs.evolve(unit, fences=(current,)))
    assert (await store.swf_load(R, run_id)).version == 2  # type: ignore[union-attr]


async def test_a_lease_that_runs_out_while_its_batch_is_written_commits_none_of_it(
    pg: tuple[PostgresStore, Hold],
) -> None:
    """The leases are checked (and locked) as the batch begins and again after its last write:
    a node starved of CPU or paused between its statements past the lease's end commits nothing
    under that lease, so every row a node commits was written before its lease ran out."""
    store, hold = pg
    assert await store.cluster_acquire("a", [4, 5], TTL) == {4: 1, 5: 1}
    fence = Fence("a", 4, 1)
    unit = new_run(run_in(4, "starved"), fence)
    other = new_run(run_in(5, "bystander"), Fence("a", 5, 1))
    outcomes: list[BaseException | None] = [None, None, None]

    async def runs_out(conn: Any) -> None:
        """Written last in the batch: the lease's end passes (the row is this batch's, FOR SHARE)."""
        await conn.execute(f"UPDATE cluster_leases SET expires_at = {NOW_MS} - 1 WHERE partition = 4")

    async def one(i: int) -> None:
        try:
            if i < 2:
                await store.commit([unit, other][i])
            else:
                await store._call(runs_out, write=True, fences=(fence,))
        except Exception as exc:
            outcomes[i] = exc

    async with trio.open_nursery() as nursery, hold():
        for i in range(3):
            nursery.start_soon(one, i)
            await until(lambda n=i + 1: store.pending_writes == n)  # type: ignore[misc]
    # One transaction, rolled back; what was under the lease that held is written again.
    assert [type(o) for o in outcomes] == [Fenced, type(None), Fenced]
    await nothing_of(store, unit)
    assert await stored(store, other) == expected(other)
    now, expires = await store._call(
        lambda c: c.fetchrow(f"SELECT {NOW_MS}, expires_at FROM cluster_leases WHERE partition = 4")
    )
    assert expires > now  # the expiry itself was rolled back with the rest
    await store.commit(unit)  # under a lease that holds, the same unit is written
    assert await stored(store, unit) == expected(unit)
