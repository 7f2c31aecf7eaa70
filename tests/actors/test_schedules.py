"""The schedule kind under MockClock: fires on its durable timer, survives a restart on the same
store firing each time exactly once, catches up after an outage (within catchupWindow, older
ones counted as missed), a trigger or a backfill racing the clock makes one run, and a scheduled
time never starts a second run, even after its run closed."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from foliot.core.errors import CommitUnknown, StorageUnavailable
from foliot.core.schedule.definition import parse_schedule
from foliot.core.workflow.machine import Cancel
from foliot.core.workflow.model import Run
from foliot.storage.base import RunFilter

from .conftest import T0, Env, advance

MIN = 60_000
WAIT = {"name": "job", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}


async def put(env: Env, name: str, **fields: Any) -> None:
    schedule, paused = parse_schedule({"workflow": "job", **fields})
    await env.engine.schedules.put("app", name, schedule, paused)


async def runs(env: Env) -> list[Run]:
    return await env.engine.store.list_runs(RunFilter("app", "job"), 1000, None)


async def until_runs(env: Env, count: int, seconds: float = 3600) -> list[Run]:
    with trio.fail_after(seconds):
        while len(found := await runs(env)) < count:
            await advance(1)
    return found


def times(found: list[Run]) -> list[int]:
    assert all(r.schedule is not None for r in found)
    return sorted(r.schedule.scheduled_time for r in found if r.schedule is not None)


def once_each(found: list[Run]) -> None:
    counted = Counter(r.business_key for r in found)
    assert all(n == 1 for n in counted.values()), counted


async def test_a_schedule_fires_on_its_timer(env: Env, autojump_clock: MockClock) -> None:
    await env.register(WAIT)
    await put(env, "tick", every="1m", overlap="allow")
    found = await until_runs(env, 3)
    assert times(found) == [T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN]
    run = found[-1]
    assert run.business_key == "schedule:tick:2027-01-15T08:01:00.000Z"
    assert run.schedule is not None and run.schedule.name == "tick"
    assert run.status == "waiting"
    state = await env.engine.schedules.document("app", "tick")
    assert state is not None and state.fired == 3 and state.missed == 0
    metrics = env.engine.metrics.schedule_fires.labels("fired")._value.get()
    assert metrics == 3


async def test_skip_counts_while_the_previous_run_is_open(env: Env, autojump_clock: MockClock) -> None:
    await env.register(WAIT)
    await put(env, "tick", every="1m")  # overlap: skip
    await advance(5 * 60 + 1)
    found = await runs(env)
    assert times(found) == [T0 + MIN]
    state = await env.engine.schedules.document("app", "tick")
    assert state is not None and state.skipped == 4


async def test_buffer_one_starts_the_held_fire_once_the_run_closes(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(WAIT)
    await put(env, "tick", every="1m", overlap="buffer_one")
    first = (await until_runs(env, 1))[0]
    await advance(3 * 60)  # 2m held, 3m and 4m skipped
    state = await env.engine.schedules.document("app", "tick")
    assert state is not None and state.buffered == T0 + 2 * MIN and state.skipped == 2
    await env.engine.runs.ask(first.run_id, Cancel("done"))
    found = await until_runs(env, 2, seconds=40)  # within the recheck bound (30 s)
    assert times(found)[-1] == T0 + 2 * MIN


async def test_a_restart_fires_each_time_exactly_once(env: Env, autojump_clock: MockClock) -> None:
    await env.register(WAIT)
    await put(env, "tick", every="1m", overlap="allow")
    await until_runs(env, 2)
    await env.crash_and_restart(down_for=0)
    found = await until_runs(env, 5)
    once_each(found)
    assert times(found) == [T0 + i * MIN for i in range(1, 6)]


async def test_catch_up_after_an_outage(env: Env, autojump_clock: MockClock) -> None:
    await env.register(WAIT)
    await put(env, "tick", every="1m", overlap="allow", catchupWindow="3m")
    await until_runs(env, 1)  # 1m fired
    await env.crash_and_restart(down_for=10 * 60)  # down from ~1m to ~11m
    await advance(1)
    found = await runs(env)
    once_each(found)
    state = await env.engine.schedules.document("app", "tick")
    assert state is not None
    made = times(found)
    # 2m..11m were owed: those within 3m of the restart were made, once each in order; the
    # older ones were counted as missed.
    assert made[0] == T0 + MIN
    # The restart came at 11m01s: 9m, 10m and 11m are within 3m of due and were made, in
    # order; 2m..8m (8m is 3m01s late) were counted as missed.
    assert made[1:] == [T0 + 9 * MIN, T0 + 10 * MIN, T0 + 11 * MIN]
    assert state.missed == 7
    assert env.engine.metrics.schedule_fires.labels("missed")._value.get() == 7
    await advance(60)
    assert times(await runs(env))[-1] == T0 + 12 * MIN


async def test_a_trigger_racing_the_tick_makes_one_run(env: Env, autojump_clock: MockClock) -> None:
    await env.register(WAIT)
    await put(env, "tick", every="1m", overlap="allow")
    clock = env.engine.clock
    await clock.sleep_until(T0 + MIN)
    assert clock.now() == T0 + MIN
    answer = await env.engine.schedules.trigger("app", "tick")  # the same instant as the tick
    found = await runs(env)
    once_each(found)
    assert times(found) == [T0 + MIN]
    assert answer["runId"] == found[0].run_id  # the one run, whichever came first


async def test_a_backfill_ahead_of_the_clock_leaves_the_tick_nothing_to_start(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(WAIT)
    await put(env, "tick", every="1m", overlap="allow")
    out = await env.engine.schedules.backfill("app", "tick", T0 + MIN, T0 + 3 * MIN)
    assert out["started"] == 2
    found = await until_runs(env, 3)
    once_each(found)
    assert times(found) == [T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN]
    by_time = {r.schedule.scheduled_time: r.run_id for r in found if r.schedule is not None}
    assert [f["runId"] for f in out["fires"]] == [by_time[T0 + MIN], by_time[T0 + 2 * MIN]]


async def test_a_time_never_starts_a_second_run_after_its_run_closed(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(WAIT)
    await put(env, "tick", every="1h", overlap="allow")
    first = await env.engine.schedules.backfill("app", "tick", T0 - 60 * MIN, T0)
    run_id = first["fires"][0]["runId"]
    await env.engine.runs.ask(run_id, Cancel("done"))
    assert (await env.until(run_id, "cancelled")).status == "cancelled"
    again = await env.engine.schedules.backfill("app", "tick", T0 - 60 * MIN, T0)
    assert again == {
        "fires": [{"scheduledTime": first["fires"][0]["scheduledTime"], "runId": run_id, "new": False}],
        "started": 0,
        "alreadyFired": 1,
    }
    assert len(await runs(env)) == 1


async def test_paused_schedules_do_not_fire_and_survive_a_restart(
    env: Env, autojump_clock: MockClock
) -> None:
    await env.register(WAIT)
    await put(env, "tick", every="1m", overlap="allow", paused=True)
    await advance(5 * 60)
    assert await runs(env) == []
    await env.crash_and_restart()
    await advance(5 * 60)
    assert await runs(env) == []
    await env.engine.schedules.unpause("app", "tick", None)
    found = await until_runs(env, 1)
    assert times(found) == [T0 + 11 * MIN]


async def test_a_crash_between_the_runs_commit_and_the_schedules_starts_no_second_run(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run (with its fire record) committed, the schedule's own commit lost: the firing is
    handed out again, finds the time taken, and the schedule records the run it started."""
    await env.register(WAIT)
    await put(env, "tick", every="1m", overlap="allow")
    store = env.engine.store
    real = store.put_schedule
    lost: list[int] = []

    async def lose_once(state: Any, expected: int | None) -> None:
        if state.fired and not lost:
            lost.append(state.fired)
            raise StorageUnavailable("the database went away")
        await real(state, expected)

    monkeypatch.setattr(store, "put_schedule", lose_once)
    found = await until_runs(env, 2)
    once_each(found)
    assert lost == [1] and times(found) == [T0 + MIN, T0 + 2 * MIN]
    state = await store.get_schedule("app", "tick")
    assert state is not None and state.last_time == T0 + 2 * MIN
    first = next(r for r in found if r.schedule is not None and r.schedule.scheduled_time == T0 + MIN)
    fire = await store.get_schedule_fire("app", "tick", T0 + MIN)
    assert fire is not None and fire.run_id == first.run_id


