"""The engine's trend sampler under MockClock: one sample per interval, from live values."""

from __future__ import annotations

from typing import Any

import pytest
import trio
from trio.testing import MockClock

from .conftest import T0, Env, advance, ok

WAIT = {"name": "w", "steps": [{"name": "w", "type": "wait", "signal": "go"}]}
TASK = {"name": "t", "steps": [{"name": "t", "type": "task"}]}


@pytest.mark.parametrize("settings_overrides", [{"trend_interval_ms": 10_000, "trend_samples": 6}])
async def test_the_sampler_records_one_sample_per_interval_and_keeps_the_last(
    env: Env, autojump_clock: MockClock, settings_overrides: dict[str, Any]
) -> None:
    trends = env.engine.trends
    live = trends.series["actors.live"]
    assert len(live) == 1  # sampled at start-up
    started = live.points()[0][0]
    assert started >= T0
    await env.register(WAIT)
    await env.register(TASK)
    waiting = [await env.start("w") for _ in range(3)]
    for run_id in waiting:
        await env.until(run_id, "waiting")
    env.answer("t", ok({"x": 1}), ok({"x": 2}))
    for run_id in [await env.start("t"), await env.start("t")]:
        await env.until(run_id, "completed")
    await advance(10.5 - (env.engine.clock.now() - started) / 1000 % 10)  # just past the next slot
    points = live.points()
    assert [at - started for at, _ in points] == [10_000 * i for i in range(len(points))]
    assert points[-1][1] == 3.0
    assert trends.series["runs.waiting"].points()[-1][1] == 3.0
    assert sum(v or 0 for _, v in trends.series["pushes.ok"].points()) == 2.0
    assert trends.series["pushes.failed"].points()[-1][1] == 0.0
    assert trends.series["pushes.p50Ms"].points()[-1][1] is not None

    await advance(60)  # six more intervals: the ring holds the last six, one interval apart
    points = live.points()
    assert len(points) == 6
    assert [at - started for at, _ in points] == [20_000, 30_000, 40_000, 50_000, 60_000, 70_000]
    assert trends.series["pushes.ok"].points()[-1][1] == 0.0  # nothing pushed in that interval
    assert trends.series["pushes.p50Ms"].points()[-1][1] is None  # no latency: a gap


FAILING = {"name": "f", "steps": [{"name": "f", "type": "task", "retry": {"maxAttempts": 1}}]}
QUEUED = {"name": "q", "steps": [{"name": "q", "type": "task", "queue": "warehouse"}]}


@pytest.mark.parametrize("settings_overrides", [{"trend_interval_ms": 10_000, "trend_samples": 6}])
async def test_per_app_runs_and_per_queue_pollers_are_sampled_per_interval(
    env: Env, autojump_clock: MockClock, settings_overrides: dict[str, Any]
) -> None:
    trends = env.engine.trends
    started = trends.series["actors.live"].points()[0][0]
    assert trends.apps.keys == {} and trends.queues.keys == {}  # nothing happened yet
    for definition in (TASK, FAILING, QUEUED):
        await env.register(definition)
    env.answer("t", ok({"x": 1}), ok({"x": 2}))
    env.answer("f", ok({"error": {"class": "boom", "retryable": False}}, 422))
    for run_id in [await env.start("t"), await env.start("t")]:
        await env.until(run_id, "completed")
    await env.until(await env.start("f"), "failed")
    queued = [await env.start("q") for _ in range(2)]

    async def poll_idle() -> None:  # a worker long-polling a queue nobody feeds
        await env.engine.runs.claim_queued("app", "idle", 1, trio.current_time() + 25, "w1")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(poll_idle)
        await advance(10.5 - (env.engine.clock.now() - started) / 1000 % 10)  # just past the next slot
        app = trends.apps.keys["app"]
        assert [v for _, v in app["started"].points()] == [5.0]
        assert [v for _, v in app["completed"].points()] == [2.0]
        assert [v for _, v in app["failed"].points()] == [1.0]
        warehouse = trends.queues.keys["app/warehouse"]
        idle = trends.queues.keys["app/idle"]
        assert warehouse["backlog"].points()[-1][1] == 2.0 and warehouse["pollers"].points()[-1][1] == 0.0
        assert idle["backlog"].points()[-1][1] == 0.0 and idle["pollers"].points()[-1][1] == 1.0

        claimed = await env.engine.runs.claim_queued("app", "warehouse", 2, trio.current_time() + 1, "w2")
        assert {run.run_id for run, _ in claimed} == set(queued)
        await advance(10)  # the next slot: nothing started; the backlog is claimed
        assert app["started"].points()[-1][1] == 0.0 and app["completed"].points()[-1][1] == 0.0
        assert warehouse["backlog"].points()[-1][1] == 0.0
        await advance(10)  # the idle poll has timed out: no poller waits any more
        assert idle["pollers"].points()[-1][1] == 0.0
    await advance(60)
    assert len(app["started"]) == 6  # bounded like every series
