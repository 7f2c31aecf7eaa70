"""The schedule store on both backends: the schedule row guarded by its version, its timers made
its document's, and the fire record written with its run's insert — a scheduled time inserts one
run, also when two starts of it are committed together in one group-commit batch."""

from __future__ import annotations

from collections.abc import AsyncIterator

import attrs
import pytest
import trio

from foliot.core.errors import StaleWrite, UniqueViolation
from foliot.core.schedule import machine as sm
from foliot.core.schedule.definition import parse_schedule
from foliot.core.workflow.model import Run, ScheduleRef
from foliot.storage.base import RunFilter, Store, UnitOfWork
from foliot.storage.factory import open_store
from foliot.storage.schedules import ScheduleFire, actor_id

from .test_contract import T0, make_run, seed_app


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    async with open_store(database_url) as s:
        yield s


def schedule_state(**fields: object) -> sm.ScheduleState:
    schedule, _ = parse_schedule({"workflow": "wf", "every": "1m", **fields})
    return attrs.evolve(sm.create("app", "s", schedule, None, T0), version=1)


async def test_put_get_list_delete_with_timers(store: Store) -> None:
    await seed_app(store)
    state = schedule_state()
    await store.put_schedule(state, None)
    assert await store.get_schedule("app", "s") == state
    with pytest.raises(StaleWrite):
        await store.put_schedule(state, None)  # exists already
    timers = await store.timers_for_run(actor_id("app", "s"))
    assert [(t.slot, t.kind, t.due_at, t.actor_kind) for t in timers] == [
        ("fire", "fire", T0 + 60_000, "schedule")
    ]
    paused = attrs.evolve(sm.pause(state, "why", T0 + 1), version=2)
    await store.put_schedule(paused, 1)
    with pytest.raises(StaleWrite):
        await store.put_schedule(attrs.evolve(paused, version=3), 1)  # moved on
    assert await store.get_schedule("app", "s") == paused
    assert await store.timers_for_run(actor_id("app", "s")) == []
    other = attrs.evolve(schedule_state(), name="t")
    await store.put_schedule(other, None)
    assert [s.name for s in await store.list_schedules("app", 10)] == ["s", "t"]
    assert [s.name for s in await store.list_schedules("app", 10, "s")] == ["t"]
    with pytest.raises(StaleWrite):
        await store.delete_schedule("app", "s", 1)
    await store.delete_schedule("app", "s", 2)
    assert await store.get_schedule("app", "s") is None


def fired_unit(run_id: str, at: int) -> UnitOfWork:
    run = make_run(run_id, bk=f"schedule:s:{at}", schedule=ScheduleRef("s", at))
    return UnitOfWork(run, None, fire=ScheduleFire("app", "s", at, run_id, T0))


async def test_a_scheduled_time_inserts_one_run_ever(store: Store) -> None:
    await seed_app(store)
    await store.commit(fired_unit("run_a", T0))
    run = await store.get_run("run_a")
    assert run is not None and run.schedule == ScheduleRef("s", T0)
    # Closed, and another start of the same time with another business key: still refused.
    closed = attrs.evolve(run, status="completed", seq=1)
    await store.commit(UnitOfWork(closed, 0))
    second = attrs.evolve(fired_unit("run_b", T0), run=make_run("run_b", bk="other"))
    with pytest.raises(UniqueViolation) as info:
        await store.commit(second)
    assert info.value.constraint == "schedule_fire"
    assert await store.get_run("run_b") is None
    assert await store.get_schedule_fire("app", "s", T0) == ScheduleFire("app", "s", T0, "run_a", T0)
    fires = await store.last_schedule_fires("app", "s", 5)
    assert [(f.fire.run_id, f.status) for f in fires] == [("run_a", "completed")]


async def test_two_starts_of_one_time_in_one_batch(store: Store) -> None:
    """Committed together (the group-commit writers take both in one batch): one run, one refusal."""
    await seed_app(store)
    outcomes: list[str] = []

    async def commit(unit: UnitOfWork) -> None:
        try:
            await store.commit(unit)
            outcomes.append("ok")
        except UniqueViolation as exc:
            outcomes.append(exc.constraint)

    async with trio.open_nursery() as nursery:
        for i in range(4):
            unit = fired_unit(f"run_{i}", T0 + 60_000)
            nursery.start_soon(commit, attrs.evolve(unit, run=make_run(f"run_{i}", bk=f"k{i}")))
        for i in range(4):  # plain starts alongside
            nursery.start_soon(commit, UnitOfWork(make_run(f"plain_{i}"), None))
    assert sorted(outcomes) == ["ok"] * 5 + ["schedule_fire"] * 3
    found: list[Run] = await store.list_runs(RunFilter("app"), 100, None)
    assert len(found) == 5
