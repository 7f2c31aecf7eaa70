"""The engine's trend sampler under MockClock: one sample per interval, from live values."""

from __future__ import annotations

from typing import Any

import pytest
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