@pytest.mark.parametrize("settled", [True, False], ids=["read-back", "in-doubt"])
async def test_a_fire_whose_commit_answer_was_lost_goes_on_firing(
    env: Env, autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch, settled: bool
) -> None:
    # The first fire's commit lands and its answer is lost (`CommitUnknown`). Read back (or,
    # in doubt, its timers given to the wheel anyway), the next fires come on time; before,
    # the landed document's next-fire timer was never armed (the wheel had paged that window
    # already) and the schedule stopped firing until a restart.
    await env.register(WAIT)
    store = env.engine.store
    real = store.put_schedule
    lost: list[int] = []

    async def lose_once(state: Any, expected: int | None) -> Any:
        await real(state, expected)
        if expected is not None and not lost:
            lost.append(state.version)
            raise CommitUnknown("connection reset after COMMIT", settled=settled)

    monkeypatch.setattr(store, "put_schedule", lose_once)
    await put(env, "tick", every="1m", overlap="allow")
    found = await until_runs(env, 3, seconds=10 * 60)
    assert lost and times(found)[:3] == [T0 + MIN, T0 + 2 * MIN, T0 + 3 * MIN]
    once_each(found)


@pytest.mark.parametrize("settings_overrides", [{"app_internal_rate": 2, "app_internal_burst": 2}])
async def test_an_apps_fires_wait_their_turn_and_are_late_not_missed(
    env: Env, autojump_clock: MockClock, settings_overrides: dict[str, Any]
) -> None:
    """20 schedules firing every second from one app at a lane of 2 starts a second: the fires
    are put off (the wheel's firings in flight stay free), none is lost while within its
    catch-up window, and none starts twice (issue 37: fires went past admission)."""
    await env.register(WAIT)
    for i in range(20):
        await put(env, f"tick{i}", every="1s", overlap="allow", catchupWindow="1h")
    await advance(30)
    found = await runs(env)
    once_each(found)
    # At most the burst plus the rate's share of 30 s: paced, not 600.
    assert 50 <= len(found) <= 2 + 2 * 31, len(found)
    assert env.engine.admission.lanes.deferred > 0
    assert env.engine.timers.max_inflight_seen <= 40
    missed = 0
    for i in range(20):
        state = await env.engine.schedules.document("app", f"tick{i}")
        assert state is not None
        missed += state.missed
    assert missed == 0
